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
/// Gates kept before the ended sales are dropped; each gate is small, so
/// this bounds the memory of a year of daily sales, not a live sale.
const GATES_MAX: usize = 1_024;
/// How long after its end a sale's gate stays: requests that arrive late
/// still get ENDED from memory.
const ENDED_KEPT: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// How far ahead of its opening a sale's gate is read. A round comes
/// about every second, so a voucher made a few seconds before its sale
/// opens is read before it; ten minutes leaves an instance restarted
/// shortly before an opening the time to read it, and keeps the read to
/// the sales of the next minutes, not the whole schedule.
const READ_AHEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// And how long after its opening: an instance started just after a sale
/// opened reads it too.
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
}

impl VoucherGates {
    pub(super) fn new(permits_per_voucher: usize, queue_max: usize) -> Self {
        Self {
            permits_per_voucher,
            queue_max,
            gates: Arc::default(),
            missing: Arc::new(RecentIds::new(MISSING_MAX, Some(MISSING_MEMORY))),
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
        let opening = store::sales_opening(db, now - READ_BEHIND, now + READ_AHEAD, GATES_MAX as u32).await?;
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
            let cutoff = now - ENDED_KEPT;
            gates.retain(|_, gate| gate.window.end > cutoff);
        }
        for store::VoucherSale { voucher_id, sale } in unknown {
            if gates.len() >= GATES_MAX {
                break;
            }
            let window = SaleWindow { begin: sale.begin_time, end: sale.end_time };
            let gate = Gate::new(window, self.permits_per_voucher, self.queue_max);
            if sale.stock <= 0 {
                gate.mark_sold_out();
            }
            gates.insert(voucher_id, Arc::new(gate));
            refreshed.read_ahead += 1;
        }
        Ok(refreshed)
    }

    /// Remembers a voucher read from the database. Past `GATES_MAX`, the
    /// gates of sales that ended a while ago leave first.
    fn insert(&self, voucher_id: u64, window: SaleWindow, stock: i32) -> Arc<Gate> {
        let mut gates = self.gates.lock().expect("voucher gates poisoned");
        if gates.len() >= GATES_MAX {
            let cutoff = chrono::Utc::now().naive_utc() - ENDED_KEPT;
            gates.retain(|_, gate| gate.window.end > cutoff);
            // Still full of live sales: the one ending first leaves (its
            // orders in flight keep their gate; a later one reloads it).
            if gates.len() >= GATES_MAX
                && let Some(first) = gates.iter().min_by_key(|(_, gate)| gate.window.end).map(|(&id, _)| id)
            {
                gates.remove(&first);
            }
        }
        let gate = gates
            .entry(voucher_id)
            .or_insert_with(|| Arc::new(Gate::new(window, self.permits_per_voucher, self.queue_max)))
            .clone();
        if stock <= 0 {
            gate.mark_sold_out();
        }
        gate
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{Arc, atomic::Ordering},
        time::Duration,
    };

    use chrono::{NaiveDateTime, TimeDelta, Utc};

    use super::{SaleWindow, VoucherGates};
    use crate::seckill::error::SeckillError;

    fn now() -> NaiveDateTime {
        Utc::now().naive_utc()
    }

    fn open_sale(gates: &VoucherGates, voucher: u64, stock: i32) -> Arc<super::Gate> {
        let window = SaleWindow { begin: now() - TimeDelta::hours(1), end: now() + TimeDelta::hours(1) };
        gates.insert(voucher, window, stock)
    }

    #[test]
    fn the_window_is_checked_before_the_sold_out_flag() {
        let gates = VoucherGates::new(8, 16);
        let gate = open_sale(&gates, 1, 0);
        let (begin, end) = (gate.window.begin, gate.window.end);
        assert!(matches!(gate.admit(begin - TimeDelta::seconds(1)), Err(SeckillError::NotStarted)));
        assert!(matches!(gate.admit(end), Err(SeckillError::Ended)), "the end itself is outside");
        assert!(matches!(gate.admit(now()), Err(SeckillError::SoldOut)), "a stock of 0 is sold out at once");
        let on_sale = open_sale(&gates, 2, 5);
        assert!(on_sale.admit(on_sale.window.begin).is_ok(), "the beginning itself is inside");
    }

    #[test]
    fn the_queue_refuses_past_its_bound_and_frees_a_place_when_one_leaves() {
        let gates = VoucherGates::new(1, 2);
        let gate = open_sale(&gates, 1, 10);
        let first = gate.queue_slot().expect("a place");
        let _second = gate.queue_slot().expect("a place");
        assert!(matches!(gate.queue_slot(), Err(SeckillError::Busy(_))));
        drop(first);
        assert!(gate.queue_slot().is_ok(), "a place came free");
    }

    #[test]
    fn the_stock_route_and_returned_units_flip_the_sold_out_flag_at_once() {
        let gates = VoucherGates::new(8, 16);
        let gate = open_sale(&gates, 1, 3);
        gates.stock_set(1, 0);
        assert!(gate.is_sold_out());
        gates.units_returned(1);
        assert!(!gate.is_sold_out());
        gate.mark_sold_out();
        gates.stock_set(1, 4);
        assert!(!gate.is_sold_out());
        gates.units_returned(99);
        gates.stock_set(99, 1);
    }

    #[test]
    fn a_sold_out_voucher_is_read_again_by_one_caller_once_a_second_has_passed() {
        let gates = VoucherGates::new(8, 16);
        let gate = open_sale(&gates, 1, 0);
        assert!(!gate.recheck_due(), "MariaDB said 0 a moment ago");
        // As if MariaDB said 0 longer ago than the recheck interval.
        std::thread::sleep(super::gate::SOLD_OUT_RECHECK + Duration::from_millis(5));
        gate.sold_out_seen_ms.store(0, Ordering::Release);
        assert!(gate.recheck_due(), "the first caller reads the stock again");
        assert!(!gate.recheck_due(), "only one caller at a time");
        gate.recheck_done(None);
        assert!(gate.is_sold_out() && !gate.recheck_due(), "no answer: again in a second, not now");
        gate.sold_out_seen_ms.store(0, Ordering::Release);
        assert!(gate.recheck_due());
        gate.recheck_done(Some(2));
        assert!(!gate.is_sold_out(), "stock came back: sells again");
        assert!(!gate.recheck_due());
    }

    /// A sale of `stock` units opening `opens_in` from now (negative: on
    /// already) for an hour.
    async fn sale(pool: &sqlx::MySqlPool, voucher: u64, stock: i32, opens_in: TimeDelta) {
        let begin = now() + opens_in;
        crate::seckill::store::insert_sale(pool, voucher, stock.into(), begin, begin + TimeDelta::hours(1), &[])
            .await
            .unwrap();
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn the_sales_opening_soon_are_known_before_their_first_order(pool: sqlx::MySqlPool) {
        sale(&pool, 1, 5, TimeDelta::minutes(-10)).await;
        sale(&pool, 2, 5, TimeDelta::seconds(3)).await;
        sale(&pool, 3, 0, TimeDelta::seconds(-30)).await;
        sale(&pool, 4, 5, TimeDelta::days(2)).await;
        sale(&pool, 5, 5, TimeDelta::hours(-2)).await;
        let gates = VoucherGates::new(8, 16);
        assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 2);
        assert!(gates.known(2).is_some_and(|gate| !gate.is_sold_out()), "opening in seconds");
        assert!(gates.known(3).is_some_and(|gate| gate.is_sold_out()), "opened just now, and sold out");
        assert!(gates.known(1).is_none(), "on for minutes: read on its first order, as an instance always did");
        assert!(gates.known(4).is_none(), "days away: read in a later round");
        assert!(gates.known(5).is_none(), "ended");
        assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 0, "known ones are not read again");
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn a_sold_out_voucher_whose_stock_came_back_sells_again_at_the_next_round(pool: sqlx::MySqlPool) {
        sale(&pool, 1, 0, TimeDelta::minutes(-10)).await;
        sale(&pool, 2, 0, TimeDelta::minutes(-10)).await;
        let gates = VoucherGates::new(8, 16);
        open_sale(&gates, 1, 0);
        open_sale(&gates, 2, 0);
        // Another instance returned a unit of voucher 1.
        sqlx::query("UPDATE tb_seckill_voucher SET stock = 1 WHERE voucher_id = 1").execute(&pool).await.unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let refreshed = gates.refresh(&pool).await.unwrap();
        assert_eq!(refreshed.selling_again, vec![1]);
        assert!(!gates.known(1).unwrap().is_sold_out(), "sells again");
        assert!(gates.known(2).unwrap().is_sold_out(), "still none left");
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn the_next_sale_is_read_ahead_among_a_thousand_on_and_room_is_made_from_the_ended(pool: sqlx::MySqlPool) {
        // More sales on now than an instance keeps gates for, and every
        // gate it has is of a sale that ended long ago.
        sqlx::query(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
             SELECT 10 + seq, 5, NOW() - INTERVAL 30 MINUTE, NOW() + INTERVAL 2 HOUR FROM seq_0_to_1099",
        )
        .execute(&pool)
        .await
        .unwrap();
        sale(&pool, 1, 5, TimeDelta::seconds(3)).await;
        let gates = VoucherGates::new(1, 1);
        let ended = SaleWindow { begin: now() - TimeDelta::days(2), end: now() - TimeDelta::days(1) };
        for voucher in 100_000..100_000 + super::GATES_MAX as u64 {
            gates.insert(voucher, ended, 1);
        }
        assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 1);
        assert!(gates.known(1).is_some(), "the sale opening next is known");
        assert!(gates.known(100_000).is_none(), "the ended sales made room");
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn reading_ahead_never_pushes_a_live_gate_out(pool: sqlx::MySqlPool) {
        let gates = VoucherGates::new(1, 1);
        for voucher in 1..=super::GATES_MAX as u64 {
            open_sale(&gates, voucher, 1);
        }
        sale(&pool, 1_000_000, 5, TimeDelta::seconds(3)).await;
        assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 0);
        assert!(gates.known(1_000_000).is_none() && gates.known(1).is_some());
    }

    #[test]
    fn the_gates_stay_bounded_and_the_ended_sales_leave_first() {
        let gates = VoucherGates::new(1, 1);
        let ended = SaleWindow { begin: now() - TimeDelta::days(2), end: now() - TimeDelta::days(1) };
        gates.insert(0, ended, 1);
        for voucher in 1..=super::GATES_MAX as u64 + 10 {
            open_sale(&gates, voucher, 1);
        }
        let held = gates.gates.lock().unwrap();
        assert!(held.len() <= super::GATES_MAX);
        assert!(!held.contains_key(&0), "the ended sale left first");
    }
}
