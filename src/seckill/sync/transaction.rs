//! The course's transaction for one order, shared by the one-order
//! path and group commit's retry of a refused group: the held-order check,
//! the guarded stock update and the insert, committed only while the
//! user's lock is held, and a commit whose answer was lost looked up
//! before anyone is told anything.

use std::{collections::HashMap, time::Duration};

use sqlx::{MySql, MySqlPool, Transaction};
use tokio_util::sync::CancellationToken;

use crate::{
    dependency::OnUnique,
    events::{OrderCreated, Outbox},
    seckill::{
        error::{SeckillError, SeckillResult},
        model::PathUse,
        store::{self, NewOrder, OrderOwner, UNIQUE_ORDER_INDEX},
        sync::admission::Gate,
    },
};

/// Commits a reservation made under the user's lock, unless the lock went
/// meanwhile; the answer for a duplicate or a sold-out voucher.
pub(super) async fn commit_reservation(
    db: &MySqlPool,
    gate: &Gate,
    order: (i64, OrderOwner),
    lost: &CancellationToken,
    reservation: SeckillResult<Reservation>,
) -> SeckillResult<()> {
    let tx = match reservation? {
        Reservation::Made(tx) => tx,
        Reservation::AlreadyOrdered(held) => return Err(SeckillError::DuplicateOrder(held)),
        Reservation::SoldOut => {
            gate.mark_sold_out();
            return Err(SeckillError::SoldOut);
        }
        Reservation::OffShelf => return Err(SeckillError::OffShelf),
        Reservation::PathUsed => return Err(SeckillError::PathUsed),
    };
    if lost.is_cancelled() {
        drop(tx);
        return Err(SeckillError::lock_lost());
    }
    match tx.commit().await {
        Ok(()) => Ok(()),
        Err(err) => settle_lost_commit(db, &[order], err).await,
    }
}

/// A `COMMIT` failed, perhaps after MariaDB applied it (the connection died
/// on the way back): the orders are looked up before anyone is told
/// anything. `Ok` when they were committed after all: each id's row is
/// there, and is this order's (its user and voucher). A row of another
/// owner under the id is another order that drew the same id (ids met
/// after a Redis failover), never this one committed.
pub(super) async fn settle_lost_commit(
    db: &MySqlPool,
    orders: &[(i64, OrderOwner)],
    err: sqlx::Error,
) -> SeckillResult<()> {
    let order_ids: Vec<i64> = orders.iter().map(|(id, _)| *id).collect();
    tracing::warn!(?order_ids, error = %err, "a commit failed; looking its orders up before answering");
    match confirm_committed(db, &order_ids).await {
        Some(found) if orders.iter().all(|(id, owner)| found.get(id) == Some(owner)) => {
            tracing::info!(?order_ids, "the commit had happened; answered as placed");
            Ok(())
        }
        Some(found) => {
            for (id, owner) in orders {
                if let Some(held_by) = found.get(id).filter(|row| *row != owner) {
                    metrics::counter!("hmdp_order_id_collisions_total").increment(1);
                    tracing::error!(
                        order_id = id,
                        ?owner,
                        ?held_by,
                        "order id collision: another order's row holds this id"
                    );
                }
            }
            Err(err.into())
        }
        None => Err(SeckillError::outcome_unknown(anyhow::anyhow!("the commit's outcome is unknown: {err}"))),
    }
}

/// How many times, and how far apart, a commit whose answer was lost is
/// looked up: a connection that died at the commit often means a database
/// that is restarting.
const CONFIRM_TRIES: u32 = 5;
const CONFIRM_PAUSE: Duration = Duration::from_millis(200);

/// After a `COMMIT` whose answer was lost (the connection died on it), whose
/// rows MariaDB has under these ids: the commit may have happened, and a user
/// must never be told "failed" about an order that exists. `None` while
/// MariaDB cannot be asked.
async fn confirm_committed(db: &MySqlPool, order_ids: &[i64]) -> Option<HashMap<i64, OrderOwner>> {
    for attempt in 1..=CONFIRM_TRIES {
        match store::settled_orders(db, order_ids).await {
            Ok(found) => return Some(found),
            Err(err) => tracing::warn!(attempt, error = %err, "looking up orders after a lost commit answer failed"),
        }
        tokio::time::sleep(CONFIRM_PAUSE).await;
    }
    None
}

/// What the order's statements found. `SoldOut` means MariaDB reported a
/// committed stock of 0 (the conditional UPDATE matched nothing).
pub(super) enum Reservation {
    /// Stock taken and the row inserted, in this open transaction: the
    /// caller commits only if it still holds the user's lock.
    Made(Transaction<'static, MySql>),
    /// The id of the order the user holds, when it is known.
    AlreadyOrdered(Option<i64>),
    SoldOut,
    OffShelf,
    /// The sale path placed an order before.
    PathUsed,
}

/// The course's transaction, up to its commit.
pub(super) async fn reserve(
    db: &MySqlPool,
    outbox: &Outbox,
    user_id: u64,
    voucher_id: u64,
    order_id: i64,
    spend: Option<PathUse>,
) -> SeckillResult<Reservation> {
    let mut tx = db.begin().await?;
    if !store::on_shelf(&mut *tx, voucher_id).await? {
        return Ok(Reservation::OffShelf);
    }
    // Before the held-order check: a path replayed after its order is
    // refused as used, not answered as a duplicate.
    if let Some(spend) = spend
        && !store::spent_paths(&mut *tx, &[spend.id]).await?.is_empty()
    {
        return Ok(Reservation::PathUsed);
    }
    if let Some(held) = store::held_order(&mut *tx, user_id, voucher_id).await? {
        return Ok(Reservation::AlreadyOrdered(Some(held)));
    }
    if !store::take_stock(&mut *tx, voucher_id, 1).await? {
        return Ok(Reservation::SoldOut);
    }
    // Another instance's order that slipped past the lock runs into the
    // unique index here: the database has the last word.
    let inserted = store::insert_orders(&mut *tx, voucher_id, &[NewOrder { id: order_id, user_id, create_time: None }])
        .await
        .on_unique(UNIQUE_ORDER_INDEX, || SeckillError::DuplicateOrder(None));
    let inserted = match inserted {
        Ok(_) => outbox
            .created(&mut tx, &[OrderCreated { voucher_id, order_id, user_id }])
            .await
            .map(|()| 1)
            .map_err(Into::into),
        Err(err) => Err(err),
    };
    let inserted = match (inserted, spend) {
        // The user's lock keeps one path from two transactions; if it was
        // lost, the primary key has the last word.
        (Ok(_), Some(spend)) => store::spend_paths(&mut *tx, &[spend])
            .await
            .on_unique(store::SPENT_PATH_KEY, || SeckillError::PathUsed)
            .map(|()| 1),
        (inserted, _) => inserted,
    };
    match inserted {
        Ok(_) => Ok(Reservation::Made(tx)),
        // Found only by the index: the id of the order the user holds is
        // looked up, so the answer can carry it.
        Err(SeckillError::DuplicateOrder(None)) => {
            drop(tx);
            Ok(Reservation::AlreadyOrdered(store::held_order(db, user_id, voucher_id).await.ok().flatten()))
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sqlx::{Connection, MySqlPool};

    use super::settle_lost_commit;
    use crate::seckill::store::OrderOwner;

    /// What the client of a killed connection sees of its `COMMIT`.
    fn lost_answer() -> sqlx::Error {
        sqlx::Error::Io(std::io::ErrorKind::UnexpectedEof.into())
    }

    /// The race the chaos run found: the connection that sent `COMMIT` was
    /// killed, MariaDB was still committing, and a plain lookup 10 ms later
    /// did not see the rows that landed a moment after, so six buyers were
    /// told 503 about orders they had. Here another connection's open
    /// transaction plays the commit still under way, and decides only after
    /// the lookup has begun.
    #[sqlx::test(migrations = "./migrations")]
    async fn a_lost_commit_still_under_way_is_waited_for_and_its_outcome_told(pool: MySqlPool) {
        let decide_after = Duration::from_millis(500);
        for (order_id, commits) in [(4_242_001_i64, true), (4_242_002, false)] {
            let mut writer = pool.acquire().await.unwrap();
            let mut tx = writer.begin().await.unwrap();
            sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, 7)")
                .bind(order_id)
                .bind(order_id)
                .execute(&mut *tx)
                .await
                .unwrap();
            let ids = [(order_id, OrderOwner { user_id: order_id as u64, voucher_id: 7 })];
            let asked = Instant::now();
            let decide = async {
                tokio::time::sleep(decide_after).await;
                if commits { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
            };
            let (settled, ()) = tokio::join!(settle_lost_commit(&pool, &ids, lost_answer()), decide);
            assert!(asked.elapsed() >= decide_after, "answered before the transaction decided");
            if commits {
                assert!(settled.is_ok(), "a committed order was told {settled:?}");
            } else {
                let err = settled.expect_err("a rolled-back order is not placed");
                assert!(!format!("{err:?}").contains("outcome is unknown"), "a rollback told as unknown: {err:?}");
            }
        }
    }
}
