//! What the sale's requests came to, and the sale at rest: its rows
//! landed, Redis drained, the after-sale scenario run, the audit.

use std::{
    collections::BTreeMap,
    sync::atomic::AtomicUsize,
    time::{Duration, Instant},
};

use hmdp::{
    keys::Keys,
    startup::{connect_database, connect_redis},
};

use super::{args::Args, plan, tally};
use crate::{aftersale, audit, cpu, events, guarded, report, report::Outcome, settle};

/// What the sale's requests came to.
pub(super) struct Run<'a> {
    pub(super) plan: &'a plan::Plan,
    pub(super) tally: tally::Tally,
    pub(super) retried: usize,
    pub(super) guard_report: Option<guarded::GuardReport>,
    /// When the first request was about to go (Unix ms).
    pub(super) started_ms: i64,
}

/// The sale at rest: its rows landed (or not), Redis drained, the
/// after-sale scenario run, and the audit of it all: each voucher's, in
/// the plan's order.
pub(super) struct Settled {
    pub(super) summary: report::Summary,
    pub(super) successes: u64,
    pub(super) unreplicated: u64,
    pub(super) first_sent: Instant,
    pub(super) rows_landed: Option<Instant>,
    pub(super) drain_timeout: Duration,
    pub(super) after_sale: Option<aftersale::AfterSaleReport>,
    pub(super) audits: Vec<audit::Audit>,
    pub(super) cpu: BTreeMap<String, cpu::CpuUse>,
    pub(super) events: Option<events::EventLag>,
}

impl Settled {
    pub(super) fn passed(&self) -> bool {
        self.audits.iter().all(|a| a.passed)
    }
}

/// Each voucher's answers (its buyers' user, outcome, order id), in the
/// plan's order.
fn by_voucher(plan: &plan::Plan, answers: &[(usize, Outcome, Option<i64>)]) -> Vec<Vec<(usize, Outcome, Option<i64>)>> {
    let mut split = vec![Vec::new(); plan.vouchers.len()];
    for answer in answers {
        split[plan.voucher_of(answer.0)].push(*answer);
    }
    split
}

/// The database, asked again until it answers or `within` has passed.
async fn connect_within(url: &str, within: Duration) -> anyhow::Result<sqlx::MySqlPool> {
    let until = Instant::now() + within;
    loop {
        match connect_database(url, 4).await {
            Ok(db) => return Ok(db),
            Err(err) if Instant::now() < until => {
                eprintln!("MariaDB does not answer yet ({err:#}); again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

pub(super) async fn settle(
    args: &Args,
    run: &mut Run<'_>,
    db: sqlx::MySqlPool,
    before: &[audit::Snapshot],
    cpu_before: &cpu::Sample,
) -> anyhow::Result<Settled> {
    let plan = run.plan;
    let count = |answers: &[(usize, Outcome, Option<i64>)], o: Outcome| {
        answers.iter().filter(|(_, outcome, _)| *outcome == o).count() as u64
    };
    let answered = by_voucher(plan, &run.tally.answers);
    let mut successes: Vec<u64> = answered.iter().map(|a| count(a, Outcome::Success)).collect();
    let unreplicated: Vec<u64> = answered.iter().map(|a| count(a, Outcome::Unreplicated)).collect();
    let first_sent = run.tally.recorder.first_sent().unwrap_or_else(Instant::now);
    let drain_timeout = Duration::from_secs_f64(args.drain_timeout);
    // A fresh pool for what follows: a fault run may have killed the idle
    // connections of the first one while the sale ran, or MariaDB itself,
    // which a sale shorter than its restart outlives.
    db.close().await;
    let db = connect_within(args.db.as_str(), drain_timeout).await?;
    let stock_added = match &args.stock_delta_file {
        Some(path) => audit::read_stock_deltas(path)?,
        None => 0,
    };
    // No more rows than units: a 202 answered "unreplicated" whose master
    // was lost may never land (the checker lets it end FAILED).
    let expected: Vec<settle::Expected> = (plan.vouchers.iter().zip(before).enumerate())
        .map(|(k, (voucher, before))| {
            let units = before.stock() + stock_added.max(0);
            let answered = |count: u64| before.orders + (count as i64).min(units);
            settle::Expected {
                voucher: *voucher,
                must: answered(successes[k]),
                may: answered(successes[k] + unreplicated[k]),
            }
        })
        .collect();
    let rows_landed = settle::rows(&db, &expected, drain_timeout).await?;
    let mut redis = connect_redis(&args.redis).await?;
    let keys = Keys::new(&args.redis.key_prefix);
    let mut reconciliations = Vec::with_capacity(plan.vouchers.len());
    for voucher in &plan.vouchers {
        reconciliations.push(settle::drain(&db, &mut redis, &keys, *voucher, drain_timeout).await?);
    }
    // One voucher only (`Args::several_vouchers_allowed`).
    let after_sale = match (args.pay_percent, args.pay_timeout_s) {
        (Some(percent), Some(timeout)) => {
            let scenario = aftersale::Scenario { pay_percent: percent, pay_timeout: Duration::from_secs(timeout) };
            let report = after_sale(&db, run, scenario).await?;
            // The audit weighs live orders: the cancelled ones left, the
            // second wave's came.
            successes[0] = successes[0] + report.second_wave_successes - report.returned;
            reconciliations[0] = settle::drain(&db, &mut redis, &keys, plan.voucher(), drain_timeout).await?;
            Some(report)
        }
        _ => None,
    };
    // Every order's cost is in: answered, persisted, drained, its event
    // relayed.
    let events = events::relayed(&db, &plan.vouchers, drain_timeout).await?;
    let cpu = cpu::per_request(cpu_before, &cpu::sample(&args.cpu), plan.jobs.len() as u64);
    if stock_added != 0 {
        // The admin's stock route changes one voucher: with several, which
        // one is not on record.
        anyhow::ensure!(
            plan.vouchers.len() == 1,
            "stock changed mid-sale by {stock_added} in a sale of {} vouchers: the change names no voucher",
            plan.vouchers.len()
        );
        eprintln!("stock changed mid-sale by {stock_added} through the admin's route");
    }
    let answered = by_voucher(plan, &run.tally.answers);
    let user_ids: Vec<Option<u64>> = plan.tokens.iter().map(|u| u.id).collect();
    let no_others = BTreeMap::new();
    // Every voucher's events at once, told with the first voucher's audit.
    let mut events_audit =
        events::audit(&args.events, args.db.as_str(), &db, &plan.vouchers, run.started_ms, drain_timeout).await?;
    let mut audits = Vec::with_capacity(plan.vouchers.len());
    for (k, (voucher, reconciliation)) in plan.vouchers.iter().zip(reconciliations).enumerate() {
        let after = audit::Snapshot::read(&db, *voucher).await?;
        let buyers = (0..plan.buyers).filter(|user| plan.voucher_of(*user) == k).count() as u64;
        let others = run.tally.others_by_voucher.get(&k).unwrap_or(&no_others);
        let mut audit =
            audit::Audit::new(&db, *voucher, &before[k], &after, successes[k], unreplicated[k], stock_added)
                .await?
                .with_refusals(audit::Refusals {
                    demand_met: after_sale.as_ref().is_some_and(|r| r.second_wave_successes == r.second_wave_users),
                    ..audit::Refusals::count(buyers, &answered[k], others)
                });
        if let Some(report) = reconciliation {
            audit = audit.with_redis(report);
        }
        if let Some(check) = audit::check_answers(&db, *voucher, &user_ids, &answered[k]).await? {
            audit = audit.with_answers(check);
        }
        if let Some(events) = events_audit.take() {
            audit = audit.with_events(events);
        }
        audits.push(audit);
    }
    Ok(Settled {
        summary: run.tally.recorder.summary(),
        successes: successes.iter().sum(),
        unreplicated: unreplicated.iter().sum(),
        first_sent,
        rows_landed,
        drain_timeout,
        after_sale,
        audits,
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
    let losers: Vec<usize> =
        answers.iter().filter(|(_, outcome, _)| *outcome == Outcome::SoldOut).map(|(user, _, _)| *user).collect();
    // The second wave's requests are on record as the first wave's are:
    // the history checker holds them to the rows too.
    let second_wave = std::sync::Mutex::new(Vec::new());
    let (retried, first_request) = (AtomicUsize::new(0), plan.jobs.len());
    let buy = |user: usize| {
        let (second_wave, retried) = (&second_wave, &retried);
        async move {
            let url = &plan.urls[plan.voucher_of(user)];
            let (answer, entry) = plan.order_on_record(url, user, first_request + user, retried).await;
            second_wave.lock().expect("the second wave's record").push(entry);
            (answer.0 == Outcome::Success).then_some(answer.1).flatten()
        }
    };
    let report = aftersale::run(&plan.client, &plan.base, db, plan.voucher(), &winners, &losers, scenario, buy).await?;
    run.tally.history.extend(second_wave.into_inner().expect("the second wave's record"));
    for &(user, id) in &report.second_wave_orders {
        run.tally.answers.push((user, Outcome::Success, Some(id)));
    }
    Ok(report)
}
