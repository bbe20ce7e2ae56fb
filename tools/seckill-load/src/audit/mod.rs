//! What the database says after the run. The numbers are read, never
//! inferred from the HTTP answers, so the audit can catch the service lying.

mod answers;

use std::collections::BTreeMap;

use anyhow::Context;
use hmdp::seckill::Reconciliation;
use order_events::audit::EventsAudit;
use serde::Serialize;
use sqlx::MySqlPool;

pub(crate) use answers::judge_answers;
pub use answers::{AnswerCheck, check_answers};

use crate::report::Outcome;

/// Stock and orders of a voucher at one moment.
pub struct Snapshot {
    stock: i64,
    pub orders: i64,
}

impl Snapshot {
    pub fn new(stock: i64, orders: i64) -> Self {
        Self { stock, orders }
    }

    pub fn stock(&self) -> i64 {
        self.stock
    }

    pub async fn read(db: &MySqlPool, voucher: u64) -> anyhow::Result<Self> {
        let stock: i32 = sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_optional(db)
            .await?
            .ok_or_else(|| anyhow::anyhow!("voucher {voucher} is not a seckill voucher"))?;
        // Live orders: a cancelled or refunded one gave its unit back.
        let orders: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ?")
                .bind(voucher)
                .bind(voucher)
                .fetch_one(db)
                .await?;
        Ok(Self { stock: stock.into(), orders })
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    pub voucher_id: u64,
    /// Stock before the run plus the orders that already existed.
    pub initial_stock: i64,
    pub orders: i64,
    pub remaining_stock: i64,
    pub oversold: i64,
    pub duplicate_pairs: i64,
    pub stock_plus_orders_is_initial: bool,
    /// Orders the run created, and successes the service answered.
    pub new_orders: i64,
    pub success_answers: u64,
    /// 202 answers: accepted, not yet on a Redis replica. A failover may
    /// lose them, honestly: they are neither required nor forbidden a row.
    pub unreplicated_answers: u64,
    /// Asynchronous mode: Redis against MariaDB once drained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<Reconciliation>,
    /// Every answer against its user's row, when the users' ids are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<AnswerCheck>,
    /// The sale's order events at a consumer (`--events-audit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<EventsAudit>,
    /// Users who came to buy.
    pub buyers: u64,
    /// Answers that may leave a unit unsold: 429, 503, anything unexpected.
    pub refusals_leaving_stock: u64,
    /// More buyers than units, stock left, and fewer refusals that leave
    /// stock than units left: the sale stopped selling (a stale sold-out
    /// flag, Redis keys of another voucher) and said SOLD_OUT instead.
    pub unsold_unexplained: bool,
    /// HTTP 500s and answers that are not the envelope: outside the
    /// contract whatever the fault (a dependency fault is a 503).
    pub answers_outside_contract: u64,
    pub passed: bool,
}

/// The answers of a run that the audit weighs besides the rows.
pub struct Refusals {
    pub buyers: u64,
    pub leaving_stock: u64,
    pub outside_contract: u64,
    /// Every buyer refused SOLD_OUT came back later and bought (the
    /// after-sale scenario's second wave): stock left then had no buyer.
    pub demand_met: bool,
}

impl Refusals {
    pub fn count(buyers: u64, recorder: &crate::report::Recorder, others: &BTreeMap<String, u64>) -> Self {
        let leaving_stock = recorder.count(Outcome::TooManyRequests)
            + recorder.count(Outcome::Unavailable)
            + recorder.count(Outcome::Other);
        let outside_contract = others
            .iter()
            .filter(|(what, _)| what.starts_with("HTTP 500") || what.ends_with("not an envelope"))
            .map(|(_, n)| n)
            .sum();
        Self { buyers, leaving_stock, outside_contract, demand_met: false }
    }
}

impl Audit {
    pub async fn new(
        db: &MySqlPool,
        voucher: u64,
        before: &Snapshot,
        after: &Snapshot,
        successes: u64,
        unreplicated: u64,
        stock_added: i64,
    ) -> anyhow::Result<Self> {
        let duplicate_pairs: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ? GROUP BY user_id HAVING COUNT(*) > 1) d",
        )
        .bind(voucher)
        .bind(voucher)
        .fetch_one(db)
        .await?;
        Ok(Self::judge(voucher, before, after, duplicate_pairs, successes, unreplicated, stock_added))
    }

    /// The verdict from the numbers alone: every success has its row, and
    /// no row comes from nowhere (each 202 may or may not have one).
    fn judge(
        voucher: u64,
        before: &Snapshot,
        after: &Snapshot,
        duplicate_pairs: i64,
        successes: u64,
        unreplicated: u64,
        stock_added: i64,
    ) -> Self {
        // Stock the admin's route added (or took) mid-sale counts as if it
        // had been there from the start.
        let initial = before.stock + before.orders + stock_added;
        let oversold = (after.orders - initial).max(0);
        let balanced = after.stock + after.orders == initial;
        let new_orders = after.orders - before.orders;
        Self {
            voucher_id: voucher,
            initial_stock: initial,
            orders: after.orders,
            remaining_stock: after.stock,
            oversold,
            duplicate_pairs,
            stock_plus_orders_is_initial: balanced,
            new_orders,
            success_answers: successes,
            unreplicated_answers: unreplicated,
            redis: None,
            events: None,
            answers: None,
            buyers: 0,
            refusals_leaving_stock: 0,
            unsold_unexplained: false,
            answers_outside_contract: 0,
            passed: oversold == 0
                && duplicate_pairs == 0
                && balanced
                && after.stock >= 0
                && (successes as i64..=(successes + unreplicated) as i64).contains(&new_orders),
        }
    }

    /// Adds what the answers say of the stock left and of the contract:
    /// stock left to more buyers than units with nothing to explain it, or
    /// any answer outside the contract, fails the audit.
    pub fn with_refusals(mut self, refusals: Refusals) -> Self {
        self.buyers = refusals.buyers;
        self.refusals_leaving_stock = refusals.leaving_stock;
        self.answers_outside_contract = refusals.outside_contract;
        let left = u64::try_from(self.remaining_stock).unwrap_or(0);
        let initial = u64::try_from(self.initial_stock).unwrap_or(0);
        self.unsold_unexplained = !refusals.demand_met && refusals.buyers > initial && left > refusals.leaving_stock;
        self.passed &= !self.unsold_unexplained && refusals.outside_contract == 0;
        self
    }

    /// Adds the per-user check; an answer that lied fails the audit.
    pub fn with_answers(mut self, check: AnswerCheck) -> Self {
        self.passed &= check.success_without_row == 0 && check.rows_told_failed == 0;
        self.answers = Some(check);
        self
    }

    /// Adds the order events seen downstream; an order without its events,
    /// or with one twice or out of order, fails the audit.
    pub fn with_events(mut self, events: EventsAudit) -> Self {
        self.passed &= events.passed;
        self.events = Some(events);
        self
    }

    /// Adds the comparison with Redis; drift fails the audit.
    pub fn with_redis(mut self, report: Reconciliation) -> Self {
        self.passed &= report.agrees();
        self.redis = Some(report);
        self
    }

    pub fn render(&self) -> String {
        let answers = self
            .answers
            .as_ref()
            .map(|a| {
                format!(
                    "  success answers without their row {}\n  202 (unreplicated) answers without their row {}\n  rows whose user was not told success {}\n",
                    a.success_without_row, a.unreplicated_without_row, a.rows_told_failed
                )
            })
            .unwrap_or_default();
        let redis = self
            .redis
            .as_ref()
            .map(|r| format!("Redis against MariaDB, after the drain\n  {}", r.render()))
            .unwrap_or_default();
        let events = self.events.as_ref().map(EventsAudit::render).unwrap_or_default();
        format!(
            "Audit of voucher {} (from MariaDB)\n  initial stock          {}\n  orders                 {}\n  remaining stock        {}\n  oversold               {}\n  duplicate (user, voucher) pairs {}\n  stock + orders = initial  {}\n  orders created by this run {} / success answers {}\n  buyers {}, refusals that may leave stock {}{}\n  answers outside the contract (500, not the envelope) {}\n{}{}{}  result                 {}\n",
            self.voucher_id,
            self.initial_stock,
            self.orders,
            self.remaining_stock,
            self.oversold,
            self.duplicate_pairs,
            if self.stock_plus_orders_is_initial { "yes" } else { "NO" },
            self.new_orders,
            self.success_answers,
            self.buyers,
            self.refusals_leaving_stock,
            if self.unsold_unexplained { ": UNSOLD STOCK NOTHING EXPLAINS" } else { "" },
            self.answers_outside_contract,
            answers,
            redis,
            events,
            if self.passed { "PASS" } else { "FAIL" },
        )
    }
}

/// The sum of the stock changes written to `path` (absent: none).
pub(crate) fn read_stock_deltas(path: &std::path::Path) -> anyhow::Result<i64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse::<i64>().with_context(|| format!("{}: {l:?} is not a number", path.display())))
        .sum()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn verdict(stock_after: i64, orders_after: i64, duplicates: i64, successes: u64) -> Audit {
        let before = Snapshot { stock: 100, orders: 0 };
        let after = Snapshot { stock: stock_after, orders: orders_after };
        Audit::judge(1, &before, &after, duplicates, successes, 0, 0)
    }

    #[test]
    fn a_202_may_lose_its_row_but_a_200_may_not() {
        let users = [10, 11];
        let rows = HashMap::from([(10, 100)]);
        let answers = [(0, Outcome::Unreplicated, Some(100)), (1, Outcome::Unreplicated, Some(101))];
        let check = judge_answers(&users, &rows, &answers);
        assert_eq!((check.success_without_row, check.unreplicated_without_row, check.rows_told_failed), (0, 1, 0));
        let before = Snapshot { stock: 100, orders: 0 };
        let kept_one = Snapshot { stock: 99, orders: 1 };
        assert!(Audit::judge(1, &before, &kept_one, 0, 0, 2, 0).passed, "a lost 202 is allowed");
        assert!(!Audit::judge(1, &before, &kept_one, 0, 2, 0, 0).passed, "a lost 200 is not");
    }

    #[test]
    fn a_clean_sell_out_passes() {
        let audit = verdict(0, 100, 0, 100);
        assert!(audit.passed && audit.oversold == 0 && audit.stock_plus_orders_is_initial);
    }

    #[test]
    fn an_oversell_fails() {
        let audit = verdict(0, 101, 0, 101);
        assert_eq!(audit.oversold, 1);
        assert!(!audit.passed);
    }

    #[test]
    fn a_duplicate_pair_fails() {
        assert!(!verdict(0, 100, 1, 100).passed);
    }

    #[test]
    fn stock_that_vanished_without_an_order_fails() {
        let audit = verdict(0, 99, 0, 99);
        assert!(!audit.stock_plus_orders_is_initial && !audit.passed);
    }

    #[test]
    fn a_sale_whose_orders_lack_their_events_at_the_consumer_fails() {
        let rows = BTreeMap::from([(1_i64, 1_u8), (2, 1)]);
        let both = BTreeMap::from([(1_i64, vec!["created".to_owned()]), (2, vec!["created".to_owned()])]);
        let one = BTreeMap::from([(1_i64, vec!["created".to_owned()])]);
        assert!(verdict(0, 100, 0, 100).with_events(EventsAudit::judge(&[7], &rows, &both)).passed);
        assert!(!verdict(0, 100, 0, 100).with_events(EventsAudit::judge(&[7], &rows, &one)).passed);
    }

    fn refusals(buyers: u64, leaving_stock: u64, outside_contract: u64) -> Refusals {
        Refusals { buyers, leaving_stock, outside_contract, demand_met: false }
    }

    #[test]
    fn stock_left_to_more_buyers_than_units_fails_unless_refusals_explain_it() {
        // 200 buyers for 100 units, 50 sold, the rest told SOLD_OUT.
        let stalled = verdict(50, 50, 0, 50).with_refusals(refusals(200, 0, 0));
        assert!(stalled.unsold_unexplained && !stalled.passed);
        // The same, with 50 answers that leave a unit (429, 503).
        let explained = verdict(50, 50, 0, 50).with_refusals(refusals(200, 50, 0));
        assert!(!explained.unsold_unexplained && explained.passed);
        assert!(!verdict(50, 50, 0, 50).with_refusals(refusals(200, 49, 0)).passed, "one unit too many");
        // Fewer buyers than units: stock is left by design.
        assert!(verdict(50, 50, 0, 50).with_refusals(refusals(50, 0, 0)).passed);
    }

    #[test]
    fn an_answer_outside_the_contract_fails() {
        assert!(!verdict(0, 100, 0, 100).with_refusals(refusals(100, 1, 1)).passed);
    }

    #[test]
    fn a_success_answer_without_its_order_fails() {
        assert!(!verdict(1, 99, 0, 100).passed, "an answered order must exist in the table");
    }

    #[test]
    fn stock_added_mid_sale_counts_as_there_from_the_start() {
        let before = Snapshot { stock: 100, orders: 0 };
        let after = Snapshot { stock: 0, orders: 150 };
        let raised = Audit::judge(1, &before, &after, 0, 150, 0, 50);
        assert!(raised.passed && raised.oversold == 0, "{raised:?}");
        let unexplained = Audit::judge(1, &before, &after, 0, 150, 0, 0);
        assert!(!unexplained.passed && unexplained.oversold == 50, "{unexplained:?}");
        let lowered = Audit::judge(1, &before, &Snapshot { stock: 0, orders: 60 }, 0, 60, 0, -40);
        assert!(lowered.passed, "{lowered:?}");
    }

    #[test]
    fn stock_left_after_every_refused_buyer_came_back_and_bought_is_explained() {
        let before = Snapshot { stock: 100, orders: 0 };
        let after = Snapshot { stock: 30, orders: 70 };
        let refusals = |demand_met| Refusals { buyers: 300, leaving_stock: 0, outside_contract: 0, demand_met };
        let judged = |demand_met| Audit::judge(1, &before, &after, 0, 70, 0, 0).with_refusals(refusals(demand_met));
        assert!(!judged(false).passed, "30 units left to 300 buyers with nothing to explain it");
        assert!(judged(true).passed, "the second wave bought all it wanted: the 30 had no buyer");
    }
}
