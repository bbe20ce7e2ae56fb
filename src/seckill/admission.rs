//! Admission, shared by every way of placing an order: what each instance
//! remembers per seckill voucher, in front of its hot stock row.
//!
//! InnoDB serialises updates of one row; with hundreds of transactions
//! queued on its lock, throughput falls steeply (lock-wait bookkeeping,
//! deadlock-detection work, connections held idle). The gate lets a few
//! transactions at a time reach the row and keeps the rest waiting cheaply
//! in memory. It also remembers the sale window (immutable once created:
//! there is no update route) and whether the voucher sold out, so refused
//! requests cost no database work at all.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::{ApiError, ApiResult};

#[derive(Clone)]
pub struct VoucherGates {
    permits_per_voucher: usize,
    gates: Arc<Mutex<HashMap<u64, Arc<Gate>>>>,
}

/// The sale window of a seckill voucher, in UTC.
#[derive(Debug, Clone, Copy)]
pub struct SaleWindow {
    pub begin: NaiveDateTime,
    pub end: NaiveDateTime,
}

pub struct Gate {
    pub window: SaleWindow,
    row: Arc<Semaphore>,
    sold_out: AtomicBool,
}

impl Gate {
    /// The checks that need no table: the sale window, then the sold-out
    /// flag. `now` is UTC.
    pub fn admit(&self, now: NaiveDateTime) -> ApiResult<()> {
        if now < self.window.begin {
            return Err(ApiError::NotStarted);
        }
        if now >= self.window.end {
            return Err(ApiError::Ended);
        }
        if self.is_sold_out() {
            return Err(ApiError::SoldOut);
        }
        Ok(())
    }

    /// Waits for a turn at the voucher's row.
    pub async fn enter(&self) -> OwnedSemaphorePermit {
        self.row.clone().acquire_owned().await.expect("gate semaphores are never closed")
    }

    pub fn is_sold_out(&self) -> bool {
        self.sold_out.load(Ordering::Acquire)
    }

    /// Only for a stock of 0 that MariaDB reported as committed (the
    /// conditional UPDATE matched no row, or a plain read saw 0). Stock
    /// only ever goes down, so the flag cannot hide stock that is there; a
    /// future restock or refund route must clear it.
    pub fn mark_sold_out(&self) {
        self.sold_out.store(true, Ordering::Release);
    }
}

impl VoucherGates {
    pub fn new(permits_per_voucher: usize) -> Self {
        Self { permits_per_voucher, gates: Arc::default() }
    }

    /// The voucher's gate, read from the database the first time this
    /// instance sees the voucher; 404 for a voucher that is not a seckill one.
    pub async fn get_or_load(&self, db: &MySqlPool, voucher_id: u64) -> ApiResult<Arc<Gate>> {
        if let Some(gate) = self.gates.lock().expect("voucher gates poisoned").get(&voucher_id) {
            return Ok(gate.clone());
        }
        let row: Option<(i32, NaiveDateTime, NaiveDateTime)> =
            sqlx::query_as("SELECT stock, begin_time, end_time FROM tb_seckill_voucher WHERE voucher_id = ?")
                .bind(voucher_id)
                .fetch_optional(db)
                .await?;
        let (stock, begin, end) = row.ok_or(ApiError::NotFound("no such seckill voucher"))?;
        Ok(self.insert(voucher_id, SaleWindow { begin, end }, stock))
    }

    /// Remembers a voucher read from the database.
    fn insert(&self, voucher_id: u64, window: SaleWindow, stock: i32) -> Arc<Gate> {
        let gate = self
            .gates
            .lock()
            .expect("voucher gates poisoned")
            .entry(voucher_id)
            .or_insert_with(|| {
                Arc::new(Gate {
                    window,
                    row: Arc::new(Semaphore::new(self.permits_per_voucher)),
                    sold_out: AtomicBool::new(false),
                })
            })
            .clone();
        if stock <= 0 {
            gate.mark_sold_out();
        }
        gate
    }
}
