//! Placing seckill orders and showing them to their owners. Where a request
//! goes, by file: `admission` (sale window, sold-out flag, the hot-row
//! gate; shared by every mode), `sync_order` (the per-user lock and one
//! transaction per order), `order` (the order as its owner sees it).

mod admission;
mod order;
mod sync_order;

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};
use chrono::Utc;

pub use admission::{Gate, SaleWindow, VoucherGates};
pub use order::OrderView;

use crate::{
    auth::CurrentUser,
    http::{ApiError, ApiResult, Reply, extract::Path},
    state::AppState,
};

/// The unique index that makes "one order per user" the database's
/// decision, not only the lock's.
pub const UNIQUE_ORDER_INDEX: &str = "uk_user_voucher";

/// Routes for logged-in users; the caller adds the login layer.
pub fn user_routes() -> Router<AppState> {
    Router::new()
        .route("/voucher-order/seckill/{voucher_id}", post(place_order))
        .route("/voucher-order/{order_id}", get(show_order))
}

async fn place_order(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(voucher_id): Path<u64>,
) -> ApiResult<Reply<String>> {
    let gate = state.gates.get_or_load(&state.db, voucher_id).await?;
    gate.admit(Utc::now().naive_utc())?;
    let order_id = sync_order::place(&state, &gate, user.id, voucher_id).await?;
    Ok(Reply::data(order_id.to_string()))
}

/// The order, for its owner only: anyone else gets the same 404 as for an
/// order that does not exist.
async fn show_order(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(order_id): Path<i64>,
) -> ApiResult<Reply<OrderView>> {
    let order = order::find_owned(&state.db, order_id, user.id).await?.ok_or(ApiError::NotFound("no such order"))?;
    Ok(Reply::data(order))
}
