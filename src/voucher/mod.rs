//! Vouchers: admins create them (ordinary or seckill) and put them on or
//! off the shelf, anyone lists a shop's vouchers on shelf with their
//! seckill fields.

mod admin;
mod model;
mod rules;
mod store;

use std::sync::Arc;

use axum::{
    Router,
    extract::{FromRef, State},
    response::{IntoResponse, Response},
    routing::{get, post, put},
};
use sqlx::MySqlPool;

pub(crate) use admin::Admin;
pub(crate) use model::{OrdinaryVoucherSchema, SeckillVoucherSchema, VoucherForm, VoucherView};

use crate::{
    config::{Config, TrustedProxies},
    connect::ReadReplica,
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Done, Failure, Success},
        extract::{Id, Json, Path},
        failures::{BadPath, BodyTimedOut, BodyTooLarge, Forbidden, RateLimited, Unavailable},
        idempotency::{Idempotency, IdempotencyKey},
        ratelimit::RateLimiter,
        whole,
    },
    seckill::{self, AfterSale, Seckill},
};

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    MySqlPool: FromRef<S>,
    ReadReplica: FromRef<S>,
    Seckill: FromRef<S>,
    Arc<AfterSale>: FromRef<S>,
    Arc<Config>: FromRef<S>,
    RateLimiter: FromRef<S>,
    TrustedProxies: FromRef<S>,
    Idempotency: FromRef<S>,
{
    Router::new()
        .route("/voucher", post(create_voucher))
        .route("/voucher/seckill", post(create_seckill_voucher))
        .route("/voucher/list/{shop_id}", get(list_for_shop))
        .route("/voucher/{voucher_id}/status", put(set_status))
        .route("/voucher/seckill/{voucher_id}/stock", put(set_stock))
        .route("/voucher-order/{order_id}/use", post(redeem_order))
}

#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusForm {
    /// 1 on the shelf (sells), 2 off the shelf (does not sell, not listed).
    #[schema(minimum = 1, maximum = 2)]
    #[serde(deserialize_with = "whole::number")]
    status: u8,
}

/// On or off the shelf. An off-shelf voucher is not listed and does not
/// sell, in either mode: a synchronous order reads the status in its own
/// transaction (so one that began before this update may still commit; none
/// after it does), an asynchronous one in Redis, updated here once MariaDB
/// has it. Idempotent: the same status again changes nothing.
#[utoipa::path(put, path = "/voucher/{voucher_id}/status", tag = "voucher", security(("adminKey" = [])),
    params(("voucher_id" = i64, Path, minimum = 0, description = "the voucher")), request_body = StatusForm,
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the status is set", body = Done),
        (status = 400, description = "VALIDATION: status is not 1 or 2", body = Failure),
        (status = 404, description = "NOT_FOUND: no such voucher", body = Failure),
        BadPath, Forbidden, RateLimited, Unavailable,
    ))]
pub(crate) async fn set_status(
    State(db): State<MySqlPool>,
    State(sales): State<Seckill>,
    _admin: Admin,
    Path(Id(voucher_id)): Path<Id>,
    Json(form): Json<StatusForm>,
) -> ApiResult<Reply<()>> {
    if !matches!(form.status, 1 | 2) {
        return Err(ApiError::validation("status must be 1 (on the shelf) or 2 (off the shelf)"));
    }
    if !store::set_status(&db, voucher_id, form.status).await? {
        return Err(ApiError::NotFound("no such voucher"));
    }
    tracing::info!(voucher_id, status = form.status, "voucher shelf status set");
    sales.shelf_changed(voucher_id, i64::from(form.status)).await?;
    Ok(Reply::done())
}

#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StockForm {
    /// Units for sale from now on, 0 to 2147483647.
    #[schema(minimum = 0, maximum = 2147483647)]
    #[serde(deserialize_with = "whole::number")]
    stock: i64,
}

/// Sets the stock of a seckill voucher, in MariaDB and (asynchronous mode)
/// Redis alike, instead of an edit by hand that Redis would not see. The
/// stock is what is for sale from now on: orders accepted and not yet
/// persisted (asynchronous mode) keep their units, and the row gets the
/// stock plus theirs (`awaitingPersistence` in the answer). A sold-out
/// voucher sells again at once on this instance, within a second on the
/// others.
#[utoipa::path(put, path = "/voucher/seckill/{voucher_id}/stock", tag = "voucher", security(("adminKey" = [])),
    params(("voucher_id" = i64, Path, minimum = 0, description = "the seckill voucher")), request_body = StockForm,
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the stock is set", body = Success<seckill::StockSet>),
        (status = 400, description = "VALIDATION: stock missing, negative or too large", body = Failure),
        (status = 404, description = "NOT_FOUND: no such seckill voucher", body = Failure),
        BadPath, Forbidden, RateLimited, Unavailable,
    ))]
pub(crate) async fn set_stock(
    State(sales): State<Seckill>,
    _admin: Admin,
    Path(Id(voucher_id)): Path<Id>,
    Json(form): Json<StockForm>,
) -> ApiResult<Reply<seckill::StockSet>> {
    let stock = i32::try_from(form.stock)
        .ok()
        .filter(|s| *s >= 0)
        .ok_or_else(|| ApiError::validation(format!("stock must be between 0 and {}", i32::MAX)))?;
    Ok(Reply::data(sales.set_stock(voucher_id, stock).await?))
}

/// The shop redeems a paid order (admin). Redeeming it again answers it
/// again.
#[utoipa::path(post, path = "/voucher-order/{order_id}/use", tag = "order", security(("adminKey" = [])),
    params(("order_id" = i64, Path, minimum = 0, description = "the order id")),
    responses(
        (status = 200, description = "the used order", body = Success<seckill::OrderView>),
        (status = 404, description = "NOT_FOUND: no such order", body = Failure),
        (status = 409, description = "ORDER_STATE: not paid", body = Failure),
        BadPath, Forbidden, RateLimited, Unavailable,
    ))]
pub(crate) async fn redeem_order(
    State(after_sale): State<Arc<AfterSale>>,
    _admin: Admin,
    Path(order): Path<Id>,
) -> ApiResult<Reply<seckill::OrderView>> {
    Ok(Reply::data(after_sale.redeem(order.signed()).await?))
}

#[utoipa::path(post, path = "/voucher", tag = "voucher", security(("adminKey" = [])), request_body = OrdinaryVoucherSchema,
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$", description = "a retry with the same key and body gets the first answer again (24 h) instead of a second voucher")),
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the new voucher's id", body = Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range", body = Failure),
        (status = 409, description = "IDEMPOTENCY_IN_FLIGHT: the same Idempotency-Key is still running", body = Failure),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the Idempotency-Key came with another body", body = Failure),
        Forbidden, RateLimited, Unavailable,
    ))]
pub(crate) async fn create_voucher(
    State(db): State<MySqlPool>,
    _admin: Admin,
    idempotency: IdempotencyKey,
    Json(form): Json<VoucherForm>,
) -> Response {
    let request = format!("POST /voucher {}", fingerprint(&form));
    let create = async move {
        let voucher = form.into_ordinary()?;
        let id = store::insert_voucher(&db, &voucher).await?;
        ApiResult::Ok(Reply::data(id))
    };
    idempotency.run(ADMIN_CALLER, request, |_| async { create.await.into_response() }).await
}

/// Both rows in one transaction: a seckill voucher never exists half-made.
/// Once they are committed the answer is the id, whatever Redis says: a 503
/// then would make the admin create the voucher twice.
#[utoipa::path(post, path = "/voucher/seckill", tag = "voucher", security(("adminKey" = [])), request_body = SeckillVoucherSchema,
    description = "`stock`, `beginTime` and `endTime` are required here.",
    params(("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$", description = "a retry with the same key and body gets the first answer again (24 h) instead of a second voucher")),
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the new voucher's id", body = Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range, or the window, in whole seconds, ends before it begins or is empty", body = Failure),
        (status = 409, description = "IDEMPOTENCY_IN_FLIGHT: the same Idempotency-Key is still running", body = Failure),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the Idempotency-Key came with another body", body = Failure),
        Forbidden, RateLimited, Unavailable,
    ))]
pub(crate) async fn create_seckill_voucher(
    State(db): State<MySqlPool>,
    State(sales): State<Seckill>,
    _admin: Admin,
    idempotency: IdempotencyKey,
    Json(form): Json<VoucherForm>,
) -> Response {
    let request = format!("POST /voucher/seckill {}", fingerprint(&form));
    let create = async move {
        let (voucher, sale) = form.into_seckill()?;
        let id = store::insert_seckill_voucher(&db, &voucher, &sale, |id, segments| sales.prepare_sale(id, segments))
            .await?;
        tracing::info!(voucher_id = id, stock = sale.stock, segments = sale.segments, "seckill voucher created");
        sales.open_sale(id).await;
        ApiResult::Ok(Reply::data(id))
    };
    idempotency.run(ADMIN_CALLER, request, |_| async { create.await.into_response() }).await
}

/// Whose idempotency keys voucher creation uses: the one admin key's.
const ADMIN_CALLER: &str = "admin";

/// What makes two creations the same request: the form as parsed, so
/// spacing and field order do not matter.
fn fingerprint(form: &VoucherForm) -> String {
    serde_json::to_string(form).expect("a form serialises")
}

/// One query: the shop's vouchers on shelf, seckill fields joined in.
#[utoipa::path(get, path = "/voucher/list/{shop_id}", tag = "voucher", params(("shop_id" = i64, Path, minimum = 0, description = "the shop")),
    responses(
        (status = 200, description = "the shop's vouchers on shelf, seckill fields set for seckill vouchers", body = Success<Vec<VoucherView>>),
        BadPath, Unavailable,
    ))]
pub(crate) async fn list_for_shop(
    State(ReadReplica(db)): State<ReadReplica>,
    Path(Id(shop_id)): Path<Id>,
) -> ApiResult<Reply<Vec<VoucherView>>> {
    // A voucher created a moment ago may be missing from a lagging replica;
    // the list is a shop window, not a promise.
    let vouchers = store::shop_vouchers(&db, shop_id).await?;
    Ok(Reply::list(vouchers))
}
