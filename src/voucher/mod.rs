//! Vouchers: admins create them (ordinary or seckill), anyone lists a
//! shop's vouchers on shelf with their seckill fields.

mod admin;
mod model;

use std::sync::Arc;

use axum::{
    Router,
    extract::{FromRef, State},
    routing::{get, post},
};
use sqlx::MySqlPool;

pub(crate) use admin::Admin;
pub(crate) use model::{Invalid, NewVoucher, VoucherForm, VoucherView};

use crate::{
    config::Config,
    connect::ReadReplica,
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Failure, Success},
        extract::{Json, Path},
        failures::{BadPath, Forbidden, Unavailable},
    },
    seckill::{self, Seckill},
};

impl From<Invalid> for ApiError {
    fn from(err: Invalid) -> Self {
        Self::Validation(err.to_string())
    }
}

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    MySqlPool: FromRef<S>,
    ReadReplica: FromRef<S>,
    Seckill: FromRef<S>,
    Arc<Config>: FromRef<S>,
{
    Router::new()
        .route("/voucher", post(create_voucher))
        .route("/voucher/seckill", post(create_seckill_voucher))
        .route("/voucher/list/{shop_id}", get(list_for_shop))
}

#[utoipa::path(post, path = "/voucher", tag = "voucher", security(("adminKey" = [])), request_body = VoucherForm,
    responses(
        (status = 200, description = "the new voucher's id", body = Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range", body = Failure),
        Forbidden, Unavailable,
    ))]
pub(crate) async fn create_voucher(
    State(db): State<MySqlPool>,
    _admin: Admin,
    Json(form): Json<VoucherForm>,
) -> ApiResult<Reply<u64>> {
    let voucher = form.into_ordinary()?;
    let id = insert_voucher(&db, &voucher).await?;
    Ok(Reply::data(id))
}

/// Both rows in one transaction: a seckill voucher never exists half-made.
#[utoipa::path(post, path = "/voucher/seckill", tag = "voucher", security(("adminKey" = [])), request_body = VoucherForm,
    description = "`stock`, `beginTime` and `endTime` are required here.",
    responses(
        (status = 200, description = "the new voucher's id", body = Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range, or the window ends before it begins", body = Failure),
        Forbidden, Unavailable,
    ))]
pub(crate) async fn create_seckill_voucher(
    State(db): State<MySqlPool>,
    State(sales): State<Seckill>,
    _admin: Admin,
    Json(form): Json<VoucherForm>,
) -> ApiResult<Reply<u64>> {
    let (voucher, sale) = form.into_seckill()?;
    let mut tx = db.begin().await?;
    let id = insert_voucher(&mut *tx, &voucher).await?;
    let (begin, end) = (sale.begin_time.naive_utc(), sale.end_time.naive_utc());
    seckill::insert_sale(&mut *tx, id, sale.stock.into(), begin, end).await?;
    tx.commit().await?;
    tracing::info!(voucher_id = id, stock = sale.stock, "seckill voucher created");
    sales.prepare_sale(id).await?;
    Ok(Reply::data(id))
}

async fn insert_voucher<'e>(db: impl sqlx::MySqlExecutor<'e>, voucher: &NewVoucher) -> sqlx::Result<u64> {
    let inserted = sqlx::query(
        "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(voucher.shop_id)
    .bind(&voucher.title)
    .bind(&voucher.sub_title)
    .bind(&voucher.rules)
    .bind(voucher.pay_value)
    .bind(voucher.actual_value)
    .bind(voucher.kind)
    .bind(voucher.status)
    .execute(db)
    .await?;
    Ok(inserted.last_insert_id())
}

/// One query: the shop's vouchers on shelf, seckill fields joined in.
#[utoipa::path(get, path = "/voucher/list/{shop_id}", tag = "voucher", params(("shop_id" = u64, Path, description = "the shop")),
    responses(
        (status = 200, description = "the shop's vouchers on shelf, seckill fields set for seckill vouchers", body = Success<Vec<VoucherView>>),
        BadPath, Unavailable,
    ))]
pub(crate) async fn list_for_shop(
    State(ReadReplica(db)): State<ReadReplica>,
    Path(shop_id): Path<u64>,
) -> ApiResult<Reply<Vec<VoucherView>>> {
    // A voucher created a moment ago may be missing from a lagging replica;
    // the list is a shop window, not a promise.
    let vouchers: Vec<VoucherView> = seckill::shop_vouchers(&db, shop_id).await?;
    Ok(Reply::list(vouchers))
}
