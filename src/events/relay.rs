//! The relay: one instance at a time (the one holding the lease) reads the
//! outbox in the order it was written, publishes, awaits the acks (until
//! one deadline for the round), and takes what was acknowledged out (kept
//! elsewhere for `OUTBOX_RETENTION_S` when it is above 0, then deleted).
//! It renews the lease all along, a round waiting on a broker included,
//! and gives the round up when the lease is lost or the instance stops.
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

/// This instance's view of the lease.
struct Lease {
    held: bool,
    /// When it runs out at the earliest, on this instance's clock: from
    /// before the renewal was sent (MariaDB's `until` is no earlier).
    until: Instant,
    renew_at: Instant,
}

/// What one turn of the holder leaves for the next.
struct Turns {
    stream_ready: bool,
    backoff: Duration,
    housekept: Instant,
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
        let now = Instant::now();
        let mut lease = Lease { held: false, until: now, renew_at: now };
        let mut turns = Turns { stream_ready: false, backoff: LEASE_EVERY, housekept: now };
        let mut cursor = Cursor::default();
        while !stop.is_cancelled() {
            if lease.held {
                self.while_held(&stop, &mut lease, self.turn(&publisher, &mut cursor, &mut turns)).await;
                continue;
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(lease.renew_at.into()) => {}
            }
            self.renew(&mut lease).await;
            // Another holder may have published meanwhile: this one starts
            // over from the outbox's first row.
            if lease.held {
                cursor = Cursor::default();
            }
        }
        if lease.held {
            match tokio::time::timeout(LEASE_TTL, store::release_lease(&self.db, &self.holder)).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "giving the outbox lease up failed; it expires on its own")
                }
                Err(_) => tracing::warn!("giving the outbox lease up took too long; it expires on its own"),
            }
        }
        metrics::gauge!("hmdp_outbox_relay_active").set(0.0);
    }

    /// Takes the lease, or renews it. A renewal not answered before the
    /// lease would run out gives it up here: past then another instance
    /// may hold it, and `hmdp_outbox_relay_active` is 1 on one instance at
    /// most.
    async fn renew(&self, lease: &mut Lease) {
        let sent = Instant::now();
        let deadline = if lease.held { lease.until } else { sent + LEASE_TTL };
        let asked = store::hold_lease(&self.db, &self.holder, LEASE_TTL.as_millis() as u64);
        let now = match tokio::time::timeout_at(deadline.into(), asked).await {
            Ok(Ok(now)) => now,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the outbox lease could not be renewed; relaying stops until it is");
                false
            }
            Err(_) => {
                tracing::warn!("the outbox lease was not renewed before it ran out; relaying stops until it is");
                false
            }
        };
        if now != lease.held {
            tracing::info!(holder = %self.holder, relaying = now, "the outbox lease changed hands");
        }
        *lease = Lease { held: now, until: sent + LEASE_TTL, renew_at: Instant::now() + LEASE_EVERY };
        metrics::gauge!("hmdp_outbox_relay_active").set(f64::from(u8::from(now)));
    }

    /// Runs `work` while this instance holds the lease, renewing it on
    /// time meanwhile (a round waiting on a silent broker included):
    /// `None` once the relay is stopped or the lease is lost, `work`
    /// dropped there. A round given up leaves its rows in the outbox, and
    /// what it had published is published again under the same ids.
    async fn while_held<T>(
        &self,
        stop: &CancellationToken,
        lease: &mut Lease,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return None,
                done = &mut work => return Some(done),
                () = tokio::time::sleep_until(lease.renew_at.into()) => {
                    self.renew(lease).await;
                    if !lease.held {
                        return None;
                    }
                }
            }
        }
    }

    /// One turn of the holder: the housekeeping when it is due, the stream
    /// made sure of, a round, and the wait it calls for.
    async fn turn(&self, publisher: &Publisher, cursor: &mut Cursor, turns: &mut Turns) {
        if turns.housekept.elapsed() >= HOUSEKEEPING_EVERY {
            self.housekeeping(cursor).await;
            turns.housekept = Instant::now();
        }
        if !turns.stream_ready {
            if let Err(err) = publisher.ensure_stream().await {
                tracing::warn!(error = %err, "the outbox relay cannot reach its NATS stream; again");
                publisher.back_or(BACKOFF_MAX).await;
                return;
            }
            turns.stream_ready = true;
        }
        match self.round(publisher, cursor).await {
            Ok(round) => {
                turns.backoff = LEASE_EVERY;
                if matches!(round, Round::CaughtUp) {
                    self.await_events().await;
                }
            }
            Err(err) => {
                metrics::counter!("hmdp_outbox_publish_failures_total").increment(1);
                tracing::warn!(error = %format!("{err:#}"), "an outbox round failed; its events stay for the next");
                // A NATS started again on an empty store has no stream: it
                // is made sure of again before the next round.
                turns.stream_ready = false;
                turns.backoff = (turns.backoff * 2).min(BACKOFF_MAX);
                publisher.back_or(turns.backoff).await;
            }
        }
    }

    /// Waits for an event of this instance's orders (or `IDLE`), then
    /// `GATHER`.
    async fn await_events(&self) {
        tokio::select! {
            () = self.written.notified() => tokio::time::sleep(GATHER).await,
            () = tokio::time::sleep(IDLE) => {}
        }
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
        // Counted before the rows are taken out: the broker dropped these
        // copies whatever becomes of this round's DELETE (which may wait on
        // the locks of the dead holder's round, or fail and come again).
        if duplicates > 0 {
            metrics::counter!("hmdp_outbox_duplicates_total").increment(duplicates);
            tracing::info!(duplicates, "the broker dropped copies of events published before and never taken out");
        }
        store::take_published(&self.db, &acked, self.settings.outbox_retention_s > 0).await?;
        debug_assert!(acked.is_sorted(), "acked in the order the events were published");
        let was_acked = |seq: &u64| acked.binary_search(seq).is_ok();
        let left: Vec<u64> = read_seqs.iter().copied().filter(|seq| !was_acked(seq)).collect();
        cursor.advance(&read_seqs, &left, cut_off, Instant::now());
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
