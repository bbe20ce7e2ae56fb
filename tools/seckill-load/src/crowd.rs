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
//!     seckill-load crowd --connections 10000 --users 30000 --stock 20000 --json crowd.json

use std::{
    collections::BTreeMap,
    io::Write as _,
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, client::conn::http1::SendRequest, header};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::Semaphore};

use crate::{
    audit,
    report::{Outcome, Recorder},
    voucher::{self, SaleVoucher},
};

/// The hidden first argument that makes this binary one part of a crowd.
pub const PART_ARG: &str = "crowd-part";

#[derive(clap::Parser, Debug)]
#[command(name = "seckill-load crowd", about = "The opening instant: a crowd of held connections orders at once")]
pub struct CrowdArgs {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    base_url: String,
    /// Connections opened and held before the sale opens.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Buyers (seeded), each ordering once; connection k serves buyers
    /// k, k + C, k + 2C, ... one after another.
    #[arg(long, default_value_t = 30_000)]
    users: u64,
    #[arg(long, default_value_t = 17_300_000_000)]
    first_phone: u64,
    /// Units of the voucher created for the sale.
    #[arg(long, default_value_t = 20_000)]
    stock: i64,
    /// Create the voucher with this guard: each buyer then asks for a sale
    /// path (solving the challenge, waiting in line as told) on its
    /// connection before ordering.
    #[arg(long, value_parser = ["path", "challenge"])]
    guard: Option<String>,
    /// The guarded voucher's admission rate.
    #[arg(long, requires = "guard")]
    admit_per_second: Option<u32>,
    /// Seconds from the voucher's creation to its opening; by default long
    /// enough to open every connection (a second per 1,000, at least 5).
    #[arg(long)]
    open_in: Option<u64>,
    /// Connections per child process (each child needs one descriptor per
    /// connection under its hard limit).
    #[arg(long, default_value_t = 10_000)]
    per_process: usize,
    /// Times a buyer follows `Retry-After` before taking the answer.
    #[arg(long, default_value_t = 3)]
    retries: u32,
    #[arg(long)]
    json: Option<PathBuf>,
    /// Every buyer's answer as CSV (`user,answer,retries,sentUs,doneUs`,
    /// times from the opening instant): the line's fairness, buyer by buyer.
    #[arg(long)]
    answers_csv: Option<PathBuf>,
    #[arg(long, default_value_t = 120.0)]
    drain_timeout: f64,
    #[command(flatten)]
    db: hmdp::config::DatabaseUrl,
    #[command(flatten)]
    redis: hmdp::config::RedisSettings,
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    jwt_secret: String,
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    admin_key: String,
}

/// One child's share of the crowd.
#[derive(Serialize, Deserialize)]
struct Job {
    addr: SocketAddr,
    host: String,
    voucher: u64,
    guarded: bool,
    /// The opening instant, in ms since the Unix epoch.
    open_at_ms: u64,
    retries: u32,
    /// Per connection, its buyers' (index, token) in order.
    connections: Vec<Vec<(usize, String)>>,
}

/// A buyer's final answer.
#[derive(Serialize, Deserialize, Clone)]
struct Answer {
    user: usize,
    /// `OK`, `OK202`, an errorCode, `HTTP 502 not an envelope`, or `dropped`.
    what: String,
    order_id: Option<i64>,
    /// From the opening instant: the first send and the final answer.
    sent_us: i64,
    done_us: i64,
    retries: u32,
}

#[derive(Serialize, Deserialize, Default)]
struct PartResult {
    answers: Vec<Answer>,
    /// Connections open (and warmed) before the opening instant.
    held_at_open: usize,
    /// Connections that could not be opened at all.
    failed_to_open: usize,
    /// Connections closed or reset with a request in flight.
    dropped_in_flight: usize,
    /// Connections closed between requests (reopened; no answer lost).
    reopened: usize,
    /// Answers that were not the envelope, by status.
    outside_envelope: BTreeMap<String, u64>,
    /// `Retry-After` followed.
    retries_followed: u64,
}

/// Runs the whole crowd: seeds, creates the voucher, spawns the parts,
/// merges, audits. Exits non-zero when the sale was not clean.
pub async fn run(args: CrowdArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0 && args.per_process > 0, "connections and per-process must be positive");
    anyhow::ensure!(args.users > 0, "--users must be positive");
    let (addr, host) = target(&args.base_url).await?;
    let db = hmdp::startup::connect_database(args.db.as_str(), 4).await?;
    let started = Instant::now();
    let sessions =
        hmdp::auth::SessionStore::new(hmdp::startup::connect_redis(&args.redis).await?, hmdp::keys::Keys::new(""));
    let keys = hmdp::auth::TokenKeys::new(args.jwt_secret.as_bytes());
    let users = hmdp::auth::seed_users(&db, &sessions, &keys, args.first_phone, args.users).await?;
    eprintln!("seeded {} users in {:.1?}", users.len(), started.elapsed());

    let open_in = args.open_in.unwrap_or_else(|| (args.connections as u64).div_ceil(1_000).max(5));
    let now_ms = unix_ms();
    // A whole second: the window's begin is stored to the second.
    let open_at_ms = (now_ms / 1_000 + open_in + 1) * 1_000;
    let voucher = create_voucher(&reqwest::Client::new(), &args, open_at_ms).await?;
    let before = audit::Snapshot::read(&db, voucher).await?;
    eprintln!(
        "voucher {voucher}: {} units for {} buyers on {} connections, opening in {:.1} s",
        args.stock,
        users.len(),
        args.connections,
        (open_at_ms - now_ms) as f64 / 1_000.0
    );

    let job = Job {
        addr,
        host,
        voucher,
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
    let crowd = Crowd { args: &args, voucher, merged: &merged, users: &users, opened, parts };
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
        let part = Job { connections: std::mem::replace(&mut rest, tail), host: job.host.clone(), ..job };
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

impl PartResult {
    fn merge(&mut self, part: PartResult) {
        self.answers.extend(part.answers);
        self.held_at_open += part.held_at_open;
        self.failed_to_open += part.failed_to_open;
        self.dropped_in_flight += part.dropped_in_flight;
        self.reopened += part.reopened;
        self.retries_followed += part.retries_followed;
        for (what, n) in part.outside_envelope {
            *self.outside_envelope.entry(what).or_default() += n;
        }
    }
}

struct Verdict {
    render: String,
    doc: Value,
    problems: Vec<String>,
}

/// The crowd's sale, answered: what the verdict is made of.
struct Crowd<'a> {
    args: &'a CrowdArgs,
    voucher: u64,
    merged: &'a PartResult,
    users: &'a [hmdp::auth::SeededUser],
    /// The opening instant, on this process's clock.
    opened: Instant,
    parts: usize,
}

/// The answers, counted.
struct Counted {
    recorder: Recorder,
    by_answer: BTreeMap<String, u64>,
    /// Each buyer's user, outcome and order id, for the audit.
    answers: Vec<(usize, Outcome, Option<i64>)>,
    /// The last success's answer, in µs after the opening instant.
    sold_out_us: Option<i64>,
    last_us: i64,
}

/// What the verdict's figures are.
struct Figures {
    summary: crate::report::Summary,
    audit: audit::Audit,
    rows_landed: Option<Instant>,
    others: BTreeMap<String, u64>,
    unanswered: u64,
}

impl Crowd<'_> {
    async fn judge(&self, db: &sqlx::MySqlPool, before: &audit::Snapshot) -> anyhow::Result<Verdict> {
        let counted = self.count();
        let figures = self.audit(db, before, &counted).await?;
        let problems = self.problems(&figures);
        let render = self.render(&counted, &figures, &problems);
        let doc = self.doc(&counted, &figures, &problems);
        Ok(Verdict { render, doc, problems })
    }

    fn count(&self) -> Counted {
        let at = |us: i64| if us >= 0 { self.opened + Duration::from_micros(us as u64) } else { self.opened };
        let mut counted = Counted {
            recorder: Recorder::new(),
            by_answer: BTreeMap::new(),
            answers: Vec::with_capacity(self.merged.answers.len()),
            sold_out_us: None,
            last_us: 0,
        };
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
            counted.recorder.record(outcome, at(a.sent_us), at(a.done_us));
            *counted.by_answer.entry(a.what.clone()).or_default() += 1;
            if matches!(outcome, Outcome::Success | Outcome::Unreplicated) {
                counted.sold_out_us = counted.sold_out_us.max(Some(a.done_us));
            }
            counted.last_us = counted.last_us.max(a.done_us);
            counted.answers.push((a.user, outcome, a.order_id));
        }
        counted
    }

    /// The sale at rest (rows landed, Redis drained) and its audit.
    async fn audit(
        &self,
        db: &sqlx::MySqlPool,
        before: &audit::Snapshot,
        counted: &Counted,
    ) -> anyhow::Result<Figures> {
        let (recorder, voucher) = (&counted.recorder, self.voucher);
        let successes = recorder.count(Outcome::Success);
        let unreplicated = recorder.count(Outcome::Unreplicated);
        let timeout = Duration::from_secs_f64(self.args.drain_timeout);
        let expected = before.orders + (successes + unreplicated) as i64;
        let rows_landed = crate::wait_for_rows(db, voucher, expected, timeout).await?;
        let mut redis = hmdp::startup::connect_redis(&self.args.redis).await?;
        let keys = hmdp::keys::Keys::new(&self.args.redis.key_prefix);
        let reconciliation = crate::wait_for_drain(db, &mut redis, &keys, voucher, timeout).await?;
        let after = audit::Snapshot::read(db, voucher).await?;
        let others: BTreeMap<String, u64> =
            counted.by_answer.iter().filter(|(what, _)| !is_expected(what)).map(|(w, n)| (w.clone(), *n)).collect();
        let mut audit = audit::Audit::new(db, voucher, before, &after, successes, unreplicated, 0)
            .await?
            .with_refusals(audit::Refusals::count(self.users.len() as u64, recorder, &others));
        if let Some(report) = reconciliation {
            audit = audit.with_redis(report);
        }
        let user_ids: Vec<Option<u64>> = self.users.iter().map(|u| Some(u.id)).collect();
        if let Some(check) = audit::check_answers(db, voucher, &user_ids, &counted.answers).await? {
            audit = audit.with_answers(check);
        }
        let finals: u64 = counted.by_answer.iter().filter(|(w, _)| is_final(w)).map(|(_, n)| n).sum();
        let unanswered = counted.answers.len() as u64 - finals;
        Ok(Figures { summary: recorder.summary(), audit, rows_landed, others, unanswered })
    }

    fn problems(&self, figures: &Figures) -> Vec<String> {
        let merged = self.merged;
        let mut problems = Vec::new();
        if merged.failed_to_open > 0 {
            problems.push(format!("{} connections could not be opened", merged.failed_to_open));
        }
        if merged.dropped_in_flight > 0 {
            problems.push(format!("{} connections closed under a request", merged.dropped_in_flight));
        }
        let outside: u64 = merged.outside_envelope.values().sum();
        if outside > 0 {
            problems.push(format!("{outside} answers outside the envelope: {:?}", merged.outside_envelope));
        }
        let unsold = figures.audit.remaining_stock;
        if unsold > 0 {
            problems.push(format!("{unsold} units unsold"));
        }
        if figures.unanswered > 0 {
            let (unanswered, others) = (figures.unanswered, &figures.others);
            problems.push(format!("{unanswered} buyers without a final answer (success or SOLD_OUT): {others:?}"));
        }
        if !figures.audit.passed {
            problems.push("the audit failed".to_owned());
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
             closed under a request: {}   answers outside the envelope: {outside} {:?}\n\
             answers by outcome: {:?}   Retry-After followed: {}\n\
             buyer latency (first send to final answer): p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms\n\
             sold out {} after the opening instant; last answer {:.3} s; all rows in MariaDB {}\n\n",
            self.args.connections,
            self.parts,
            merged.held_at_open,
            merged.failed_to_open,
            merged.reopened,
            merged.dropped_in_flight,
            merged.outside_envelope,
            counted.by_answer,
            merged.retries_followed,
            counted.sold_out_us.map_or("never (no sale)".to_owned(), |us| format!("{:.3} s", us as f64 / 1e6)),
            counted.last_us as f64 / 1e6,
            self.rows_landed_secs(figures)
                .map_or("NOT within the drain timeout".to_owned(), |s| format!("{s:.3} s after the opening instant")),
        ));
        render.push_str(&figures.audit.render());
        if !problems.is_empty() {
            render.push_str(&format!("\nPROBLEMS: {}\n", problems.join("; ")));
        }
        render
    }

    fn doc(&self, counted: &Counted, figures: &Figures, problems: &[String]) -> Value {
        let (args, merged, (p50, p99, max)) = (self.args, self.merged, Self::latency(figures));
        json!({
            "voucherId": self.voucher,
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
            "unsold": figures.audit.remaining_stock,
            "report": figures.summary,
            "audit": figures.audit,
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

/// The crowd's voucher: its window opens at the opening instant.
async fn create_voucher(client: &reqwest::Client, args: &CrowdArgs, open_at_ms: u64) -> anyhow::Result<u64> {
    let sale = SaleVoucher {
        title: format!("crowd of {}, stock {}", args.connections, args.stock),
        stock: args.stock,
        begin: chrono::DateTime::from_timestamp_millis(open_at_ms as i64).context("the opening instant")?,
        segments: 1,
        guard: args.guard.as_deref(),
        admit_per_second: args.admit_per_second,
    };
    voucher::create(client, &args.base_url, &args.admin_key, &sale).await
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// A child: reads its job on stdin, holds its connections, orders at the
/// opening instant, writes its answers on stdout.
pub fn part_main() -> anyhow::Result<()> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let job: Job = serde_json::from_reader(std::io::stdin().lock()).context("reading the job")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(part(job))?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &result)?;
    out.flush()?;
    Ok(())
}

/// What one connection's run adds to its part's result.
#[derive(Default)]
struct Tally {
    answers: Vec<Answer>,
    held: bool,
    failed_to_open: bool,
    dropped_in_flight: usize,
    reopened: usize,
    outside_envelope: BTreeMap<String, u64>,
    retries_followed: u64,
}

/// Connections opened at once while the crowd gathers: more only queue in
/// the kernel's accept queue and nginx's.
const OPENING_AT_ONCE: usize = 256;

async fn part(mut job: Job) -> anyhow::Result<PartResult> {
    let connections = std::mem::take(&mut job.connections);
    let job = Arc::new(job);
    let opening = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    // The opening instant on this process's monotonic clock.
    let now_ms = unix_ms();
    let open_at = if job.open_at_ms > now_ms {
        Instant::now() + Duration::from_millis(job.open_at_ms - now_ms)
    } else {
        Instant::now() - Duration::from_millis(now_ms - job.open_at_ms)
    };
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|buyers| {
            let (job, opening) = (job.clone(), opening.clone());
            tokio::spawn(async move { connection(&job, buyers, &opening, open_at).await })
        })
        .collect();
    let mut result = PartResult::default();
    for task in tasks {
        let tally = task.await?;
        result.answers.extend(tally.answers);
        result.held_at_open += usize::from(tally.held);
        result.failed_to_open += usize::from(tally.failed_to_open);
        result.dropped_in_flight += tally.dropped_in_flight;
        result.reopened += tally.reopened;
        result.retries_followed += tally.retries_followed;
        for (what, n) in tally.outside_envelope {
            *result.outside_envelope.entry(what).or_default() += n;
        }
    }
    Ok(result)
}

type Sender = SendRequest<Full<Bytes>>;

/// A buyer's final answer as the report counts it, and the order id.
type Final = (String, Option<i64>);

/// One held connection: opened and warmed, then its buyers in turn from
/// the opening instant.
async fn connection(job: &Job, buyers: Vec<(usize, String)>, opening: &Semaphore, open_at: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut sender = {
        let _turn = opening.acquire().await.expect("never closed");
        warm(job).await
    };
    tally.held = sender.is_some() && Instant::now() < open_at;
    tokio::time::sleep_until(open_at.into()).await;
    let micros = |t: Instant| -> i64 {
        if t >= open_at { (t - open_at).as_micros() as i64 } else { -((open_at - t).as_micros() as i64) }
    };
    for (user, token) in buyers {
        let first_sent = Instant::now();
        let mut retries = 0;
        let answer = loop {
            if sender.as_mut().is_none_or(|s| s.is_closed()) {
                if sender.is_some() {
                    tally.reopened += 1;
                }
                sender = open(job).await.ok();
            }
            let Some(s) = sender.as_mut() else {
                tally.failed_to_open = true;
                break ("no connection".to_owned(), None);
            };
            let path = if job.guarded {
                match guarded_path(job, s, &token, &mut tally).await {
                    Ok(path) => format!("/voucher-order/seckill/{}/{path}", job.voucher),
                    Err(refused) => break refused,
                }
            } else {
                format!("/voucher-order/seckill/{}", job.voucher)
            };
            match send(job, s, "POST", &path, Some(&token), None).await {
                Err(()) => {
                    tally.dropped_in_flight += 1;
                    sender = None;
                    break ("dropped".to_owned(), None);
                }
                Ok(Reply::Outside(what)) => {
                    *tally.outside_envelope.entry(what.clone()).or_default() += 1;
                    break (what, None);
                }
                Ok(Reply::Envelope { status, body, retry_after }) => {
                    let what = read(status, &body);
                    if let Some(wait) = retry_after.filter(|_| retries < job.retries) {
                        retries += 1;
                        tally.retries_followed += 1;
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    let order_id = body["data"].as_str().and_then(|id| id.parse().ok());
                    break (what, order_id);
                }
            }
        };
        let (what, order_id): Final = answer;
        tally.answers.push(Answer {
            user,
            what,
            order_id,
            sent_us: micros(first_sent),
            done_us: micros(Instant::now()),
            retries,
        });
    }
    tally
}

/// A connection nginx holds: opened (a few tries: the accept queue may be
/// full for a moment) and asked `GET /health` once.
async fn warm(job: &Job) -> Option<Sender> {
    for attempt in 0..5u64 {
        if let Ok(mut sender) = open(job).await
            && matches!(send(job, &mut sender, "GET", "/health", None, None).await, Ok(Reply::Envelope { .. }))
        {
            return Some(sender);
        }
        tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
    }
    None
}

async fn open(job: &Job) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(job.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

enum Reply {
    Envelope {
        status: StatusCode,
        body: Value,
        retry_after: Option<Duration>,
    },
    /// Not the envelope: `HTTP 502 not an envelope`.
    Outside(String),
}

/// One request on the connection; `Err` when the connection failed with
/// the request in flight (sent, or maybe sent, and no answer).
async fn send(
    job: &Job,
    sender: &mut Sender,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<Reply, ()> {
    let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, &job.host)
        .header(header::CONTENT_LENGTH, payload.len());
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, token);
    }
    let request = request.body(Full::new(payload)).map_err(|_| ())?;
    sender.ready().await.map_err(|_| ())?;
    let response = sender.send_request(request).await.map_err(|_| ())?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .filter(|_| {
            status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::TOO_MANY_REQUESTS
                || status == StatusCode::BAD_GATEWAY
        })
        .map(Duration::from_secs);
    let bytes = response.into_body().collect().await.map_err(|_| ())?.to_bytes();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(body) if body.get("success").is_some_and(Value::is_boolean) => {
            Ok(Reply::Envelope { status, body, retry_after })
        }
        _ => Ok(Reply::Outside(format!("HTTP {} not an envelope", status.as_u16()))),
    }
}

/// `OK`, `OK202` or the errorCode.
fn read(status: StatusCode, body: &Value) -> String {
    if body["success"] == true {
        return if status == StatusCode::ACCEPTED { "OK202" } else { "OK" }.to_owned();
    }
    body["errorCode"].as_str().unwrap_or("no errorCode").to_owned()
}

/// The guarded flow on the buyer's connection: ask for a path, solve the
/// challenge (on the blocking pool), wait in line as told. `Err` is the
/// buyer's final answer.
async fn guarded_path(job: &Job, sender: &mut Sender, token: &str, tally: &mut Tally) -> Result<String, Final> {
    let route = format!("/voucher-order/seckill/{}/path", job.voucher);
    let mut body: Option<Value> = None;
    let mut retries = 0;
    loop {
        let reply = send(job, sender, "POST", &route, Some(token), body.take().as_ref()).await;
        let (status, answer, retry_after) = match reply {
            Err(()) => {
                tally.dropped_in_flight += 1;
                return Err(("dropped".to_owned(), None));
            }
            Ok(Reply::Outside(what)) => {
                *tally.outside_envelope.entry(what.clone()).or_default() += 1;
                return Err((what, None));
            }
            Ok(Reply::Envelope { status, body, retry_after }) => (status, body, retry_after),
        };
        if answer["success"] != true {
            if let Some(wait) = retry_after.filter(|_| retries < job.retries) {
                retries += 1;
                tally.retries_followed += 1;
                tokio::time::sleep(wait).await;
                continue;
            }
            return Err((read(status, &answer), None));
        }
        let data = &answer["data"];
        if let Some(path) = data["path"].as_str() {
            return Ok(path.to_owned());
        }
        if let Some(challenge) = data.get("challenge") {
            let token = challenge["token"].as_str().unwrap_or_default().to_owned();
            let bits = challenge["difficulty"].as_u64().unwrap_or(0) as u8;
            let solving = token.clone();
            let nonce = tokio::task::spawn_blocking(move || hmdp_pow::solve(&solving, bits))
                .await
                .expect("the solver does not panic");
            body = Some(json!({"challenge": token, "nonce": nonce.to_string()}));
            continue;
        }
        tokio::time::sleep(Duration::from_millis(data["retryAfterMs"].as_u64().unwrap_or(1_000))).await;
    }
}
