//! The lab's report: a markdown table per part, JSON, and the list of
//! results that contradict what a strategy is known to do.

use std::{collections::BTreeMap, fmt::Write as _, time::Duration};

use serde::Serialize;

use super::{
    Experiment, LockRun, Scale,
    drive::{Audit, Driven, percentile_ms},
};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StrategyRun {
    pub strategy: Experiment,
    pub name: &'static str,
    pub voucher_id: u64,
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
            _ => None,
        }
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
