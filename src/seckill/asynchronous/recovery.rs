//! Recovery of the asynchronous mode. Entries nobody acknowledged for
//! `ASYNC_CLAIM_IDLE_MS` (their consumer died, is stuck, or failed them) are
//! taken over with XAUTOCLAIM and retried. An entry the database refused
//! `ASYNC_MAX_DELIVERIES` times is dead-lettered and compensated (its buyer
//! slot freed, Redis's stock set from MariaDB's row), so one bad entry never
//! blocks the entries behind it.

use std::{sync::LazyLock, time::Duration};

use hmdp_redis::Redis;
use redis::{
    AsyncCommands, Script,
    streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply},
};
use sqlx::MySqlPool;

use super::{
    converge::{self, with_stock_from_row},
    stream::{Entry, GROUP, PersistError, acknowledge},
};
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::{segments::Segments, store},
};

static COMPENSATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_stock_from_row!("../../../lua/seckill_compensate.lua")));

/// A retired sale's failed orders and dead letters stay this long (and the
/// index that finds a failed order's voucher).
pub(super) const FAILED_KEPT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How long dead-lettering asks an unanswered compensation again while it
/// holds the voucher's row lock.
const COMPENSATE_PATIENCE: Duration = Duration::from_secs(10);

/// What recovery needs; the consumer owns one.
#[derive(Clone)]
pub(crate) struct Recovery {
    pub(crate) db: MySqlPool,
    pub(crate) redis: Redis,
    pub(crate) keys: Keys,
    /// The consumer's name: entries taken over become its own.
    pub(crate) name: String,
    pub(crate) page: usize,
    pub(crate) claim_idle: Duration,
    pub(crate) max_deliveries: u64,
}

impl Recovery {
    /// One page of the voucher's entries idle for longer than the claim bound,
    /// taken over from any consumer of the group (this one included), and
    /// where the next page starts (`0-0`: no more).
    pub(super) async fn claim_page(
        &self,
        sk: &SeckillKeys,
        start: &str,
    ) -> Result<(Vec<StreamId>, String), PersistError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&sk.orders)
            .arg(GROUP)
            .arg(&self.name)
            .arg(self.claim_idle.as_millis() as u64)
            .arg(start)
            .arg("COUNT")
            .arg(self.page)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok((reply.claimed, reply.next_stream_id))
    }

    /// The database refused this entry on its own. It stays pending (and is
    /// retried once idle) until it has been delivered `max_deliveries` times;
    /// then it is dead-lettered. (`sk`: the keys of the entry's segment.)
    pub(super) async fn refused(
        &self,
        segments: &Segments,
        sk: &SeckillKeys,
        voucher: u64,
        entry: &Entry,
        reason: &str,
    ) {
        let pending: redis::RedisResult<StreamPendingCountReply> = redis::cmd("XPENDING")
            .arg(&sk.orders)
            .arg(GROUP)
            .arg(&entry.stream_id)
            .arg(&entry.stream_id)
            .arg(1)
            .query_async(&mut self.redis.clone())
            .await;
        let deliveries = match pending {
            Ok(reply) => match reply.ids.first() {
                Some(p) => p.times_delivered as u64,
                None => return, // acknowledged meanwhile, by another consumer
            },
            Err(err) => {
                tracing::warn!(voucher, order_id = entry.order_id, error = %err, "reading the delivery count failed; will retry");
                return;
            }
        };
        if deliveries < self.max_deliveries {
            tracing::warn!(
                voucher,
                order_id = entry.order_id,
                deliveries,
                reason,
                "order refused by the database; will retry"
            );
            return;
        }
        match self.dead_letter(segments, sk, voucher, entry, reason).await {
            Ok(()) => metrics::counter!("hmdp_async_dead_lettered_total").increment(1),
            Err(err) => {
                tracing::warn!(voucher, order_id = entry.order_id, error = %err, "dead-lettering failed; will retry")
            }
        }
    }

    /// Under the voucher's row lock, so no batch can persist the order at the
    /// same time: if its row exists after all it is simply acknowledged;
    /// otherwise it is moved to the dead-letter stream and compensated.
    async fn dead_letter(
        &self,
        segments: &Segments,
        sk: &SeckillKeys,
        voucher: u64,
        entry: &Entry,
        reason: &str,
    ) -> Result<(), PersistError> {
        let mut tx = self.db.begin().await?;
        let db_stock = store::lock_stock(&mut *tx, voucher).await?;
        let mine = store::OrderOwner { user_id: entry.user_id, voucher_id: voucher };
        if store::existing_orders(&mut *tx, &[entry.order_id]).await?.get(&entry.order_id) == Some(&mine) {
            tx.commit().await?;
            return acknowledge(&self.redis, sk, std::slice::from_ref(entry)).await;
        }
        let holds_another = store::held_order(&mut *tx, entry.user_id, voucher).await?;
        // The unit goes back only as far as MariaDB has it: the script sets
        // Redis's stock from the row, this order no longer pending.
        let segmented = segments.count() > 1;
        // The pending orders with their row, which the script must not count.
        let persisted = if !segmented {
            converge::unpersisted(&mut tx, &self.redis, sk, voucher).await?.persisted
        } else {
            if let Some(db_stock) = db_stock {
                self.set_segments_without(&mut tx, segments, sk, voucher, entry, db_stock.into()).await?;
            }
            Vec::new()
        };
        let row_stock = db_stock.filter(|_| !segmented).map_or_else(String::new, |s| s.to_string());
        let mut compensate = COMPENSATE.prepare_invoke();
        compensate
            .key(&sk.stock)
            .key(&sk.buyers)
            .key(&sk.orders)
            .key(&sk.dead)
            .key(&sk.pending)
            .key(&sk.failed)
            .key(&sk.holders)
            .arg(&entry.stream_id)
            .arg(entry.order_id)
            .arg(entry.user_id)
            .arg(voucher)
            .arg(reason)
            .arg(u8::from(holds_another.is_some()))
            .arg(row_stock)
            .arg(&persisted);
        // A call whose answer was lost may still run later. The row lock is
        // held until a call is answered (the script is idempotent: a later
        // run of a lost call changes nothing), so no consumer can persist
        // the order in between and then see it dead-lettered after its row.
        let (compensated, before, after) = self.until_answered(&compensate, entry.order_id).await?;
        if let Some(db_stock) = db_stock.filter(|_| !segmented) {
            converge::report(voucher, db_stock.into(), before, after);
        }
        tx.commit().await?;
        if compensated == 1 {
            self.record_failed(voucher, entry, reason).await;
        }
        Ok(())
    }

    /// In segments no one script sees every segment: each is set from the
    /// row first, this order already counted as gone, and the script then
    /// leaves the stock alone. Whoever sees the order gone (FAILED, or a
    /// drained stream) sees its unit back; should the script fail after
    /// this, Redis holds one unit more than MariaDB until the order's next
    /// dead-lettering sets it from the row again.
    async fn set_segments_without(
        &self,
        tx: &mut sqlx::MySqlConnection,
        segments: &Segments,
        sk: &SeckillKeys,
        voucher: u64,
        entry: &Entry,
        db_stock: i64,
    ) -> Result<(), PersistError> {
        let mut found = converge::unpersisted_each(&mut *tx, &self.redis, segments, voucher).await?;
        let waiting: bool = self.redis.clone().hexists(&sk.pending, entry.order_id).await?;
        if let Some(own) = segments.keys().iter().position(|k| k.orders == sk.orders)
            && waiting
            && !found[own].persisted.contains(&entry.order_id)
        {
            found[own].count -= 1;
            found[own].persisted.push(entry.order_id);
        }
        converge::set_from_row(&self.redis, segments, voucher, db_stock, &found).await?;
        Ok(())
    }

    /// The compensation script, asked again while Redis does not answer
    /// (within `COMPENSATE_PATIENCE`): the caller holds the row lock.
    async fn until_answered(
        &self,
        compensate: &redis::ScriptInvocation<'_>,
        order_id: i64,
    ) -> Result<(i64, i64, i64), PersistError> {
        let patience = tokio::time::Instant::now() + COMPENSATE_PATIENCE;
        loop {
            match compensate.invoke_async(&mut self.redis.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(err) if hmdp_redis::unavailable(&err) && tokio::time::Instant::now() < patience => {
                    tracing::warn!(order_id, error = %err, "dead-lettering unanswered; asking again under the row lock");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// A dead-lettered order: its FAILED stays findable once the sale
    /// leaves the active set, and the operator hears of it.
    async fn record_failed(&self, voucher: u64, entry: &Entry, reason: &str) {
        let indexed: redis::RedisResult<()> =
            self.redis.clone().set_ex(self.keys.failed_order(entry.order_id), voucher, FAILED_KEPT.as_secs()).await;
        if let Err(err) = indexed {
            tracing::warn!(order_id = entry.order_id, error = %err, "indexing a failed order failed; found while its sale is active");
        }
        tracing::error!(
            voucher,
            order_id = entry.order_id,
            user_id = entry.user_id,
            reason,
            "order dead-lettered; buyer slot freed, stock set from MariaDB"
        );
    }

    /// An entry without the fields the order script writes cannot be persisted
    /// or compensated; it is set aside so it blocks nothing.
    pub(super) async fn dead_letter_malformed(&self, sk: &SeckillKeys, voucher: u64, raw: &StreamId) {
        let fields: Vec<(String, String)> = raw
            .map
            .iter()
            .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap_or_default()))
            .collect();
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&sk.dead).arg("*").arg("reason").arg("malformed entry").arg("entry").arg(&raw.id);
        for (k, v) in &fields {
            xadd.arg(k).arg(v);
        }
        let moved = redis::pipe()
            .atomic()
            .add_command(xadd)
            .ignore()
            .xack(&sk.orders, GROUP, &[&raw.id])
            .ignore()
            .xdel(&sk.orders, &[&raw.id])
            .ignore()
            .exec_async(&mut self.redis.clone())
            .await;
        match moved {
            Ok(()) => tracing::error!(voucher, entry = %raw.id, ?fields, "malformed order entry set aside"),
            Err(err) => {
                tracing::warn!(voucher, entry = %raw.id, error = %err, "setting a malformed entry aside failed")
            }
        }
    }
}
