//! The synchronous order, the design card's path: the per-user lock taken
//! without waiting, and inside it the order committed in MariaDB (one order
//! per user, `stock = stock - 1 ... AND stock > 0`, insert), only while the
//! lock is still held; the lock is released only after that commit. The
//! UNIQUE (user_id, voucher_id) index has the last word. With
//! `ORDER_BATCH_MAX` above 1 the commit is shared with the voucher's other
//! ready orders (`group_commit`); at 1 each order has its own transaction.

use std::{sync::Arc, time::Duration};

use sqlx::{MySql, MySqlPool, Transaction};
use tokio_util::sync::CancellationToken;

use super::{Gate, UNIQUE_ORDER_INDEX, order};
use crate::{
    http::{ApiError, ApiResult, error::ResultExt},
    lock::{Holder, LockGuard},
    state::AppState,
};

/// Places one order for an admitted request; returns the order id. Runs in
/// a task of its own, so a client that goes away mid-order cannot cut the
/// order between its commit and its unlock.
pub(super) async fn place(state: &AppState, gate: Arc<Gate>, user_id: u64, voucher_id: u64) -> ApiResult<i64> {
    let state = state.clone();
    tokio::spawn(async move { place_under_lock(&state, &gate, user_id, voucher_id).await })
        .await
        .map_err(|e| ApiError::internal(anyhow::anyhow!("the order task failed: {e}")))?
}

async fn place_under_lock(state: &AppState, gate: &Arc<Gate>, user_id: u64, voucher_id: u64) -> ApiResult<i64> {
    // One request per user at a time, across instances: a second in-flight
    // request of the same user is refused rather than queued.
    let lock_name = state.keys.order_lock(user_id);
    let guard = state
        .locks
        .try_lock(&lock_name, &Holder::random(), Duration::ZERO, None)
        .await
        .map_err(|e| ApiError::dependency(e.is_unavailable(), e))?
        .ok_or(ApiError::TooManyRequests("another order of yours is in progress"))?;

    // Stops the order like a lost lock does: at the deadline, or when the
    // lock is lost, whichever comes first.
    let stop = guard.lost_token();
    let deadline = Duration::from_millis(state.config.request_deadline_ms);
    let expire = tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::time::sleep(deadline).await;
            stop.cancel();
        }
    });
    let placed = under_lock(state, gate, user_id, voucher_id, &guard, &stop).await;
    expire.abort();
    // Released after the commit or rollback, never before.
    if let Err(err) = guard.unlock().await {
        tracing::warn!(error = %err, "releasing the order lock failed; its lease will free it");
    }
    placed
}

async fn under_lock(
    state: &AppState,
    gate: &Arc<Gate>,
    user_id: u64,
    voucher_id: u64,
    guard: &LockGuard,
    stop: &CancellationToken,
) -> ApiResult<i64> {
    if gate.is_sold_out() {
        return Err(ApiError::SoldOut);
    }
    let _slot = gate.queue_slot()?;
    let order_id = state.order_ids.next().await.map_err(|e| ApiError::dependency(e.is_unavailable(), e))?;
    if state.config.order_batch_max > 1 {
        state.group_commit.commit(gate, voucher_id, user_id, order_id, stop.clone()).await?;
    } else {
        let _turn = tokio::select! {
            biased;
            () = stop.cancelled() => return Err(lock_lost()),
            turn = gate.enter() => turn,
        };
        // If the lock is lost (or the deadline passes) mid-transaction, the
        // transaction is dropped, which rolls it back.
        let reservation = tokio::select! {
            biased;
            () = stop.cancelled() => return Err(lock_lost()),
            reservation = reserve(&state.db, user_id, voucher_id, order_id) => reservation,
        };
        let tx = match with_held_order(&state.db, user_id, voucher_id, reservation).await? {
            Reservation::Made(tx) => tx,
            Reservation::AlreadyOrdered(held) => return Err(ApiError::DuplicateOrder(Some(held))),
            Reservation::SoldOut => {
                gate.mark_sold_out();
                return Err(ApiError::SoldOut);
            }
        };
        if stop.is_cancelled() {
            drop(tx);
            return Err(lock_lost());
        }
        if let Err(err) = tx.commit().await {
            settle_lost_commit(&state.db, &[order_id], err).await?;
        }
    }
    tracing::debug!(order_id, user_id, voucher_id, fence = guard.fencing_token(), "order placed");
    Ok(order_id)
}

/// A `COMMIT` failed, perhaps after MariaDB applied it (the connection died
/// on the way back): the orders are looked up before anyone is told
/// anything. `Ok` when they were committed after all.
pub(super) async fn settle_lost_commit(db: &MySqlPool, order_ids: &[i64], err: sqlx::Error) -> ApiResult<()> {
    tracing::warn!(?order_ids, error = %err, "a commit failed; looking its orders up before answering");
    match order::confirm_committed(db, order_ids).await {
        Some(found) if order_ids.iter().all(|id| found.contains(id)) => {
            tracing::info!(?order_ids, "the commit had happened; answered as placed");
            Ok(())
        }
        Some(_) => Err(err.into()),
        None => Err(ApiError::Unavailable(anyhow::anyhow!("the commit's outcome is unknown: {err}"))),
    }
}

/// A duplicate found only by the unique index comes without the id of the
/// order the user holds; look it up, so the answer can carry it.
pub(super) async fn with_held_order(
    db: &MySqlPool,
    user_id: u64,
    voucher_id: u64,
    reservation: ApiResult<Reservation>,
) -> ApiResult<Reservation> {
    match reservation {
        Err(ApiError::DuplicateOrder(None)) => {
            Err(ApiError::DuplicateOrder(order::held_by(db, user_id, voucher_id).await.ok().flatten()))
        }
        other => other,
    }
}

/// The order stopped before its commit: its lock was lost or its deadline
/// passed. Nothing was committed.
pub(super) fn lock_lost() -> ApiError {
    ApiError::Unavailable(anyhow::anyhow!(
        "the order lost its lock or ran out of time before the commit; nothing was committed"
    ))
}

/// What the order's statements found. `SoldOut` means MariaDB reported a
/// committed stock of 0 (the conditional UPDATE matched nothing).
pub(super) enum Reservation {
    /// Stock taken and the row inserted, in this open transaction: the
    /// caller commits only if it still holds the user's lock.
    Made(Transaction<'static, MySql>),
    /// The id of the order the user holds.
    AlreadyOrdered(i64),
    SoldOut,
}

pub(super) async fn reserve(db: &MySqlPool, user_id: u64, voucher_id: u64, order_id: i64) -> ApiResult<Reservation> {
    let mut tx = db.begin().await?;
    let existing: Option<i64> =
        sqlx::query_scalar("SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ? LIMIT 1")
            .bind(user_id)
            .bind(voucher_id)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some(held) = existing {
        return Ok(Reservation::AlreadyOrdered(held));
    }
    let taken = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0")
        .bind(voucher_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if taken == 0 {
        return Ok(Reservation::SoldOut);
    }
    // Another instance's order that slipped past the lock runs into the
    // unique index here: the database has the last word.
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)")
        .bind(order_id)
        .bind(user_id)
        .bind(voucher_id)
        .execute(&mut *tx)
        .await
        .on_unique(UNIQUE_ORDER_INDEX, || ApiError::DuplicateOrder(None))?;
    Ok(Reservation::Made(tx))
}
