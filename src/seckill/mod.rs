//! Placing a seckill order, synchronously, the way the course project does
//! it and then some: sale window and stock checks, the per-user lock taken
//! without waiting, and inside it one transaction (one order per user,
//! `stock = stock - 1 ... AND stock > 0`, insert), committed only while the
//! lock is still held and released only after the commit. The UNIQUE
//! (user_id, voucher_id) index has the last word.

mod gate;
mod order;

use std::time::Duration;

use axum::{Router, extract::State, routing::{get, post}};
use chrono::Utc;

pub use gate::{Gate, SaleWindow, VoucherGates};
pub use order::OrderView;

use crate::{
    auth::CurrentUser,
    http::{ApiError, ApiResult, Reply, extract::Path},
    lock::{Holder, LockGuard},
    state::AppState,
    voucher,
};

/// Routes for logged-in users; the caller adds the login layer.
pub fn user_routes() -> Router<AppState> {
    Router::new()
        .route("/voucher-order/seckill/{voucher_id}", post(place_order))
        .route("/voucher-order/{order_id}", get(order::show))
}

async fn place_order(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(voucher_id): Path<u64>,
) -> ApiResult<Reply<String>> {
    let gate = match state.gates.get(voucher_id) {
        Some(gate) => gate,
        None => {
            let voucher = voucher::find_seckill(&state.db, voucher_id)
                .await?
                .ok_or(ApiError::NotFound("no such seckill voucher"))?;
            let window = SaleWindow { begin: voucher.begin_time, end: voucher.end_time };
            state.gates.insert(voucher_id, window, voucher.stock)
        }
    };
    let now = Utc::now().naive_utc();
    if now < gate.window.begin {
        return Err(ApiError::NotStarted);
    }
    if now >= gate.window.end {
        return Err(ApiError::Ended);
    }
    if gate.is_sold_out() {
        return Err(ApiError::SoldOut);
    }

    // One request per user at a time, across instances: a second in-flight
    // request of the same user is refused rather than queued.
    let lock_name = state.keys.order_lock(user.id);
    let guard = state
        .locks
        .try_lock(&lock_name, &Holder::random(), Duration::ZERO, None)
        .await?
        .ok_or(ApiError::TooManyRequests("another order of yours is in progress"))?;

    let placed = order_under_lock(&state, &gate, user.id, voucher_id, &guard).await;
    // Released after the commit or rollback, never before.
    if let Err(err) = guard.unlock().await {
        tracing::warn!(error = %err, "releasing the order lock failed; its lease will free it");
    }
    let order_id = placed?;
    Ok(Reply::data(order_id.to_string()))
}

async fn order_under_lock(
    state: &AppState,
    gate: &Gate,
    user_id: u64,
    voucher_id: u64,
    guard: &LockGuard,
) -> ApiResult<i64> {
    let _turn = gate.enter().await;
    if gate.is_sold_out() {
        return Err(ApiError::SoldOut);
    }
    let order_id = state.order_ids.next().await?;

    // If the lock is lost mid-transaction, the transaction is dropped, which
    // rolls it back.
    let tx = tokio::select! {
        biased;
        () = guard.lost() => return Err(lock_lost()),
        tx = order::reserve(state, gate, user_id, voucher_id, order_id) => tx?,
    };
    if guard.is_lost() {
        drop(tx);
        return Err(lock_lost());
    }
    tx.commit().await?;
    tracing::info!(order_id, user_id, voucher_id, fence = guard.fencing_token(), "order placed");
    Ok(order_id)
}

fn lock_lost() -> ApiError {
    ApiError::Unavailable(anyhow::anyhow!("the order lock was lost before the commit; rolled back"))
}
