//! Per-voucher admission in front of the hot stock row, per instance.
//!
//! InnoDB serialises updates of one row; with hundreds of transactions
//! queued on its lock, throughput falls steeply (lock-wait bookkeeping,
//! deadlock-detection work, connections held idle). The gate lets a few
//! transactions at a time reach the row and keeps the rest waiting cheaply
//! in memory. It also remembers a sold-out voucher, so later requests are
//! answered without touching the row.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Clone)]
pub struct VoucherGates {
    permits_per_voucher: usize,
    gates: Arc<Mutex<HashMap<u64, Arc<Gate>>>>,
}

struct Gate {
    row: Arc<Semaphore>,
    sold_out: AtomicBool,
}

impl VoucherGates {
    pub fn new(permits_per_voucher: usize) -> Self {
        Self { permits_per_voucher, gates: Arc::default() }
    }

    fn gate(&self, voucher_id: u64) -> Arc<Gate> {
        self.gates
            .lock()
            .expect("voucher gates poisoned")
            .entry(voucher_id)
            .or_insert_with(|| {
                Arc::new(Gate { row: Arc::new(Semaphore::new(self.permits_per_voucher)), sold_out: AtomicBool::new(false) })
            })
            .clone()
    }

    /// Waits for a turn at the voucher's row.
    pub async fn enter(&self, voucher_id: u64) -> OwnedSemaphorePermit {
        self.gate(voucher_id).row.clone().acquire_owned().await.expect("gate semaphores are never closed")
    }

    pub fn is_sold_out(&self, voucher_id: u64) -> bool {
        self.gate(voucher_id).sold_out.load(Ordering::Acquire)
    }

    /// Only for a stock of 0 that MariaDB reported as committed (the
    /// conditional UPDATE matched no row, or a plain read saw 0). Stock
    /// only ever goes down, so the flag cannot hide stock that is there; a
    /// future restock or refund route must clear it.
    pub fn mark_sold_out(&self, voucher_id: u64) {
        self.gate(voucher_id).sold_out.store(true, Ordering::Release);
    }
}
