//! Placing seckill orders and showing them to their owners. Where a request
//! goes, by file: `admission` (sale window, sold-out flag, hot-row gate),
//! `sync_order` (the per-user lock, the order committed under it),
//! `group_commit` (the ready orders of a voucher in one transaction),
//! `async_order` (one Redis script decides and queues the order),
//! `consumer` (batched persistence of the queue), `recovery` (taking over
//! idle entries, dead letters), `reconcile` (Redis against MariaDB),
//! `order` (the order as its owner sees it). The route picks the mode here,
//! in one place.

mod admission;
mod async_order;
mod consumer;
mod group_commit;
mod order;
mod reconcile;
mod recovery;
mod sync_order;

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};
use chrono::Utc;

pub use admission::{Gate, SaleWindow, VoucherGates};
pub use async_order::load as load_async_keys;
pub use consumer::{BLOCK as CONSUMER_BLOCK, Consumer, GROUP as CONSUMER_GROUP};
pub use group_commit::{GroupCommitter, GroupStats};
pub use order::{OrderState, OrderView};
pub use reconcile::{Reconciliation, reconcile};

use serde::Deserialize;

use crate::{
    auth::CurrentUser,
    config::SeckillMode,
    http::{
        ApiError, ApiResult, Reply,
        extract::{Path, Query},
    },
    state::AppState,
};

/// The unique index that makes "one order per user" the database's
/// decision, not only the lock's.
pub const UNIQUE_ORDER_INDEX: &str = "uk_user_voucher";

/// Routes for logged-in users; the caller adds the login layer.
pub fn user_routes() -> Router<AppState> {
    Router::new()
        .route("/voucher-order/seckill/{voucher_id}", post(place_order))
        .route("/voucher-order/mine", get(my_orders))
        .route("/voucher-order/{order_id}", get(show_order))
}

#[utoipa::path(post, path = "/voucher-order/seckill/{voucher_id}", tag = "order", security(("token" = [])),
    params(("voucher_id" = u64, Path, description = "the seckill voucher")),
    responses(
        (status = 200, description = "the order id, a string (it does not fit a JavaScript number)", body = crate::http::envelope::Success<String>),
        (status = 400, description = "VALIDATION: the voucher id is not a number", body = crate::http::envelope::Failure),
        (status = 401, description = "UNAUTHORIZED: no token, or its session expired", body = crate::http::envelope::Failure),
        (status = 404, description = "NOT_FOUND: no such seckill voucher", body = crate::http::envelope::Failure),
        (status = 409, description = "SOLD_OUT; DUPLICATE_ORDER (data: the order the user holds); NOT_STARTED; ENDED", body = crate::http::envelope::Failure),
        (status = 429, description = "TOO_MANY_REQUESTS: too many orders from this user, or another of the user's orders is in progress", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn place_order(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(voucher_id): Path<u64>,
) -> ApiResult<Reply<String>> {
    let placed = match state.order_limit.hit(user.id, "too many orders; slow down") {
        Ok(()) => place_order_for(&state, user.id, voucher_id).await,
        Err(refused) => Err(refused),
    };
    let outcome = placed.as_ref().map_or_else(ApiError::code, |_| "SUCCESS");
    let mode = match state.config.seckill_mode {
        SeckillMode::Sync => "sync",
        SeckillMode::Async => "async",
    };
    metrics::counter!("hmdp_seckill_orders_total", "mode" => mode, "outcome" => outcome).increment(1);
    Ok(Reply::data(placed?.to_string()))
}

/// One order in the configured mode, as the route places it once the
/// caller is known; the strategy lab drives the service through here.
pub async fn place_order_for(state: &AppState, user_id: u64, voucher_id: u64) -> ApiResult<i64> {
    match state.config.seckill_mode {
        SeckillMode::Sync => {
            let gate = state.gates.get_or_load(&state.db, voucher_id).await?;
            gate.admit(Utc::now().naive_utc())?;
            sync_order::place(state, gate, user_id, voucher_id).await
        }
        SeckillMode::Async => async_order::place(state, user_id, voucher_id).await,
    }
}

/// A new seckill voucher is put on sale: in the asynchronous mode its keys
/// are loaded and the consumers start reading its stream.
pub async fn prepare_sale(state: &AppState, voucher_id: u64) -> ApiResult<()> {
    match state.config.seckill_mode {
        SeckillMode::Sync => Ok(()),
        SeckillMode::Async => async_order::load(&state.db, &mut state.redis.clone(), &state.keys, voucher_id).await,
    }
}

/// The order, for its owner only: anyone else gets the same 404 as for an
/// order that does not exist.
#[utoipa::path(get, path = "/voucher-order/{order_id}", tag = "order", security(("token" = [])),
    params(("order_id" = String, Path, description = "the order id as returned by the order route")),
    responses(
        (status = 200, description = "the order, with its state", body = crate::http::envelope::Success<OrderView>),
        (status = 400, description = "VALIDATION: the order id is not a number", body = crate::http::envelope::Failure),
        (status = 401, description = "UNAUTHORIZED: no token, or its session expired", body = crate::http::envelope::Failure),
        (status = 404, description = "NOT_FOUND: no such order of this user", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn show_order(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(order_id): Path<i64>,
) -> ApiResult<Reply<OrderView>> {
    let order = order::find_owned(&state.db, &mut state.redis.clone(), &state.keys, order_id, user.id)
        .await?
        .ok_or(ApiError::NotFound("no such order"))?;
    Ok(Reply::data(order))
}

const MAX_PAGE_SIZE: u32 = 100;

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    page: Option<u32>,
    page_size: Option<u32>,
}

/// The user's orders with their rows, newest first, a page at a time
/// (`page` from 1, `pageSize` up to 100, default 10); `total` counts all.
#[utoipa::path(get, path = "/voucher-order/mine", tag = "order", security(("token" = [])), params(PageQuery),
    responses(
        (status = 200, description = "one page of the user's orders, newest first; `total` counts them all", body = crate::http::envelope::Success<Vec<OrderView>>),
        (status = 400, description = "VALIDATION: page below 1 or pageSize outside 1 to 100", body = crate::http::envelope::Failure),
        (status = 401, description = "UNAUTHORIZED: no token, or its session expired", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn my_orders(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(query): Query<PageQuery>,
) -> ApiResult<Reply<Vec<OrderView>>> {
    let page = query.page.unwrap_or(1);
    let size = query.page_size.unwrap_or(10);
    if page == 0 || !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(ApiError::validation(format!("page starts at 1 and pageSize is 1 to {MAX_PAGE_SIZE}")));
    }
    let (orders, total) = order::list_owned(&state.db, user.id, page, size).await?;
    Ok(Reply::page(orders, total))
}
