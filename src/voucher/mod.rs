//! Vouchers: admins create them (ordinary or seckill), anyone lists a
//! shop's vouchers on shelf with their seckill fields.

mod admin;
mod model;

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};

pub use admin::Admin;
pub use model::{NewVoucher, VoucherForm, VoucherView};

use crate::{
    http::{
        ApiResult, Reply,
        extract::{Json, Path},
    },
    seckill,
    state::AppState,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/voucher", post(create_voucher))
        .route("/voucher/seckill", post(create_seckill_voucher))
        .route("/voucher/list/{shop_id}", get(list_for_shop))
}

#[utoipa::path(post, path = "/voucher", tag = "voucher", security(("adminKey" = [])), request_body = VoucherForm,
    responses(
        (status = 200, description = "the new voucher's id", body = crate::http::envelope::Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range", body = crate::http::envelope::Failure),
        (status = 403, description = "FORBIDDEN: admin key missing or wrong", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn create_voucher(
    State(state): State<AppState>,
    _admin: Admin,
    Json(form): Json<VoucherForm>,
) -> ApiResult<Reply<u64>> {
    let voucher = form.into_ordinary()?;
    let id = insert_voucher(&state.db, &voucher).await?;
    Ok(Reply::data(id))
}

/// Both rows in one transaction: a seckill voucher never exists half-made.
#[utoipa::path(post, path = "/voucher/seckill", tag = "voucher", security(("adminKey" = [])), request_body = VoucherForm,
    description = "`stock`, `beginTime` and `endTime` are required here.",
    responses(
        (status = 200, description = "the new voucher's id", body = crate::http::envelope::Success<u64>),
        (status = 400, description = "VALIDATION: a field missing, unknown or out of range, or the window ends before it begins", body = crate::http::envelope::Failure),
        (status = 403, description = "FORBIDDEN: admin key missing or wrong", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn create_seckill_voucher(
    State(state): State<AppState>,
    _admin: Admin,
    Json(form): Json<VoucherForm>,
) -> ApiResult<Reply<u64>> {
    let (voucher, seckill) = form.into_seckill()?;
    let mut tx = state.db.begin().await?;
    let id = insert_voucher(&mut *tx, &voucher).await?;
    sqlx::query("INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, ?, ?, ?)")
        .bind(id)
        .bind(seckill.stock)
        .bind(seckill.begin_time.naive_utc())
        .bind(seckill.end_time.naive_utc())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(voucher_id = id, stock = seckill.stock, "seckill voucher created");
    seckill::prepare_sale(&state, id).await?;
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
        (status = 200, description = "the shop's vouchers on shelf, seckill fields set for seckill vouchers", body = crate::http::envelope::Success<Vec<VoucherView>>),
        (status = 400, description = "VALIDATION: the shop id is not a number", body = crate::http::envelope::Failure),
        (status = 503, description = "UNAVAILABLE: MariaDB or Redis unreachable", body = crate::http::envelope::Failure),
    ))]
pub(crate) async fn list_for_shop(
    State(state): State<AppState>,
    Path(shop_id): Path<u64>,
) -> ApiResult<Reply<Vec<VoucherView>>> {
    let vouchers = sqlx::query_as::<_, VoucherView>(
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value,
                v.type, v.status, sv.stock, sv.begin_time, sv.end_time
         FROM tb_voucher v
         LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id
         WHERE v.shop_id = ? AND v.status = 1
         ORDER BY v.id",
    )
    .bind(shop_id)
    .fetch_all(&state.db)
    .await?;
    Ok(Reply::list(vouchers))
}
