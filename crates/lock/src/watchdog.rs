//! The holds this process has, and what keeps them honest: a watchdog that
//! renews leases while they are held, and the `lost` signal that fires when
//! a hold ends without an unlock (the lease ran out, someone deleted the
//! key, or Redis could not be reached before the lease would have expired).
//!
//! Watchdog-mode holds are renewed by one ticker per process that scans the
//! holds, not by a task per hold: spawning and cancelling a task on every
//! acquisition cost a third of the uncontended lock throughput (measured
//! by `scripts/bench-lock`; docs/history.md, "The lock alone"). Fixed
//! leases are rare and get their own timer.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::LockMetrics;

/// What the watchdog needs of the lock client: its holds, its counters and
/// a renewal. The client implements it, so this module names no type of
/// the module that uses it.
pub(super) trait Renewer: Send + Sync + 'static {
    fn holds(&self) -> &Holds;
    fn metrics(&self) -> &LockMetrics;
    /// Re-arms the key's TTL if `owner` still holds it: `Ok(false)` when
    /// it does not.
    fn renew(&self, key: &str, owner: &str, ttl: Duration) -> impl Future<Output = redis::RedisResult<bool>> + Send;
}

type HoldId = (String, String);
type HoldList = Vec<(HoldId, Arc<Hold>)>;

/// One lock held by one owner in this process, shared by its re-entries.
pub(super) struct Hold {
    lease: Lease,
    state: Mutex<HoldState>,
    pub lost: CancellationToken,
    /// Ends a fixed lease's timer once the last hold is released.
    stop: CancellationToken,
}

struct HoldState {
    /// When the lease runs out, as far as we know: measured from the moment
    /// the last confirmed acquire or renewal was sent, so never late.
    expires_at: Instant,
    next_renewal_at: Instant,
    renewing: bool,
}

#[derive(Default)]
pub(super) struct Holds {
    by_lock: Mutex<HashMap<HoldId, Arc<Hold>>>,
}

#[derive(Clone, Copy)]
pub(super) enum Lease {
    /// Renewed every ttl/3 while held.
    Watchdog(Duration),
    /// Never renewed; lost when it runs out.
    Fixed(Duration),
}

impl Lease {
    pub(super) fn ttl(self) -> Duration {
        match self {
            Lease::Watchdog(d) | Lease::Fixed(d) => d,
        }
    }
}

/// How often the ticker looks at the watchdog holds.
pub(super) fn tick(watchdog_ttl: Duration) -> Duration {
    (watchdog_ttl / 12).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// How long before the lease could have run out a watchdog hold is given
/// up: the holder must hear "lost" before another owner can get the lock,
/// and the ticker may look up to one tick late.
fn give_up_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(1)) + tick(ttl)
}

impl Holds {
    /// Records an acquisition. `sent_at` is taken before the acquire command
    /// was sent, so deadlines computed from it are never late.
    pub(super) fn acquired<R: Renewer>(
        &self,
        inner: &Arc<R>,
        id: HoldId,
        lease: Lease,
        sent_at: Instant,
        first: bool,
    ) -> Arc<Hold> {
        let mut map = self.by_lock.lock().expect("holds poisoned");
        if !first && let Some(hold) = map.get(&id).filter(|h| !h.lost.is_cancelled()) {
            // The script re-armed the key's TTL.
            hold.state.lock().expect("hold poisoned").expires_at = sent_at + lease.ttl();
            return hold.clone();
        }
        // A first acquisition while we still had a record means that earlier
        // hold ended behind our back (its lease ran out): say so.
        if let Some(stale) = map.remove(&id) {
            Self::mark_lost(&**inner, &id, &stale);
        }
        let hold = Arc::new(Hold {
            lease,
            state: Mutex::new(HoldState {
                expires_at: sent_at + lease.ttl(),
                next_renewal_at: sent_at + lease.ttl() / 3,
                renewing: false,
            }),
            lost: CancellationToken::new(),
            stop: CancellationToken::new(),
        });
        if let Lease::Fixed(_) = lease {
            tokio::spawn(expire_lease(Arc::downgrade(inner), id.clone(), hold.clone()));
        }
        map.insert(id, hold.clone());
        hold
    }

    /// Records an unlock that released the last hold: renewal stops.
    /// Partial unlocks change nothing here (the watchdog renews the key,
    /// whatever its count).
    pub(super) fn released_last(&self, id: &HoldId) {
        if let Some(hold) = self.by_lock.lock().expect("holds poisoned").remove(id) {
            hold.stop.cancel();
        }
    }

    /// Ends `hold` as lost, unless a newer hold has replaced it.
    pub(super) fn lost<R: Renewer>(&self, inner: &R, id: &HoldId, hold: &Arc<Hold>) {
        {
            let mut map = self.by_lock.lock().expect("holds poisoned");
            if map.get(id).is_some_and(|h| Arc::ptr_eq(h, hold)) {
                map.remove(id);
            }
        }
        Self::mark_lost(inner, id, hold);
    }

    fn mark_lost<R: Renewer>(inner: &R, id: &HoldId, hold: &Hold) {
        hold.stop.cancel();
        if !hold.lost.is_cancelled() {
            LockMetrics::bump(&inner.metrics().lost);
            hold.lost.cancel();
            tracing::warn!(lock = %id.0, "lock lost before it was unlocked");
        }
    }

    /// One look at every watchdog hold: the ones past their give-up time are
    /// lost, the ones due for renewal are returned.
    fn scan(&self, now: Instant) -> (HoldList, HoldList) {
        let map = self.by_lock.lock().expect("holds poisoned");
        let (mut expired, mut due) = (Vec::new(), Vec::new());
        for (id, hold) in map.iter() {
            let Lease::Watchdog(ttl) = hold.lease else { continue };
            let mut state = hold.state.lock().expect("hold poisoned");
            if now + give_up_margin(ttl) >= state.expires_at {
                expired.push((id.clone(), hold.clone()));
            } else if !state.renewing && now >= state.next_renewal_at {
                state.renewing = true;
                due.push((id.clone(), hold.clone()));
            }
        }
        (expired, due)
    }
}

/// The process's watchdog: renews what is due every tick, retries a failed
/// renewal sooner, and reports a hold lost when Redis says its owner no
/// longer holds it or when no renewal was confirmed in time.
pub(super) async fn run_ticker<R: Renewer>(inner: Weak<R>, watchdog_ttl: Duration, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(tick(watchdog_ttl));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        let (expired, due) = inner.holds().scan(Instant::now());
        for (id, hold) in expired {
            inner.holds().lost(&*inner, &id, &hold);
        }
        for (id, hold) in due {
            tokio::spawn(renew(Arc::downgrade(&inner), id, hold));
        }
    }
}

async fn renew<R: Renewer>(inner: Weak<R>, id: HoldId, hold: Arc<Hold>) {
    let ttl = hold.lease.ttl();
    let interval = ttl / 3;
    let sent_at = Instant::now();
    let result = {
        let Some(inner) = inner.upgrade() else { return };
        tokio::time::timeout(interval, inner.renew(&id.0, &id.1, ttl)).await
    };
    let Some(inner) = inner.upgrade() else { return };
    let mut state = hold.state.lock().expect("hold poisoned");
    state.renewing = false;
    match result {
        Ok(Ok(true)) => {
            state.expires_at = state.expires_at.max(sent_at + ttl);
            state.next_renewal_at = sent_at + interval;
            LockMetrics::bump(&inner.metrics().renewals);
        }
        Ok(Ok(false)) => {
            drop(state);
            inner.holds().lost(&*inner, &id, &hold);
        }
        Ok(Err(err)) => {
            tracing::warn!(lock = %id.0, error = %err, "lock renewal failed; retrying");
            state.next_renewal_at = Instant::now() + interval / 4;
        }
        Err(_) => {
            tracing::warn!(lock = %id.0, "lock renewal timed out; retrying");
            state.next_renewal_at = Instant::now() + interval / 4;
        }
    }
}

/// How long before a fixed lease runs out its holder is told: Redis expires
/// the key only a network hop after `expires_at`, while tokio's timers fire
/// up to a millisecond late, so without a margin another owner could take
/// the lock before its holder hears that it lost it.
fn fixed_lease_margin(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

/// A fixed lease is never renewed: it is lost when it runs out (a re-entry
/// moves the deadline, as it re-arms the key's TTL).
async fn expire_lease<R: Renewer>(inner: Weak<R>, id: HoldId, hold: Arc<Hold>) {
    let margin = fixed_lease_margin(hold.lease.ttl());
    loop {
        let deadline = hold.state.lock().expect("hold poisoned").expires_at;
        tokio::select! {
            () = hold.stop.cancelled() => return,
            () = tokio::time::sleep_until(deadline - margin) => {
                if hold.state.lock().expect("hold poisoned").expires_at > deadline {
                    continue;
                }
                if let Some(inner) = inner.upgrade() {
                    inner.holds().lost(&*inner, &id, &hold);
                }
                return;
            }
        }
    }
}
