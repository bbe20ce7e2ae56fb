//! What the database says after the run. The numbers are read, never
//! inferred from the HTTP answers, so the audit can catch the service lying.

mod answers;

use std::collections::BTreeMap;

use anyhow::Context;
use hmdp::seckill::Reconciliation;
use order_events::audit::EventsAudit;
use serde::Serialize;
use sqlx::MySqlPool;

#[cfg(test)]
pub use answers::Row;
pub(crate) use answers::judge_answers;
pub use answers::{AnswerCheck, Fate, Rows, check_answers, voucher_rows};

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
    /// The orders created are the ones the answers account for: exactly
    /// the 200s and the 202s kept once each answer is held to its buyer's
    /// row; until then (users of unknown id) between the 200s and the 200s
    /// and 202s together.
    pub orders_match_answers: bool,
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
    /// From the answers (user, outcome, order id) of the voucher's buyers
    /// and its unexpected ones by what they were.
    pub fn count(buyers: u64, answers: &[(usize, Outcome, Option<i64>)], others: &BTreeMap<String, u64>) -> Self {
        let leaving_stock = answers
            .iter()
            .filter(|(_, o, _)| matches!(o, Outcome::TooManyRequests | Outcome::Unavailable | Outcome::Other))
            .count() as u64;
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
        let duplicate_pairs = duplicate_pairs(db, voucher).await?;
        Ok(Self::judge(voucher, before, after, duplicate_pairs, successes, unreplicated, stock_added))
    }

    /// The verdict from the numbers alone: every success has its row, and
    /// no row comes from nowhere (each 202 may or may not have one, which
    /// only the answers, held to their rows, say: `with_answers`).
    pub(crate) fn judge(
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
        let mut audit = Self {
            voucher_id: voucher,
            initial_stock: initial,
            orders: after.orders,
            remaining_stock: after.stock,
            oversold,
            duplicate_pairs,
            stock_plus_orders_is_initial: balanced,
            new_orders,
            orders_match_answers: (successes as i64..=(successes + unreplicated) as i64).contains(&new_orders),
            success_answers: successes,
            unreplicated_answers: unreplicated,
            redis: None,
            events: None,
            answers: None,
            buyers: 0,
            refusals_leaving_stock: 0,
            unsold_unexplained: false,
            answers_outside_contract: 0,
            passed: false,
        };
        audit.settle_verdict();
        audit
    }

    /// `passed` from every check made so far.
    fn settle_verdict(&mut self) {
        self.passed = self.oversold == 0
            && self.duplicate_pairs == 0
            && self.stock_plus_orders_is_initial
            && self.remaining_stock >= 0
            && self.orders_match_answers
            && !self.unsold_unexplained
            && self.answers_outside_contract == 0
            && self.answers.as_ref().is_none_or(AnswerCheck::honest)
            && self.redis.as_ref().is_none_or(Reconciliation::agrees)
            && self.events.as_ref().is_none_or(|e| e.passed);
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
        self.settle_verdict();
        self
    }

    /// Adds the per-buyer check; an answer that lied fails the audit, and
    /// the orders created must be exactly those the answers kept.
    pub fn with_answers(mut self, check: AnswerCheck) -> Self {
        self.orders_match_answers = self.new_orders == check.expected_new_rows(false, false);
        self.answers = Some(check);
        self.settle_verdict();
        self
    }

    /// Adds the order events seen downstream; an order without its events,
    /// or with one twice or out of order, fails the audit.
    pub fn with_events(mut self, events: EventsAudit) -> Self {
        self.events = Some(events);
        self.settle_verdict();
        self
    }

    /// Adds the comparison with Redis; drift fails the audit.
    pub fn with_redis(mut self, report: Reconciliation) -> Self {
        self.redis = Some(report);
        self.settle_verdict();
        self
    }

    pub fn render(&self) -> String {
        let answers = self
            .answers
            .as_ref()
            .map(|a| {
                let lies: String = a.never_excused().iter().map(|lie| format!("  {lie}\n")).collect();
                format!(
                    "  success answers without their buyer's row {}\n  202 answers kept {} / without their row {}\n  rows whose user was not told success {}\n{lies}",
                    a.success_without_row, a.accepted_persisted, a.unreplicated_without_row, a.rows_told_failed
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
            "Audit of voucher {} (from MariaDB)\n  initial stock          {}\n  orders                 {}\n  remaining stock        {}\n  oversold               {}\n  duplicate (user, voucher) pairs {}\n  stock + orders = initial  {}\n  orders created by this run {} / success answers {}{}\n  buyers {}, refusals that may leave stock {}{}\n  answers outside the contract (500, not the envelope) {}\n{}{}{}  result                 {}\n",
            self.voucher_id,
            self.initial_stock,
            self.orders,
            self.remaining_stock,
            self.oversold,
            self.duplicate_pairs,
            if self.stock_plus_orders_is_initial { "yes" } else { "NO" },
            self.new_orders,
            self.success_answers,
            if self.orders_match_answers { "" } else { ": NOT WHAT THE ANSWERS KEPT" },
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

/// All vouchers' audits added up.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub vouchers: usize,
    pub vouchers_passed: usize,
    pub initial_stock: i64,
    pub orders: i64,
    pub remaining_stock: i64,
    pub oversold: i64,
    pub duplicate_pairs: i64,
    pub new_orders: i64,
    pub success_answers: u64,
    pub passed: bool,
}

impl Totals {
    pub fn of<'a>(audits: impl IntoIterator<Item = &'a Audit>) -> Self {
        let mut totals = Totals::default();
        for a in audits {
            totals.vouchers += 1;
            totals.vouchers_passed += usize::from(a.passed);
            totals.initial_stock += a.initial_stock;
            totals.orders += a.orders;
            totals.remaining_stock += a.remaining_stock;
            totals.oversold += a.oversold;
            totals.duplicate_pairs += a.duplicate_pairs;
            totals.new_orders += a.new_orders;
            totals.success_answers += a.success_answers;
        }
        totals.passed = totals.vouchers_passed == totals.vouchers;
        totals
    }

    pub fn render(&self) -> String {
        format!(
            "Audit of {} vouchers together (from MariaDB, each voucher audited alone)\n  initial stock          {}\n  orders                 {}\n  remaining stock        {}\n  oversold               {}\n  duplicate (user, voucher) pairs {}\n  orders created by this run {} / success answers {}\n  vouchers that passed   {} of {}\n  result                 {}\n",
            self.vouchers,
            self.initial_stock,
            self.orders,
            self.remaining_stock,
            self.oversold,
            self.duplicate_pairs,
            self.new_orders,
            self.success_answers,
            self.vouchers_passed,
            self.vouchers,
            if self.passed { "PASS" } else { "FAIL" },
        )
    }
}

/// Users holding two live orders of the voucher (the UNIQUE index makes it
/// impossible; the audit reads it all the same).
pub async fn duplicate_pairs(db: &MySqlPool, voucher: u64) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ? GROUP BY user_id HAVING COUNT(*) > 1) d",
    )
    .bind(voucher)
    .bind(voucher)
    .fetch_one(db)
    .await?)
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

/// A made-up sale of 100 units audited as the sale audits itself: the
/// buyer at place i has id 10 + i, `rows` are the orders afterwards (user
/// id, order id) and the voucher had none before.
#[cfg(test)]
pub(crate) fn audited_sale(answers: &[(usize, Outcome, Option<i64>)], rows: &[(u64, i64)]) -> Audit {
    use std::collections::HashMap;
    let users: Vec<u64> = (10..10 + answers.iter().map(|a| a.0 as u64 + 1).max().unwrap_or(0)).collect();
    let rows: Rows = rows.iter().map(|&(user_id, id)| (id, Row { user_id, live: true })).collect();
    let check = judge_answers(&users, &rows, answers, &HashMap::new());
    let count = |o: Outcome| answers.iter().filter(|a| a.1 == o).count() as u64;
    let orders = rows.len() as i64;
    let (before, after) = (Snapshot::new(100, 0), Snapshot::new(100 - orders, orders));
    Audit::judge(1, &before, &after, 0, count(Outcome::Success), count(Outcome::Unreplicated), 0).with_answers(check)
}

#[cfg(test)]
mod tests;
