//! What a Redis failover can take from the asynchronous mode, and how each
//! round (`AsyncMode::settle`) gives it back. A master cut off from the
//! rest of its cluster keeps accepting orders until it notices (no replica
//! acknowledges them: they are answered 202), while the majority promotes
//! its replica, which never saw them. Two things follow:
//!
//! - The orders the old master's consumers persisted before it stopped are
//!   rows the new master knows nothing of: its stock counts their units
//!   again and its buyers set lacks their users, so it would sell those
//!   units twice and MariaDB would refuse the second sale, after the buyer
//!   was told yes. A voucher whose master is not the one of the last round
//!   (its `master_replid` changed) learns its buyers and its stock again
//!   from MariaDB (`converge::relearn`). The last round is this instance's,
//!   or, for an instance that has not seen the voucher yet (one started
//!   after the failover), the lineage its keys were last learnt under,
//!   kept beside them in Redis (`lua/seckill_lineage.lua`): it replicates
//!   with them, so a promoted replica holds its old master's, and the
//!   difference is seen even when every instance restarted.
//! - When the cut heals, the old master becomes a replica and throws away
//!   what it accepted alone. The orders this instance answered 202 are
//!   watched until they have their row or are `FAILED`; one that is neither
//!   pending in Redis nor a row (looked up under the voucher's row lock, so
//!   no batch persists it meanwhile) vanished with the old master and is
//!   recorded `FAILED`, which `GET /voucher-order/{id}` then says. Its unit
//!   needs no giving back: neither the new master nor MariaDB took it.
//!
//! The watch lives in the instance that answered: an instance that dies
//! takes it along, and such an order stays unknown (404) to its buyer.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock},
};

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

use super::{
    converge,
    recovery::FAILED_KEPT,
    segments::{SegmentMaps, Segments},
    stream::{Held, held},
};
use crate::{
    events::Outbox,
    keys::{Keys, SeckillKeys},
    recent::RecentIds,
    seckill::{error::SeckillResult, store},
};

static VANISHED: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_vanished.lua")));
static LINEAGE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_lineage.lua")));

/// Orders answered 202 watched at once, at most (beyond, the memory
/// forgets, and a forgotten order that vanished stays unknown).
const WATCHED_MAX: usize = 100_000;
/// Vouchers whose masters' lineage is remembered, at most.
const LINEAGES_MAX: usize = 10_000;
/// Watched orders looked up at once.
const LOOKUP_CHUNK: usize = 1_000;

/// An order answered 202, until it ends.
#[derive(Clone, Copy)]
struct Watched {
    user_id: u64,
    voucher_id: u64,
    accepted_ms: i64,
}

impl Watched {
    /// The row found under the order's id is this order's: a row of
    /// another owner is another order that drew the same id (a counter
    /// taken back by a failover), and this one has no row.
    fn is_row(&self, voucher_id: u64, row: Option<&store::OrderOwner>) -> bool {
        row == Some(&store::OrderOwner { user_id: self.user_id, voucher_id })
    }
}

pub(super) struct Failover {
    db: MySqlPool,
    redis: Redis,
    keys: Keys,
    segments: Arc<SegmentMaps>,
    outbox: Outbox,
    /// Order id -> the order answered 202.
    watched: RecentIds<Watched>,
    /// Voucher -> the `master_replid` of each segment's master at the last
    /// round.
    lineages: RecentIds<Vec<String>>,
}

impl Failover {
    pub(super) fn new(db: MySqlPool, redis: Redis, keys: Keys, segments: Arc<SegmentMaps>, outbox: Outbox) -> Self {
        Self {
            db,
            redis,
            keys,
            segments,
            outbox,
            watched: RecentIds::new(WATCHED_MAX, None),
            lineages: RecentIds::new(LINEAGES_MAX, None),
        }
    }

    /// An order answered 202: watched until it has its row or is `FAILED`.
    pub(super) fn watch(&self, order_id: i64, user_id: u64, voucher_id: u64) {
        let accepted_ms = chrono::Utc::now().timestamp_millis();
        self.watched.insert(order_id as u64, Watched { user_id, voucher_id, accepted_ms });
    }

    /// Each round: vouchers whose master changed learn again from MariaDB,
    /// then the orders answered 202 are settled.
    pub(super) async fn round(&self) {
        if let Err(err) = self.relearn_after_failover().await {
            tracing::warn!(error = %err, "checking the vouchers' Redis masters failed; again next round");
        }
        let watched = self.watched.take_all();
        let mut by_voucher: HashMap<u64, Vec<(i64, Watched)>> = HashMap::new();
        for (id, order) in watched {
            by_voucher.entry(order.voucher_id).or_default().push((id as i64, order));
        }
        for (voucher, orders) in by_voucher {
            for chunk in orders.chunks(LOOKUP_CHUNK) {
                let open = match self.settle_unreplicated(voucher, chunk).await {
                    Ok(open) => open,
                    Err(err) => {
                        tracing::warn!(voucher, error = %err, "settling orders answered 202 failed; again next round");
                        chunk.to_vec()
                    }
                };
                for (id, order) in open {
                    self.watched.insert(id as u64, order);
                }
            }
        }
    }

    /// Every active voucher's masters, against the last round's; a voucher
    /// whose master cannot be reached now is looked at next round.
    async fn relearn_after_failover(&self) -> SeckillResult<()> {
        let active: Vec<u64> = self.redis.clone().smembers(self.keys.seckill_active()).await?;
        for voucher in active {
            if let Err(err) = self.relearn_if_moved(voucher).await {
                tracing::warn!(voucher, error = %err, "checking the voucher's Redis master failed; again next round");
            }
        }
        Ok(())
    }

    async fn relearn_if_moved(&self, voucher: u64) -> SeckillResult<()> {
        let segments = self.segments.of_or_single(voucher).await?;
        let (mut lineage, mut recorded) = (Vec::with_capacity(segments.count()), Vec::new());
        for sk in segments.keys() {
            let (now, before) = lineage_of(&self.redis, sk, "").await?;
            lineage.push(now);
            recorded.push(before);
        }
        // Against this instance's last round, and against the lineage the
        // keys were last learnt under (another instance's relearning, or
        // the old master's load, replicated). A split keeps the segments
        // the voucher had (segment 0) and adds others: the segments both
        // layouts have are compared.
        let seen_moved =
            self.lineages.get(voucher).is_some_and(|before| before.iter().zip(&lineage).any(|(b, now)| b != now));
        let recorded_moved = recorded.iter().zip(&lineage).any(|(before, now)| !before.is_empty() && before != now);
        if seen_moved || recorded_moved {
            tracing::warn!(
                voucher,
                "the Redis master of the voucher's keys changed (a failover); its buyers and stock are learnt again from MariaDB"
            );
            metrics::counter!("hmdp_redis_relearned_total").increment(1);
            converge::relearn(&self.db, &self.redis, &segments, voucher).await?;
            // Recorded once learnt: a relearning that failed is tried again
            // (by any instance). A master changed meanwhile keeps the old
            // record, and is learnt again next round.
            for (sk, now) in segments.keys().iter().zip(&lineage) {
                lineage_of(&self.redis, sk, now).await?;
            }
        }
        self.lineages.insert(voucher, lineage);
        Ok(())
    }

    /// The voucher's orders answered 202 that are still to watch: those
    /// pending, and those `FAILED` whose index could not be written. Those
    /// with their row are done, and those that vanished are recorded
    /// `FAILED`.
    async fn settle_unreplicated(&self, voucher: u64, orders: &[(i64, Watched)]) -> SeckillResult<Vec<(i64, Watched)>> {
        let segments = self.segments.of_or_single(voucher).await?;
        let ids: Vec<i64> = orders.iter().map(|(id, _)| *id).collect();
        let rows = store::existing_orders(&self.db, &ids).await?;
        let (mut open, mut gone, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for (segment, sk) in segments.keys().iter().enumerate() {
            let mine: Vec<(i64, Watched)> = orders
                .iter()
                .copied()
                .filter(|(id, o)| segments.of_user(o.user_id) == segment && !o.is_row(voucher, rows.get(id)))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let ids: Vec<i64> = mine.iter().map(|(id, _)| *id).collect();
            for (order, held) in mine.into_iter().zip(held(&self.redis, sk, &ids).await?) {
                match held {
                    Held::Failed => failed.push(order),
                    Held::Pending => open.push(order),
                    Held::Gone => gone.push((segment, order)),
                }
            }
        }
        if !gone.is_empty() {
            self.record_gone(voucher, &segments, gone, &mut open, &mut failed).await?;
        }
        // A failed order's event is written again (idempotent) before it
        // leaves the watch: the commit that recorded it may have been lost.
        let told: Vec<(i64, u64)> = failed.iter().map(|(id, o)| (*id, o.user_id)).collect();
        if let Err(err) = self.failed_told(voucher, &told).await {
            tracing::warn!(voucher, error = %err, "writing failed orders' events failed; again next round");
            open.append(&mut failed);
        }
        // A failed order is found by its index once its sale leaves the
        // active set: written again (it is idempotent) until it holds.
        for (id, order) in failed {
            let indexed: redis::RedisResult<()> =
                self.redis.clone().set_ex(self.keys.failed_order(id), voucher, FAILED_KEPT.as_secs()).await;
            if let Err(err) = indexed {
                tracing::warn!(order_id = id, error = %err, "indexing a failed order failed; again next round");
                open.push((id, order));
            }
        }
        Ok(open)
    }

    /// The orders found neither pending nor failed, looked at again under
    /// the voucher's row lock: those without a row are recorded `FAILED`.
    async fn record_gone(
        &self,
        voucher: u64,
        segments: &Segments,
        gone: Vec<(usize, (i64, Watched))>,
        open: &mut Vec<(i64, Watched)>,
        failed: &mut Vec<(i64, Watched)>,
    ) -> SeckillResult<()> {
        // Under the row lock no batch persists: an order neither pending nor
        // a row now never will be.
        let mut tx = self.db.begin().await?;
        store::lock_stock(&mut *tx, voucher).await?;
        let ids: Vec<i64> = gone.iter().map(|(_, (id, _))| *id).collect();
        let rows = store::existing_orders(&mut *tx, &ids).await?;
        for (segment, (id, order)) in gone {
            if order.is_row(voucher, rows.get(&id)) {
                continue;
            }
            let sk = &segments.keys()[segment];
            let recorded: i64 = VANISHED
                .key(&sk.pending)
                .key(&sk.failed)
                .arg(id)
                .arg(format!("{}:{}", order.user_id, order.accepted_ms))
                .invoke_async(&mut self.redis.clone())
                .await?;
            match recorded {
                0 => open.push((id, order)),
                1 => {
                    self.outbox.failed(&mut tx, voucher, &[(id, order.user_id)]).await?;
                    metrics::counter!("hmdp_orders_vanished_total").increment(1);
                    tracing::error!(
                        voucher,
                        order_id = id,
                        user_id = order.user_id,
                        "an order answered 202 vanished with a demoted Redis master: recorded FAILED"
                    );
                    failed.push((id, order));
                }
                _ => failed.push((id, order)),
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn failed_told(&self, voucher: u64, orders: &[(i64, u64)]) -> sqlx::Result<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let mut conn = self.db.acquire().await?;
        self.outbox.failed(&mut conn, voucher, orders).await
    }
}

/// The replication history (`master_replid`) of the master serving the
/// segment's keys, and the one they were last learnt under (empty when
/// not loaded); `relearnt`, when it is the current one, is recorded as
/// learnt under.
async fn lineage_of(redis: &Redis, sk: &SeckillKeys, relearnt: &str) -> redis::RedisResult<(String, String)> {
    LINEAGE.key(&sk.window).arg(relearnt).invoke_async(&mut redis.clone()).await
}
