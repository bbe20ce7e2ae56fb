//! Finding a user's orders wherever they are: pending in Redis, in their
//! row, or dead-lettered. An id the service answered with is never a 404
//! for its owner.

use chrono::DateTime;
use hmdp_redis::Redis;
use redis::AsyncCommands;
use sqlx::MySqlPool;

use super::{
    error::SeckillResult,
    model::{OrderState, OrderView},
    store,
};
use crate::keys::Keys;

/// Where an order's row is looked for: the replica first when there is one,
/// then the primary, which has every committed row.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    pub primary: &'a MySqlPool,
    pub replica: Option<&'a MySqlPool>,
}

/// The order if it exists and belongs to `user_id`: the same `None` for
/// both, so an id reveals nothing about other users' orders.
///
/// Looked up in the order an asynchronous order moves: pending in Redis,
/// then its row, then the dead letters. An order persisted (or given back)
/// between two looks is found by the next one, because the pending entry is
/// removed only after the commit (or together with the failed entry).
pub(super) async fn find_owned(
    rows: Rows<'_>,
    redis: &mut Redis,
    keys: &Keys,
    order_id: i64,
    user_id: u64,
) -> SeckillResult<Option<OrderView>> {
    let active: Vec<u64> = redis.smembers(keys.seckill_active()).await?;
    if let Some(view) = in_redis(redis, keys, &active, order_id, user_id, OrderState::Pending).await? {
        return Ok(Some(view));
    }
    if let Some(replica) = rows.replica
        && let Some(row) = store::owned_order(replica, order_id, user_id).await?
    {
        return Ok(Some(row));
    }
    let row = store::owned_order(rows.primary, order_id, user_id).await?;
    if row.is_some() {
        return Ok(row);
    }
    in_redis(redis, keys, &active, order_id, user_id, OrderState::Failed).await
}

/// The order in the pending or failed hash of one of the active vouchers;
/// each holds `<userId>:<ts ms>`.
async fn in_redis(
    redis: &mut Redis,
    keys: &Keys,
    active: &[u64],
    order_id: i64,
    user_id: u64,
    state: OrderState,
) -> SeckillResult<Option<OrderView>> {
    if active.is_empty() {
        return Ok(None);
    }
    // One HGET per voucher, concurrently: the vouchers' hashes live in
    // different slots of a cluster.
    let lookups = active.iter().map(|&voucher| {
        let sk = keys.seckill(voucher);
        let hash = if state == OrderState::Pending { sk.pending } else { sk.failed };
        let mut redis = redis.clone();
        async move { redis.hget::<_, _, Option<String>>(hash, order_id).await }
    });
    let found: Vec<Option<String>> = futures::future::try_join_all(lookups).await?;
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
