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
mod experiment;
mod locks;
mod report;
mod segments;
mod service;
mod textbook;

use std::time::Duration;

use anyhow::Context;

pub use chart::render_svg;
pub use drive::Audit;
pub use experiment::{Experiment, LabOptions, Scale};
pub use locks::{LockRun, LockScenario};
pub use report::{LabReport, StrategyRun};

use hmdp::{Config, startup};

/// Runs what `options` selects and reports it; a strategy that broke when
/// it must not, or did not break when it must, is listed by
/// [`LabReport::unexpected`].
pub async fn run(config: &Config, options: &LabOptions) -> anyhow::Result<LabReport> {
    // Creates the database when missing, and brings its schema up to date.
    startup::migrate(&startup::connect_database(config.db.url.as_str(), 2).await?).await?;
    // The textbook strategies queue for connections far longer than the
    // service's 5 s would allow: the lab measures the strategy, not the pool.
    let db = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(config.db.max_connections)
        .acquire_timeout(Duration::from_secs(600))
        .connect(config.db.url.as_str())
        .await
        .context("connecting to MariaDB")?;
    textbook::prepare(&db).await.context("creating the lab tables")?;
    let redis = startup::connect_redis(&config.redis).await?;
    let scale = options.scale(config.db.max_connections);
    let requests = std::sync::Arc::new(drive::requests(scale.users, scale.double_click_percent));
    // Voucher ids start again in every database (the stack's, bench-lab's
    // scratch one, each test's), and a strategy's Redis state outlives its
    // run: keys named after the database keep one from reading another's.
    let database: sqlx::mysql::MySqlConnectOptions = config.db.url.as_str().parse().context("parsing DATABASE_URL")?;
    let lab_prefix = format!("{}lab:{}:", config.redis.key_prefix, database.get_database().unwrap_or_default());

    let mut strategies = Vec::new();
    for experiment in Experiment::STRATEGIES.into_iter().filter(|e| options.wants(*e)) {
        tracing::info!(strategy = experiment.name(), "running");
        let run = match experiment {
            Experiment::StockGuardLock | Experiment::GroupCommit | Experiment::RedisLuaStream => {
                service::run(config, &lab_prefix, experiment, &scale, requests.clone()).await?
            }
            Experiment::RedisSegments | Experiment::RedisSegmentsBorrowing => {
                segments::run(&db, config, &lab_prefix, experiment, &scale, requests.clone()).await?
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
