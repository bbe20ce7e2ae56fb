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
    pub audit: &'a Audit,
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
        let told = self.ledger_problems(&mut problems);
        self.redis_problems(&mut problems);
        self.answer_problems(told, &mut problems);
        problems
    }

    /// Clients that retry with a key are owed an answer even from a killed
    /// instance (app2, or the one relaying order events); without them a
    /// killed instance's orders may be lost.
    fn killed(&self) -> bool {
        matches!(self.fault, "instance-kill" | "events-holder-kill" | "events-relay-kill") && self.retries.is_none()
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
    fn ledger_problems(&self, problems: &mut Vec<String>) -> u64 {
        let (a, killed, nowait) = (self.audit, self.killed(), self.nowait());
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
        if untold > 0 && !killed {
            problems.push(format!("{untold} rows whose user was not told success"));
        }
        problems.extend(check.never_excused());
        let expected = check.expected_new_rows(nowait, killed);
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
    fn redis_problems(&self, problems: &mut Vec<String>) {
        if self.mode != "async" {
            return;
        }
        match &self.audit.redis {
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
        let excused = killed || (self.nowait() && told > 0);
        if !self.load_passed && !excused {
            problems.push("the load tool's audit failed".into());
        }
    }

    /// The run's row of the chaos table.
    pub fn row(&self) -> String {
        let a = self.audit;
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
        let (told, untold, unrep_lost) = a.answers.as_ref().map_or(("?".into(), "?".into(), 0), |c| {
            (c.success_without_row.to_string(), c.rows_told_failed.to_string(), c.unreplicated_without_row)
        });
        let yes = |ok: bool| if ok { "yes" } else { "no" };
        format!(
            "| {mode} | {} | {:.2} s | {outcomes} | {} | {} | {told} | {} / {unrep_lost} | {untold} | {} | {} | {}, {} |",
            self.fault,
            self.wall_secs,
            a.oversold,
            a.duplicate_pairs,
            a.unreplicated_answers,
            a.remaining_stock,
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
mod tests {
    use std::{collections::BTreeMap, time::Instant};

    use super::{Injection, Run};
    use crate::audit::{AnswerCheck, Audit};
    use crate::chaos::probe::sample;

    fn clean_audit() -> Audit {
        Audit {
            voucher_id: 7,
            initial_stock: 4_000,
            orders: 4_000,
            remaining_stock: 0,
            oversold: 0,
            duplicate_pairs: 0,
            stock_plus_orders_is_initial: true,
            new_orders: 4_000,
            orders_match_answers: true,
            success_answers: 4_000,
            unreplicated_answers: 0,
            redis: None,
            events: None,
            answers: Some(AnswerCheck { success_orders: 4_000, ..AnswerCheck::default() }),
            buyers: 6_000,
            refusals_leaving_stock: 0,
            unsold_unexplained: false,
            answers_outside_contract: 0,
            passed: true,
        }
    }

    fn happened() -> Injection {
        let now = Instant::now();
        Injection {
            happened: true,
            evidence: "12 connections killed".into(),
            recovered: true,
            started: now,
            ended: now,
        }
    }

    fn verdict(audit: &Audit, injection: &Injection, wall_secs: f64) -> Vec<String> {
        let others = BTreeMap::new();
        let again = Ok(());
        Run {
            mode: "sync",
            fault: "db-kill",
            fault_at: 0.5,
            wall_secs,
            outcomes: vec![("SUCCESS".into(), 4_000), ("SOLD_OUT".into(), 2_000)],
            others: &others,
            retries: None,
            after_sale: None,
            audit,
            load_passed: audit.passed,
            injection,
            orders_again: &again,
            locks_lost: 0,
            during_fault: 0,
        }
        .problems()
    }

    #[test]
    fn a_clean_sale_under_a_fault_that_happened_passes() {
        assert_eq!(verdict(&clean_audit(), &happened(), 2.4), Vec::<String>::new());
    }

    #[test]
    fn an_undersold_sale_fails() {
        let mut audit = clean_audit();
        // 300 units left while buyers were told SOLD_OUT, with nothing that
        // explains it (the audit's own finding).
        audit.remaining_stock = 300;
        audit.orders = 3_700;
        audit.new_orders = 3_700;
        audit.success_answers = 3_700;
        audit.answers = Some(AnswerCheck { success_orders: 3_700, ..AnswerCheck::default() });
        audit.unsold_unexplained = true;
        audit.passed = false;
        let problems = verdict(&audit, &happened(), 2.4);
        assert!(problems.iter().any(|p| p.contains("300 units unsold")), "{problems:?}");
    }

    #[test]
    fn a_fault_that_did_nothing_fails_even_when_the_sale_was_clean() {
        let nothing =
            Injection { happened: false, evidence: "no connection of database hmdp was killed".into(), ..happened() };
        let problems = verdict(&clean_audit(), &nothing, 2.4);
        assert_eq!(problems, ["the fault did not happen: no connection of database hmdp was killed"]);
    }

    #[test]
    fn a_sale_over_before_its_fault_proves_nothing() {
        let problems = verdict(&clean_audit(), &happened(), 0.4);
        assert!(problems.iter().any(|p| p.contains("ended before the fault")), "{problems:?}");
    }

    #[test]
    fn a_success_without_its_row_fails_and_an_instance_kill_may_lose_only_answers() {
        let mut audit = clean_audit();
        audit.answers = Some(AnswerCheck { success_orders: 4_000, success_without_row: 2, ..AnswerCheck::default() });
        audit.new_orders = 3_998;
        let problems = verdict(&audit, &happened(), 2.4);
        assert!(problems.iter().any(|p| p.contains("2 success answers without their row")), "{problems:?}");

        // SIGKILL takes the answers of the process along: rows whose user
        // was not told success are that, and nothing else may go.
        let mut audit = clean_audit();
        audit.answers = Some(AnswerCheck {
            success_orders: 3_995,
            rows_told_failed: 5,
            untold_live_rows: 5,
            ..AnswerCheck::default()
        });
        audit.success_answers = 3_995;
        audit.passed = false;
        let (others, again) = (BTreeMap::from([("HTTP 502 not an envelope".to_owned(), 5)]), Ok(()));
        let run = Run {
            mode: "sync",
            fault: "instance-kill",
            fault_at: 0.5,
            wall_secs: 2.4,
            outcomes: vec![],
            others: &others,
            retries: None,
            after_sale: None,
            audit: &audit,
            load_passed: false,
            injection: &happened(),
            orders_again: &again,
            locks_lost: 3,
            during_fault: 0,
        };
        assert_eq!(run.problems(), Vec::<String>::new());
        assert!(run.row().starts_with("| sync | instance-kill | 2.40 s |"), "{}", run.row());
        assert!(run.row().contains("; 0 sold in the 0.00 s the fault lasted"), "{}", run.row());
    }

    #[test]
    fn a_lock_metric_is_read_by_its_labels() {
        let text = "# TYPE hmdp_lock_events_total counter\n\
                    hmdp_lock_events_total{event=\"acquired\"} 120\n\
                    hmdp_lock_events_total{event=\"lost\"} 3\n\
                    hmdp_lock_events_total_other 9\n";
        assert_eq!(sample(text, "hmdp_lock_events_total", &[("event", "lost")]), Some(3.0));
        assert_eq!(sample(text, "hmdp_lock_events_total", &[("event", "renewed")]), None);
    }

    #[test]
    fn a_chaos_run_whose_200_names_another_buyers_order_fails() {
        use crate::report::Outcome;
        // Buyer 0 was told 200 with order 500, which is buyer 1's row.
        let answers = [(0, Outcome::Success, Some(500)), (1, Outcome::Duplicate, Some(500))];
        let audit = crate::audit::audited_sale(&answers, &[(11, 500)]);
        let problems = verdict(&audit, &happened(), 2.4);
        assert!(!problems.is_empty(), "{audit:?}");
    }
}
