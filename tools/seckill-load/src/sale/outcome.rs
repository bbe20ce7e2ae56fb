//! What the sale's requests came to, and the sale at rest: its rows
//! landed, Redis drained, the after-sale scenario run, the audit.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use hmdp::{
    keys::Keys,
    startup::{connect_database, connect_redis},
};

use super::{args::Args, plan};
use crate::{aftersale, audit, cpu, events, guarded, report, report::Outcome, settle};

/// What the sale's requests came to.
pub(super) struct Run<'a> {
    pub(super) plan: &'a plan::Plan,
    pub(super) tally: plan::Tally,
    pub(super) retried: usize,
    pub(super) guard_report: Option<guarded::GuardReport>,
    /// When the first request was about to go (Unix ms).
    pub(super) started_ms: i64,
}

/// The sale at rest: its rows landed (or not), Redis drained, the
/// after-sale scenario run, and the audit of it all.
pub(super) struct Settled {
    pub(super) summary: report::Summary,
    pub(super) successes: u64,
    pub(super) unreplicated: u64,
    pub(super) first_sent: Instant,
    pub(super) rows_landed: Option<Instant>,
    pub(super) drain_timeout: Duration,
    pub(super) after_sale: Option<aftersale::AfterSaleReport>,
    pub(super) audit: audit::Audit,
    pub(super) cpu: BTreeMap<String, cpu::CpuUse>,
    pub(super) events: Option<events::EventLag>,
}

pub(super) async fn settle(
    args: &Args,
    run: &mut Run<'_>,
    db: sqlx::MySqlPool,
    before: &audit::Snapshot,
    cpu_before: &cpu::Sample,
) -> anyhow::Result<Settled> {
    let (plan, recorder) = (run.plan, &run.tally.recorder);
    let mut successes = recorder.count(Outcome::Success);
    let unreplicated = recorder.count(Outcome::Unreplicated);
    let first_sent = recorder.first_sent().unwrap_or_else(Instant::now);
    let drain_timeout = Duration::from_secs_f64(args.drain_timeout);
    // A fresh pool for what follows: a fault run may have killed the idle
    // connections of the first one while the sale ran.
    db.close().await;
    let db = connect_database(args.db.as_str(), 4).await?;
    let expected = before.orders + (successes + unreplicated) as i64;
    let rows_landed = settle::rows(&db, &[(plan.voucher, expected)], drain_timeout).await?;
    let mut redis = connect_redis(&args.redis).await?;
    let keys = Keys::new(&args.redis.key_prefix);
    let mut reconciliation = settle::drain(&db, &mut redis, &keys, plan.voucher, drain_timeout).await?;
    let after_sale = match (args.pay_percent, args.pay_timeout_s) {
        (Some(percent), Some(timeout)) => {
            let scenario = aftersale::Scenario { pay_percent: percent, pay_timeout: Duration::from_secs(timeout) };
            let report = after_sale(&db, run, scenario).await?;
            // The audit weighs live orders: the cancelled ones left, the
            // second wave's came.
            successes = successes + report.second_wave_successes - report.returned;
            reconciliation = settle::drain(&db, &mut redis, &keys, plan.voucher, drain_timeout).await?;
            Some(report)
        }
        _ => None,
    };
    // Every order's cost is in: answered, persisted, drained, its event
    // relayed.
    let events = events::relayed(&db, plan.voucher, drain_timeout).await?;
    let cpu = cpu::per_request(cpu_before, &cpu::sample(&args.cpu), plan.jobs.len() as u64);
    let after = audit::Snapshot::read(&db, plan.voucher).await?;
    let stock_added = match &args.stock_delta_file {
        Some(path) => audit::read_stock_deltas(path)?,
        None => 0,
    };
    if stock_added != 0 {
        eprintln!("stock changed mid-sale by {stock_added} through the admin's route");
    }
    let recorder = &run.tally.recorder;
    let mut audit = audit::Audit::new(&db, plan.voucher, before, &after, successes, unreplicated, stock_added)
        .await?
        .with_refusals(audit::Refusals {
            demand_met: after_sale.as_ref().is_some_and(|r| r.second_wave_successes == r.second_wave_users),
            ..audit::Refusals::count(plan.buyers as u64, recorder, &run.tally.others)
        });
    if let Some(report) = reconciliation {
        audit = audit.with_redis(report);
    }
    let user_ids: Vec<Option<u64>> = plan.tokens.iter().map(|u| u.id).collect();
    if let Some(check) = audit::check_answers(&db, plan.voucher, &user_ids, &run.tally.answers).await? {
        audit = audit.with_answers(check);
    }
    if let Some(events) =
        events::audit(&args.events, args.db.as_str(), &db, plan.voucher, run.started_ms, drain_timeout).await?
    {
        audit = audit.with_events(events);
    }
    let summary = recorder.summary();
    Ok(Settled {
        summary,
        successes,
        unreplicated,
        first_sent,
        rows_landed,
        drain_timeout,
        after_sale,
        audit,
        cpu,
        events,
    })
}

/// The after-sale scenario: some winners pay, the rest time out, and the
/// losers buy the returned units; the second wave's orders join the answers.
async fn after_sale(
    db: &sqlx::MySqlPool,
    run: &mut Run<'_>,
    scenario: aftersale::Scenario,
) -> anyhow::Result<aftersale::AfterSaleReport> {
    let plan = run.plan;
    let answers = &run.tally.answers;
    let winners: Vec<(usize, String, i64)> = answers
        .iter()
        .filter(|(_, outcome, _)| *outcome == Outcome::Success)
        .filter_map(|(user, _, id)| Some((*user, plan.tokens[*user].token.clone(), (*id)?)))
        .collect();
    let losers: Vec<(usize, String)> = answers
        .iter()
        .filter(|(_, outcome, _)| *outcome == Outcome::SoldOut)
        .map(|(user, _, _)| (*user, plan.tokens[*user].token.clone()))
        .collect();
    let report = aftersale::run(&plan.client, &plan.base, db, plan.voucher, &winners, &losers, scenario).await?;
    for &(user, id) in &report.second_wave_orders {
        run.tally.answers.push((user, Outcome::Success, Some(id)));
    }
    Ok(report)
}
