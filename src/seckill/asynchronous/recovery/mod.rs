//! Recovery of the asynchronous mode. Entries nobody acknowledged for
//! `ASYNC_CLAIM_IDLE_MS` (their consumer died, is stuck, or failed them) are
//! taken over with XAUTOCLAIM and retried. An entry the database refused
//! `ASYNC_MAX_DELIVERIES` times is dead-lettered and compensated (its buyer
//! slot freed, Redis's stock set from MariaDB's row), so one bad entry never
//! blocks the entries behind it.

mod dead_letter;

use std::{sync::LazyLock, time::Duration};

use hmdp_redis::Redis;
use redis::{
    Script,
    streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply},
};
use sqlx::MySqlPool;

use super::{
    converge::with_stock_from_row,
    stream::{Entry, GROUP, PersistError},
};
use crate::{
    events::Outbox,
    keys::{Keys, SeckillKeys},
    seckill::asynchronous::segments::Segments,
};

static COMPENSATE: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("seckill_compensate.lua")));

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
    /// Where a dead letter writes its `failed` event.
    pub(crate) outbox: Outbox,
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
}
