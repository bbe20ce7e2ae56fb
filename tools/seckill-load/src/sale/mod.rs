//! The JMeter-style sale, `seckill-load` without a subcommand: users
//! seeded or read, a voucher created (or several, `--vouchers`, opening
//! together), the requests driven (`plan.rs`), the rows awaited and each
//! voucher audited (`outcome.rs`), the verdict (`verdict.rs`).

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

use crate::{audit, chaos, cpu, guarded, history, masters, users, users::User, voucher};
use outcome::{Run, settle};
use verdict::{ceiling, chaos_verdict, print_sale, verdict, write_json};

mod args;
mod outcome;
mod plan;
mod tally;
mod verdict;

pub(crate) use args::Args;

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.concurrency > 0 && args.requests_per_user > 0,
        "concurrency and requests-per-user must be positive"
    );
    args.several_vouchers_allowed()?;
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
    let vouchers = match (args.voucher, args.stock) {
        _ if args.ceiling => vec![0],
        (Some(id), _) => vec![id],
        (None, Some(stock)) => create_vouchers(&client, &args, stock).await?,
        (None, None) => anyhow::bail!("give --stock S (creates a voucher) or --voucher ID"),
    };
    anyhow::ensure!(
        tokens.len() - args.guard.bots >= vouchers.len(),
        "{} buyers for {} vouchers: every voucher needs a buyer",
        tokens.len() - args.guard.bots,
        vouchers.len()
    );
    let before = match args.ceiling {
        true => None,
        false => {
            let mut before = Vec::with_capacity(vouchers.len());
            for voucher in &vouchers {
                before.push(audit::Snapshot::read(&db, *voucher).await?);
            }
            Some(before)
        }
    };
    let placements = match args.ceiling {
        true => None,
        false => masters::read(&args.redis, &vouchers).await?,
    };
    let plan = Arc::new(plan::Plan::new(&args, client, vouchers, tokens));
    plan.announce();

    let locks_before = match &args.chaos.fault {
        Some(_) => chaos::locks_lost(&plan.client, &args.chaos.instances).await,
        None => 0,
    };
    let injection = args.chaos.fault.is_some().then(|| chaos::inject(&args.chaos, plan.client.clone(), &plan.vouchers));
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
    let mut run = Run { plan: &plan, tally, retried, guard_report, started_ms };
    let settled = settle(&args, &mut run, db, &before, &cpu_before).await?;
    // After the settling: the after-sale scenario's second wave is on
    // record too.
    if let Some(path) = &args.history {
        let vouchers: Vec<history::VoucherBefore> = (plan.vouchers.iter().zip(&before))
            .map(|(voucher, before)| history::VoucherBefore {
                voucher_id: *voucher,
                stock_before: before.stock(),
                orders_before: before.orders,
            })
            .collect();
        history::write(path, &history::Header::new(&vouchers, plan.buyers as u64), &run.tally.history)?;
    }
    print_sale(&run, &settled);
    if let Some(path) = &args.json {
        write_json(path, &args, &run, &settled, placements.as_deref())?;
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

/// The sale's vouchers (`--vouchers`, one by default), all open since the
/// same minute ago; `stock` split between them, the first ones taking what
/// does not divide.
async fn create_vouchers(client: &reqwest::Client, args: &Args, stock: i64) -> anyhow::Result<Vec<u64>> {
    let key = args.admin_key.as_deref().context("--stock needs ADMIN_KEY")?;
    let n = args.vouchers;
    let begin = chrono::Utc::now() - chrono::Duration::minutes(1);
    let mut vouchers = Vec::with_capacity(usize::from(n));
    for (k, units) in split_stock(stock, n).into_iter().enumerate() {
        let title = match n {
            1 => format!("load test, stock {units}"),
            _ => format!("load test, stock {units} ({} of {n})", k + 1),
        };
        let sale = voucher::SaleVoucher {
            title,
            stock: units,
            begin,
            lasts: chrono::Duration::hours(2),
            segments: args.segments,
            guard: args.guard.guard.as_deref(),
            admit_per_second: args.guard.admit_per_second,
        };
        vouchers.push(voucher::create(client, &args.base_url, key, &sale).await?);
    }
    Ok(vouchers)
}

/// `stock` units over `vouchers` vouchers: evenly, the first ones taking
/// what does not divide.
fn split_stock(stock: i64, vouchers: u16) -> Vec<i64> {
    let n = i64::from(vouchers);
    (0..n).map(|k| stock / n + i64::from(k < stock % n)).collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Args, split_stock};

    #[test]
    fn the_stock_is_split_evenly_the_first_vouchers_taking_the_remainder() {
        assert_eq!(split_stock(2_000, 1), [2_000]);
        assert_eq!(split_stock(10, 4), [3, 3, 2, 2]);
        assert_eq!(split_stock(2_001, 4).iter().sum::<i64>(), 2_001);
    }

    fn refusal(flags: &[&str]) -> Option<String> {
        let args = Args::parse_from(["seckill-load", "--stock", "100"].iter().chain(flags));
        args.several_vouchers_allowed().err().map(|e| e.to_string())
    }

    #[test]
    fn what_is_made_for_one_voucher_is_refused_with_several() {
        assert_eq!(refusal(&["--vouchers", "4"]), None);
        assert_eq!(refusal(&["--segments", "4"]), None, "one voucher in segments");
        let segments = refusal(&["--vouchers", "4", "--segments", "2"]);
        assert!(segments.is_some_and(|why| why.contains("--segments above 1")));
        let after_sale = refusal(&["--vouchers", "2", "--pay-percent", "50", "--pay-timeout-s", "3"]);
        assert!(after_sale.is_some_and(|why| why.contains("--pay-percent")));
        let too_few = refusal(&["--vouchers", "101"]);
        assert!(too_few.is_some_and(|why| why.contains("cannot give each of --vouchers 101 a unit")));
    }
}
