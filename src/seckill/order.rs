//! The order transaction and the order as its owner sees it.

use axum::extract::State;
use chrono::NaiveDateTime;
use serde::{Serialize, Serializer};
use sqlx::{MySql, Transaction};

use crate::{
    auth::CurrentUser,
    http::{ApiError, ApiResult, Reply, extract::Path, time},
    state::AppState,
};

/// Runs the order's statements and hands back the open transaction, so the
/// caller commits only if it still holds the user's lock.
pub(super) async fn reserve(
    state: &AppState,
    gate: &super::Gate,
    user_id: u64,
    voucher_id: u64,
    order_id: i64,
) -> ApiResult<Transaction<'static, MySql>> {
    let mut tx = state.db.begin().await?;
    let existing: Option<i64> =
        sqlx::query_scalar("SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ? LIMIT 1")
            .bind(user_id)
            .bind(voucher_id)
            .fetch_optional(&mut *tx)
            .await?;
    if existing.is_some() {
        return Err(ApiError::DuplicateOrder);
    }
    let taken = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0")
        .bind(voucher_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    if taken == 0 {
        gate.mark_sold_out();
        return Err(ApiError::SoldOut);
    }
    // A unique violation here (another instance's order slipped past the
    // lock) becomes DUPLICATE_ORDER through ApiError's From<sqlx::Error>.
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)")
        .bind(order_id)
        .bind(user_id)
        .bind(voucher_id)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

#[derive(Debug, Serialize, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    #[serde(serialize_with = "as_string")]
    pub id: i64,
    pub user_id: u64,
    pub voucher_id: u64,
    pub pay_type: u8,
    pub status: u8,
    #[serde(serialize_with = "time::serialize")]
    pub create_time: NaiveDateTime,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    pub pay_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    pub use_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    pub refund_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize")]
    pub update_time: NaiveDateTime,
}

/// The order, for its owner only: anyone else gets the same 404 as for an
/// order that does not exist.
pub(super) async fn show(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(order_id): Path<i64>,
) -> ApiResult<Reply<OrderView>> {
    let order = sqlx::query_as::<_, OrderView>(
        "SELECT id, user_id, voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time, update_time
         FROM tb_voucher_order WHERE id = ? AND user_id = ?",
    )
    .bind(order_id)
    .bind(user.id)
    .fetch_optional(&state.db)
    .await?
    .ok_or(ApiError::NotFound("no such order"))?;
    Ok(Reply::data(order))
}

fn as_string<S: Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.to_string())
}
