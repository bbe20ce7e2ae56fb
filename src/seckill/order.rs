//! The order as its owner sees it, in whichever state it is: `PENDING`
//! (accepted in Redis, not yet in MariaDB), `CONFIRMED` (its row), `FAILED`
//! (dead-lettered, stock given back). An id the service answered with is
//! never a 404 for its owner.

use chrono::{DateTime, NaiveDateTime};
use redis::{AsyncCommands, aio::ConnectionManager};
use serde::{Serialize, Serializer};
use sqlx::MySqlPool;

use super::{SeckillResult, store};
use crate::{http::time, keys::Keys};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderState {
    Pending,
    #[default]
    Confirmed,
    Failed,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderView {
    #[serde(serialize_with = "as_string")]
    #[schema(value_type = String)]
    pub id: i64,
    pub user_id: u64,
    pub voucher_id: u64,
    /// A row is confirmed by being there.
    #[sqlx(skip)]
    pub state: OrderState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_type: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u8>,
    #[serde(serialize_with = "time::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub create_time: NaiveDateTime,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub use_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub refund_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub update_time: Option<NaiveDateTime>,
}

/// The order if it exists and belongs to `user_id`: the same `None` for
/// both, so an id reveals nothing about other users' orders.
///
/// Looked up in the order an asynchronous order moves: pending in Redis,
/// then its row, then the dead letters. An order persisted (or given back)
/// between two looks is found by the next one, because the pending entry is
/// removed only after the commit (or together with the failed entry).
pub(super) async fn find_owned(
    db: &MySqlPool,
    redis: &mut ConnectionManager,
    keys: &Keys,
    order_id: i64,
    user_id: u64,
) -> SeckillResult<Option<OrderView>> {
    let active: Vec<u64> = redis.smembers(keys.seckill_active()).await?;
    if let Some(view) = in_redis(redis, keys, &active, order_id, user_id, OrderState::Pending).await? {
        return Ok(Some(view));
    }
    let row = store::owned_order(db, order_id, user_id).await?;
    if row.is_some() {
        return Ok(row);
    }
    in_redis(redis, keys, &active, order_id, user_id, OrderState::Failed).await
}

/// The order in the pending or failed hash of one of the active vouchers;
/// each holds `<userId>:<ts ms>`.
async fn in_redis(
    redis: &mut ConnectionManager,
    keys: &Keys,
    active: &[u64],
    order_id: i64,
    user_id: u64,
    state: OrderState,
) -> SeckillResult<Option<OrderView>> {
    if active.is_empty() {
        return Ok(None);
    }
    let mut pipe = redis::pipe();
    for &voucher in active {
        let sk = keys.seckill(voucher);
        pipe.hget(if state == OrderState::Pending { sk.pending } else { sk.failed }, order_id);
    }
    let found: Vec<Option<String>> = pipe.query_async(redis).await?;
    for (&voucher_id, value) in active.iter().zip(found) {
        let Some((owner, ts)) = value.as_deref().and_then(|v| v.split_once(':')) else { continue };
        if owner.parse() != Ok(user_id) {
            return Ok(None);
        }
        let create_time = ts.parse().ok().and_then(DateTime::from_timestamp_millis).unwrap_or_default().naive_utc();
        return Ok(Some(OrderView {
            id: order_id,
            user_id,
            voucher_id,
            state,
            pay_type: None,
            status: None,
            create_time,
            pay_time: None,
            use_time: None,
            refund_time: None,
            update_time: None,
        }));
    }
    Ok(None)
}

/// The user's orders that have their row, newest first (ids grow with
/// time), and how many there are in all.
pub(super) async fn list_owned(
    db: &MySqlPool,
    user_id: u64,
    page: u32,
    per_page: u32,
) -> SeckillResult<(Vec<OrderView>, u64)> {
    let offset = u64::from(page.saturating_sub(1)) * u64::from(per_page);
    let orders = store::owned_orders(db, user_id, per_page, offset).await?;
    let total = store::count_owned(db, user_id).await?;
    Ok((orders, total))
}

fn as_string<S: Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.to_string())
}
