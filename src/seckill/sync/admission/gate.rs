//! One voucher's gate: its sale window, its sold-out flag (read again
//! from MariaDB once a second while set), and the few transactions at a
//! time it lets reach the hot row, with a bounded queue in front.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::NaiveDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::seckill::error::{SeckillError, SeckillResult};

/// How long a sold-out voucher is answered from memory before one request
/// reads its stock again: stock can come back (the admin's stock route,
/// served by another instance; a cancelled order), and each instance learns
/// of it this soon, at
/// the price of one primary-key read per second per sold-out voucher.
pub(super) const SOLD_OUT_RECHECK: Duration = Duration::from_secs(1);

/// The sale window of a seckill voucher, in UTC.
#[derive(Debug, Clone, Copy)]
pub(in crate::seckill::sync) struct SaleWindow {
    pub(crate) begin: NaiveDateTime,
    pub(crate) end: NaiveDateTime,
}

pub(in crate::seckill::sync) struct Gate {
    pub(crate) window: SaleWindow,
    row: Arc<Semaphore>,
    sold_out: AtomicBool,
    /// When MariaDB last said 0, in ms since `created`.
    pub(super) sold_out_seen_ms: AtomicU64,
    /// One request at a time reads the stock again.
    rechecking: AtomicBool,
    created: Instant,
    /// Orders of this instance waiting for the row (or for their group).
    waiting: AtomicUsize,
    queue_max: usize,
}

/// A place in a gate's queue, given back when dropped.
pub(in crate::seckill::sync) struct QueueSlot(Arc<Gate>);

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    pub(super) fn new(window: SaleWindow, permits: usize, queue_max: usize) -> Self {
        Self {
            window,
            row: Arc::new(Semaphore::new(permits)),
            sold_out: AtomicBool::new(false),
            sold_out_seen_ms: AtomicU64::new(0),
            rechecking: AtomicBool::new(false),
            created: Instant::now(),
            waiting: AtomicUsize::new(0),
            queue_max,
        }
    }

    /// The checks that need no table: the sale window, then the sold-out
    /// flag. `now` is UTC.
    pub(in crate::seckill::sync) fn admit(&self, now: NaiveDateTime) -> SeckillResult<()> {
        if now < self.window.begin {
            return Err(SeckillError::NotStarted);
        }
        if now >= self.window.end {
            return Err(SeckillError::Ended);
        }
        if self.is_sold_out() {
            return Err(SeckillError::SoldOut);
        }
        Ok(())
    }

    /// A place in the queue for the voucher's row, or `Busy` (503 with
    /// `Retry-After`) when
    /// `HOT_ROW_QUEUE_MAX` orders already wait: beyond that an order would
    /// only wait out its deadline.
    pub(in crate::seckill::sync) fn queue_slot(self: &Arc<Self>) -> SeckillResult<QueueSlot> {
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue_max {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(SeckillError::Busy("too many orders wait for this voucher on this instance"));
        }
        Ok(QueueSlot(self.clone()))
    }

    /// Waits for a turn at the voucher's row.
    pub(in crate::seckill::sync) async fn enter(&self) -> OwnedSemaphorePermit {
        self.row.clone().acquire_owned().await.expect("gate semaphores are never closed")
    }

    /// Stock is known to be back: sells again.
    pub(super) fn sell_again(&self) {
        self.sold_out.store(false, Ordering::Release);
    }

    pub(in crate::seckill::sync) fn is_sold_out(&self) -> bool {
        self.sold_out.load(Ordering::Acquire)
    }

    /// Only for a stock of 0 that MariaDB reported as committed (the
    /// conditional UPDATE matched no row, or a plain read saw 0). The flag
    /// may hide stock added later for at most `SOLD_OUT_RECHECK`.
    pub(in crate::seckill::sync) fn mark_sold_out(&self) {
        self.sold_out_seen_ms.store(self.elapsed_ms(), Ordering::Release);
        self.sold_out.store(true, Ordering::Release);
    }

    /// True for the one caller that should read the stock again now: the
    /// voucher is sold out here, MariaDB said so longer ago than
    /// `SOLD_OUT_RECHECK`, and nobody else is reading it.
    pub(super) fn recheck_due(&self) -> bool {
        self.is_sold_out()
            && self.elapsed_ms().saturating_sub(self.sold_out_seen_ms.load(Ordering::Acquire))
                >= SOLD_OUT_RECHECK.as_millis() as u64
            && self.rechecking.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// What the recheck read: stock back on sale, or still none (or no
    /// answer, which changes nothing).
    pub(super) fn recheck_done(&self, stock: Option<i32>) {
        match stock {
            Some(left) if left > 0 => self.sell_again(),
            Some(_) => self.mark_sold_out(),
            // Not read: again in a second, not at the next request.
            None => self.sold_out_seen_ms.store(self.elapsed_ms(), Ordering::Release),
        }
        self.rechecking.store(false, Ordering::Release);
    }

    /// Whether MariaDB last said 0 before `instant`: a read begun after
    /// that which finds stock may sell again; one begun before may not undo
    /// a sell-out that came after it.
    pub(super) fn sold_out_before(&self, instant: Instant) -> bool {
        // The mark is kept in whole milliseconds, rounded down: the next
        // millisecond is the latest it can have been made.
        self.created + Duration::from_millis(self.sold_out_seen_ms.load(Ordering::Acquire) + 1) <= instant
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
