//! The sale's report, its JSON and its verdict (a chaos run's too).

use anyhow::Context;
use serde_json::json;

use super::{
    args::Args,
    outcome::{Run, Settled},
    plan, tally,
};
use crate::{aftersale, audit, chaos, cpu, guarded, masters, report, report::Outcome};

/// The ceiling's run (`--ceiling`): the report and the CPU, no audit.
pub(super) fn ceiling(
    args: &Args,
    plan: &plan::Plan,
    tally: &tally::Tally,
    cpu_before: &cpu::Sample,
) -> anyhow::Result<()> {
    let summary = tally.recorder.summary();
    let cpu = cpu::per_request(cpu_before, &cpu::sample(&args.cpu), plan.jobs.len() as u64);
    println!("{}", report::render(&summary));
    if !cpu.is_empty() {
        println!("{}", cpu::render(&cpu));
    }
    if let Some(path) = &args.json {
        let doc = json!({ "ceiling": plan.urls[0], "users": plan.tokens.len(), "requests": plan.jobs.len(), "concurrency": args.concurrency, "report": summary, "cpu": cpu });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let failed = tally.recorder.count(Outcome::Other) + tally.recorder.count(Outcome::Unavailable);
    anyhow::ensure!(failed == 0, "{failed} requests failed");
    Ok(())
}

/// A refusal answered before the order that took the last unit was even
/// sent was wrong when it was said: a unit was there for that buyer.
fn sold_out_early(tally: &tally::Tally) -> usize {
    tally.sold_out_at.iter().filter(|at| Some(**at) < tally.last_sale_sent).count()
}

pub(super) fn print_sale(run: &Run<'_>, settled: &Settled) {
    let orders = settled.successes + settled.unreplicated;
    println!("{}", report::render(&settled.summary));
    match settled.rows_landed {
        Some(at) => println!(
            "All {orders} orders in MariaDB {:.3} s after the first request.\n",
            (at - settled.first_sent).as_secs_f64()
        ),
        None => {
            println!("NOT all {orders} orders reached MariaDB within {:?} of the last answer.\n", settled.drain_timeout)
        }
    }
    match settled.audits.as_slice() {
        [only] => println!("{}", only.render()),
        all => {
            println!("{}", audit::Totals::of(all).render());
            for a in all {
                println!("{}", a.render());
            }
        }
    }
    let early = sold_out_early(&run.tally);
    println!(
        "SOLD_OUT answered before the last sale's order was sent: {early} of {} SOLD_OUT ({:.3} % of requests)\n",
        run.tally.sold_out_at.len(),
        100.0 * early as f64 / run.plan.jobs.len().max(1) as f64
    );
    if !settled.cpu.is_empty() {
        println!("{}", cpu::render(&settled.cpu));
    }
    if let Some(lag) = &settled.events {
        println!("{}", lag.render());
    }
    if let Some(report) = &settled.after_sale {
        println!("{}", report.render());
    }
    if let Some(report) = &run.guard_report {
        println!("{}", report.render(run.plan.buyers, orders));
    }
}

pub(super) fn write_json(
    path: &std::path::Path,
    args: &Args,
    run: &Run<'_>,
    settled: &Settled,
    placements: Option<&[masters::Placement]>,
) -> anyhow::Result<()> {
    // One voucher: its audit, as before there could be several.
    let (audit, voucher_audits) = match settled.audits.as_slice() {
        [only] => (json!(only), serde_json::Value::Null),
        all => (json!(audit::Totals::of(all)), json!(all)),
    };
    let doc = json!({
        "voucherId": run.plan.voucher(),
        "voucherIds": run.plan.vouchers,
        "voucherMasters": placements,
        "users": run.plan.tokens.len(),
        "requests": run.plan.jobs.len(),
        "concurrency": args.concurrency,
        "rampUpSecs": args.ramp_up,
        // The wall clock just before the first request (Unix ms): what a
        // split's `split_at` (Redis's clock) is measured from.
        "startedAtMs": run.started_ms,
        "throughput": args.throughput,
        "report": &settled.summary,
        "rowsLandedSecs": settled.rows_landed.map(|at| (at - settled.first_sent).as_secs_f64()),
        "otherAnswers": &run.tally.others,
        "retried": run.retried,
        "afterSale": &settled.after_sale,
        "audit": audit,
        "voucherAudits": voucher_audits,
        "soldOutBeforeLastSale": sold_out_early(&run.tally),
        "guarded": &run.guard_report,
        "cpu": &settled.cpu,
        "events": &settled.events,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))
}

/// A chaos run's verdict: the sale's audit, the orders asked again after
/// the fault, the locks lost, the answers during the fault.
pub(super) async fn chaos_verdict(
    args: &Args,
    run: &Run<'_>,
    settled: &Settled,
    fault: &str,
    injection: chaos::Injection,
    locks_before: u64,
) -> anyhow::Result<()> {
    let client = &run.plan.client;
    let users: Vec<&str> = run.plan.tokens.iter().skip(1).map(|u| u.token.as_str()).collect();
    let admin_key = args.admin_key.as_deref().unwrap_or_default();
    let again = chaos::orders_again(client, &args.chaos.instances, admin_key, &users).await;
    let locks_lost = chaos::locks_lost(client, &args.chaos.instances).await.saturating_sub(locks_before);
    let after_sale = settled.after_sale.as_ref();
    let verdict = chaos::Run {
        mode: &args.chaos.mode,
        fault,
        fault_at: args.chaos.fault_at,
        wall_secs: settled.summary.wall_secs,
        outcomes: settled
            .summary
            .rows
            .iter()
            .filter(|r| r.label != "TOTAL")
            .map(|r| (r.label.clone(), r.samples))
            .collect(),
        others: &run.tally.others,
        retries: (args.retries > 0).then_some(run.retried),
        after_sale,
        audits: &settled.audits,
        load_passed: settled.passed() && after_sale.is_none_or(aftersale::AfterSaleReport::passed),
        injection: &injection,
        orders_again: &again,
        locks_lost,
        during_fault: run.tally.succeeded_at.iter().filter(|at| injection.lasted(**at)).count() as u64,
    };
    let problems = verdict.report(args.chaos.table.as_deref(), args.chaos.problems.as_deref())?;
    anyhow::ensure!(problems.is_empty(), "the chaos run found {} problem(s)", problems.len());
    Ok(())
}

/// A sale without a fault passes when its audit, its guard and its
/// after-sale pass, and (with `--fail-on-other`) nothing unexpected came.
pub(super) fn verdict(args: &Args, run: &Run<'_>, settled: &Settled) -> anyhow::Result<()> {
    let failed: Vec<u64> = settled.audits.iter().filter(|a| !a.passed).map(|a| a.voucher_id).collect();
    anyhow::ensure!(failed.is_empty(), "audit failed (voucher {failed:?})");
    anyhow::ensure!(run.guard_report.as_ref().is_none_or(guarded::GuardReport::bots_kept_out), "a bot placed an order");
    anyhow::ensure!(
        settled.after_sale.as_ref().is_none_or(aftersale::AfterSaleReport::passed),
        "the after-sale scenario failed"
    );
    // Without a fault, a 503 is as unexpected as anything else.
    let recorder = &run.tally.recorder;
    let unexpected = recorder.count(Outcome::Other) + recorder.count(Outcome::Unavailable);
    anyhow::ensure!(!args.fail_on_other || unexpected == 0, "{unexpected} requests ended in unexpected outcomes");
    Ok(())
}
