//! Admission: what each instance of the synchronous mode remembers per
//! seckill voucher, in front of its hot stock row.
//!
//! InnoDB serialises updates of one row; with hundreds of transactions
//! queued on its lock, throughput falls steeply (lock-wait bookkeeping,
//! deadlock-detection work, connections held idle). The gate lets a few
//! transactions at a time reach the row and keeps the rest waiting cheaply
//! in memory. It also remembers the sale window (immutable once created:
//! there is no update route) and whether the voucher sold out, so refused
//! requests cost no database work beyond one stock read per second.

mod gate;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

pub(super) use gate::{Gate, SaleWindow};
use sqlx::MySqlPool;

use crate::recent::RecentIds;
use crate::seckill::{
    error::{SeckillError, SeckillResult},
    store,
};

/// How long an id found missing is answered 404 without a look at MariaDB.
const MISSING_MEMORY: Duration = Duration::from_secs(5);
/// Missing ids remembered at most.
const MISSING_MAX: usize = 10_000;
/// Gates kept before the ended sales are dropped; each gate is a few
/// hundred bytes, so this bounds the memory (a few MiB) of a year of
/// sales, not the sales on at once: at 1,024, a shop with more sales on
/// than that (bench-many keeps each round's 551 on for two hours) had its
/// read-ahead stopped by a full map of live gates, and each of its new
/// sales' gates was read by its first orders, pushing out another live
/// one to be read again.
const GATES_MAX: usize = 10_000;
/// Sales read ahead a round, at most.
const READ_AHEAD_MAX: u32 = 1_024;
/// How long after its end a sale's gate stays: requests that arrive late
/// still get ENDED from memory.
const ENDED_KEPT: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// How far ahead of its opening a sale's gate is read. A round comes
/// about every second, so a voucher made a few seconds before its sale
/// opens is read before it; ten minutes leaves an instance restarted
/// shortly before an opening the time to read it, and keeps the read to
/// the sales of the next minutes, not the whole schedule.
const READ_AHEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// And how long after its opening, in an instance's first round: one
/// started just after a sale opened reads it too. Later rounds read from
/// where the round before stopped (never further back than this): the
/// sales of the last minute, known already, would come first and could
/// fill the read. A sale created already open after a round, or one the
/// read cut twice, is read on its first order.
const READ_BEHIND: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// What a round's refresh changed.
#[derive(Debug, Default)]
pub(super) struct Refreshed {
    /// Gates read ahead of their sale's first order.
    pub(super) read_ahead: usize,
    /// Vouchers held for sold out whose stock came back.
    pub(super) selling_again: Vec<u64>,
}

#[derive(Clone)]
pub(super) struct VoucherGates {
    permits_per_voucher: usize,
    queue_max: usize,
    gates: Arc<Mutex<HashMap<u64, Arc<Gate>>>>,
    /// Ids recently found to be no seckill voucher.
    missing: Arc<RecentIds>,
    /// When the last round's read of the sales opening ran.
    last_read: Arc<Mutex<Option<chrono::NaiveDateTime>>>,
}

impl VoucherGates {
    pub(super) fn new(permits_per_voucher: usize, queue_max: usize) -> Self {
        Self {
            permits_per_voucher,
            queue_max,
            gates: Arc::default(),
            missing: Arc::new(RecentIds::new(MISSING_MAX, Some(MISSING_MEMORY))),
            last_read: Arc::default(),
        }
    }

    /// The voucher's gate, read from the database the first time this
    /// instance sees the voucher; 404 for a voucher that is not a seckill one.
    pub(super) async fn get_or_load(&self, db: &MySqlPool, voucher_id: u64) -> SeckillResult<Arc<Gate>> {
        if let Some(gate) = self.known(voucher_id) {
            if gate.recheck_due() {
                let read = store::sale(db, voucher_id).await;
                gate.recheck_done(read.as_ref().ok().and_then(|sale| sale.map(|s| s.stock)));
                if read.as_ref().is_ok_and(Option::is_some) && !gate.is_sold_out() {
                    tracing::info!(voucher_id, "stock came back to a sold-out voucher; selling again");
                }
            }
            return Ok(gate);
        }
        if self.missing.contains(voucher_id) {
            return Err(SeckillError::NoSuchVoucher);
        }
        let Some(sale) = store::sale(db, voucher_id).await? else {
            // A flood of requests for an id that is no seckill voucher
            // does not reach MariaDB.
            self.missing.insert(voucher_id, ());
            return Err(SeckillError::NoSuchVoucher);
        };
        let window = SaleWindow { begin: sale.begin_time, end: sale.end_time };
        Ok(self.insert(voucher_id, window, sale.stock))
    }

    /// The admin set the voucher's stock: this instance knows at once (the
    /// others within `SOLD_OUT_RECHECK`).
    pub(super) fn stock_set(&self, voucher_id: u64, stock: i32) {
        if let Some(gate) = self.known(voucher_id) {
            if stock > 0 { gate.sell_again() } else { gate.mark_sold_out() }
        }
    }

    /// Units came back to the voucher (a cancel or refund committed here):
    /// this instance sells again at once.
    pub(super) fn units_returned(&self, voucher_id: u64) {
        if let Some(gate) = self.known(voucher_id) {
            gate.sell_again();
        }
    }

    /// The voucher's gate, if this instance has one.
    fn known(&self, voucher_id: u64) -> Option<Arc<Gate>> {
        self.gates.lock().expect("voucher gates poisoned").get(&voucher_id).cloned()
    }

    /// Each round, two reads, each one statement whatever the number of
    /// sales. The sales opening within `READ_AHEAD` that this instance
    /// does not know yet become known: without it, fifty sales opening at
    /// the same second would each be read at their opening instant, by
    /// every instance and by every order that arrives before the first
    /// read returns, while their buyers wait. And the vouchers it holds for
    /// sold out, still on sale, whose stock came back (a cancel or the
    /// unpaid timeout on another instance, the admin's stock route there)
    /// sell here within a round, without a burst of buyers told SOLD_OUT
    /// while one request rechecks; a read per such voucher and round made
    /// five hundred sold-out sales cost each instance five hundred reads a
    /// second for as long as they were on. Past `GATES_MAX`, the gates of
    /// sales ended a while ago leave first; live ones are never pushed out
    /// here (the rest are read on their first order).
    pub(super) async fn refresh(&self, db: &MySqlPool) -> sqlx::Result<Refreshed> {
        let now = chrono::Utc::now().naive_utc();
        // A gate found sold out after the read began keeps its flag: the
        // read may predate the order that took the last unit.
        let asked = std::time::Instant::now();
        let sold_out: Vec<u64> = self
            .gates
            .lock()
            .expect("voucher gates poisoned")
            .iter()
            .filter(|(_, gate)| gate.is_sold_out() && gate.window.end > now)
            .map(|(&id, _)| id)
            .collect();
        let back = store::in_stock_of(db, &sold_out).await?;
        let behind = now - READ_BEHIND;
        let since = self.last_read.lock().expect("gate reads poisoned").map_or(behind, |last| last.max(behind));
        let opening = store::sales_opening(db, since, now + READ_AHEAD, READ_AHEAD_MAX).await?;
        // A full read stopped inside the window: the next round goes on
        // from its last opening (the sales cut at that very second are
        // read on their first order), and the one after from its own now.
        let read_to = match opening.last() {
            Some(last) if opening.len() >= READ_AHEAD_MAX as usize => last.sale.begin_time,
            _ => now,
        };
        *self.last_read.lock().expect("gate reads poisoned") = Some(read_to);
        let mut gates = self.gates.lock().expect("voucher gates poisoned");
        let mut refreshed = Refreshed::default();
        for voucher_id in back {
            if let Some(gate) = gates.get(&voucher_id)
                && gate.is_sold_out()
                && gate.sold_out_before(asked)
            {
                gate.sell_again();
                refreshed.selling_again.push(voucher_id);
            }
        }
        let unknown: Vec<store::VoucherSale> =
            opening.into_iter().filter(|sale| !gates.contains_key(&sale.voucher_id)).collect();
        if gates.len() + unknown.len() > GATES_MAX {
            forget_ended(&mut gates, now);
        }
        for store::VoucherSale { voucher_id, sale } in unknown {
            if gates.len() >= GATES_MAX {
                break;
            }
            let window = SaleWindow { begin: sale.begin_time, end: sale.end_time };
            gates.insert(voucher_id, self.new_gate(window, sale.stock));
            refreshed.read_ahead += 1;
        }
        Ok(refreshed)
    }

    /// Remembers a voucher read from the database. Past `GATES_MAX`, the
    /// gates of sales that ended a while ago leave first.
    fn insert(&self, voucher_id: u64, window: SaleWindow, stock: i32) -> Arc<Gate> {
        let mut gates = self.gates.lock().expect("voucher gates poisoned");
        if gates.len() >= GATES_MAX {
            forget_ended(&mut gates, chrono::Utc::now().naive_utc());
            // Still full of live sales: the one ending first leaves (its
            // orders in flight keep their gate; a later one reloads it).
            if gates.len() >= GATES_MAX
                && let Some(first) = gates.iter().min_by_key(|(_, gate)| gate.window.end).map(|(&id, _)| id)
            {
                gates.remove(&first);
            }
        }
        let gate = gates.entry(voucher_id).or_insert_with(|| self.new_gate(window, stock)).clone();
        // Known already (another order read it meanwhile): this read's 0 is
        // news to it too.
        if stock <= 0 {
            gate.mark_sold_out();
        }
        gate
    }

    /// A gate for a sale read with `stock` left: sold out at once at 0.
    fn new_gate(&self, window: SaleWindow, stock: i32) -> Arc<Gate> {
        let gate = Gate::new(window, self.permits_per_voucher, self.queue_max);
        if stock <= 0 {
            gate.mark_sold_out();
        }
        Arc::new(gate)
    }
}

/// Drops the gates of sales that ended more than `ENDED_KEPT` before
/// `now`: requests that late no longer need ENDED from memory.
fn forget_ended(gates: &mut HashMap<u64, Arc<Gate>>, now: chrono::NaiveDateTime) {
    let cutoff = now - ENDED_KEPT;
    gates.retain(|_, gate| gate.window.end > cutoff);
}

#[cfg(test)]
mod tests;
