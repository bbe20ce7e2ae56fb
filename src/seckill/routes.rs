//! The order's routes after it is placed (placing it passes the sale path
//! first: `salepath/ordering.rs`).

use axum::{
    Router,
    extract::{FromRef, State},
    routing::{get, post},
};
use serde::Deserialize;

use std::sync::Arc;

use super::{aftersale::AfterSale, error::SeckillError, model::OrderView, service::Seckill};
use crate::{
    auth::CurrentUser,
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Failure, Success},
        extract::{Id, Json, Path, Query},
        failures::{BadPath, BodyTimedOut, BodyTooLarge, Unauthorized, Unavailable},
        whole,
    },
};

/// Routes for logged-in users; the caller adds the login layer.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Seckill: FromRef<S>,
    Arc<AfterSale>: FromRef<S>,
{
    Router::new()
        .route("/voucher-order/mine", get(my_orders))
        .route("/voucher-order/{order_id}", get(show_order))
        .route("/voucher-order/{order_id}/pay", post(pay_order))
        .route("/voucher-order/{order_id}/cancel", post(cancel_order))
        .route("/voucher-order/{order_id}/refund", post(refund_order))
}

/// The order, for its owner only: anyone else gets the same 404 as for an
/// order that does not exist.
#[utoipa::path(get, path = "/voucher-order/{order_id}", tag = "order", security(("token" = [])),
    params(("order_id" = i64, Path, minimum = 0, description = "the order id as returned by the order route (a string there)")),
    responses(
        (status = 200, description = "the order, with its state", body = Success<OrderView>),
        BadPath, Unauthorized,
        (status = 404, description = "NOT_FOUND: no such order of this user", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn show_order(
    State(seckill): State<Seckill>,
    user: CurrentUser,
    Path(order): Path<Id>,
) -> ApiResult<Reply<OrderView>> {
    let order = seckill.find_order(order.signed(), user.id).await?.ok_or(SeckillError::NoSuchOrder)?;
    Ok(Reply::data(order))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PayForm {
    /// 1 balance, 2 Alipay, 3 WeChat.
    #[schema(minimum = 1, maximum = 3)]
    #[serde(deserialize_with = "whole::number")]
    pay_type: u8,
}

/// Pays an unpaid order before its deadline. There is no payment provider:
/// this is the state change a provider's confirmed callback would cause.
/// Paying again with the same pay type answers the paid order again.
#[utoipa::path(post, path = "/voucher-order/{order_id}/pay", tag = "order", security(("token" = [])),
    params(("order_id" = i64, Path, minimum = 0, description = "the order id")), request_body = PayForm,
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the paid order", body = Success<OrderView>),
        (status = 400, description = "VALIDATION: payType is not 1, 2 or 3", body = Failure),
        BadPath, Unauthorized,
        (status = 404, description = "NOT_FOUND: no such order of this user", body = Failure),
        (status = 409, description = "ORDER_EXPIRED: the payment deadline has passed; ORDER_STATE: not unpaid (paid with another pay type, cancelled, used, refunded, or still being recorded)", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn pay_order(
    State(after_sale): State<Arc<AfterSale>>,
    user: CurrentUser,
    Path(order): Path<Id>,
    Json(form): Json<PayForm>,
) -> ApiResult<Reply<OrderView>> {
    if !(1..=3).contains(&form.pay_type) {
        return Err(ApiError::validation("payType must be 1 (balance), 2 (Alipay) or 3 (WeChat)"));
    }
    Ok(Reply::data(after_sale.confirm_payment(order.signed(), Some(user.id), form.pay_type).await?))
}

/// Cancels an unpaid order; its unit goes back on sale, and the user may
/// buy the voucher again. Cancelling it again answers it again.
#[utoipa::path(post, path = "/voucher-order/{order_id}/cancel", tag = "order", security(("token" = [])),
    params(("order_id" = i64, Path, minimum = 0, description = "the order id")),
    responses(
        (status = 200, description = "the cancelled order", body = Success<OrderView>),
        BadPath, Unauthorized,
        (status = 404, description = "NOT_FOUND: no such order of this user", body = Failure),
        (status = 409, description = "ORDER_STATE: not unpaid (a paid order is refunded instead)", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn cancel_order(
    State(after_sale): State<Arc<AfterSale>>,
    user: CurrentUser,
    Path(order): Path<Id>,
) -> ApiResult<Reply<OrderView>> {
    Ok(Reply::data(after_sale.cancel(order.signed(), user.id).await?))
}

/// Refunds a paid, unused order at once (no provider to wait for); its unit
/// goes back on sale, and the user may buy the voucher again.
#[utoipa::path(post, path = "/voucher-order/{order_id}/refund", tag = "order", security(("token" = [])),
    params(("order_id" = i64, Path, minimum = 0, description = "the order id")),
    responses(
        (status = 200, description = "the refunded order", body = Success<OrderView>),
        BadPath, Unauthorized,
        (status = 404, description = "NOT_FOUND: no such order of this user", body = Failure),
        (status = 409, description = "ORDER_STATE: not paid, or already used", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn refund_order(
    State(after_sale): State<Arc<AfterSale>>,
    user: CurrentUser,
    Path(order): Path<Id>,
) -> ApiResult<Reply<OrderView>> {
    Ok(Reply::data(after_sale.refund(order.signed(), user.id).await?))
}

const MAX_PAGE_SIZE: u32 = 100;

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// From 1 (the default).
    #[param(value_type = Option<u64>, minimum = 1, maximum = 4294967295.0)]
    page: Option<u32>,
    /// 1 to 100, 10 by default.
    #[param(minimum = 1, maximum = 100)]
    page_size: Option<u32>,
}

/// The user's orders with their rows, newest first, a page at a time
/// (`page` from 1, `pageSize` up to 100, default 10); `total` counts all.
#[utoipa::path(get, path = "/voucher-order/mine", tag = "order", security(("token" = [])), params(PageQuery),
    responses(
        (status = 200, description = "one page of the user's orders, newest first; `total` counts them all", body = Success<Vec<OrderView>>),
        (status = 400, description = "VALIDATION: page below 1 or pageSize outside 1 to 100", body = Failure),
        Unauthorized, Unavailable,
    ))]
pub(crate) async fn my_orders(
    State(seckill): State<Seckill>,
    user: CurrentUser,
    Query(query): Query<PageQuery>,
) -> ApiResult<Reply<Vec<OrderView>>> {
    let page = query.page.unwrap_or(1);
    let size = query.page_size.unwrap_or(10);
    if page == 0 || !(1..=MAX_PAGE_SIZE).contains(&size) {
        return Err(ApiError::validation(format!("page starts at 1 and pageSize is 1 to {MAX_PAGE_SIZE}")));
    }
    let (orders, total) = seckill.orders_of(user.id, page, size).await?;
    Ok(Reply::page(orders, total))
}
