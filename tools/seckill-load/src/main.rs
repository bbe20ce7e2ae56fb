//! `seckill-load`: a JMeter-style load test of the seckill route, followed by
//! an audit of the database that proves (or refutes) "no oversell, one order
//! per user" for the run.
//!
//!     seckill-load --base-url http://127.0.0.1:8080 --users 1000 --stock 200 --concurrency 1000
//!     seckill-load --tokens tokens.csv --stock 20000 --concurrency 1000 --json run.json
//!
//! `--users N` seeds N users itself (needs DATABASE_URL, REDIS_URL and the
//! stack's JWT_SECRET); `--tokens` reads `hmdp seed-users` output. `--stock`
//! creates a voucher through the admin API (ADMIN_KEY), window open now;
//! `--voucher` uses an existing one. Exits non-zero when the audit fails.
//!
//!     seckill-load crowd --connections 10000 --users 30000 --stock 20000
//!
//! `crowd` is the opening instant instead (src/crowd.rs): the connections
//! are opened and held before the window opens and all order at once.
//!
//!     seckill-load --stock 200 --users 1000 --history sale.jsonl
//!     seckill-load check-history --history sale.jsonl
//!
//! `--history` keeps every request's answer on disk; `check-history` reads
//! it against the tables afterwards (src/history.rs).
//!
//!     seckill-load seed-past --orders 10000000 --vouchers 1000 --users 1000000
//!
//! `seed-past` fills the database with a year of ended sales first
//! (src/past.rs).

mod aftersale;
mod audit;
mod chaos;
mod cpu;
mod crowd;
mod events;
mod fate;
mod guarded;
mod history;
mod past;
mod report;
mod sale;
mod settle;
mod users;
mod voucher;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::Context;
use clap::Parser;
use hmdp::{
    auth::{SessionStore, TokenKeys, seed_users},
    config::{DatabaseUrl, RedisSettings},
    keys::Keys,
    startup::{connect_database, connect_redis},
};
use serde_json::json;

use report::Outcome;
use users::User;

#[derive(Parser)]
#[command(name = "seckill-load", about = "Load-test the seckill route, then audit the database")]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base_url: String,
    /// Seed this many users directly (needs JWT_SECRET, REDIS_URL).
    #[arg(long, conflicts_with = "tokens")]
    users: Option<u64>,
    /// First phone of the seeded users.
    #[arg(long, default_value_t = 17_100_000_000)]
    first_phone: u64,
    /// CSV from `hmdp seed-users` (a `token` column).
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Create a seckill voucher with this stock (needs ADMIN_KEY).
    #[arg(long, conflicts_with = "voucher")]
    stock: Option<i64>,
    /// Sell the created voucher's stock in this many segments (1 to 16;
    /// the asynchronous mode spreads them over the Redis masters).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16), conflicts_with = "voucher")]
    segments: u8,
    /// Use this existing voucher instead.
    #[arg(long)]
    voucher: Option<u64>,
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Workers start evenly spread over this many seconds.
    #[arg(long, default_value_t = 0.0)]
    ramp_up: f64,
    /// At most this many requests per second in all (JMeter's Constant
    /// Throughput Timer): the sale then lasts a known time whatever the
    /// box's speed, so a fault injected after a delay lands mid-sale.
    #[arg(long, value_parser = positive_rate)]
    throughput: Option<f64>,
    /// Requests per user; above 1 it is a duplicate storm.
    #[arg(long, default_value_t = 1)]
    requests_per_user: usize,
    /// Clients that retry: every order carries an `Idempotency-Key` and
    /// is sent again, with the same key, up to this many times after no
    /// answer, a 502, a 503 or a key still in flight (as the sale page
    /// does). The report counts each order once, by its last answer.
    #[arg(long, default_value_t = 0)]
    retries: u32,
    /// A file of stock changes made mid-sale through the admin's stock
    /// route, one signed number per line (`stock - previous` of each
    /// answer): the audit counts them as stock there from the start.
    #[arg(long)]
    stock_delta_file: Option<PathBuf>,
    /// After the sale, this percentage of the winners pays; the others let
    /// the service's unpaid timeout cancel their orders, and a second wave
    /// of the losers buys the returned units. Needs --pay-timeout-s.
    #[arg(long, requires = "pay_timeout_s")]
    pay_percent: Option<f64>,
    /// The service's ORDER_PAY_TIMEOUT_S, for --pay-percent.
    #[arg(long)]
    pay_timeout_s: Option<u64>,
    /// Also write the report and the audit as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Every request's answer, one JSON line each (when sent and
    /// answered, the user, the status, the `errorCode`, the order id), for
    /// `seckill-load check-history` to read against the tables.
    #[arg(long, conflicts_with = "ceiling")]
    history: Option<PathBuf>,
    /// Fail when any request ended outside the expected outcomes.
    #[arg(long)]
    fail_on_other: bool,
    /// For the audit: the service's database.
    #[command(flatten)]
    db: DatabaseUrl,
    /// For the audit and seeding: the service's Redis, and its
    /// REDIS_KEY_PREFIX to find the asynchronous mode's keys.
    #[command(flatten)]
    redis: RedisSettings,
    /// Optional here, unlike `hmdp serve`: only `--users` needs it.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    jwt_secret: Option<String>,
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    admin_key: Option<String>,
    /// How long to wait, after the last answer, for every success to have
    /// its row (the asynchronous mode persists after answering).
    #[arg(long, default_value_t = 60.0)]
    drain_timeout: f64,
    /// The box's ceiling for the same traffic: `GET /user/me` (an
    /// authenticated no-op: refresh layer, session lookup, envelope) once
    /// per request instead of an order; no voucher, no audit.
    #[arg(long, conflicts_with_all = ["stock", "voucher"])]
    ceiling: bool,
    /// Server processes whose CPU the run is charged (`NAME=PID,PID...`,
    /// repeated): user + system time from before the first request until
    /// the rows landed, per request sent. `scripts/bench-cpu` passes the
    /// instances, nginx, Redis and MariaDB.
    #[arg(long = "cpu", value_parser = cpu::parse_group)]
    cpu: Vec<cpu::Group>,
    /// A chaos run (`--fault`): the sale under one fault, then the verdict.
    #[command(flatten)]
    chaos: chaos::ChaosArgs,
    /// A guarded sale (`--guard`): the full flow, bots, greedy buyers.
    #[command(flatten)]
    guard: guarded::GuardArgs,
    /// The sale's order events audited at a consumer (`--events-audit`).
    #[command(flatten)]
    events: events::EventsArgs,
}

fn positive_rate(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("{value} is not a positive number of requests per second")),
    }
}

fn main() -> anyhow::Result<()> {
    // `crowd` is a run of its own; `crowd-part` is one of its children.
    match std::env::args().nth(1).as_deref() {
        Some(crowd::PART_ARG) => return crowd::part_main(),
        Some("crowd") => {
            let args = crowd::CrowdArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(crowd::run(args));
        }
        Some("seed-past") => {
            let args = past::PastArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(past::run(args));
        }
        Some("check-history") => {
            let args = history::CheckArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(history::check(args));
        }
        _ => {}
    }
    tokio::runtime::Runtime::new()?.block_on(sale(Args::parse()))
}

async fn sale(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.concurrency > 0 && args.requests_per_user > 0,
        "concurrency and requests-per-user must be positive"
    );
    // A thousand connections need more than the usual 1024 descriptors.
    let _ = rlimit::increase_nofile_limit(65_536);

    let db = connect_database(args.db.as_str(), 4).await?;
    let tokens = load_tokens(&args, &db).await?;
    anyhow::ensure!(!tokens.is_empty(), "no users: give --users N or --tokens FILE");
    // The last `--bots` users are bots, not buyers: the audit counts the
    // buyers alone.
    anyhow::ensure!(args.guard.bots < tokens.len(), "--bots must leave some buyers");

    let client =
        reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).timeout(Duration::from_secs(60)).build()?;
    let voucher = match (args.voucher, args.stock) {
        _ if args.ceiling => 0,
        (Some(id), _) => id,
        (None, Some(stock)) => create_voucher(&client, &args, stock).await?,
        (None, None) => anyhow::bail!("give --stock S (creates a voucher) or --voucher ID"),
    };
    let before = if args.ceiling { None } else { Some(audit::Snapshot::read(&db, voucher).await?) };
    let plan = Arc::new(sale::Plan::new(&args, client, voucher, tokens));
    plan.announce();

    let locks_before = match &args.chaos.fault {
        Some(_) => chaos::locks_lost(&plan.client, &args.chaos.instances).await,
        None => 0,
    };
    let injection = args.chaos.fault.is_some().then(|| chaos::inject(&args.chaos, plan.client.clone(), voucher));
    let cpu_before = cpu::sample(&args.cpu);
    let started_ms = chrono::Utc::now().timestamp_millis();
    let counters = Arc::new(sale::Counters::default());
    let progress = tokio::spawn(sale::show_progress(counters.done.clone(), plan.jobs.len()));
    let ledger = Arc::new(guarded::Ledger::default());
    let (tally, bot_answers) = sale::drive(plan.clone(), counters.clone(), ledger.clone()).await?;
    progress.abort();
    let guard_report = plan.guarded.then(|| {
        let ledger = Arc::try_unwrap(ledger).unwrap_or_else(|_| panic!("every worker has ended"));
        guarded::GuardReport::new(&args.guard, ledger, bot_answers)
    });
    if !tally.others.is_empty() {
        eprintln!("other answers, by status: {:?}", tally.others);
    }
    let retried = counters.retried.load(Ordering::Relaxed);
    if args.retries > 0 {
        eprintln!("retries with the same Idempotency-Key: {retried}");
    }
    eprintln!();

    let Some(before) = before else { return ceiling(&args, &plan, &tally, &cpu_before) };
    if let Some(path) = &args.history {
        let sale = history::Header {
            voucher_id: voucher,
            stock_before: before.stock(),
            orders_before: before.orders,
            buyers: plan.buyers as u64,
        };
        history::write(path, &sale, &tally.history)?;
    }
    let mut run = Run { plan: &plan, tally, retried, guard_report, started_ms };
    let settled = settle(&args, &mut run, db, &before, &cpu_before).await?;
    print_sale(&run, &settled);
    if let Some(path) = &args.json {
        write_json(path, &args, &run, &settled)?;
    }
    if let (Some(fault), Some(injection)) = (&args.chaos.fault, injection) {
        return chaos_verdict(&args, &run, &settled, fault, injection.await?, locks_before).await;
    }
    verdict(&args, &run, &settled)
}

/// The ceiling's run (`--ceiling`): the report and the CPU, no audit.
fn ceiling(args: &Args, plan: &sale::Plan, tally: &sale::Tally, cpu_before: &cpu::Sample) -> anyhow::Result<()> {
    let summary = tally.recorder.summary();
    let cpu = cpu::per_request(cpu_before, &cpu::sample(&args.cpu), plan.jobs.len() as u64);
    println!("{}", report::render(&summary));
    if !cpu.is_empty() {
        println!("{}", cpu::render(&cpu));
    }
    if let Some(path) = &args.json {
        let doc = json!({ "ceiling": plan.url, "users": plan.tokens.len(), "requests": plan.jobs.len(), "concurrency": args.concurrency, "report": summary, "cpu": cpu });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let failed = tally.recorder.count(Outcome::Other) + tally.recorder.count(Outcome::Unavailable);
    anyhow::ensure!(failed == 0, "{failed} requests failed");
    Ok(())
}

/// What the sale's requests came to.
struct Run<'a> {
    plan: &'a sale::Plan,
    tally: sale::Tally,
    retried: usize,
    guard_report: Option<guarded::GuardReport>,
    /// When the first request was about to go (Unix ms).
    started_ms: i64,
}

/// The sale at rest: its rows landed (or not), Redis drained, the
/// after-sale scenario run, and the audit of it all.
struct Settled {
    summary: report::Summary,
    successes: u64,
    unreplicated: u64,
    first_sent: Instant,
    rows_landed: Option<Instant>,
    drain_timeout: Duration,
    after_sale: Option<aftersale::AfterSaleReport>,
    audit: audit::Audit,
    cpu: BTreeMap<String, cpu::CpuUse>,
    events: Option<events::EventLag>,
}

async fn settle(
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
        Some(path) => read_stock_deltas(path)?,
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

/// A refusal answered before the order that took the last unit was even
/// sent was wrong when it was said: a unit was there for that buyer.
fn sold_out_early(tally: &sale::Tally) -> usize {
    tally.sold_out_at.iter().filter(|at| Some(**at) < tally.last_sale_sent).count()
}

fn print_sale(run: &Run<'_>, settled: &Settled) {
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
    println!("{}", settled.audit.render());
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

fn write_json(path: &std::path::Path, args: &Args, run: &Run<'_>, settled: &Settled) -> anyhow::Result<()> {
    let doc = json!({
        "voucherId": run.plan.voucher,
        "users": run.plan.tokens.len(),
        "requests": run.plan.jobs.len(),
        "concurrency": args.concurrency,
        "rampUpSecs": args.ramp_up,
        "throughput": args.throughput,
        "report": &settled.summary,
        "rowsLandedSecs": settled.rows_landed.map(|at| (at - settled.first_sent).as_secs_f64()),
        "otherAnswers": &run.tally.others,
        "retried": run.retried,
        "afterSale": &settled.after_sale,
        "audit": &settled.audit,
        "soldOutBeforeLastSale": sold_out_early(&run.tally),
        "guarded": &run.guard_report,
        "cpu": &settled.cpu,
        "events": &settled.events,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?).with_context(|| format!("writing {}", path.display()))
}

/// A chaos run's verdict: the sale's audit, the orders asked again after
/// the fault, the locks lost, the answers during the fault.
async fn chaos_verdict(
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
        audit: &settled.audit,
        load_passed: settled.audit.passed && after_sale.is_none_or(aftersale::AfterSaleReport::passed),
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
fn verdict(args: &Args, run: &Run<'_>, settled: &Settled) -> anyhow::Result<()> {
    anyhow::ensure!(settled.audit.passed, "audit failed");
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

/// The sum of the stock changes written to `path` (absent: none).
pub(crate) fn read_stock_deltas(path: &std::path::Path) -> anyhow::Result<i64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse::<i64>().with_context(|| format!("{}: {l:?} is not a number", path.display())))
        .sum()
}

async fn load_tokens(args: &Args, db: &sqlx::MySqlPool) -> anyhow::Result<Vec<User>> {
    if let Some(path) = &args.tokens {
        return users::tokens_from_file(path);
    }
    let Some(count) = args.users else { return Ok(Vec::new()) };
    let secret = args.jwt_secret.as_deref().context("--users needs JWT_SECRET (the stack's)")?;
    let started = Instant::now();
    let sessions = SessionStore::new(connect_redis(&args.redis).await?, Keys::new(""));
    let users = seed_users(db, &sessions, &TokenKeys::new(secret.as_bytes()), args.first_phone, count).await?;
    eprintln!("seeded {count} users in {:.1?}", started.elapsed());
    Ok(users.into_iter().map(|u| User { id: Some(u.id), token: u.token }).collect())
}

/// The sale's voucher: open since a minute ago.
async fn create_voucher(client: &reqwest::Client, args: &Args, stock: i64) -> anyhow::Result<u64> {
    let key = args.admin_key.as_deref().context("--stock needs ADMIN_KEY")?;
    let sale = voucher::SaleVoucher {
        title: format!("load test, stock {stock}"),
        stock,
        begin: chrono::Utc::now() - chrono::Duration::minutes(1),
        lasts: chrono::Duration::hours(2),
        segments: args.segments,
        guard: args.guard.guard.as_deref(),
        admit_per_second: args.guard.admit_per_second,
    };
    voucher::create(client, &args.base_url, key, &sale).await
}
