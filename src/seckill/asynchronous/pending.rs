//! An asynchronous order before and after its row: pending in Redis
//! (accepted, not yet persisted) or failed (dead-lettered). An order
//! persisted (or given back) between two looks is found by the next one,
//! because the pending entry is removed only after the commit (or together
//! with the failed entry).

use chrono::DateTime;
use hmdp_redis::Redis;
use redis::AsyncCommands;
use sqlx::MySqlPool;

use super::{AsyncMode, segments::SegmentMaps};
use crate::seckill::{
    error::SeckillResult,
    model::{OrderState, OrderView},
    order::{self, Rows},
    store,
};

impl AsyncMode {
    /// The order if it exists and belongs to `user_id` (the same `None` for
    /// both), looked up in the order an asynchronous order moves: pending
    /// in Redis, then its row, then the dead letters.
    pub(crate) async fn find_owned(
        &self,
        rows: Rows<'_>,
        order_id: i64,
        user_id: u64,
    ) -> SeckillResult<Option<OrderView>> {
        let redis = &mut self.redis.clone();
        let active: Vec<u64> = redis.smembers(self.keys.seckill_active()).await?;
        let maps = &self.segments;
        if let Some(view) = in_redis(redis, maps, &active, order_id, user_id, OrderState::Pending).await? {
            return Ok(Some(view));
        }
        let row = order::owned_row(rows, order_id, user_id).await?;
        if row.is_some() {
            return Ok(row);
        }
        // A failed order names its voucher in an index of its own (its sale
        // may have been retired from the active set), then the active sales:
        // the index may name another user's order that drew the same id.
        let indexed: Option<u64> = redis.get(self.keys.failed_order(order_id)).await?;
        let mut vouchers: Vec<u64> = indexed.into_iter().collect();
        vouchers.extend(active.into_iter().filter(|voucher| Some(*voucher) != indexed));
        in_redis(redis, maps, &vouchers, order_id, user_id, OrderState::Failed).await
    }

    /// The user's orders accepted but not yet rows, newest first.
    pub(crate) async fn pending_of(&self, user_id: u64) -> SeckillResult<Vec<OrderView>> {
        pending_of(&self.db, &mut self.redis.clone(), &self.keys, &self.segments, user_id).await
    }
}

/// The order in the pending or failed hash of one of the active vouchers
/// (of each of their segments); each holds `<userId>:<ts ms>`.
async fn in_redis(
    redis: &mut Redis,
    maps: &SegmentMaps,
    active: &[u64],
    order_id: i64,
    user_id: u64,
    state: OrderState,
) -> SeckillResult<Option<OrderView>> {
    if active.is_empty() {
        return Ok(None);
    }
    // One HGET per segment, concurrently: the hashes live in different
    // slots of a cluster.
    let mut hashes = Vec::new();
    for &voucher in active {
        for sk in maps.of_or_single(voucher).await?.keys() {
            hashes.push((voucher, sk.clone()));
        }
    }
    let lookups = hashes.iter().map(|(_, sk)| {
        let mut redis = redis.clone();
        async move {
            let hash = if state == OrderState::Pending { &sk.pending } else { &sk.failed };
            redis.hget::<_, _, Option<String>>(hash, order_id).await
        }
    });
    let found: Vec<Option<String>> = futures::future::try_join_all(lookups).await?;
    // Another user's entry under the id is another order that drew the same
    // id (ids met after a failover): this user's may be in another hash.
    for (&(voucher_id, _), value) in hashes.iter().zip(found) {
        let Some((owner, ts)) = value.as_deref().and_then(|v| v.split_once(':')) else { continue };
        if owner.parse() == Ok(user_id) {
            return Ok(Some(pending_view(order_id, user_id, voucher_id, ts, state)));
        }
    }
    Ok(None)
}

/// The user's pending orders, newest first: one per voucher at most (the
/// holders hash of each active voucher, in the user's segment), those
/// already persisted left out.
async fn pending_of(
    db: &MySqlPool,
    redis: &mut Redis,
    keys: &crate::keys::Keys,
    maps: &SegmentMaps,
    user_id: u64,
) -> SeckillResult<Vec<OrderView>> {
    let active: Vec<u64> = redis.smembers(keys.seckill_active()).await?;
    if active.is_empty() {
        return Ok(Vec::new());
    }
    let mut holders = Vec::with_capacity(active.len());
    for &voucher in &active {
        let segments = maps.of_or_single(voucher).await?;
        holders.push((voucher, segments.keys()[segments.of_user(user_id)].clone()));
    }
    // The vouchers' hashes live in different slots of a cluster.
    let lookups = holders.into_iter().map(|(voucher, sk)| {
        let mut redis = redis.clone();
        async move {
            let Some(order_id) = redis.hget::<_, _, Option<i64>>(&sk.holders, user_id).await? else {
                return redis::RedisResult::Ok(None);
            };
            let accepted: Option<String> = redis.hget(&sk.pending, order_id).await?;
            Ok(accepted.map(|accepted| (voucher, order_id, accepted)))
        }
    });
    let found: Vec<(u64, i64, String)> = futures::future::try_join_all(lookups).await?.into_iter().flatten().collect();
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = found.iter().map(|(_, id, _)| *id).collect();
    let persisted = store::existing_orders(db, &ids).await?;
    // Left out once its row lands (the rows list it); a row of another
    // owner under the id is not its row.
    let mut views: Vec<OrderView> = found
        .into_iter()
        .filter(|(voucher_id, id, _)| {
            persisted.get(id) != Some(&store::OrderOwner { user_id, voucher_id: *voucher_id })
        })
        .filter_map(|(voucher_id, order_id, accepted)| {
            let (owner, ts) = accepted.split_once(':')?;
            (owner.parse() == Ok(user_id)).then(|| pending_view(order_id, user_id, voucher_id, ts, OrderState::Pending))
        })
        .collect();
    views.sort_by_key(|v| std::cmp::Reverse(v.id));
    Ok(views)
}

fn pending_view(order_id: i64, user_id: u64, voucher_id: u64, ts: &str, state: OrderState) -> OrderView {
    let create_time = ts.parse().ok().and_then(DateTime::from_timestamp_millis).unwrap_or_default().naive_utc();
    OrderView {
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
        status_name: None,
        pay_deadline: None,
    }
}
