//! The asynchronous mode: one Redis script decides each order and queues
//! it on the voucher's stream, the answer goes out at once, and the
//! consumers persist the queue later in batches. Redis keeps a mirror of
//! each voucher (stock, window, buyers) that follows MariaDB's rows.
//!
//! By file: `placing` (the order itself, `AsyncMode::place`, retried when
//! its answer is lost),
//! `replica_wait` (waiting for a Redis replica before a 200), `mirror`
//! (a voucher's keys verified, loaded, cleared, retired), `converge`
//! (Redis's stock set from the row: the stock route, returned units, the
//! shelf), `stream` (an entry and its acknowledgement), `consumer`
//! (batched persistence), `recovery` (idle entries taken over, dead
//! letters), `reconcile` (Redis against MariaDB). A voucher sold in
//! segments is all of this once per segment (`segments`), and a voucher
//! found hot during its sale is split into segments while it sells
//! (`split`); `pending` finds an order before its row (pending) and after
//! it failed (a dead letter).

mod batch;
mod consumer;
mod converge;
mod failover;
mod load;
mod mirror;
mod news;
mod pending;
mod placing;
mod reconcile;
mod recovery;
mod replica_wait;
pub(super) mod segments;
mod shared_batch;
mod split;
mod stream;
mod verdict;

use std::{collections::HashSet, sync::Arc, time::Duration};

use hmdp_redis::Redis;
use sqlx::{MySqlConnection, MySqlPool};

use consumer::Consumer;
use mirror::Mirror;
use news::{News, Told};
pub use reconcile::{Reconciliation, reconcile};
use recovery::Recovery;
use replica_wait::ReplicaWait;
use segments::{SegmentMaps, Segments};
use split::{HotVouchers, Split};

use super::{
    error::{SeckillError, SeckillResult},
    model::StockSet,
    parts::{Dependencies, Workers},
};
use crate::{config::Config, connect::connect_redis_with, ids::OrderIdGenerator, keys::Keys, recent::RecentIds};

/// Vouchers remembered as owed to Redis, at most.
const OWED_MAX: usize = 10_000;

/// The asynchronous mode's hooks, built once at start-up.
pub(crate) struct AsyncMode {
    db: MySqlPool,
    redis: Redis,
    keys: Keys,
    segments: Arc<SegmentMaps>,
    mirror: Mirror,
    order_ids: OrderIdGenerator,
    /// An order's time to be decided, retries included.
    deadline: Duration,
    replica_wait: ReplicaWait,
    consumer: Consumer,
    /// Returned units Redis has not learnt of yet (voucher -> users whose
    /// slots to free), retried each round.
    owed: RecentIds<HashSet<u64>>,
    /// What a Redis failover took, given back each round.
    failover: failover::Failover,
    /// Hot vouchers split into segments.
    split: Arc<Split>,
    /// What every instance must know of a voucher at once.
    news: Arc<News>,
}

impl AsyncMode {
    /// The consumer gets a Redis connection of its own (its blocking reads
    /// would hold up every command behind them), and so do orders waiting
    /// for a replica (`WAIT` blocks its connection).
    pub(crate) async fn build(config: &Config, instance: &str, deps: &Dependencies) -> anyhow::Result<Self> {
        let settings = &config.seckill.asynchronous;
        let (db, redis, keys) = (deps.db.clone(), deps.redis.clone(), deps.keys.clone());
        // Each voucher's segments, read from its row once.
        let segments = Arc::new(SegmentMaps::new(db.clone(), redis.clone(), keys.clone()));
        let mut blocking = connect_redis_with(&config.redis, consumer::BLOCK + Duration::from_secs(2)).await?;
        redis.count_like(&mut blocking);
        let claim_idle = Duration::from_millis(settings.async_claim_idle_ms);
        let recovery = Recovery {
            db: db.clone(),
            redis: redis.clone(),
            keys: keys.clone(),
            name: instance.to_owned(),
            page: settings.async_batch_max,
            claim_idle,
            max_deliveries: settings.async_max_deliveries,
            outbox: deps.outbox.clone(),
        };
        let consumer = Consumer {
            db: db.clone(),
            blocking,
            redis: redis.clone(),
            keys: keys.clone(),
            segments: segments.clone(),
            name: instance.to_owned(),
            batch_max: settings.async_batch_max,
            claim_idle,
            retirement: mirror::Retirement {
                after: Duration::from_millis(settings.async_retire_after_ms),
                working_keys_kept: Duration::from_millis(settings.async_retired_keys_kept_ms),
            },
            recovery,
        };
        let wait = Duration::from_millis(settings.order_replica_wait_ms);
        let replica_wait = ReplicaWait::build(&config.redis, settings.order_replica_acks, wait, &redis).await?;
        let news = Arc::new(News::new(redis.clone(), &keys));
        let split = Arc::new(Split::new(
            db.clone(),
            redis.clone(),
            keys.clone(),
            segments.clone(),
            HotVouchers { hot_keys: deps.hot_keys.clone(), split_into: config.hot_keys.split_segments },
            news.clone(),
            instance,
        ));
        Ok(Self {
            split,
            news,
            mirror: Mirror::new(db.clone(), redis.clone(), keys.clone(), segments.clone()),
            failover: failover::Failover::new(
                db.clone(),
                redis.clone(),
                keys.clone(),
                segments.clone(),
                deps.outbox.clone(),
            ),
            order_ids: deps.order_ids.clone(),
            deadline: Duration::from_millis(config.seckill.request_deadline_ms),
            replica_wait,
            segments,
            db,
            redis,
            keys,
            consumer,
            owed: RecentIds::new(OWED_MAX, None),
        })
    }

    /// The consumer, one per instance, reading every active voucher's
    /// stream, the splitter of hot vouchers, and the listener to what the
    /// other instances tell.
    pub(crate) fn spawn_workers(&self, workers: &Workers) {
        let consumer = self.consumer.clone();
        workers.spawn(|stop| consumer.run(stop));
        let split = self.split.clone();
        workers.spawn(|stop| split.run(stop));
        let (news, segments) = (self.news.clone(), self.segments.clone());
        workers.spawn(|stop| news.listen(segments, stop));
    }

    /// Units Redis holds for sale, over every segment; `None` while a
    /// segment's keys are not loaded (the first order loads them).
    pub(crate) async fn units_left(&self, voucher_id: u64) -> SeckillResult<Option<i64>> {
        use redis::AsyncCommands;
        let segments = self.mirror.segments(voucher_id).await?;
        let mut total = 0;
        for keys in segments.keys() {
            let stock: Option<i64> = self.redis.clone().get(&keys.stock).await?;
            let Some(stock) = stock else { return Ok(None) };
            total += stock.max(0);
        }
        Ok(Some(total))
    }

    /// The new voucher's keys are loaded and the consumers start reading
    /// its stream: only a head start, as the first order loads what is
    /// missing.
    pub(crate) async fn open_sale(&self, voucher_id: u64) {
        if let Err(err) = self.mirror.load(voucher_id).await
            && !matches!(err, SeckillError::Ended)
        {
            tracing::warn!(voucher_id, error = %err, "loading a new voucher's keys failed; its first order loads them");
        }
    }

    pub(crate) async fn shelf_changed(&self, voucher_id: u64, status: i64) -> SeckillResult<()> {
        // An ordinary voucher has no keys to tell.
        let Some(segments) = self.segments.of(voucher_id).await? else { return Ok(()) };
        converge::shelf_changed(&mut self.redis.clone(), &segments, status).await
    }

    pub(crate) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        let segments = self.segments.of(voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let set = converge::set_stock(&self.db, &self.redis, &segments, voucher_id, stock).await?;
        self.tell_reopened(&segments, voucher_id).await;
        Ok(set)
    }

    /// Units came back to a voucher in segments: the sold-out the other
    /// instances hold no longer stands.
    async fn tell_reopened(&self, segments: &Segments, voucher_id: u64) {
        if segments.borrowing().is_some() {
            self.news.tell(Told::Reopened, voucher_id).await;
        }
    }

    async fn segments_of(&self, voucher_id: u64) -> SeckillResult<Arc<Segments>> {
        Ok(self.segments.of_or_single(voucher_id).await?)
    }

    /// Redis learns the units MariaDB got back and frees the buyers' slots,
    /// inside the transaction that returns them (`conn` holds the row lock,
    /// `db_stock` is the row's stock there). A failure leaves Redis short
    /// (it undersells, never oversells); the instance tries again each round
    /// until Redis has it (a crash of the instance meanwhile leaves it to
    /// the next correction: a dead letter, the stock route, or another
    /// return of the voucher).
    pub(crate) async fn units_returned(&self, conn: &mut MySqlConnection, voucher: u64, db_stock: i64, users: &[u64]) {
        let told = match self.segments_of(voucher).await {
            Ok(segments) => {
                let told =
                    converge::units_returned_locked(conn, &self.redis, &segments, voucher, db_stock, users).await;
                self.tell_reopened(&segments, voucher).await;
                told
            }
            Err(err) => Err(err),
        };
        if let Err(err) = told {
            self.owe(voucher, users, &err);
        }
    }

    fn owe(&self, voucher: u64, users: &[u64], err: &SeckillError) {
        tracing::warn!(voucher, error = %err, "Redis did not learn of returned units; again next round");
        if !self.owed.extend(voucher, users.iter().copied()) {
            tracing::warn!(voucher, "too many vouchers owed to Redis; this one waits for its next correction");
        }
    }

    /// Each after-sale round: Redis is told of the units it missed (the step
    /// is idempotent, so one that half-ran before is simply run again), and
    /// what a failover took is given back (`failover`).
    pub(crate) async fn settle(&self) {
        self.failover.round().await;
        for (voucher, users) in self.owed.take_all() {
            let users: Vec<u64> = users.into_iter().collect();
            let told = match self.segments_of(voucher).await {
                Ok(segments) => converge::units_returned(&self.db, &self.redis, &segments, voucher, &users).await,
                Err(err) => Err(err),
            };
            if let Err(err) = told {
                self.owe(voucher, &users, &err);
            }
        }
    }

    /// The order streams' length, pending entries and lag.
    pub(crate) async fn record_metrics(&self) -> redis::RedisResult<()> {
        stream::record_stream_metrics(&mut self.redis.clone(), &self.keys, &self.segments).await
    }
}
