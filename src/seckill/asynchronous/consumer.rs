//! The asynchronous mode's consumer: every instance reads the order streams
//! of the active vouchers as one consumer (named by `INSTANCE_ID`) of group
//! `orders`, and persists each batch in one MariaDB transaction: one
//! multi-row insert and one stock update by the number of rows inserted.
//!
//! Redelivery is harmless: a batch first takes the voucher's row lock, then
//! skips every entry that already has its row or was dead-lettered, so an
//! entry persisted before never adds a row or takes stock twice.
//! The same row lock orders persistence against dead-lettering (`recovery`),
//! so an order is either persisted or given back, never both.
//!
//! A voucher sold in segments has a stream per segment, each read and
//! persisted as a voucher's; the borrows between its segments whose
//! borrower died mid-borrow are ended here too.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use chrono::DateTime;
use hmdp_redis::Redis;
use redis::{
    AsyncCommands,
    streams::{StreamId, StreamReadReply},
};
use sqlx::MySqlPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    converge::converge,
    mirror,
    recovery::Recovery,
    stream::{Entry, GROUP, PersistError, acknowledge},
};
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::{
        segments::{SegmentMaps, Segments},
        store::{self, NewOrder, OrderOwner},
    },
};

/// How long one XREADGROUP waits for new entries; also how late the
/// consumer notices a shutdown at worst.
pub(crate) const BLOCK: Duration = Duration::from_millis(500);
/// Between two rounds of non-blocking reads that found nothing (cluster).
const IDLE_POLL: Duration = Duration::from_millis(20);
/// After an error, before trying again.
const BACKOFF: Duration = Duration::from_millis(200);
/// How often, at most, the consumer looks for sales to retire.
const RETIRE_EVERY: Duration = Duration::from_secs(10);

/// XAUTOCLAIM pages looked at per stream and round, so a huge backlog of
/// idle entries cannot starve the new ones.
const CLAIM_PAGES: usize = 8;
/// A borrow between segments still in flight after this long lost its
/// borrower (a live one settles within milliseconds): its units go back.
const BORROW_OVERDUE: Duration = Duration::from_secs(2);

/// One order stream: a voucher's, or one segment's of a voucher sold in
/// segments.
#[derive(Clone)]
struct Stream {
    voucher: u64,
    segments: Arc<Segments>,
    segment: usize,
}

impl Stream {
    fn keys(&self) -> &SeckillKeys {
        &self.segments.keys()[self.segment]
    }
}

/// What a consumer needs; built once at start-up.
#[derive(Clone)]
pub(crate) struct Consumer {
    pub(crate) db: MySqlPool,
    /// Its own connection: a blocking read holds up every command behind it
    /// on the same connection.
    pub(crate) blocking: Redis,
    pub(crate) redis: Redis,
    pub(crate) keys: Keys,
    pub(crate) segments: Arc<SegmentMaps>,
    pub(crate) name: String,
    pub(crate) batch_max: usize,
    pub(crate) claim_idle: Duration,
    pub(crate) recovery: Recovery,
    /// How long after its end a drained sale is retired.
    pub(crate) retire_after: Duration,
}

impl Consumer {
    /// Runs until `stop`; errors are logged and retried, never fatal.
    pub(crate) async fn run(self, stop: CancellationToken) {
        tracing::info!(consumer = %self.name, "order stream consumer started");
        // Streams whose group this consumer made sure of and whose own
        // pending entries it re-read (entries it was given before a restart).
        let mut ready: HashSet<String> = HashSet::new();
        let mut last_claim = Instant::now();
        let retire_every = self.retire_after.min(RETIRE_EVERY);
        let mut last_retire = Instant::now();
        while !stop.is_cancelled() {
            let round = async {
                let active = self.active_vouchers().await?;
                let mut streams = self.streams(&active).await?;
                for stream in &streams {
                    if !ready.contains(&stream.keys().orders) {
                        self.ensure_group(stream).await?;
                        self.reread_own_pending(stream).await?;
                        ready.insert(stream.keys().orders.clone());
                    }
                }
                if last_claim.elapsed() >= self.claim_idle / 2 {
                    for stream in &streams {
                        self.claim_idle(stream).await?;
                    }
                    self.recover_borrows(&streams).await;
                    last_claim = Instant::now();
                }
                if last_retire.elapsed() >= retire_every {
                    let retired = self.retire(&streams).await?;
                    streams.retain(|s| !retired.contains(&s.voucher));
                    // Only the streams still read are remembered.
                    ready.retain(|name| streams.iter().any(|s| s.keys().orders == *name));
                    last_retire = Instant::now();
                }
                if streams.is_empty() {
                    tokio::time::sleep(BLOCK).await;
                    return Ok(());
                }
                self.read_new(&streams).await
            };
            let result: Result<(), PersistError> = tokio::select! {
                () = stop.cancelled() => break,
                result = round => result,
            };
            if let Err(err) = result {
                if err.to_string().contains("NOGROUP") {
                    // A stream was deleted: its group is made again.
                    ready.clear();
                }
                metrics::counter!("hmdp_async_consumer_failures_total", "what" => "round").increment(1);
                tracing::warn!(consumer = %self.name, error = %err, "order consumer round failed; retrying");
                tokio::time::sleep(BACKOFF).await;
            }
        }
        tracing::info!(consumer = %self.name, "order stream consumer stopped");
    }

    /// Every stream of the active vouchers: one per segment.
    async fn streams(&self, active: &[u64]) -> Result<Vec<Stream>, PersistError> {
        let mut streams = Vec::with_capacity(active.len());
        for &voucher in active {
            let segments = self.segments.of_or_single(voucher).await?;
            for segment in 0..segments.count() {
                streams.push(Stream { voucher, segments: segments.clone(), segment });
            }
        }
        Ok(streams)
    }

    /// Ends the borrows between segments that lost their borrower; each
    /// voucher once (its streams share one `Segments`).
    async fn recover_borrows(&self, streams: &[Stream]) {
        for stream in streams.iter().filter(|s| s.segment == 0) {
            let Some(borrowing) = stream.segments.borrowing() else { continue };
            match borrowing.recover(BORROW_OVERDUE).await {
                Ok(recovered) if recovered.returned > 0 || recovered.forgotten > 0 => {
                    metrics::counter!("hmdp_segment_units_recovered_total").increment(recovered.returned as u64);
                    tracing::warn!(voucher = stream.voucher, ?recovered, "borrows whose borrower died were ended");
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(voucher = stream.voucher, error = %err, "recovering borrows failed; again next round")
                }
            }
        }
    }

    /// Retires the sales that ended `retire_after` ago and drained.
    /// Returns the vouchers retired.
    async fn retire(&self, streams: &[Stream]) -> Result<Vec<u64>, PersistError> {
        let mut retired = Vec::new();
        for stream in streams.iter().filter(|s| s.segment == 0) {
            let voucher = stream.voucher;
            if mirror::retire(&self.db, &self.redis, &self.keys, &stream.segments, voucher, self.retire_after).await? {
                tracing::info!(consumer = %self.name, voucher, "sale ended and drained; retired");
                retired.push(voucher);
            }
        }
        Ok(retired)
    }

    async fn active_vouchers(&self) -> Result<Vec<u64>, PersistError> {
        let mut ids: Vec<u64> = self.redis.clone().smembers(self.keys.seckill_active()).await?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// Takes over the voucher's entries idle for longer than the claim
    /// bound, from any consumer of the group (this one included), and
    /// retries them.
    async fn claim_idle(&self, stream: &Stream) -> Result<(), PersistError> {
        let mut start = "0-0".to_owned();
        for _ in 0..CLAIM_PAGES {
            let (claimed, next) = self.recovery.claim_page(stream.keys(), &start).await?;
            if !claimed.is_empty() {
                let (voucher, count) = (stream.voucher, claimed.len());
                tracing::info!(consumer = %self.name, voucher, segment = stream.segment, count, "took over idle order entries");
                self.handle(stream, claimed).await;
            }
            if next == "0-0" {
                break;
            }
            start = next;
        }
        Ok(())
    }

    /// Creates the group from the stream's start, making the stream when it
    /// does not exist; an existing group is left as it is.
    async fn ensure_group(&self, stream: &Stream) -> Result<(), PersistError> {
        let created: redis::RedisResult<()> =
            self.redis.clone().xgroup_create_mkstream(&stream.keys().orders, GROUP, "0").await;
        match created {
            Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
            other => Ok(other?),
        }
    }

    async fn reread_own_pending(&self, stream: &Stream) -> Result<(), PersistError> {
        let mut after = "0".to_owned();
        loop {
            let reply: StreamReadReply = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(self.batch_max)
                .arg("STREAMS")
                .arg(&stream.keys().orders)
                .arg(&after)
                .query_async(&mut self.redis.clone())
                .await?;
            let entries: Vec<StreamId> = reply.keys.into_iter().flat_map(|k| k.ids).collect();
            let Some(last) = entries.last() else { return Ok(()) };
            after = last.id.clone();
            let (voucher, count) = (stream.voucher, entries.len());
            tracing::info!(consumer = %self.name, voucher, segment = stream.segment, count, "re-reading own pending entries");
            self.handle(stream, entries).await;
        }
    }

    /// New entries of the active streams. One Redis (or one stream) takes
    /// one blocking read over every stream; a cluster keeps the
    /// streams in many slots and refuses a read across them, so there each
    /// stream is read on its own, without blocking (a blocking read would
    /// hold up the reads queued behind it on the node's connection), and an
    /// empty round waits `IDLE_POLL`.
    async fn read_new(&self, streams: &[Stream]) -> Result<(), PersistError> {
        if streams.len() == 1 || !self.blocking.is_cluster() {
            let found = self.read(streams, Some(BLOCK), &mut self.blocking.clone()).await?;
            self.handle_all(found).await;
            return Ok(());
        }
        let reads = streams.iter().map(|stream| {
            let mut redis = self.redis.clone();
            async move { self.read(std::slice::from_ref(stream), None, &mut redis).await }
        });
        let found: Vec<(Stream, Vec<StreamId>)> =
            futures::future::try_join_all(reads).await?.into_iter().flatten().collect();
        if found.is_empty() {
            tokio::time::sleep(IDLE_POLL).await;
        }
        self.handle_all(found).await;
        Ok(())
    }

    async fn read(
        &self,
        read_from: &[Stream],
        block: Option<Duration>,
        redis: &mut Redis,
    ) -> Result<Vec<(Stream, Vec<StreamId>)>, PersistError> {
        let streams: Vec<&str> = read_from.iter().map(|s| s.keys().orders.as_str()).collect();
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP").arg(GROUP).arg(&self.name).arg("COUNT").arg(self.batch_max);
        if let Some(block) = block {
            read.arg("BLOCK").arg(block.as_millis() as u64);
        }
        let reply: Option<StreamReadReply> =
            read.arg("STREAMS").arg(&streams).arg(vec![">"; streams.len()]).query_async(redis).await?;
        let by_stream: HashMap<&str, &Stream> = streams.iter().copied().zip(read_from).collect();
        Ok(reply
            .map(|r| r.keys)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|key| Some(((*by_stream.get(key.key.as_str())?).clone(), key.ids)))
            .collect())
    }

    async fn handle_all(&self, found: Vec<(Stream, Vec<StreamId>)>) {
        for (stream, entries) in found {
            self.handle(&stream, entries).await;
        }
    }

    /// Persists what can be persisted and acknowledges it. A batch the
    /// database refuses is retried entry by entry, so one bad entry holds up
    /// no other; the bad one stays pending until recovery retries it or, past
    /// the delivery limit, dead-letters it.
    async fn handle(&self, stream: &Stream, raw: Vec<StreamId>) {
        let (voucher, sk) = (stream.voucher, stream.keys());
        let mut entries = Vec::with_capacity(raw.len());
        for r in &raw {
            match Entry::parse(r) {
                Some(entry) => entries.push(entry),
                None => self.recovery.dead_letter_malformed(sk, voucher, r).await,
            }
        }
        if entries.is_empty() {
            return;
        }
        match self.persist(stream, &entries).await {
            Ok(()) => {}
            Err(PersistError::Unavailable(err)) => {
                metrics::counter!("hmdp_async_consumer_failures_total", "what" => "batch_unavailable").increment(1);
                tracing::warn!(voucher, count = entries.len(), error = %format!("{err:#}"), "batch not persisted; will retry");
            }
            Err(PersistError::Refused(err)) => {
                metrics::counter!("hmdp_async_consumer_failures_total", "what" => "batch_refused").increment(1);
                tracing::warn!(voucher, count = entries.len(), error = %format!("{err:#}"), "batch refused; persisting one by one");
                for entry in &entries {
                    match self.persist(stream, std::slice::from_ref(entry)).await {
                        Ok(()) => {}
                        Err(PersistError::Refused(err)) => {
                            self.recovery.refused(&stream.segments, sk, voucher, entry, &format!("{err:#}")).await;
                        }
                        Err(PersistError::Unavailable(err)) => {
                            tracing::warn!(voucher, order_id = entry.order_id, error = %format!("{err:#}"), "order not persisted; will retry");
                        }
                    }
                }
            }
        }
    }

    /// One transaction for the batch, then the acknowledgement.
    async fn persist(&self, stream: &Stream, entries: &[Entry]) -> Result<(), PersistError> {
        let (voucher, sk) = (stream.voucher, stream.keys());
        let mut tx = self.db.begin().await?;
        // The voucher's row lock: batches and dead-lettering of one voucher
        // take turns, so the checks below stay true until the commit.
        let db_stock = store::lock_stock(&mut *tx, voucher).await?.ok_or(sqlx::Error::RowNotFound)?;
        // Dead-lettered and given back already: never persisted after that.
        let order_ids: Vec<i64> = entries.iter().map(|e| e.order_id).collect();
        let failed: Vec<Option<String>> =
            redis::cmd("HMGET").arg(&sk.failed).arg(&order_ids).query_async(&mut self.redis.clone()).await?;
        let mut candidates: Vec<&Entry> =
            entries.iter().zip(&failed).filter(|(_, f)| f.is_none()).map(|(e, _)| e).collect();
        let ids: Vec<i64> = candidates.iter().map(|e| e.order_id).collect();
        let persisted = store::existing_orders(&mut *tx, &ids).await?;
        // A row under the id with another owner is not this order: a
        // collision (an id sequence that went backwards). Alarmed and
        // refused, so the order is dead-lettered and its unit given back,
        // instead of acknowledged as if it had been persisted.
        if let Some(clash) = candidates.iter().find(|e| {
            persisted
                .get(&e.order_id)
                .is_some_and(|owner| *owner != OrderOwner { user_id: e.user_id, voucher_id: voucher })
        }) {
            metrics::counter!("hmdp_order_id_collisions_total").increment(1);
            tracing::error!(
                order_id = clash.order_id,
                user_id = clash.user_id,
                voucher,
                held_by = ?persisted.get(&clash.order_id),
                "order id collision: another order's row holds this id"
            );
            return Err(PersistError::Refused(anyhow::anyhow!(
                "order id {} is held by another order's row",
                clash.order_id
            )));
        }
        candidates.retain(|e| !persisted.contains_key(&e.order_id));
        // Redis accepted more than MariaDB has: Redis learns the row's stock
        // now, so it stops accepting orders the database cannot honour.
        if i64::from(db_stock) < candidates.len() as i64 {
            converge(&mut tx, &self.redis, &stream.segments, voucher, db_stock.into()).await?;
            return Err(PersistError::Refused(anyhow::anyhow!(
                "MariaDB has {db_stock} left, fewer than the {} orders accepted in Redis",
                candidates.len()
            )));
        }
        if !candidates.is_empty() {
            let orders: Vec<NewOrder> = candidates
                .iter()
                .map(|e| NewOrder {
                    id: e.order_id,
                    user_id: e.user_id,
                    create_time: Some(DateTime::from_timestamp_millis(e.ts_ms).unwrap_or_default().naive_utc()),
                })
                .collect();
            let inserted = store::insert_orders(&mut *tx, voucher, &orders).await?;
            if !store::take_stock(&mut *tx, voucher, inserted).await? {
                return Err(PersistError::Refused(anyhow::anyhow!(
                    "MariaDB has less stock than {inserted} orders accepted in Redis"
                )));
            }
        }
        tx.commit().await?;
        acknowledge(&self.redis, sk, entries).await?;
        tracing::debug!(voucher, batch = entries.len(), inserted = candidates.len(), "batch persisted");
        Ok(())
    }
}
