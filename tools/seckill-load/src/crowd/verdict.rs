//! The crowd's verdict: the answers counted, every voucher audited against
//! MariaDB (and Redis) once the sale is at rest, and what was not clean
//! named. With many vouchers each is audited alone (its stock, its
//! buyers' answers, its rows) and the totals are the sum: a voucher that
//! oversold cannot hide behind one that undersold.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    args::CrowdArgs,
    job::{Answer, PartResult},
};
use crate::{
    audit,
    report::{Outcome, Recorder},
    settle,
};

pub(super) struct Verdict {
    pub render: String,
    pub doc: Value,
    pub problems: Vec<String>,
}

/// The crowd's sale, answered: what the verdict is made of.
pub(super) struct Crowd<'a> {
    pub args: &'a CrowdArgs,
    /// Buyer i ordered `vouchers[i % len]`.
    pub vouchers: &'a [u64],
    pub merged: &'a PartResult,
    pub users: &'a [hmdp::auth::SeededUser],
    /// The opening instant, on this process's clock.
    pub opened: Instant,
    pub parts: usize,
}

/// Answers counted, of the whole sale or of one voucher.
struct Counted {
    recorder: Recorder,
    by_answer: BTreeMap<String, u64>,
    /// Each buyer's user, outcome and order id, for the audit.
    answers: Vec<(usize, Outcome, Option<i64>)>,
    /// The last success's answer, in µs after the opening instant.
    sold_out_us: Option<i64>,
    last_us: i64,
}

impl Counted {
    fn new() -> Self {
        Self {
            recorder: Recorder::new(),
            by_answer: BTreeMap::new(),
            answers: Vec::new(),
            sold_out_us: None,
            last_us: 0,
        }
    }

    fn add(&mut self, a: &Answer, outcome: Outcome, opened: Instant) {
        let at = |us: i64| if us >= 0 { opened + Duration::from_micros(us as u64) } else { opened };
        self.recorder.record(outcome, at(a.sent_us), at(a.done_us));
        *self.by_answer.entry(a.what.clone()).or_default() += 1;
        if matches!(outcome, Outcome::Success | Outcome::Unreplicated) {
            self.sold_out_us = self.sold_out_us.max(Some(a.done_us));
        }
        self.last_us = self.last_us.max(a.done_us);
        self.answers.push((a.user, outcome, a.order_id));
    }

    /// Rows the answers promise: every success, and every 202 at most.
    fn promised(&self) -> i64 {
        (self.recorder.count(Outcome::Success) + self.recorder.count(Outcome::Unreplicated)) as i64
    }

    /// Answers the contract does not expect of a sale, by what they were.
    fn others(&self) -> BTreeMap<String, u64> {
        self.by_answer.iter().filter(|(what, _)| !is_expected(what)).map(|(w, n)| (w.clone(), *n)).collect()
    }
}

/// What the verdict's figures are.
struct Figures {
    summary: crate::report::Summary,
    audits: Vec<audit::Audit>,
    totals: audit::Totals,
    rows_landed: Option<Instant>,
    others: BTreeMap<String, u64>,
    unanswered: u64,
}

/// Failing vouchers' audits shown in full; the rest are in the JSON.
const FAILURES_SHOWN: usize = 5;

impl Crowd<'_> {
    /// `before` holds each voucher's snapshot, in `vouchers`' order.
    pub async fn judge(&self, db: &sqlx::MySqlPool, before: &[audit::Snapshot]) -> anyhow::Result<Verdict> {
        let (total, per_voucher) = self.count();
        let figures = self.audit(db, before, &total, &per_voucher).await?;
        let problems = self.problems(&figures);
        let render = self.render(&total, &figures, &problems);
        let doc = self.doc(&total, &figures, &problems);
        Ok(Verdict { render, doc, problems })
    }

    /// The whole sale's answers, and each voucher's.
    fn count(&self) -> (Counted, Vec<Counted>) {
        let mut total = Counted::new();
        let mut per_voucher: Vec<Counted> = self.vouchers.iter().map(|_| Counted::new()).collect();
        for a in &self.merged.answers {
            let outcome = match a.what.as_str() {
                "OK" => Outcome::Success,
                "OK202" => Outcome::Unreplicated,
                "SOLD_OUT" => Outcome::SoldOut,
                "DUPLICATE_ORDER" => Outcome::Duplicate,
                "TOO_MANY_REQUESTS" => Outcome::TooManyRequests,
                "UNAVAILABLE" => Outcome::Unavailable,
                _ => Outcome::Other,
            };
            total.add(a, outcome, self.opened);
            per_voucher[a.user % self.vouchers.len()].add(a, outcome, self.opened);
        }
        (total, per_voucher)
    }

    /// The sale at rest (every voucher's rows landed, Redis drained) and
    /// each voucher's audit.
    async fn audit(
        &self,
        db: &sqlx::MySqlPool,
        before: &[audit::Snapshot],
        total: &Counted,
        per_voucher: &[Counted],
    ) -> anyhow::Result<Figures> {
        let timeout = Duration::from_secs_f64(self.args.drain_timeout);
        let expected: Vec<settle::Expected> = (self.vouchers.iter().zip(before).zip(per_voucher))
            .map(|((voucher, before), counted)| settle::Expected {
                voucher: *voucher,
                must: before.orders + counted.recorder.count(Outcome::Success) as i64,
                may: before.orders + counted.promised(),
            })
            .collect();
        let rows_landed = settle::rows(db, &expected, timeout).await?;
        let mut redis = hmdp::startup::connect_redis(&self.args.redis).await?;
        let keys = hmdp::keys::Keys::new(&self.args.redis.key_prefix);
        let user_ids: Vec<Option<u64>> = self.users.iter().map(|u| Some(u.id)).collect();
        let mut audits = Vec::with_capacity(self.vouchers.len());
        for ((voucher, before), counted) in self.vouchers.iter().zip(before).zip(per_voucher) {
            let recorder = &counted.recorder;
            let (successes, unreplicated) = (recorder.count(Outcome::Success), recorder.count(Outcome::Unreplicated));
            let reconciliation = settle::drain(db, &mut redis, &keys, *voucher, timeout).await?;
            let after = audit::Snapshot::read(db, *voucher).await?;
            let buyers = counted.answers.len() as u64;
            let mut audit = audit::Audit::new(db, *voucher, before, &after, successes, unreplicated, 0)
                .await?
                .with_refusals(audit::Refusals::count(buyers, &counted.answers, &counted.others()));
            if let Some(report) = reconciliation {
                audit = audit.with_redis(report);
            }
            if let Some(check) = audit::check_answers(db, *voucher, &user_ids, &counted.answers).await? {
                audit = audit.with_answers(check);
            }
            audits.push(audit);
        }
        let finals: u64 = total.by_answer.iter().filter(|(w, _)| is_final(w)).map(|(_, n)| n).sum();
        let unanswered = total.answers.len() as u64 - finals;
        let totals = audit::Totals::of(&audits);
        Ok(Figures {
            summary: total.recorder.summary(),
            audits,
            totals,
            rows_landed,
            others: total.others(),
            unanswered,
        })
    }

    fn problems(&self, figures: &Figures) -> Vec<String> {
        let merged = self.merged;
        let mut problems = connection_problems(merged);
        let outside: u64 = merged.outside_envelope.values().sum();
        if outside > 0 {
            problems.push(format!("{outside} answers outside the envelope: {:?}", merged.outside_envelope));
        }
        let unsold = figures.totals.remaining_stock;
        if unsold > 0 {
            problems.push(format!("{unsold} units unsold"));
        }
        if figures.unanswered > 0 {
            let (unanswered, others) = (figures.unanswered, &figures.others);
            problems.push(format!("{unanswered} buyers without a final answer (success or SOLD_OUT): {others:?}"));
        }
        if !figures.totals.passed {
            let failed: Vec<u64> = figures.audits.iter().filter(|a| !a.passed).map(|a| a.voucher_id).collect();
            problems.push(format!("the audit failed for {} voucher(s): {failed:?}", failed.len()));
        }
        problems
    }

    /// The buyers' latency (first send to final answer): p50, p99, max.
    fn latency(figures: &Figures) -> (f64, f64, f64) {
        let total = figures.summary.rows.iter().find(|r| r.label == "TOTAL");
        total.map_or((0.0, 0.0, 0.0), |r| (r.median_ms, r.p99_ms, r.max_ms))
    }

    fn rows_landed_secs(&self, figures: &Figures) -> Option<f64> {
        figures.rows_landed.map(|t| t.saturating_duration_since(self.opened).as_secs_f64())
    }

    fn render(&self, counted: &Counted, figures: &Figures, problems: &[String]) -> String {
        let (merged, (p50, p99, max)) = (self.merged, Self::latency(figures));
        let outside: u64 = merged.outside_envelope.values().sum();
        let mut render = crate::report::render(&figures.summary);
        render.push_str(&format!(
            "\nThe crowd: {} connections in {} process(es), {} held at the opening instant, {} not opened, {} reopened between requests\n\
             vouchers opening together: {}\n\
             closed under a request: {}   answers outside the envelope: {outside} {:?}\n\
             answers by outcome: {:?}   Retry-After followed: {}\n\
             buyer latency (first send to final answer): p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms\n\
             sold out {} after the opening instant; last answer {:.3} s; all rows in MariaDB {}\n\n",
            self.args.connections,
            self.parts,
            merged.held_at_open,
            merged.failed_to_open,
            merged.reopened,
            self.vouchers.len(),
            merged.dropped_in_flight,
            merged.outside_envelope,
            counted.by_answer,
            merged.retries_followed,
            counted.sold_out_us.map_or("never (no sale)".to_owned(), |us| format!("{:.3} s", us as f64 / 1e6)),
            counted.last_us as f64 / 1e6,
            self.rows_landed_secs(figures)
                .map_or("NOT within the drain timeout".to_owned(), |s| format!("{s:.3} s after the opening instant")),
        ));
        if let [only] = figures.audits.as_slice() {
            render.push_str(&only.render());
        } else {
            render.push_str(&figures.totals.render());
            for failed in figures.audits.iter().filter(|a| !a.passed).take(FAILURES_SHOWN) {
                render.push_str(&failed.render());
            }
        }
        if !problems.is_empty() {
            render.push_str(&format!("\nPROBLEMS: {}\n", problems.join("; ")));
        }
        render
    }

    fn doc(&self, counted: &Counted, figures: &Figures, problems: &[String]) -> Value {
        let (args, merged, (p50, p99, max)) = (self.args, self.merged, Self::latency(figures));
        // One voucher: its audit, as before there were many.
        let (audit, voucher_audits) = match figures.audits.as_slice() {
            [only] => (json!(only), Value::Null),
            all => (json!(figures.totals), json!(all)),
        };
        json!({
            "voucherId": self.vouchers[0],
            "voucherIds": self.vouchers,
            "vouchers": self.vouchers.len(),
            "connections": args.connections,
            "processes": self.parts,
            "users": self.users.len(),
            "stock": args.stock,
            "guard": args.guard,
            "admitPerSecond": args.admit_per_second,
            "retries": args.retries,
            "heldAtOpen": merged.held_at_open,
            "failedToOpen": merged.failed_to_open,
            "droppedInFlight": merged.dropped_in_flight,
            "reopened": merged.reopened,
            "outsideEnvelope": merged.outside_envelope,
            "answers": counted.by_answer,
            "retriesFollowed": merged.retries_followed,
            "p50Ms": p50,
            "p99Ms": p99,
            "maxMs": max,
            "soldOutSecs": counted.sold_out_us.map(|us| us as f64 / 1e6),
            "lastAnswerSecs": counted.last_us as f64 / 1e6,
            "rowsLandedSecs": self.rows_landed_secs(figures),
            "unsold": figures.totals.remaining_stock,
            "report": figures.summary,
            "audit": audit,
            "voucherAudits": voucher_audits,
            "problems": problems,
        })
    }
}

/// The answers a sale expects: bought, or sold out.
fn is_final(what: &str) -> bool {
    matches!(what, "OK" | "OK202" | "SOLD_OUT")
}

fn is_expected(what: &str) -> bool {
    is_final(what) || matches!(what, "DUPLICATE_ORDER" | "TOO_MANY_REQUESTS" | "UNAVAILABLE")
}

/// What the crowd's connections went through that a sale must not do to
/// them. A held connection that the server closed between two requests (or
/// before the first) counts as much as one closed under a request: nginx
/// closes idle keep-alive connections to make room when its workers run
/// out of `worker_connections` ("reusing connections"), and a buyer whose
/// connection was taken waits for a new one at the opening instant.
fn connection_problems(merged: &PartResult) -> Vec<String> {
    let mut problems = Vec::new();
    if merged.failed_to_open > 0 {
        problems.push(format!("{} connections could not be opened", merged.failed_to_open));
    }
    if merged.dropped_in_flight > 0 {
        problems.push(format!("{} connections closed under a request", merged.dropped_in_flight));
    }
    if merged.reopened > 0 {
        problems.push(format!("{} held connections closed by the server between requests", merged.reopened));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crowd_whose_held_connections_were_closed_between_requests_fails() {
        let clean = PartResult { held_at_open: 3, ..Default::default() };
        assert!(connection_problems(&clean).is_empty());
        let reused = PartResult { held_at_open: 3, reopened: 1, ..Default::default() };
        assert_eq!(connection_problems(&reused), ["1 held connections closed by the server between requests"]);
        let dropped = PartResult { dropped_in_flight: 2, failed_to_open: 1, ..Default::default() };
        assert_eq!(connection_problems(&dropped).len(), 2);
    }
}
