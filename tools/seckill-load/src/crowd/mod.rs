//! `seckill-load crowd`: the opening instant. C connections are opened and
//! held before the sale's window opens (each sends one `GET /health`, so
//! nginx holds it and has upstream connections ready); at the opening
//! instant every connection sends its first buyer's order at once, then its
//! next buyer's, until each buyer has a final answer. A buyer told 503 or
//! 429 with `Retry-After` waits that long and asks again, at most
//! `--retries` times, as a well-behaved app does; nothing else is sent
//! again (a POST that may have been carried out is never repeated).
//!
//! The client is this tool, not wrk: a bare hyper HTTP/1.1 connection per
//! buyer slot, no pool, no TLS, one task each. One process may hold only
//! as many descriptors as its hard limit (20,000 on the machines measured),
//! so the connections are split over child processes of this binary
//! (`crowd-part`, a job on stdin and the answers on stdout), at most
//! `--per-process` each. Times cross processes as microseconds from the
//! opening instant, agreed on as a wall-clock time.
//!
//! `--vouchers N` opens N vouchers at the same instant instead of one, the
//! stock and the buyers split evenly (buyer i orders voucher i mod N, each
//! once), and audits each voucher and all of them: a festival evening, not
//! one sale.
//!
//!     seckill-load crowd --connections 10000 --users 30000 --stock 20000 --json crowd.json
//!     seckill-load crowd --connections 1000 --vouchers 50

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::{
    audit,
    voucher::{self, SaleVoucher},
};

mod args;
mod job;
mod part;
mod verdict;

pub use args::CrowdArgs;
use job::{Answer, Job, PartResult, unix_ms};
pub use part::part_main;
use verdict::Crowd;

/// The hidden first argument that makes this binary one part of a crowd.
pub const PART_ARG: &str = "crowd-part";

/// Runs the whole crowd: seeds, creates the vouchers, spawns the parts,
/// merges, audits. Exits non-zero when the sale was not clean.
pub async fn run(args: CrowdArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0 && args.per_process > 0, "connections and per-process must be positive");
    anyhow::ensure!(args.users > 0, "--users must be positive");
    anyhow::ensure!(
        args.vouchers > 0 && args.stock >= args.vouchers as i64 && args.users >= args.vouchers as u64,
        "--vouchers must be positive and at most --stock and --users: every voucher gets a unit and a buyer"
    );
    let (addr, host) = target(&args.base_url).await?;
    let db = hmdp::startup::connect_database(args.db.as_str(), 4).await?;
    let started = Instant::now();
    let sessions = hmdp::auth::SessionStore::new(
        hmdp::startup::connect_redis(&args.redis).await?,
        hmdp::keys::Keys::new(&args.redis.key_prefix),
    );
    let keys = hmdp::auth::TokenKeys::new(args.jwt_secret.as_bytes());
    let users = hmdp::auth::seed_users(&db, &sessions, &keys, args.first_phone, args.users).await?;
    eprintln!("seeded {} users in {:.1?}", users.len(), started.elapsed());

    let open_in = args.open_in.unwrap_or_else(|| (args.connections as u64).div_ceil(1_000).max(5));
    let now_ms = unix_ms();
    // A whole second: the window's begin is stored to the second.
    let open_at_ms = (now_ms / 1_000 + open_in + 1) * 1_000;
    let vouchers = create_vouchers(&reqwest::Client::new(), &args, open_at_ms).await?;
    let mut before = Vec::with_capacity(vouchers.len());
    for voucher in &vouchers {
        before.push(audit::Snapshot::read(&db, *voucher).await?);
    }
    eprintln!(
        "{} voucher(s) from {}: {} units for {} buyers on {} connections, opening in {:.1} s",
        vouchers.len(),
        vouchers[0],
        args.stock,
        users.len(),
        args.connections,
        (open_at_ms - now_ms) as f64 / 1_000.0
    );

    let job = Job {
        addr,
        host,
        vouchers: vouchers.clone(),
        guarded: args.guard.is_some(),
        open_at_ms,
        retries: args.retries,
        connections: Vec::new(),
    };
    let tokens: Vec<String> = users.iter().map(|u| u.token.clone()).collect();
    let children = spawn_parts(&args, job, &tokens).await?;
    let parts = children.len();
    let mut merged = PartResult::default();
    for child in children {
        let out = child.wait_with_output().await?;
        anyhow::ensure!(out.status.success(), "a part of the crowd failed: {}", out.status);
        merged.merge(serde_json::from_slice(&out.stdout).context("reading a part's answers")?);
    }
    if let Some(path) = &args.answers_csv {
        write_answers_csv(path, &merged.answers)?;
    }
    let opened = Instant::now() - Duration::from_millis(unix_ms().saturating_sub(open_at_ms));
    let crowd = Crowd { args: &args, vouchers: &vouchers, merged: &merged, users: &users, opened, parts };
    let mut verdict = crowd.judge(&db, &before).await?;
    verdict.doc["openAtMs"] = json!(open_at_ms);
    println!("{}", verdict.render);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&verdict.doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(verdict.problems.is_empty(), "the crowd's sale was not clean: {}", verdict.problems.join("; "));
    Ok(())
}

/// The address to connect to, and the `Host` header to send.
async fn target(base_url: &str) -> anyhow::Result<(std::net::SocketAddr, String)> {
    let url: reqwest::Url = base_url.parse().context("--base-url")?;
    let host = url.host_str().context("--base-url has no host")?.to_owned();
    let addr = tokio::net::lookup_host((host.as_str(), url.port_or_known_default().unwrap_or(80)))
        .await?
        .next()
        .context("--base-url resolves to nothing")?;
    let header = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    Ok((addr, header))
}

/// The parts of the crowd, each a process of its own holding up to
/// `--per-process` connections. Connection k serves buyers k, k + C, ...;
/// parts take whole runs of connections.
async fn spawn_parts(args: &CrowdArgs, job: Job, tokens: &[String]) -> anyhow::Result<Vec<tokio::process::Child>> {
    let c = args.connections;
    let mut per_connection: Vec<Vec<(usize, String)>> = vec![Vec::new(); c];
    for (i, token) in tokens.iter().enumerate() {
        per_connection[i % c].push((i, token.clone()));
    }
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    let mut rest = per_connection;
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(args.per_process));
        let part = Job {
            connections: std::mem::replace(&mut rest, tail),
            host: job.host.clone(),
            vouchers: job.vouchers.clone(),
            ..job
        };
        let mut child = tokio::process::Command::new(&exe)
            .arg(PART_ARG)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a part of the crowd")?;
        let mut stdin = child.stdin.take().context("the part's stdin")?;
        tokio::io::AsyncWriteExt::write_all(&mut stdin, &serde_json::to_vec(&part)?).await?;
        drop(stdin);
        children.push(child);
    }
    Ok(children)
}

fn write_answers_csv(path: &std::path::Path, answers: &[Answer]) -> anyhow::Result<()> {
    let mut csv = String::from("user,answer,retries,sentUs,doneUs\n");
    for a in answers {
        csv.push_str(&format!("{},{},{},{},{}\n", a.user, a.what, a.retries, a.sent_us, a.done_us));
    }
    std::fs::write(path, csv).with_context(|| format!("writing {}", path.display()))
}

/// The crowd's vouchers, their windows opening at the opening instant;
/// the stock split evenly, the first ones taking what does not divide.
async fn create_vouchers(client: &reqwest::Client, args: &CrowdArgs, open_at_ms: u64) -> anyhow::Result<Vec<u64>> {
    let n = args.vouchers as i64;
    let begin = chrono::DateTime::from_timestamp_millis(open_at_ms as i64).context("the opening instant")?;
    let mut vouchers = Vec::with_capacity(args.vouchers);
    for k in 0..n {
        let stock = args.stock / n + i64::from(k < args.stock % n);
        let sale = SaleVoucher {
            title: format!("crowd of {}, stock {stock} ({} of {n})", args.connections, k + 1),
            stock,
            begin,
            lasts: chrono::Duration::seconds(args.sale_seconds.try_into().unwrap_or(i64::MAX)),
            segments: None,
            guard: args.guard.as_deref(),
            admit_per_second: args.admit_per_second,
        };
        vouchers.push(voucher::create(client, &args.base_url, &args.admin_key, &sale).await?);
    }
    Ok(vouchers)
}
