//! The history held to what the tables and the service said once the sale
//! drained, voucher by voucher: no database here, so that a made-up
//! history can be judged as a real one is.

use std::collections::{HashMap, HashSet};

use hmdp::seckill::Reconciliation;
use serde::Serialize;

use super::file::{Entry, VoucherBefore};
use crate::{audit, fate, report::Outcome};

/// What the run allows and asks of the history (`check-history`'s flags).
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    pub healed_at_ms: Option<u64>,
    pub untold_allowed: bool,
    pub replica_wait_off: bool,
    pub max_stall_ms: Option<u64>,
}

/// What the history and the tables say together (of one voucher, or of
/// the whole sale added up).
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

impl Findings {
    /// The vouchers' findings added up: counts summed, times the worst.
    fn total(all: &[&Findings]) -> Findings {
        let mut answers = Some(audit::AnswerCheck::default());
        for f in all {
            answers = answers.zip(f.answers.as_ref()).map(|(mut sum, a)| {
                sum.add(a);
                sum
            });
        }
        Findings {
            requests: all.iter().map(|f| f.requests).sum(),
            answers,
            accepted: all.iter().map(|f| f.accepted).sum(),
            unsettled: all.iter().map(|f| f.unsettled).sum(),
            unsettled_with_order: all.iter().map(|f| f.unsettled_with_order).sum(),
            abnormal_after_heal_ms: all.iter().filter_map(|f| f.abnormal_after_heal_ms).max(),
            longest_stall_ms: all.iter().map(|f| f.longest_stall_ms).max().unwrap_or(0),
            last_answered_ms: all.iter().map(|f| f.last_answered_ms).max().unwrap_or(0),
        }
    }
}

/// The users' ids by their place in the run, as the history names them;
/// `None` when one is unknown (tokens without a `userId`).
pub fn user_ids(entries: &[Entry]) -> Option<Vec<u64>> {
    let mut ids = vec![None; entries.iter().map(|e| e.user + 1).max().unwrap_or(0)];
    for e in entries {
        ids[e.user] = e.user_id;
    }
    ids.into_iter().collect()
}

/// One voucher's entries against its rows (order id -> its buyer) and the
/// fates the buyers were told of the orders answered 202; `user_ids` are
/// the whole sale's (a row of a user who never ordered this voucher is a
/// row nobody was told of).
pub fn find(
    entries: &[&Entry],
    user_ids: Option<&[u64]>,
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
    if let Some(user_ids) = user_ids {
        let answers: Vec<(usize, Outcome, Option<i64>)> =
            entries.iter().map(|e| (e.user, e.outcome, e.order_id)).collect();
        findings.answers = Some(audit::judge_answers(user_ids, rows, &answers, fates));
    }
    findings
}

/// The widest gap between two sales, or from the last sale to the last
/// buyer turned away (a 503, a 429, no answer...) when no SOLD_OUT came
/// after it: a sale that stopped selling while stock was left stalled
/// until its end, however quick its sales were before.
fn longest_stall_ms(entries: &[&Entry]) -> u64 {
    let sale = |e: &&&Entry| matches!(e.outcome, Outcome::Success | Outcome::Unreplicated);
    let mut sold: Vec<u64> = entries.iter().filter(sale).map(|e| e.sold_at_ms()).collect();
    sold.sort_unstable();
    let between = sold.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or(0);
    let first_sent = entries.iter().map(|e| e.sent_ms).min().unwrap_or(0);
    let last_sale = sold.last().copied().unwrap_or(first_sent);
    let after: Vec<&Entry> = entries.iter().copied().filter(|e| e.answered_ms > last_sale).collect();
    let turned_away = |e: &&&Entry| !matches!(e.outcome, Outcome::SoldOut | Outcome::Duplicate);
    let tail = match after.iter().any(|e| e.outcome == Outcome::SoldOut) {
        true => 0,
        false => after.iter().filter(turned_away).map(|e| e.answered_ms - last_sale).max().unwrap_or(0),
    };
    between.max(tail)
}

/// What the tables and the service said of one voucher once the sale
/// drained.
pub struct VoucherFacts {
    pub before: VoucherBefore,
    /// Its orders, cancelled ones too (each marked live or not).
    pub rows: audit::Rows,
    pub after: audit::Snapshot,
    pub duplicate_pairs: i64,
    /// Stock changed mid-sale through the admin's route.
    pub stock_added: i64,
    /// Its buyers whose answer settled nothing, by their order lists.
    pub resolutions: Option<fate::Resolutions>,
    /// Its Redis against MariaDB (`--reconcile`).
    pub reconciliation: Option<Reconciliation>,
}

/// One voucher's verdict.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherVerdict {
    pub voucher_id: u64,
    pub findings: Findings,
    pub ledger: audit::Audit,
    pub unsettled_resolved: Option<fate::Resolutions>,
    pub redis_agrees: Option<bool>,
    pub problems: Vec<String>,
}

/// The whole sale's verdict: every voucher's, and their sum.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The vouchers' findings added up.
    pub findings: Findings,
    /// The voucher's ledger (one voucher), or the vouchers' added up.
    pub ledger: serde_json::Value,
    pub fates: Option<fate::Fates>,
    pub unsettled_resolved: Option<fate::Resolutions>,
    pub redis_agrees: Option<bool>,
    pub vouchers: Vec<VoucherVerdict>,
    /// Everything the history and the tables disagree on, each voucher's
    /// named (when there are several); empty when they agree.
    pub problems: Vec<String>,
}

/// The history against the facts of each voucher (in the header's order)
/// and the 202s' fates (`None`: not asked).
pub fn judge(rules: &Rules, entries: &[Entry], facts: &[VoucherFacts], fates: Option<fate::Fates>) -> Verdict {
    let user_ids = user_ids(entries);
    let by_order = fates.as_ref().map(|f| f.by_order.clone()).unwrap_or_default();
    let several = facts.len() > 1;
    let vouchers: Vec<VoucherVerdict> = facts
        .iter()
        .map(|f| {
            let id = f.before.voucher_id;
            let mine: Vec<&Entry> = entries.iter().filter(|e| e.voucher_id.unwrap_or(id) == id).collect();
            let verdict = judge_voucher(rules, &mine, user_ids.as_deref(), f, &by_order);
            match several {
                true => VoucherVerdict {
                    problems: verdict.problems.iter().map(|p| format!("voucher {id}: {p}")).collect(),
                    ..verdict
                },
                false => verdict,
            }
        })
        .collect();
    let findings = Findings::total(&vouchers.iter().map(|v| &v.findings).collect::<Vec<_>>());
    let mut problems = fates.as_ref().map(fate::Fates::problems).unwrap_or_default();
    if findings.answers.is_none() {
        problems.push("users of unknown id: the answers cannot be held to the rows".into());
    }
    problems.extend(vouchers.iter().flat_map(|v| v.problems.iter().cloned()));
    stall_problems(rules, &findings, &mut problems);
    let unsettled_resolved = facts.iter().try_fold(fate::Resolutions::default(), |mut sum, f| {
        sum.add(f.resolutions.as_ref()?);
        Some(sum)
    });
    let redis_agrees = vouchers.iter().try_fold(true, |all, v| Some(all && v.redis_agrees?));
    let ledger = match vouchers.as_slice() {
        [only] => serde_json::json!(only.ledger),
        all => serde_json::json!(audit::Totals::of(all.iter().map(|v| &v.ledger))),
    };
    Verdict { findings, ledger, fates, unsettled_resolved, redis_agrees, vouchers, problems }
}

/// One voucher: each answer held to its buyer's row, the ledger exactly
/// the orders the answers kept (the allowances each counted as itself),
/// its buyers' order lists, its Redis.
fn judge_voucher(
    rules: &Rules,
    entries: &[&Entry],
    user_ids: Option<&[u64]>,
    facts: &VoucherFacts,
    fates: &HashMap<i64, audit::Fate>,
) -> VoucherVerdict {
    let b = facts.before;
    let findings = find(entries, user_ids, &facts.rows, fates, rules.healed_at_ms);
    let count = |o: Outcome| entries.iter().filter(|e| e.outcome == o).count() as u64;
    let before = audit::Snapshot::new(b.stock_before, b.orders_before);
    let mut ledger = audit::Audit::judge(
        b.voucher_id,
        &before,
        &facts.after,
        facts.duplicate_pairs,
        count(Outcome::Success),
        count(Outcome::Unreplicated),
        facts.stock_added,
    );
    let mut problems = Vec::new();
    if let Some(a) = &findings.answers {
        ledger = ledger.with_answers(a.clone());
        answer_problems(rules, a, &ledger, &mut problems);
    }
    if let Some(report) = &facts.reconciliation
        && !report.agrees()
    {
        problems.push(format!("Redis and MariaDB disagree once drained: {}", report.render().trim()));
    }
    problems.extend(facts.resolutions.as_ref().map(fate::Resolutions::problems).unwrap_or_default());
    VoucherVerdict {
        voucher_id: b.voucher_id,
        findings,
        ledger,
        unsettled_resolved: facts.resolutions.clone(),
        redis_agrees: facts.reconciliation.as_ref().map(Reconciliation::agrees),
        problems,
    }
}

/// Each answer held to its buyer's row, and the ledger: exactly the orders
/// the answers kept, the allowances each counted as itself.
fn answer_problems(rules: &Rules, a: &audit::AnswerCheck, l: &audit::Audit, problems: &mut Vec<String>) {
    if a.success_without_row > 0 && !rules.replica_wait_off {
        problems.push(format!("{} answers of 200 without their buyer's row", a.success_without_row));
    }
    if a.rows_told_failed > 0 && !rules.untold_allowed {
        problems.push(format!("{} rows whose user was never told", a.rows_told_failed));
    }
    problems.extend(a.never_excused());
    if l.oversold != 0 || l.duplicate_pairs != 0 || !l.stock_plus_orders_is_initial || l.remaining_stock < 0 {
        problems.push(format!(
            "the ledger does not add up: oversold {}, duplicate pairs {}, stock {} + orders {} against initial {}",
            l.oversold, l.duplicate_pairs, l.remaining_stock, l.orders, l.initial_stock
        ));
    }
    let expected = a.expected_new_rows(rules.replica_wait_off, rules.untold_allowed);
    if l.new_orders != expected {
        let lost = match rules.replica_wait_off {
            true => format!(", less {} 200s lost", a.success_without_row),
            false => String::new(),
        };
        let untold = match rules.untold_allowed {
            true => format!(", and {} rows never told", a.untold_live_rows),
            false => String::new(),
        };
        problems.push(format!(
            "the ledger does not add up: {} new orders for {} orders answered 200 and {} answered 202 and kept{lost}{untold} ({expected} expected; {} rows told only by DUPLICATE_ORDER)",
            l.new_orders, a.success_orders, a.accepted_persisted, a.told_only_by_duplicate,
        ));
    }
}

/// With `max_stall_ms`, the sale must have outlasted the fault, and no
/// voucher gone longer than that without selling.
fn stall_problems(rules: &Rules, findings: &Findings, problems: &mut Vec<String>) {
    let Some(bound) = rules.max_stall_ms else { return };
    let last = findings.last_answered_ms;
    match rules.healed_at_ms {
        None => problems.push(
            "the stall check is void: the fault's end is unknown (no --healed-at-ms), so nothing says the sale outlasted it"
                .into(),
        ),
        Some(healed) if last < healed => problems.push(format!(
            "the stall check is void: the sale's last answer came {} ms before the fault ended; a longer sale must outlast the fault",
            healed - last
        )),
        Some(_) if findings.longest_stall_ms > bound => {
            problems.push(format!("the sale sold nothing for {} ms (at most {bound})", findings.longest_stall_ms))
        }
        Some(_) => {}
    }
}
