//! The verdict on a chaos run, strict as the table has always been.

use std::{collections::BTreeMap, io::Write, path::Path};

use anyhow::Context;

use super::{injection::Injection, probe::RECOVERY};
use crate::{aftersale::AfterSaleReport, audit::Audit};

/// One run as the verdict sees it.
pub struct Run<'a> {
    pub mode: &'a str,
    pub fault: &'a str,
    pub fault_at: f64,
    pub wall_secs: f64,
    /// Outcomes by label, in the report's order.
    pub outcomes: Vec<(String, u64)>,
    /// Answers outside the expected outcomes, by status.
    pub others: &'a BTreeMap<String, u64>,
    /// Clients retried with an `Idempotency-Key` (and how many retries).
    pub retries: Option<usize>,
    pub after_sale: Option<&'a AfterSaleReport>,
    /// Each voucher's audit (a sale of several vouchers has one each).
    pub audits: &'a [Audit],
    /// The load tool's own checks (the audit, the after-sale scenario).
    pub load_passed: bool,
    pub injection: &'a Injection,
    pub orders_again: &'a Result<(), String>,
    pub locks_lost: u64,
    /// Success answers given while the fault lasted (a voucher in segments
    /// sells on the masters a master kill spared).
    pub during_fault: u64,
}

impl Run<'_> {
    /// Everything the run did wrong; empty when it passes.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        self.fault_problems(&mut problems);
        let several = self.audits.len() > 1;
        let mut told = 0;
        for a in self.audits {
            let mut mine = Vec::new();
            told += self.ledger_problems(a, &mut mine);
            self.redis_problems(a, &mut mine);
            problems.extend(mine.into_iter().map(|p| match several {
                true => format!("voucher {}: {p}", a.voucher_id),
                false => p,
            }));
        }
        self.answer_problems(told, &mut problems);
        problems
    }

    /// Clients that retry with a key are owed an answer even from a killed
    /// instance (app2, the one relaying order events, or app1 with its
    /// host lost); without them a killed instance's answers may be lost.
    fn killed(&self) -> bool {
        (matches!(self.fault, "instance-kill" | "events-holder-kill" | "events-relay-kill")
            || self.fault.starts_with("lost-app-host"))
            && self.retries.is_none()
    }

    /// Rows whose buyer's answer settled nothing (a 503 sent while the
    /// order's call was still held in a cut link, or in a link to a lost
    /// master's host, which answers nothing until its replica is promoted)
    /// are counted, each as itself, under a cut as long as the ids'
    /// master's and a master's host lost: the answers are not lies of 200,
    /// and each buyer's order list shows the order. So with the MariaDB
    /// primary's host lost: a commit its standby acknowledged is kept and
    /// promoted with it, while its answer died with the connection.
    fn untold_counted(&self) -> bool {
        self.killed()
            || self.fault == "cut-redis-master-long"
            || self.fault.starts_with("lost-redis-master-host")
            || self.fault.starts_with("lost-db-primary-host")
    }

    /// Without the replica wait, a master's death may take accepted
    /// orders: that loss is measured, not failed.
    fn nowait(&self) -> bool {
        self.fault.ends_with("-nowait")
    }

    /// The fault happened mid-sale, the service recovered, and it sells
    /// again afterwards.
    fn fault_problems(&self, problems: &mut Vec<String>) {
        if !self.injection.happened {
            problems.push(format!("the fault did not happen: {}", self.injection.evidence));
        }
        match self.after_sale {
            Some(after) => {
                if after.returned != after.expected_returned {
                    let (returned, expected) = (after.returned, after.expected_returned);
                    problems.push(format!("{returned} units returned for {expected} expired orders"));
                }
                if after.second_wave_successes != after.returned.min(after.second_wave_users) {
                    let (bought, returned) = (after.second_wave_successes, after.returned);
                    problems.push(format!("the second wave bought {bought} of {returned} returned units"));
                }
            }
            None if self.wall_secs <= self.fault_at => {
                problems.push(format!("the sale ({:.2} s) ended before the fault", self.wall_secs));
            }
            None => {}
        }
        if !self.injection.recovered {
            problems.push(format!("not serving within {} s of the fault", RECOVERY.as_secs()));
        }
        if let Err(why) = self.orders_again {
            problems.push(format!("a fresh order did not succeed after the fault: {why}"));
        }
    }

    /// The rows against the answers: no oversell, no duplicate, every
    /// success its buyer's row, every row told, and the orders created
    /// exactly those the answers kept (a killed instance's untold rows and
    /// a `-nowait` fault's lost 200s counted, each as itself). Returns the
    /// successes without their row.
    fn ledger_problems(&self, a: &Audit, problems: &mut Vec<String>) -> u64 {
        let (untold_counted, nowait) = (self.untold_counted(), self.nowait());
        if a.oversold != 0 || a.duplicate_pairs != 0 {
            problems.push(format!("oversold {}, duplicate pairs {}", a.oversold, a.duplicate_pairs));
        }
        if !a.stock_plus_orders_is_initial || a.remaining_stock < 0 {
            problems.push(format!(
                "stock + orders != initial (stock {}, orders {}, initial {})",
                a.remaining_stock, a.orders, a.initial_stock
            ));
        }
        let Some(check) = &a.answers else {
            problems.push("the answers were not checked against the rows".into());
            return 0;
        };
        let (told, untold) = (check.success_without_row, check.rows_told_failed);
        if told > 0 && !nowait {
            problems.push(format!("{told} success answers without their row"));
        }
        if untold > 0 && !untold_counted {
            problems.push(format!("{untold} rows whose user was not told success"));
        }
        problems.extend(check.never_excused());
        let expected = check.expected_new_rows(nowait, untold_counted);
        if a.new_orders != expected {
            problems.push(format!(
                "{} new orders for {} orders answered 200 and {} answered 202 and kept ({expected} expected; {} rows told only by DUPLICATE_ORDER)",
                a.new_orders, check.success_orders, check.accepted_persisted, check.told_only_by_duplicate
            ));
        }
        if a.unsold_unexplained {
            problems.push(format!(
                "{} units unsold to {} buyers with {} refusals to explain it",
                a.remaining_stock, a.buyers, a.refusals_leaving_stock
            ));
        }
        told
    }

    /// The asynchronous mode's Redis agrees with MariaDB once drained.
    fn redis_problems(&self, a: &Audit, problems: &mut Vec<String>) {
        if self.mode != "async" {
            return;
        }
        match &a.redis {
            None => problems.push("Redis was not compared with MariaDB".into()),
            Some(r)
                if !(r.pending_orders == 0
                    && r.unacknowledged == 0
                    && r.redis_stock == Some(r.db_stock)
                    && r.redis_buyers == Some(r.db_buyers)
                    && r.only_in_db.is_empty()
                    && r.only_in_redis.is_empty()) =>
            {
                problems.push(format!("Redis != MariaDB after the drain: {r:?}"));
            }
            Some(_) => {}
        }
    }

    /// Every answer in the contract, and the load tool's own checks passed
    /// (a killed instance fails them by design, and so does a -nowait loss
    /// the rows show: `told`, successes without their row).
    fn answer_problems(&self, told: u64, problems: &mut Vec<String>) {
        let killed = self.killed();
        let broken: Vec<&String> = self.others.keys().filter(|k| !(killed && k.starts_with("HTTP 502"))).collect();
        if broken.iter().any(|k| k.starts_with("HTTP 500") || k.contains("not an envelope")) {
            problems.push(format!("answers outside the contract: {broken:?}"));
        }
        let excused = self.untold_counted() || (self.nowait() && told > 0);
        if !self.load_passed && !excused {
            problems.push("the load tool's audit failed".into());
        }
    }

    /// The run's row of the chaos table (a sale of several vouchers: their
    /// sums).
    pub fn row(&self) -> String {
        let sum = |of: fn(&Audit) -> i64| self.audits.iter().map(of).sum::<i64>();
        let mut outcomes: Vec<String> =
            self.outcomes.iter().filter(|(_, n)| *n > 0).map(|(label, n)| format!("{label} {n}")).collect();
        if !self.others.is_empty() {
            let others: Vec<String> = self.others.iter().map(|(k, v)| format!("{k} {v}")).collect();
            outcomes.push(format!("(other: {})", others.join(", ")));
        }
        let mut outcomes = outcomes.join(", ");
        let lasted = self.injection.ended.saturating_duration_since(self.injection.started).as_secs_f64();
        outcomes += &format!("; {} sold in the {lasted:.2} s the fault lasted", self.during_fault);
        if let Some(after) = self.after_sale {
            outcomes += &format!(
                "; after the sale: {} paid, {} of {} returned (deadline to cancel max {} s), second wave {}",
                after.paid,
                after.returned,
                after.expected_returned,
                after.lag_max_secs.map_or("?".into(), |s| format!("{s}")),
                after.second_wave_successes
            );
        }
        let mode = match self.retries {
            Some(n) => format!("{} (clients retry, {n} retries)", self.mode),
            None => self.mode.to_owned(),
        };
        let checks: Option<Vec<&crate::audit::AnswerCheck>> = self.audits.iter().map(|a| a.answers.as_ref()).collect();
        let (told, untold, unrep_lost) = checks.map_or(("?".into(), "?".into(), 0), |c| {
            let total = |of: fn(&crate::audit::AnswerCheck) -> u64| c.iter().map(|c| of(c)).sum::<u64>();
            (
                total(|c| c.success_without_row).to_string(),
                total(|c| c.rows_told_failed).to_string(),
                total(|c| c.unreplicated_without_row),
            )
        });
        let yes = |ok: bool| if ok { "yes" } else { "no" };
        format!(
            "| {mode} | {} | {:.2} s | {outcomes} | {} | {} | {told} | {} / {unrep_lost} | {untold} | {} | {} | {}, {} |",
            self.fault,
            self.wall_secs,
            sum(|a| a.oversold),
            sum(|a| a.duplicate_pairs),
            sum(|a| a.unreplicated_answers as i64),
            sum(|a| a.remaining_stock),
            self.locks_lost,
            yes(self.injection.recovered),
            yes(self.orders_again.is_ok()),
        )
    }

    /// Prints the row, appends it to the table and the problems to their
    /// file; returns the problems.
    pub fn report(&self, table: Option<&Path>, problems_file: Option<&Path>) -> anyhow::Result<Vec<String>> {
        let (row, problems) = (self.row(), self.problems());
        println!("{row}");
        if let Some(path) = table {
            append(path, &format!("{row}\n"))?;
        }
        if !problems.is_empty() {
            eprintln!("chaos run {} {}: {}", self.mode, self.fault, problems.join("; "));
            if let Some(path) = problems_file {
                append(path, &format!("{} {}: {}\n", self.mode, self.fault, problems.join("; ")))?;
            }
        }
        Ok(problems)
    }
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests;
