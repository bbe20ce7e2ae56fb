//! The order as its owner sees it.

use chrono::NaiveDateTime;
use serde::{Serialize, Serializer};
use sqlx::MySqlPool;

use crate::http::time;

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

/// The order if it exists and belongs to `user_id`: the same `None` for
/// both, so an id reveals nothing about other users' orders.
pub async fn find_owned(db: &MySqlPool, order_id: i64, user_id: u64) -> sqlx::Result<Option<OrderView>> {
    sqlx::query_as::<_, OrderView>(
        "SELECT id, user_id, voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time, update_time
         FROM tb_voucher_order WHERE id = ? AND user_id = ?",
    )
    .bind(order_id)
    .bind(user_id)
    .fetch_optional(db)
    .await
}

fn as_string<S: Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.to_string())
}
