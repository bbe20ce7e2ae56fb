//! `seckill-load check-history`: the history held to the tables.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

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
    /// two successes, or from the last success to the last buyer turned
    /// away while nothing was sold out): a fault that cuts one instance off
    /// must leave the other selling. Needs `--healed-at-ms`: a sale whose
    /// last answer came before the fault ended tested nothing, and fails.
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
    /// Each answer against its buyer's row (None when a user's id is
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
    /// by the time each was answered, or from the last success to the last
    /// buyer turned away when nothing said SOLD_OUT after it.
    pub longest_stall_ms: u64,
    /// When the last answer came (Unix ms).
    pub last_answered_ms: u64,
}

/// Each entry against the rows (order id -> its buyer) and the fates its
/// buyers were told of the orders answered 202.
pub fn find(
    entries: &[Entry],
    rows: &audit::Rows,
    fates: &HashMap<i64, audit::Fate>,
    healed_at_ms: Option<u64>,
) -> Findings {
    let holders: HashSet<u64> = rows.values().filter(|r| r.live).map(|r| r.user_id).collect();
    let mut findings = Findings {
        requests: entries.len(),
        answers: None,
        accepted: entries.iter().filter(|e| e.outcome == Outcome::Unreplicated).count() as u64,
        unsettled: 0,
        unsettled_with_order: 0,
        abnormal_after_heal_ms: None,
        longest_stall_ms: longest_stall_ms(entries),
        last_answered_ms: entries.iter().map(|e| e.answered_ms).max().unwrap_or(0),
    };
    for e in entries {
        if e.settled_nothing() {
            findings.unsettled += 1;
            findings.unsettled_with_order += u64::from(e.user_id.is_some_and(|u| holders.contains(&u)));
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
        findings.answers = Some(audit::judge_answers(&user_ids, rows, &answers, fates));
    }
    findings
}

/// The widest gap between two sales, or from the last sale to the last
/// buyer turned away (a 503, a 429, no answer...) when no SOLD_OUT came
/// after it: a sale that stopped selling while stock was left stalled
/// until its end, however quick its sales were before.
fn longest_stall_ms(entries: &[Entry]) -> u64 {
    let sale = |e: &&Entry| matches!(e.outcome, Outcome::Success | Outcome::Unreplicated);
    let mut sold: Vec<u64> = entries.iter().filter(sale).map(|e| e.answered_ms).collect();
    sold.sort_unstable();
    let between = sold.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or(0);
    let first_sent = entries.iter().map(|e| e.sent_ms).min().unwrap_or(0);
    let last_sale = sold.last().copied().unwrap_or(first_sent);
    let after: Vec<&Entry> = entries.iter().filter(|e| e.answered_ms > last_sale).collect();
    let turned_away = |e: &&&Entry| !matches!(e.outcome, Outcome::SoldOut | Outcome::Duplicate);
    let tail = match after.iter().any(|e| e.outcome == Outcome::SoldOut) {
        true => 0,
        false => after.iter().filter(turned_away).map(|e| e.answered_ms - last_sale).max().unwrap_or(0),
    };
    between.max(tail)
}

/// `seckill-load check-history`: exits non-zero when a 200 is not its
/// buyer's row, a 202's fate and its row disagree, a row was never told,
/// the ledger does not add up exactly, or there was nothing to check.
pub async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let (sale, entries) = read(&args.history)?;
    anyhow::ensure!(!entries.is_empty(), "the history holds no request: there is nothing to check");
    let db = hmdp::startup::connect_database(args.db.as_str(), 2).await?;
    let rows = live_rows(&db, sale.voucher_id).await?;
    let holders: HashSet<u64> = rows.values().map(|r| r.user_id).collect();
    let (fates, resolutions) = match (&args.base_url, &args.tokens) {
        (Some(base_url), Some(tokens)) => (
            Some(fate::ask(base_url, tokens, &asked(&entries, |e| e.outcome == Outcome::Unreplicated)).await?),
            Some(
                fate::resolve(base_url, tokens, &asked(&entries, Entry::settled_nothing), sale.voucher_id, &holders)
                    .await?,
            ),
        ),
        _ => (None, None),
    };
    let by_order = fates.as_ref().map(|f| f.by_order.clone()).unwrap_or_default();
    let findings = find(&entries, &rows, &by_order, args.healed_at_ms);
    let count = |o: Outcome| entries.iter().filter(|e| e.outcome == o).count() as u64;
    let stock_added = match &args.stock_delta_file {
        Some(path) => audit::read_stock_deltas(path)?,
        None => 0,
    };
    let before = audit::Snapshot::new(sale.stock_before, sale.orders_before);
    let after = audit::Snapshot::read(&db, sale.voucher_id).await?;
    let mut ledger = audit::Audit::new(
        &db,
        sale.voucher_id,
        &before,
        &after,
        count(Outcome::Success),
        count(Outcome::Unreplicated),
        stock_added,
    )
    .await?;
    if let Some(check) = &findings.answers {
        ledger = ledger.with_answers(check.clone());
    }
    let reconciliation = match args.reconcile {
        true => {
            let mut redis = hmdp::startup::connect_redis(&args.redis).await?;
            let keys = hmdp::keys::Keys::new(&args.redis.key_prefix);
            Some(hmdp::seckill::reconcile(&db, &mut redis, &keys, sale.voucher_id).await?)
        }
        false => None,
    };
    let checked = Checked { findings: &findings, ledger: &ledger, fates: &fates, resolutions: &resolutions };
    let problems = checked.problems(&args, reconciliation.as_ref());
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "findings": findings, "ledger": ledger, "fates": fates, "unsettledResolved": resolutions,
            "redisAgrees": reconciliation.as_ref().map(hmdp::seckill::Reconciliation::agrees),
            "problems": problems,
        }))?
    );
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
            Some(a) => self.answer_problems(a, args, &mut problems),
        }
        self.stall_problems(args, &mut problems);
        problems
    }

    /// Each answer held to its buyer's row, and the ledger: exactly the
    /// orders the answers kept, the allowances each counted as itself.
    fn answer_problems(&self, a: &audit::AnswerCheck, args: &CheckArgs, problems: &mut Vec<String>) {
        if a.success_without_row > 0 && !args.replica_wait_off {
            problems.push(format!("{} answers of 200 without their buyer's row", a.success_without_row));
        }
        if a.rows_told_failed > 0 && !args.untold_allowed {
            problems.push(format!("{} rows whose user was never told", a.rows_told_failed));
        }
        problems.extend(a.never_excused());
        let l = self.ledger;
        let expected = a.expected_new_rows(args.replica_wait_off, args.untold_allowed);
        if l.oversold != 0 || l.duplicate_pairs != 0 || !l.stock_plus_orders_is_initial || l.remaining_stock < 0 {
            problems.push(format!(
                "the ledger does not add up: oversold {}, duplicate pairs {}, stock {} + orders {} against initial {}",
                l.oversold, l.duplicate_pairs, l.remaining_stock, l.orders, l.initial_stock
            ));
        }
        if l.new_orders != expected {
            problems.push(format!(
                "the ledger does not add up: {} new orders for {} orders answered 200 and {} answered 202 and kept{}{} ({expected} expected; {} rows told only by DUPLICATE_ORDER)",
                l.new_orders,
                a.success_orders,
                a.accepted_persisted,
                if args.replica_wait_off { format!(", less {} 200s lost", a.success_without_row) } else { String::new() },
                if args.untold_allowed { format!(", and {} rows never told", a.untold_live_rows) } else { String::new() },
                a.told_only_by_duplicate,
            ));
        }
    }

    /// With `--max-stall-ms`, the sale must have outlasted the fault, and
    /// never gone longer than that without selling.
    fn stall_problems(&self, args: &CheckArgs, problems: &mut Vec<String>) {
        let Some(bound) = args.max_stall_ms else { return };
        let last = self.findings.last_answered_ms;
        match args.healed_at_ms {
            None => problems.push(
                "the stall check is void: the fault's end is unknown (no --healed-at-ms), so nothing says the sale outlasted it".into(),
            ),
            Some(healed) if last < healed => problems.push(format!(
                "the stall check is void: the sale's last answer came {} ms before the fault ended; a longer sale must outlast the fault",
                healed - last
            )),
            Some(_) if self.findings.longest_stall_ms > bound => problems.push(format!(
                "the sale sold nothing for {} ms (at most {bound})",
                self.findings.longest_stall_ms
            )),
            Some(_) => {}
        }
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

/// The voucher's live orders, by id.
async fn live_rows(db: &MySqlPool, voucher: u64) -> anyhow::Result<audit::Rows> {
    Ok(sqlx::query_as::<_, (i64, u64)>(
        "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ?",
    )
    .bind(voucher)
    .bind(voucher)
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|(id, user_id)| (id, audit::Row { user_id, live: true }))
    .collect())
}

#[cfg(test)]
mod tests;
