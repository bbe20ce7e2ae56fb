//! `seckill-load check-history`: the history held to the tables.

use std::{collections::HashMap, path::PathBuf};

use serde::Serialize;
use sqlx::MySqlPool;

use super::file::{Entry, read};
use crate::{audit, fate, report::Outcome};

#[derive(clap::Parser)]
#[command(name = "seckill-load check-history", about = "Read a sale's history (--history) against the tables")]
pub struct CheckArgs {
    #[arg(long)]
    history: PathBuf,
    /// When the fault was healed (Unix ms): the checker says how long the
    /// service took to answer normally again after it.
    #[arg(long)]
    healed_at_ms: Option<u64>,
    /// Stock changed mid-sale through the admin's route (the sale's
    /// `--stock-delta-file`): counted as there from the start.
    #[arg(long)]
    stock_delta_file: Option<PathBuf>,
    /// A fault that kills an instance takes its answers with it: rows
    /// whose user was never told are counted, not failed.
    #[arg(long)]
    untold_allowed: bool,
    /// The service ran with the replica wait off (`ORDER_REPLICA_ACKS=0`)
    /// through a master's failover: its 200s were never on a replica, and
    /// those a demoted master took along are counted, not failed.
    #[arg(long)]
    replica_wait_off: bool,
    /// Fail when the sale went longer than this without selling (between
    /// two successes): a fault that cuts one instance off must leave the
    /// other selling.
    #[arg(long)]
    max_stall_ms: Option<u64>,
    /// Where the orders answered 202 are looked up, each with its buyer's
    /// token from `--tokens` (the sale's): each must end `CONFIRMED` or
    /// `FAILED`, none vanished.
    #[arg(long, requires = "tokens")]
    base_url: Option<String>,
    #[arg(long, requires = "base_url")]
    tokens: Option<PathBuf>,
    /// The asynchronous mode's Redis, read against MariaDB once drained
    /// (`hmdp reconcile`): stock, buyers, nothing pending.
    #[arg(long)]
    reconcile: bool,
    #[command(flatten)]
    db: hmdp::config::DatabaseUrl,
    #[command(flatten)]
    redis: hmdp::config::RedisSettings,
}

/// What the history and the tables say together.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Findings {
    pub requests: usize,
    /// Each answer against its user's row (None when a user's id is
    /// unknown): 200s and 202s without their row, rows never told.
    pub answers: Option<audit::AnswerCheck>,
    pub accepted: u64,
    /// Answers that settled nothing, and how many of those users hold an
    /// order all the same.
    pub unsettled: u64,
    pub unsettled_with_order: u64,
    /// From the heal to the last answer that settled nothing or was a 503.
    pub abnormal_after_heal_ms: Option<u64>,
    /// The longest the sale went without selling: between two successes,
    /// by the time each was answered.
    pub longest_stall_ms: u64,
}

/// Each entry against the rows (user id -> the order that user holds).
pub fn find(entries: &[Entry], rows: &HashMap<u64, i64>, healed_at_ms: Option<u64>) -> Findings {
    let mut findings = Findings {
        requests: entries.len(),
        answers: None,
        accepted: entries.iter().filter(|e| e.outcome == Outcome::Unreplicated).count() as u64,
        unsettled: 0,
        unsettled_with_order: 0,
        abnormal_after_heal_ms: None,
        longest_stall_ms: longest_stall_ms(entries),
    };
    for e in entries {
        if e.settled_nothing() {
            findings.unsettled += 1;
            findings.unsettled_with_order += u64::from(e.user_id.is_some_and(|u| rows.contains_key(&u)));
        }
        if let Some(healed) = healed_at_ms
            && e.sent_ms >= healed
            && (e.settled_nothing() || e.outcome == Outcome::Unavailable)
        {
            let after = e.answered_ms.saturating_sub(healed);
            findings.abnormal_after_heal_ms = Some(findings.abnormal_after_heal_ms.unwrap_or(0).max(after));
        }
    }
    // The audit's own judgment, on the users as the history names them.
    let mut user_ids = vec![None; entries.iter().map(|e| e.user + 1).max().unwrap_or(0)];
    for e in entries {
        user_ids[e.user] = e.user_id;
    }
    if let Some(user_ids) = user_ids.into_iter().collect::<Option<Vec<u64>>>() {
        let answers: Vec<(usize, Outcome, Option<i64>)> =
            entries.iter().map(|e| (e.user, e.outcome, e.order_id)).collect();
        findings.answers = Some(audit::judge_answers(&user_ids, rows, &answers));
    }
    findings
}

fn longest_stall_ms(entries: &[Entry]) -> u64 {
    let mut sold: Vec<u64> = entries
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Success | Outcome::Unreplicated))
        .map(|e| e.answered_ms)
        .collect();
    sold.sort_unstable();
    sold.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or(0)
}

/// `seckill-load check-history`: exits non-zero when a 200 has no row, a
/// row was never told, the ledger does not add up, or there was nothing
/// to check.
pub async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let (sale, entries) = read(&args.history)?;
    anyhow::ensure!(!entries.is_empty(), "the history holds no request: there is nothing to check");
    let db = hmdp::startup::connect_database(args.db.as_str(), 2).await?;
    let rows = live_rows(&db, sale.voucher_id).await?;
    let findings = find(&entries, &rows, args.healed_at_ms);
    let count = |o: Outcome| entries.iter().filter(|e| e.outcome == o).count() as u64;
    let stock_added = match &args.stock_delta_file {
        Some(path) => audit::read_stock_deltas(path)?,
        None => 0,
    };
    let before = audit::Snapshot::new(sale.stock_before, sale.orders_before);
    let after = audit::Snapshot::read(&db, sale.voucher_id).await?;
    let ledger = audit::Audit::new(
        &db,
        sale.voucher_id,
        &before,
        &after,
        count(Outcome::Success),
        count(Outcome::Unreplicated),
        stock_added,
    )
    .await?;
    let (fates, resolutions) = match (&args.base_url, &args.tokens) {
        (Some(base_url), Some(tokens)) => (
            Some(fate::ask(base_url, tokens, &asked(&entries, |e| e.outcome == Outcome::Unreplicated)).await?),
            Some(
                fate::resolve(base_url, tokens, &asked(&entries, Entry::settled_nothing), sale.voucher_id, &rows)
                    .await?,
            ),
        ),
        _ => (None, None),
    };
    let reconciliation = match args.reconcile {
        true => {
            let mut redis = hmdp::startup::connect_redis(&args.redis).await?;
            let keys = hmdp::keys::Keys::new(&args.redis.key_prefix);
            Some(hmdp::seckill::reconcile(&db, &mut redis, &keys, sale.voucher_id).await?)
        }
        false => None,
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "findings": findings, "ledger": ledger, "fates": fates, "unsettledResolved": resolutions,
            "redisAgrees": reconciliation.as_ref().map(hmdp::seckill::Reconciliation::agrees)
        }))?
    );
    let checked = Checked { findings: &findings, ledger: &ledger, fates: &fates, resolutions: &resolutions };
    let problems = checked.problems(&args, reconciliation.as_ref());
    anyhow::ensure!(problems.is_empty(), "the history against the tables: {}", problems.join("; "));
    Ok(())
}

/// What `check` found, held to the run's allowances.
struct Checked<'a> {
    findings: &'a Findings,
    ledger: &'a audit::Audit,
    fates: &'a Option<fate::Fates>,
    resolutions: &'a Option<fate::Resolutions>,
}

impl Checked<'_> {
    /// Everything the history and the tables disagree on; empty when they
    /// agree.
    fn problems(&self, args: &CheckArgs, reconciliation: Option<&hmdp::seckill::Reconciliation>) -> Vec<String> {
        let mut problems = self.fates.as_ref().map(fate::Fates::problems).unwrap_or_default();
        if let Some(report) = reconciliation
            && !report.agrees()
        {
            problems.push(format!("Redis and MariaDB disagree once drained: {}", report.render().trim()));
        }
        problems.extend(self.resolutions.as_ref().map(fate::Resolutions::problems).unwrap_or_default());
        match &self.findings.answers {
            None => problems.push("users of unknown id: the answers cannot be held to the rows".into()),
            Some(a) if a.success_without_row > 0 && !args.replica_wait_off => {
                problems.push(format!("{} answers of 200 without their row", a.success_without_row));
            }
            Some(a) if a.rows_told_failed > 0 && !args.untold_allowed => {
                problems.push(format!("{} rows whose user was never told", a.rows_told_failed));
            }
            Some(_) => {}
        }
        if let Some(bound) = args.max_stall_ms
            && self.findings.longest_stall_ms > bound
        {
            problems.push(format!("the sale sold nothing for {} ms (at most {bound})", self.findings.longest_stall_ms));
        }
        // Untold rows are orders of no success answer: the ledger would count
        // them against the answers too.
        let untold = self.findings.answers.as_ref().map_or(0, |a| a.rows_told_failed) as i64;
        let lost = self.findings.answers.as_ref().map_or(0, |a| a.success_without_row) as i64;
        let ledger_holds = self.ledger.passed
            || (args.replica_wait_off
                && self.ledger.oversold == 0
                && self.ledger.duplicate_pairs == 0
                && self.ledger.stock_plus_orders_is_initial
                && self.ledger.new_orders
                    == (self.ledger.success_answers + self.ledger.unreplicated_answers) as i64 - lost)
            || (args.untold_allowed
                && self.ledger.oversold == 0
                && self.ledger.duplicate_pairs == 0
                && self.ledger.stock_plus_orders_is_initial
                && self.ledger.new_orders
                    <= (self.ledger.success_answers + self.ledger.unreplicated_answers) as i64 + untold);
        if !ledger_holds {
            problems.push(
                "the ledger does not add up (oversold, a duplicate, stock + orders, orders against answers)".into(),
            );
        }
        problems
    }
}

/// The entries `which` picks, as the buyers' lookups need them.
fn asked(entries: &[Entry], which: impl Fn(&Entry) -> bool) -> Vec<fate::Asked> {
    entries
        .iter()
        .filter(|e| which(e))
        .map(|e| fate::Asked { user: e.user, user_id: e.user_id, order_id: e.order_id })
        .collect()
}

/// User id -> the live order that user holds for the voucher.
async fn live_rows(db: &MySqlPool, voucher: u64) -> anyhow::Result<HashMap<u64, i64>> {
    Ok(sqlx::query_as::<_, (u64, i64)>(
        "SELECT user_id, id FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ?",
    )
    .bind(voucher)
    .bind(voucher)
    .fetch_all(db)
    .await?
    .into_iter()
    .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::file::{Header, write};

    fn entry(user: usize, outcome: Outcome, status: Option<u16>, order_id: Option<i64>, sent_ms: u64) -> Entry {
        Entry {
            sent_ms,
            answered_ms: sent_ms + 5,
            user,
            user_id: Some(user as u64 + 100),
            status,
            error_code: None,
            order_id,
            outcome,
            attempts: 1,
        }
    }

    #[test]
    fn a_history_written_reads_back_the_same() {
        let path = std::env::temp_dir().join(format!("history-{}.jsonl", std::process::id()));
        let header = Header { voucher_id: 7, stock_before: 100, orders_before: 0, buyers: 2 };
        let entries =
            vec![entry(2, Outcome::SoldOut, Some(409), None, 20), entry(1, Outcome::Success, Some(200), Some(9), 10)];
        write(&path, &header, &entries).unwrap();
        let (read_header, read_entries) = read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(read_header, header);
        assert_eq!(read_entries, vec![entries[1].clone(), entries[0].clone()], "sorted by the time sent");
    }

    #[test]
    fn a_200_without_its_row_is_found_and_a_202_without_it_only_counted() {
        // User i has id 100 + i; user 0 holds order 500.
        let rows = HashMap::from([(100, 500)]);
        let entries = [
            entry(0, Outcome::Success, Some(200), Some(500), 0),
            entry(1, Outcome::Success, Some(200), Some(501), 0),
            entry(2, Outcome::Unreplicated, Some(202), Some(502), 0),
        ];
        let found = find(&entries, &rows, None);
        let answers = found.answers.unwrap();
        assert_eq!((answers.success_without_row, found.accepted, answers.unreplicated_without_row), (1, 1, 1));
        assert_eq!(answers.rows_told_failed, 0);
    }

    #[test]
    fn an_answer_that_settled_nothing_is_resolved_against_the_rows() {
        let rows = HashMap::from([(100, 500)]);
        let entries = [entry(0, Outcome::Other, None, None, 0), entry(1, Outcome::Other, Some(502), None, 0)];
        let found = find(&entries, &rows, None);
        assert_eq!((found.unsettled, found.unsettled_with_order), (2, 1));
        assert_eq!(found.answers.unwrap().rows_told_failed, 1, "user 0 holds an order nobody told it of");
    }

    #[test]
    fn users_of_unknown_id_leave_the_answers_unjudged() {
        let mut unknown = entry(0, Outcome::Success, Some(200), Some(500), 0);
        unknown.user_id = None;
        assert_eq!(find(&[unknown], &HashMap::new(), None).answers, None);
    }

    #[test]
    fn the_longest_stall_is_the_widest_gap_between_two_sales() {
        let entries = [
            entry(0, Outcome::Success, Some(200), Some(500), 0),
            entry(1, Outcome::Unavailable, Some(503), None, 100),
            entry(2, Outcome::Success, Some(200), Some(502), 4_000),
            entry(3, Outcome::Unreplicated, Some(202), Some(503), 4_100),
        ];
        assert_eq!(find(&entries, &HashMap::new(), None).longest_stall_ms, 4_000);
        assert_eq!(find(&entries[..1], &HashMap::new(), None).longest_stall_ms, 0);
    }

    #[test]
    fn the_time_to_answer_normally_runs_from_the_heal_to_the_last_abnormal_answer() {
        let entries = [
            entry(0, Outcome::Unavailable, Some(503), None, 900),
            entry(1, Outcome::Unavailable, Some(503), None, 1_200),
            entry(2, Outcome::SoldOut, Some(409), None, 1_500),
        ];
        assert_eq!(find(&entries, &HashMap::new(), Some(1_000)).abnormal_after_heal_ms, Some(205));
        assert_eq!(find(&entries, &HashMap::new(), Some(1_300)).abnormal_after_heal_ms, None);
    }
}
