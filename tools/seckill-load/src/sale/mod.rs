//! The JMeter-style sale, `seckill-load` without a subcommand: users
//! seeded or read, a voucher created, the requests driven (`plan.rs`),
//! the rows awaited and audited (`outcome.rs`), the verdict
//! (`verdict.rs`).

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use anyhow::Context;
use hmdp::{
    auth::{SessionStore, TokenKeys, seed_users},
    keys::Keys,
    startup::{connect_database, connect_redis},
};

use crate::{audit, chaos, cpu, guarded, history, users, users::User, voucher};
use outcome::{Run, settle};
use verdict::{ceiling, chaos_verdict, print_sale, verdict, write_json};

mod args;
mod outcome;
mod plan;
mod verdict;

pub(crate) use args::Args;

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
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
    let plan = Arc::new(plan::Plan::new(&args, client, voucher, tokens));
    plan.announce();

    let locks_before = match &args.chaos.fault {
        Some(_) => chaos::locks_lost(&plan.client, &args.chaos.instances).await,
        None => 0,
    };
    let injection = args.chaos.fault.is_some().then(|| chaos::inject(&args.chaos, plan.client.clone(), voucher));
    let cpu_before = cpu::sample(&args.cpu);
    let started_ms = chrono::Utc::now().timestamp_millis();
    let counters = Arc::new(plan::Counters::default());
    let progress = tokio::spawn(plan::show_progress(counters.done.clone(), plan.jobs.len()));
    let ledger = Arc::new(guarded::Ledger::default());
    let (tally, bot_answers) = plan::drive(plan.clone(), counters.clone(), ledger.clone()).await?;
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

async fn load_tokens(args: &Args, db: &sqlx::MySqlPool) -> anyhow::Result<Vec<User>> {
    if let Some(path) = &args.tokens {
        return users::tokens_from_file(path);
    }
    let Some(count) = args.users else { return Ok(Vec::new()) };
    let secret = args.jwt_secret.as_deref().context("--users needs JWT_SECRET (the stack's)")?;
    let started = Instant::now();
    let sessions = SessionStore::new(connect_redis(&args.redis).await?, Keys::new(&args.redis.key_prefix));
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
