//! The relay: one instance at a time (the one holding the lease) reads the
//! outbox in the order it was written, publishes, awaits the acks, and
//! takes what was acknowledged out (kept elsewhere for
//! `OUTBOX_RETENTION_S` when it is above 0, then deleted).
//!
//! An order's events leave in the order they committed: a round takes at
//! most one event of each order (its oldest unpublished), so a later event
//! is published only once its earlier one was acknowledged. A relay that
//! dies between publishing and taking the rows out leaves them for the
//! next holder, who publishes them again under the same `Nats-Msg-Id`,
//! which the broker drops. Each round reads from where the last left off
//! (`cursor`), not from the outbox's first row.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::MySqlPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    cursor::Cursor,
    publisher::{Published, Publisher},
    store::{self, StoredEvent},
};
use crate::config::EventSettings;

/// How long the lease lasts past its last renewal, and how often the
/// holder renews it and the others ask for it: another instance takes over
/// within `LEASE_TTL + LEASE_EVERY` (1.45 s) of the holder's death, plus
/// what a busy instance and MariaDB add (a chaos run under a sale measured
/// 2.0 s with 1.5 s and 300 ms).
const LEASE_TTL: Duration = Duration::from_millis(1_200);
const LEASE_EVERY: Duration = Duration::from_millis(250);
/// Events one round publishes at most.
const ROUND_MAX: u32 = 1_000;
/// How long the holder waits, once it has published all it read, for an
/// order of its own instance to write an event; past it, it reads anyway
/// (the other instances' orders do not wake it). Polling every 20 ms cost
/// MariaDB 6 µs on every request of an idle-relay sale (bench-cpu).
const IDLE: Duration = Duration::from_millis(250);
/// How long it waits after being woken before it reads: the writer's
/// transaction commits meanwhile, and the events of other orders gather,
/// so that a sale is relayed in rounds of hundreds rather than of a few
/// (each round's read, publish and delete cost about the same whatever it
/// carries). It adds as much to an event's lag.
const GATHER: Duration = Duration::from_millis(50);
/// The longest wait after a failed round.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often the backlog is measured, and published events past their
/// retention deleted (a batch at a time, a few batches a turn).
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(1);
const PURGE_BATCH: u32 = 1_000;
const PURGE_BATCHES: u32 = 20;
/// Gaps of the outbox's `seq` asked about at most per housekeeping.
const GAPS_ASKED: usize = 16;

pub(super) struct Relay {
    pub(super) db: MySqlPool,
    pub(super) settings: EventSettings,
    /// This instance, as the lease names it.
    pub(super) holder: String,
    /// Told by this instance's orders each time they write an event.
    pub(super) written: Arc<Notify>,
}

/// How a round ended.
enum Round {
    /// It read all there was: the next waits for more.
    CaughtUp,
    /// Its read was cut off at its limit, or some of its events were not
    /// acknowledged: the next follows at once.
    More,
}

impl Relay {
    pub(super) async fn run(self, stop: CancellationToken) {
        let publisher = loop {
            match Publisher::connect(&self.settings).await {
                Ok(publisher) => break publisher,
                Err(err) => tracing::warn!(error = %err, "the outbox relay cannot set up its NATS client; again"),
            }
            if pause(&stop, BACKOFF_MAX).await {
                return;
            }
        };
        let (mut held, mut stream_ready, mut backoff) = (false, false, LEASE_EVERY);
        let (mut renewed, mut housekept) = (Instant::now() - LEASE_EVERY, Instant::now());
        let mut cursor = Cursor::default();
        while !stop.is_cancelled() {
            if renewed.elapsed() >= LEASE_EVERY {
                let was_held = held;
                held = self.hold_lease(held).await;
                renewed = Instant::now();
                // Another holder may have published meanwhile: this one
                // starts over from the outbox's first row.
                if held && !was_held {
                    cursor = Cursor::default();
                }
            }
            if !held {
                if pause(&stop, LEASE_EVERY).await {
                    break;
                }
                continue;
            }
            if housekept.elapsed() >= HOUSEKEEPING_EVERY {
                self.housekeeping(&mut cursor).await;
                housekept = Instant::now();
            }
            if !stream_ready {
                match publisher.ensure_stream().await {
                    Ok(()) => stream_ready = true,
                    Err(err) => {
                        tracing::warn!(error = %err, "the outbox relay cannot reach its NATS stream; again");
                        if pause(&stop, BACKOFF_MAX).await {
                            break;
                        }
                        continue;
                    }
                }
            }
            let next = match self.round(&publisher, &mut cursor).await {
                Ok(round) => {
                    backoff = LEASE_EVERY;
                    round
                }
                Err(err) => {
                    metrics::counter!("hmdp_outbox_publish_failures_total").increment(1);
                    tracing::warn!(error = %format!("{err:#}"), "an outbox round failed; its events stay for the next");
                    // A NATS started again on an empty store has no stream:
                    // it is made sure of again before the next round.
                    stream_ready = false;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    if pause(&stop, backoff).await {
                        break;
                    }
                    continue;
                }
            };
            if matches!(next, Round::CaughtUp) && self.await_events(&stop).await {
                break;
            }
        }
        if held && let Err(err) = store::release_lease(&self.db, &self.holder).await {
            tracing::warn!(error = %err, "giving the outbox lease up failed; it expires on its own");
        }
    }

    async fn hold_lease(&self, held: bool) -> bool {
        let now = match store::hold_lease(&self.db, &self.holder, LEASE_TTL.as_millis() as u64).await {
            Ok(now) => now,
            Err(err) => {
                tracing::warn!(error = %err, "the outbox lease could not be renewed; relaying stops until it is");
                false
            }
        };
        if now != held {
            tracing::info!(holder = %self.holder, relaying = now, "the outbox lease changed hands");
        }
        metrics::gauge!("hmdp_outbox_relay_active").set(f64::from(u8::from(now)));
        now
    }

    /// Waits for an event of this instance's orders (or `IDLE`), then
    /// `GATHER`: whether the relay was stopped meanwhile.
    async fn await_events(&self, stop: &CancellationToken) -> bool {
        tokio::select! {
            () = stop.cancelled() => return true,
            () = self.written.notified() => {}
            () = tokio::time::sleep(IDLE) => return false,
        }
        pause(stop, GATHER).await
    }

    /// Publishes the oldest unpublished event of each order among the next
    /// `ROUND_MAX`, takes those acknowledged out.
    async fn round(&self, publisher: &Publisher, cursor: &mut Cursor) -> anyhow::Result<Round> {
        let read = store::unpublished(&self.db, cursor.floor(), ROUND_MAX).await?;
        let cut_off = read.len() == ROUND_MAX as usize;
        let read_seqs: Vec<u64> = read.iter().map(|e| e.seq).collect();
        let events = first_of_each_order(read);
        if events.is_empty() {
            cursor.advance(&[], &[], false, Instant::now());
            return Ok(Round::CaughtUp);
        }
        let Published { acked, duplicates, failure } = publisher.publish(&events).await;
        store::take_published(&self.db, &acked, self.settings.outbox_retention_s > 0).await?;
        debug_assert!(acked.is_sorted(), "acked in the order the events were published");
        let was_acked = |seq: &u64| acked.binary_search(seq).is_ok();
        let left: Vec<u64> = read_seqs.iter().copied().filter(|seq| !was_acked(seq)).collect();
        cursor.advance(&read_seqs, &left, cut_off, Instant::now());
        if duplicates > 0 {
            metrics::counter!("hmdp_outbox_duplicates_total").increment(duplicates);
            tracing::info!(duplicates, "the broker dropped copies of events published before and never taken out");
        }
        let now = chrono::Utc::now().naive_utc();
        let lag = metrics::histogram!("hmdp_outbox_lag_seconds");
        for event in events.iter().filter(|e| was_acked(&e.seq)) {
            lag.record((now - event.occurred_at).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6);
        }
        metrics::counter!("hmdp_outbox_published_total").increment(acked.len() as u64);
        match failure {
            Some(err) if acked.is_empty() => Err(err),
            Some(err) => {
                metrics::counter!("hmdp_outbox_publish_failures_total").increment(1);
                tracing::warn!(error = %format!("{err:#}"), acked = acked.len(), "some events were not acknowledged; again");
                Ok(Round::More)
            }
            None if cut_off => Ok(Round::More),
            None => Ok(Round::CaughtUp),
        }
    }

    async fn housekeeping(&self, cursor: &mut Cursor) {
        match store::backlog(&self.db).await {
            Ok(backlog) => {
                metrics::gauge!("hmdp_outbox_backlog").set(backlog.count as f64);
                metrics::gauge!("hmdp_outbox_oldest_seconds").set(backlog.oldest.map_or(0.0, |(_, s)| s));
                // A row below the floor was put back with its old `seq` (a
                // replay from the kept events, docs/events.md): read from
                // the first row again.
                if let Some((seq, _)) = backlog.oldest
                    && seq < cursor.floor()
                {
                    tracing::info!(
                        seq,
                        floor = cursor.floor(),
                        "an event below the relay's cursor: reading from the first row again"
                    );
                    *cursor = Cursor::default();
                }
            }
            Err(err) => tracing::warn!(error = %err, "measuring the outbox backlog failed"),
        }
        for (from, to) in cursor.settled_gaps(Instant::now()).into_iter().take(GAPS_ASKED) {
            match store::settled_range(&self.db, from, to).await {
                Ok(rows) => cursor.found(from, to, &rows),
                // Most often a transaction still writing there: asked again next time.
                Err(err) => tracing::debug!(from, to, error = %err, "a gap of the outbox is not settled yet"),
            }
        }
        if self.settings.outbox_retention_s == 0 {
            return;
        }
        for _ in 0..PURGE_BATCHES {
            match store::purge_published(&self.db, self.settings.outbox_retention_s, PURGE_BATCH).await {
                Ok(n) if n < u64::from(PURGE_BATCH) => break,
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "deleting published events failed; again later");
                    break;
                }
            }
        }
    }
}

/// Each order's oldest event of the list (which is in `seq` order).
fn first_of_each_order(events: Vec<StoredEvent>) -> Vec<StoredEvent> {
    let mut seen = std::collections::HashSet::with_capacity(events.len());
    events.into_iter().filter(|e| seen.insert(e.order_id)).collect()
}

/// Sleeps for `wait` unless stopped first: whether it was stopped.
async fn pause(stop: &CancellationToken, wait: Duration) -> bool {
    tokio::select! {
        () = stop.cancelled() => true,
        () = tokio::time::sleep(wait) => false,
    }
}
