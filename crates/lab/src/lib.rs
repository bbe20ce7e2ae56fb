//! The strategy lab: the designs the course and the red-packet study
//! compare, run one after another in this process on the same requests,
//! each on a fresh voucher against the real MariaDB and Redis, and audited
//! from the tables afterwards. The textbook strategies (`textbook`) work on
//! lab tables without the service's UNIQUE index and CHECK, so that what
//! they get wrong shows in the counts instead of being stopped by the
//! database; the service's own paths (`service`) run on the service's
//! tables, exactly as the routes run them. `locks` replays the lock's
//! historical pitfalls with many tasks on one lock.

mod chart;
mod drive;
mod locks;
mod report;
mod service;
mod textbook;

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Args, ValueEnum};

pub use chart::render_svg;
pub use drive::Audit;
pub use locks::{LockRun, LockScenario};
pub use report::{LabReport, StrategyRun};

use hmdp::{Config, startup};

#[derive(Clone, Debug, Args)]
pub struct LabOptions {
    /// Distinct buyers (the red-packet study's 30,000).
    #[arg(long, default_value_t = 30_000)]
    pub users: u64,
    /// Stock of each strategy's voucher (the study's 20,000 packets).
    #[arg(long, default_value_t = 20_000)]
    pub stock: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 1_000)]
    pub concurrency: usize,
    /// Percent of the buyers who send two orders at once (a double click):
    /// without them no strategy could show a duplicate order.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub double_click_percent: u8,
    /// Segments of the segmented-stock strategy (it also runs with one, its
    /// baseline).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub segments: u32,
    /// The naive strategy's pause between reading the stock and writing it
    /// (up to twice this, depending on the buyer): it makes its race
    /// certain instead of likely.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub race_pause_ms: u64,
    /// A seconds-long run: 2,000 buyers, stock 500, 200 in flight, and
    /// shorter lock scenarios. Overrides the three sizes.
    #[arg(long)]
    pub quick: bool,
    /// Run only these strategies and scenarios (comma-separated names).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Experiment>,
    /// Print the report as JSON instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// Also draw wall time and correctness per strategy as an SVG file.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub save_json: Option<PathBuf>,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            users: 30_000,
            stock: 20_000,
            concurrency: 1_000,
            double_click_percent: 10,
            segments: 8,
            race_pause_ms: 5,
            quick: false,
            only: Vec::new(),
            json: false,
            chart: None,
            save_json: None,
        }
    }
}

/// The sizes a run uses once `--quick` is applied.
#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scale {
    pub users: u64,
    pub stock: u64,
    pub concurrency: usize,
    pub requests: usize,
    pub double_click_percent: u8,
    pub segments: u32,
    pub db_connections: u32,
    pub race_pause_ms: u64,
    pub lock_tasks: usize,
    pub lock_rounds: usize,
}

impl LabOptions {
    fn scale(&self, db_connections: u32) -> Scale {
        let (users, stock, concurrency) =
            if self.quick { (2_000, 500, 200) } else { (self.users, self.stock, self.concurrency) };
        let (lock_tasks, lock_rounds) = if self.quick { (8, 2) } else { (16, 3) };
        Scale {
            users,
            stock,
            concurrency: concurrency.max(1),
            requests: drive::requests(users, self.double_click_percent).len(),
            double_click_percent: self.double_click_percent,
            segments: self.segments,
            db_connections,
            race_pause_ms: self.race_pause_ms,
            lock_tasks,
            lock_rounds,
        }
    }

    fn wants(&self, experiment: Experiment) -> bool {
        self.only.is_empty() || self.only.contains(&experiment)
    }
}

/// Everything the lab can run, by the name `--only` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    Naive,
    ForUpdate,
    VersionCas,
    VersionCasRetry,
    StockGuardLock,
    GroupCommit,
    RedisLuaStream,
    OneLock,
    Segmented,
    SetnxNoExpiry,
    ExpiryNoOwnerCheck,
    CheckThenDelete,
    LeaseShorterThanWork,
    Watchdog,
}

impl Experiment {
    pub const STRATEGIES: [Experiment; 9] = [
        Self::Naive,
        Self::ForUpdate,
        Self::VersionCas,
        Self::VersionCasRetry,
        Self::StockGuardLock,
        Self::GroupCommit,
        Self::RedisLuaStream,
        Self::OneLock,
        Self::Segmented,
    ];
    pub const LOCK_SCENARIOS: [Experiment; 5] = [
        Self::SetnxNoExpiry,
        Self::ExpiryNoOwnerCheck,
        Self::CheckThenDelete,
        Self::LeaseShorterThanWork,
        Self::Watchdog,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive read-check-write",
            Self::ForUpdate => "SELECT ... FOR UPDATE",
            Self::VersionCas => "version CAS",
            Self::VersionCasRetry => "version CAS + retries",
            Self::StockGuardLock => "stock > 0 + user lock (sync)",
            Self::GroupCommit => "group commit (sync)",
            Self::RedisLuaStream => "Redis Lua + stream (async)",
            Self::OneLock => "one lock (1 segment)",
            Self::Segmented => "segmented stock",
            Self::SetnxNoExpiry => "SETNX, no expiry, holder crashes",
            Self::ExpiryNoOwnerCheck => "expiry, no owner check",
            Self::CheckThenDelete => "owner check, then DEL",
            Self::LeaseShorterThanWork => "fixed lease < work",
            Self::Watchdog => "service lock + watchdog",
        }
    }

    /// Strategies that must lose nothing and sell nothing twice; the others
    /// are here to show how they fail, and must fail.
    pub fn must_be_correct(self) -> bool {
        !matches!(self, Self::Naive)
    }
}

/// Runs what `options` selects and reports it; a strategy that broke when
/// it must not, or did not break when it must, is listed by
/// [`LabReport::unexpected`].
pub async fn run(config: &Config, options: &LabOptions) -> anyhow::Result<LabReport> {
    // Creates the database when missing, and brings its schema up to date.
    startup::migrate(&startup::connect_database(&config.db.url, 2).await?).await?;
    // The textbook strategies queue for connections far longer than the
    // service's 5 s would allow: the lab measures the strategy, not the pool.
    let db = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(config.db.max_connections)
        .acquire_timeout(Duration::from_secs(600))
        .connect(&config.db.url)
        .await
        .context("connecting to MariaDB")?;
    textbook::prepare(&db).await.context("creating the lab tables")?;
    let redis = startup::connect_redis(&config.redis.url).await?;
    let scale = options.scale(config.db.max_connections);
    let requests = std::sync::Arc::new(drive::requests(scale.users, scale.double_click_percent));
    // Voucher ids start again in every database (the stack's, bench-lab's
    // scratch one, each test's), and a strategy's Redis state outlives its
    // run: keys named after the database keep one from reading another's.
    let database: sqlx::mysql::MySqlConnectOptions = config.db.url.parse().context("parsing DATABASE_URL")?;
    let lab_prefix = format!("{}lab:{}:", config.redis.key_prefix, database.get_database().unwrap_or_default());

    let mut strategies = Vec::new();
    for experiment in Experiment::STRATEGIES.into_iter().filter(|e| options.wants(*e)) {
        tracing::info!(strategy = experiment.name(), "running");
        let run = match experiment {
            Experiment::StockGuardLock | Experiment::GroupCommit | Experiment::RedisLuaStream => {
                service::run(config, &lab_prefix, experiment, &scale, requests.clone()).await?
            }
            _ => textbook::run(&db, config, &lab_prefix, experiment, &scale, requests.clone()).await?,
        };
        eprintln!("{}", run.one_line());
        strategies.push(run);
    }

    let mut lock_runs = Vec::new();
    for experiment in Experiment::LOCK_SCENARIOS.into_iter().filter(|e| options.wants(*e)) {
        let scenario = LockScenario::of(experiment).expect("a lock scenario");
        let run = locks::run(config, &lab_prefix, redis.clone(), scenario, scale.lock_tasks, scale.lock_rounds).await?;
        eprintln!("{}", run.one_line());
        lock_runs.push(run);
    }
    db.close().await;
    Ok(LabReport { scale, strategies, locks: lock_runs })
}

/// How long a request may wait on a lock before it gives up; long enough
/// that it never happens at the lab's sizes unless something is stuck.
const LOCK_WAIT: Duration = Duration::from_secs(60);
