//! The asynchronous mode's consumer: every instance reads the order streams
//! of the active vouchers as one consumer (named by `INSTANCE_ID`) of group
//! `orders`, and hands what it reads to `batch.rs`, which persists each
//! batch in one transaction under the voucher's row lock (or, when a round
//! read several streams, to `shared_batch.rs`, which persists them all in
//! one transaction under all their rows' locks). The same lock orders
//! persistence against dead-lettering (`recovery`), so an order is either
//! persisted or given back, never both.
//!
//! A voucher sold in segments has a stream per segment, each read and
//! persisted as a voucher's; the borrows between its segments whose
//! borrower died mid-borrow are ended here too.

mod reading;

use std::{collections::HashSet, sync::Arc, time::Duration};

use hmdp_redis::Redis;
use redis::{AsyncCommands, streams::StreamId};
use sqlx::MySqlPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    batch::Batch,
    mirror::{self, Retirement},
    recovery::Recovery,
    stream::PersistError,
};
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::asynchronous::segments::{SegmentMaps, Segments},
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
    pub(crate) retirement: Retirement,
}

impl Consumer {
    /// Runs until `stop`; errors are logged and retried, never fatal.
    pub(crate) async fn run(self, stop: CancellationToken) {
        tracing::info!(consumer = %self.name, "order stream consumer started");
        // Streams whose group this consumer made sure of and whose own
        // pending entries it re-read (entries it was given before a restart).
        let mut ready: HashSet<String> = HashSet::new();
        // The active vouchers as last read: a round that cannot read the
        // set (its master cut off from this instance) still persists the
        // streams it reaches.
        let mut known_active: Vec<u64> = Vec::new();
        let mut last_claim = Instant::now();
        let retire_every = self.retirement.after.min(RETIRE_EVERY);
        let mut last_retire = Instant::now();
        while !stop.is_cancelled() {
            let round = async {
                let active = match self.active_vouchers().await {
                    Ok(active) => active,
                    Err(err) if !known_active.is_empty() => {
                        tracing::warn!(consumer = %self.name, error = %err, "the active sales could not be read; reading those known");
                        known_active.clone()
                    }
                    Err(err) => return Err(err),
                };
                known_active.clone_from(&active);
                let mut streams = self.streams(&active).await?;
                // A stream this instance cannot reach now is left for a later
                // round; the others go on.
                let mut unreachable = None;
                for stream in &streams {
                    if !ready.contains(&stream.keys().orders) {
                        match self.make_ready(stream).await {
                            Ok(()) => _ = ready.insert(stream.keys().orders.clone()),
                            Err(err) => unreachable = Some(err),
                        }
                    }
                }
                streams.retain(|s| ready.contains(&s.keys().orders));
                if last_claim.elapsed() >= self.claim_idle / 2 {
                    for stream in &streams {
                        if let Err(err) = self.claim_idle(stream).await {
                            unreachable = Some(err);
                        }
                    }
                    self.recover_borrows(&streams).await;
                    last_claim = Instant::now();
                }
                if last_retire.elapsed() >= retire_every {
                    match self.retire(&streams).await {
                        Ok(retired) => {
                            streams.retain(|s| !retired.contains(&s.voucher));
                            // Only the streams still read are remembered.
                            ready.retain(|name| streams.iter().any(|s| s.keys().orders == *name));
                        }
                        Err(err) => unreachable = Some(err),
                    }
                    last_retire = Instant::now();
                }
                if streams.is_empty() {
                    tokio::time::sleep(BLOCK).await;
                    return unreachable.map_or(Ok(()), Err);
                }
                self.read_new(&streams).await?;
                unreachable.map_or(Ok(()), Err)
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

    /// The stream's group made, and its own pending entries read again.
    async fn make_ready(&self, stream: &Stream) -> Result<(), PersistError> {
        self.ensure_group(stream).await?;
        self.reread_own_pending(stream).await
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

    /// Retires the sales that ended `retirement.after` ago and drained.
    /// Returns the vouchers retired.
    async fn retire(&self, streams: &[Stream]) -> Result<Vec<u64>, PersistError> {
        let mut retired = Vec::new();
        for stream in streams.iter().filter(|s| s.segment == 0) {
            let voucher = stream.voucher;
            if mirror::retire(&self.db, &self.redis, &self.keys, &stream.segments, voucher, self.retirement).await? {
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

    async fn handle(&self, stream: &Stream, raw: Vec<StreamId>) {
        self.batch().handle(stream.voucher, &stream.segments, stream.keys(), raw).await;
    }

    fn batch(&self) -> Batch<'_> {
        Batch { db: &self.db, redis: &self.redis, recovery: &self.recovery }
    }
}
