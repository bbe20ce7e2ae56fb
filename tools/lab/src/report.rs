//! The lab's report: a markdown table per part, JSON, and the list of
//! results that contradict what a strategy is known to do.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use serde::Serialize;

use super::{
    drive::{Audit, Driven, percentile_ms},
    experiment::{Experiment, Scale},
    locks::LockRun,
};

/// Refusals that leave stock behind by design: a lost version race, a
/// segment lock not had in time.
const REFUSED_WITH_STOCK_LEFT: [&str; 2] = ["VERSION_CONFLICT", "LOCK_TIMEOUT"];

/// Buyers beyond the stock that guarantee a sell-out: a buyer always goes to
/// the same segment (by id), and with this many more buyers than units
/// (the most segments the lab splits into) every segment has more buyers
/// than units.
const SELL_OUT_MARGIN: i64 = 64;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StrategyRun {
    pub strategy: Experiment,
    pub name: &'static str,
    pub voucher_id: u64,
    pub buyers: u64,
    pub wall_ms: u64,
    pub orders_per_sec: f64,
    pub successes: u64,
    pub refusals: BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub audit: Audit,
    pub notes: Vec<String>,
}

impl StrategyRun {
    pub(super) fn new(
        strategy: Experiment,
        voucher_id: u64,
        driven: &Driven,
        audit: Audit,
        wall: Duration,
        notes: Vec<String>,
    ) -> Self {
        let successes = driven.successes.len() as u64;
        Self {
            strategy,
            name: strategy.name(),
            voucher_id,
            buyers: driven.buyers,
            wall_ms: wall.as_millis() as u64,
            orders_per_sec: successes as f64 / wall.as_secs_f64().max(1e-9),
            successes,
            refusals: driven.refusals.clone(),
            p50_ms: percentile_ms(&driven.latencies_us, 0.50),
            p99_ms: percentile_ms(&driven.latencies_us, 0.99),
            audit,
            notes,
        }
    }

    /// Why this run contradicts what its strategy is known to do, if it does.
    pub fn unexpected(&self) -> Option<String> {
        let audit = &self.audit;
        if self.refusals.contains_key("ERROR") || self.refusals.contains_key("INTERNAL") {
            return Some(format!("{}: orders failed with errors: {:?}", self.name, self.refusals));
        }
        match self.strategy {
            Experiment::Naive if audit.oversold == 0 || audit.duplicates == 0 => Some(format!(
                "{}: the race did not show (oversold {}, duplicates {})",
                self.name, audit.oversold, audit.duplicates
            )),
            Experiment::Naive => None,
            _ if !audit.clean() => Some(format!("{}: audit failed: {audit:?}", self.name)),
            Experiment::VersionCas if audit.stock_left == 0 => {
                Some(format!("{}: no buyer lost a version race, so the pitfall did not show", self.name))
            }
            // A clean audit also passes a strategy that sold nothing (say,
            // every buyer answered DUPLICATE_ORDER from stale Redis state):
            // with more buyers than units, each unit left behind needs a
            // refusal that leaves one by design.
            _ if audit.stock_left > 0
                && i64::try_from(self.buyers).unwrap_or(i64::MAX)
                    >= audit.initial_stock.saturating_add(SELL_OUT_MARGIN)
                && u64::try_from(audit.stock_left).unwrap_or(0) > self.refused_with_stock_left() =>
            {
                Some(format!(
                    "{}: {} of {} units left unsold though {} buyers came, and no refusal explains it: {:?}",
                    self.name, audit.stock_left, audit.initial_stock, self.buyers, self.refusals
                ))
            }
            _ => None,
        }
    }

    /// Refusals that leave a unit unsold by design (a lost version race, a
    /// segment lock not had in time).
    fn refused_with_stock_left(&self) -> u64 {
        REFUSED_WITH_STOCK_LEFT.iter().filter_map(|why| self.refusals.get(*why)).sum()
    }

    pub fn one_line(&self) -> String {
        format!(
            "{:<30} {:>8.2} s {:>8.0} orders/s  ok {:>6}  oversold {:>5}  duplicates {:>5}  {}",
            self.name,
            self.wall_ms as f64 / 1e3,
            self.orders_per_sec,
            self.successes,
            self.audit.oversold,
            self.audit.duplicates,
            if self.unexpected().is_none() { "as expected" } else { "UNEXPECTED" }
        )
    }

    fn refusals_text(&self) -> String {
        if self.refusals.is_empty() {
            return "-".into();
        }
        self.refusals.iter().map(|(why, n)| format!("{why} {n}")).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabReport {
    pub scale: Scale,
    pub strategies: Vec<StrategyRun>,
    pub locks: Vec<LockRun>,
}

impl LabReport {
    /// Every result that contradicts what its strategy or scenario is known
    /// to do; the lab exits non-zero when there is one.
    pub fn unexpected(&self) -> Vec<String> {
        let mut out: Vec<String> = self.strategies.iter().filter_map(StrategyRun::unexpected).collect();
        for run in self.locks.iter().filter(|r| !r.as_expected()) {
            let wanted = run.scenario.expected_failure().unwrap_or("no violation at all");
            out.push(format!("{}: expected {wanted}, got {run:?}", run.name));
        }
        out
    }

    pub fn markdown(&self) -> String {
        let s = &self.scale;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} buyers ({} % double-click, {} requests), stock {}, {} in flight, {} database connections\n",
            s.users, s.double_click_percent, s.requests, s.stock, s.concurrency, s.db_connections
        );
        if !self.strategies.is_empty() {
            out.push_str("| strategy | wall s | orders/s | successes | oversold | duplicates | stock left | refused (reason count) | p50 ms | p99 ms | audit | notes |\n");
            out.push_str("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|\n");
            for r in &self.strategies {
                let verdict = match (r.audit.clean(), r.unexpected().is_none()) {
                    (true, true) => "clean",
                    (false, true) => "broken, as expected",
                    (_, false) => "UNEXPECTED",
                };
                let _ = writeln!(
                    out,
                    "| {} | {:.2} | {:.0} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {} |",
                    r.name,
                    r.wall_ms as f64 / 1e3,
                    r.orders_per_sec,
                    r.successes,
                    r.audit.oversold,
                    r.audit.duplicates,
                    r.audit.stock_left,
                    r.refusals_text(),
                    r.p50_ms,
                    r.p99_ms,
                    verdict,
                    r.notes.join("; ")
                );
            }
        }
        if !self.locks.is_empty() {
            out.push_str("\n| lock scenario | tasks | acquisitions | two inside at once | deleted another's lock | lease lost | deadlocked waiters | wall s | verdict |\n");
            out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
            for r in &self.locks {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
                    r.name,
                    r.tasks,
                    r.acquisitions,
                    r.overlaps,
                    r.foreign_deletes,
                    r.lost_leases,
                    r.deadlocked,
                    r.wall_ms as f64 / 1e3,
                    match (r.as_expected(), r.scenario.expected_failure()) {
                        (true, Some(_)) => "broken, as expected",
                        (true, None) => "clean",
                        (false, _) => "UNEXPECTED",
                    }
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: Experiment, buyers: u64, stock: i64, sold: &[u64], refusals: &[(&str, u64)]) -> StrategyRun {
        let driven = Driven {
            wall: Duration::from_millis(100),
            buyers,
            successes: sold.to_vec(),
            refusals: refusals.iter().map(|(why, n)| (why.to_string(), *n)).collect(),
            latencies_us: vec![1_000; sold.len()],
        };
        let audit = Audit::of(stock, stock - sold.len() as i64, sold, sold);
        StrategyRun::new(strategy, 1, &driven, audit, driven.wall, Vec::new())
    }

    #[test]
    fn a_correct_strategy_that_sold_nothing_to_a_crowd_is_flagged() {
        let stale = run(Experiment::RedisLuaStream, 2_000, 500, &[], &[("DUPLICATE_ORDER", 2_200)]);
        let why = stale.unexpected().expect("selling nothing to 2,000 buyers must be flagged");
        assert!(why.contains("500 of 500 units left unsold"), "{why}");
    }

    #[test]
    fn stock_left_after_a_refusal_that_leaves_it_is_as_expected() {
        let sold: Vec<u64> = (0..400).collect();
        let cas = run(Experiment::VersionCas, 2_000, 500, &sold, &[("VERSION_CONFLICT", 1_600)]);
        assert_eq!(cas.unexpected(), None);
        let almost: Vec<u64> = (0..497).collect();
        let segmented = run(Experiment::Segmented, 2_000, 500, &almost, &[("LOCK_TIMEOUT", 3), ("SOLD_OUT", 1_500)]);
        assert_eq!(segmented.unexpected(), None);
    }

    #[test]
    fn one_refusal_that_leaves_stock_does_not_excuse_a_hundred_units_left() {
        let sold: Vec<u64> = (0..400).collect();
        let cas = run(Experiment::VersionCas, 2_000, 500, &sold, &[("VERSION_CONFLICT", 1), ("SOLD_OUT", 1_599)]);
        let why = cas.unexpected().expect("100 units left, one conflict to explain them");
        assert!(why.contains("100 of 500 units left unsold"), "{why}");
    }

    #[test]
    fn stock_left_when_buyers_were_too_few_to_empty_it_is_as_expected() {
        let sold: Vec<u64> = (0..480).collect();
        assert_eq!(run(Experiment::StockGuardLock, 480, 500, &sold, &[]).unexpected(), None);
    }

    #[test]
    fn a_sold_out_correct_strategy_is_as_expected() {
        let sold: Vec<u64> = (0..500).collect();
        assert_eq!(run(Experiment::GroupCommit, 2_000, 500, &sold, &[("SOLD_OUT", 1_500)]).unexpected(), None);
    }
}
