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
//! which the broker drops.

use std::time::{Duration, Instant};

use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use super::{
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
/// How long the holder waits for new events when there were none.
const IDLE: Duration = Duration::from_millis(20);
/// The longest wait after a failed round.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often the backlog is measured, and published events past their
/// retention deleted (a batch at a time, a few batches a turn).
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(1);
const PURGE_BATCH: u32 = 1_000;
const PURGE_BATCHES: u32 = 20;

pub(super) struct Relay {
    pub(super) db: MySqlPool,
    pub(super) settings: EventSettings,
    /// This instance, as the lease names it.
    pub(super) holder: String,
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
        while !stop.is_cancelled() {
            if renewed.elapsed() >= LEASE_EVERY {
                held = self.hold_lease(held).await;
                renewed = Instant::now();
            }
            if !held {
                if pause(&stop, LEASE_EVERY).await {
                    break;
                }
                continue;
            }
            if housekept.elapsed() >= HOUSEKEEPING_EVERY {
                self.housekeeping().await;
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
            let wait = match self.round(&publisher).await {
                Ok(0) => IDLE,
                Ok(_) => {
                    backoff = LEASE_EVERY;
                    Duration::ZERO
                }
                Err(err) => {
                    metrics::counter!("hmdp_outbox_publish_failures_total").increment(1);
                    tracing::warn!(error = %format!("{err:#}"), "an outbox round failed; its events stay for the next");
                    // A NATS started again on an empty store has no stream:
                    // it is made sure of again before the next round.
                    stream_ready = false;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    backoff
                }
            };
            if !wait.is_zero() && pause(&stop, wait).await {
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

    /// Publishes the oldest unpublished event of each order among the next
    /// `ROUND_MAX`, takes those acknowledged out; how many were.
    async fn round(&self, publisher: &Publisher) -> anyhow::Result<usize> {
        let events = first_of_each_order(store::unpublished(&self.db, ROUND_MAX).await?);
        if events.is_empty() {
            return Ok(0);
        }
        let Published { acked, duplicates, failure } = publisher.publish(&events).await;
        store::take_published(&self.db, &acked, self.settings.outbox_retention_s > 0).await?;
        if duplicates > 0 {
            metrics::counter!("hmdp_outbox_duplicates_total").increment(duplicates);
            tracing::info!(duplicates, "the broker dropped copies of events published before and never taken out");
        }
        let now = chrono::Utc::now().naive_utc();
        for event in events.iter().filter(|e| acked.contains(&e.seq)) {
            let lag = (now - event.occurred_at).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6;
            metrics::histogram!("hmdp_outbox_lag_seconds").record(lag);
        }
        metrics::counter!("hmdp_outbox_published_total").increment(acked.len() as u64);
        match failure {
            Some(err) if acked.is_empty() => Err(err),
            Some(err) => {
                metrics::counter!("hmdp_outbox_publish_failures_total").increment(1);
                tracing::warn!(error = %format!("{err:#}"), acked = acked.len(), "some events were not acknowledged; again");
                Ok(acked.len())
            }
            None => Ok(acked.len()),
        }
    }

    async fn housekeeping(&self) {
        match store::backlog(&self.db).await {
            Ok((count, oldest_s)) => {
                metrics::gauge!("hmdp_outbox_backlog").set(count as f64);
                metrics::gauge!("hmdp_outbox_oldest_seconds").set(oldest_s);
            }
            Err(err) => tracing::warn!(error = %err, "measuring the outbox backlog failed"),
        }
        let retained = self.settings.outbox_retention_s > 0;
        for _ in (0..PURGE_BATCHES).filter(|_| retained) {
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
