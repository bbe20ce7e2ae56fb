//! What the lock has been doing: counters an operator reads through
//! `LockService::metrics()`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

#[derive(Debug, Default)]
pub struct LockMetrics {
    pub(super) acquired: AtomicU64,
    pub(super) reentered: AtomicU64,
    pub(super) contended: AtomicU64,
    pub(super) wait_timeouts: AtomicU64,
    pub(super) renewals: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) abandoned: AtomicU64,
}

/// A consistent-enough copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LockMetricsSnapshot {
    /// First acquisitions.
    pub acquired: u64,
    /// Acquisitions by an owner that already held the lock.
    pub reentered: u64,
    /// Attempts that found the lock held by another owner.
    pub contended: u64,
    /// `try_lock` calls that waited and gave up.
    pub wait_timeouts: u64,
    /// Successful watchdog renewals.
    pub renewals: u64,
    /// Holds that ended without an unlock: lease gone or unreachable.
    pub lost: u64,
    /// Guards dropped without `unlock` (released in the background).
    pub abandoned: u64,
}

impl LockMetrics {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> LockMetricsSnapshot {
        LockMetricsSnapshot {
            acquired: self.acquired.load(Relaxed),
            reentered: self.reentered.load(Relaxed),
            contended: self.contended.load(Relaxed),
            wait_timeouts: self.wait_timeouts.load(Relaxed),
            renewals: self.renewals.load(Relaxed),
            lost: self.lost.load(Relaxed),
            abandoned: self.abandoned.load(Relaxed),
        }
    }
}
