//! What the lab can run (`Experiment`), how big (`Scale`), and the flags
//! that choose both (`LabOptions`).

use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

use super::drive;

#[derive(Clone, Debug, Args)]
pub struct LabOptions {
    /// Distinct buyers (the red-packet study's 30,000: docs/lab.md).
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
    /// Segments of the segmented-stock strategies (the lock one also runs
    /// with one, its baseline).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
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
    pub(crate) fn scale(&self, db_connections: u32) -> Scale {
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

    pub(crate) fn wants(&self, experiment: Experiment) -> bool {
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
    RedisSegments,
    RedisSegmentsBorrowing,
    SetnxNoExpiry,
    ExpiryNoOwnerCheck,
    CheckThenDelete,
    LeaseShorterThanWork,
    Watchdog,
}

impl Experiment {
    pub const STRATEGIES: [Experiment; 11] = [
        Self::Naive,
        Self::ForUpdate,
        Self::VersionCas,
        Self::VersionCasRetry,
        Self::StockGuardLock,
        Self::GroupCommit,
        Self::RedisLuaStream,
        Self::OneLock,
        Self::Segmented,
        Self::RedisSegments,
        Self::RedisSegmentsBorrowing,
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
            Self::RedisSegments => "Redis segments, no borrowing",
            Self::RedisSegmentsBorrowing => "Redis segments + borrowing",
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

/// How long a request may wait on a lock before it gives up; long enough
/// that it never happens at the lab's sizes unless something is stuck.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(60);
