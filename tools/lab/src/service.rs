//! The service's own order paths, run in this process exactly as the route
//! runs them (the session aside), on the service's tables.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use chrono::Utc;
use sqlx::MySqlPool;
use tokio::time::Instant;

use super::{
    drive::{self, Audit, Refusal},
    experiment::{Experiment, Scale},
    report::StrategyRun,
    textbook::new_voucher,
};
use hmdp::{Config, config::SeckillMode, seckill, startup::Application};

/// How long the asynchronous strategy may take to persist what it accepted.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

pub async fn run(
    config: &Config,
    lab_prefix: &str,
    experiment: Experiment,
    scale: &Scale,
    requests: Arc<Vec<u64>>,
) -> anyhow::Result<StrategyRun> {
    let mut config = config.clone();
    config.server.bind_addr = "127.0.0.1:0".into();
    config.server.instance_id = Some(format!("lab-{}", std::process::id()));
    config.redis.key_prefix = lab_prefix.to_owned();
    // The lab measures the strategy, not the per-user rate limit.
    config.limits.orders_per_user_10s = 1_000_000;
    config.seckill.sync.hot_row_queue_max = config.seckill.sync.hot_row_queue_max.max(scale.concurrency * 2);
    (config.seckill.mode, config.seckill.sync.order_batch_max) = match experiment {
        Experiment::StockGuardLock => (SeckillMode::Sync, 1),
        Experiment::GroupCommit => (SeckillMode::Sync, config.seckill.sync.order_batch_max.max(2)),
        Experiment::RedisLuaStream => (SeckillMode::Async, config.seckill.sync.order_batch_max),
        other => anyhow::bail!("{} is not one of the service's paths", other.name()),
    };
    let batch_max = config.seckill.sync.order_batch_max;
    let application = Application::build(config).await?;
    let state = application.state().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(application.run_until(async move {
        stopped.await.ok();
    }));

    let voucher = new_voucher(&state.db, experiment).await?;
    let now = Utc::now().naive_utc();
    let (begin, end) = (now - chrono::Duration::minutes(1), now + chrono::Duration::days(1));
    let tags = state.seckill.prepare_sale(voucher, 1).await.context("clearing stale keys")?;
    seckill::insert_sale(&state.db, voucher, scale.stock as i64, (begin, end), &tags, true).await?;
    state.seckill.open_sale(voucher).await;

    let started = Instant::now();
    let sales = state.seckill.clone();
    let driven = drive::drive(requests, scale.concurrency, move |user| {
        let sales = sales.clone();
        async move { sales.place(user, voucher, None).await.map(drop).map_err(|e| Refusal::Borrowed(e.error_code())) }
    })
    .await;
    let mut notes = Vec::new();
    let mut wall = driven.wall;
    if experiment == Experiment::RedisLuaStream {
        let answered = driven.wall;
        wait_for_rows(&state.db, voucher, driven.successes.len() as i64).await?;
        wall = started.elapsed();
        notes.push(format!("all answered in {:.2} s; wall time runs to the last row", answered.as_secs_f64()));
    } else if experiment == Experiment::GroupCommit {
        let groups = state.seckill.group_stats();
        if groups.groups > 0 {
            notes.push(format!(
                "up to {batch_max} per transaction, {:.1} on average",
                groups.committed as f64 / groups.groups as f64
            ));
        }
    } else {
        notes.push("one transaction per order".into());
    }
    let audit = audit(&state.db, voucher, scale.stock, &driven.successes).await?;
    stop.send(()).ok();
    server.await.context("the lab's service task")??;
    Ok(StrategyRun::new(experiment, voucher, &driven, audit, wall, notes))
}

async fn wait_for_rows(db: &MySqlPool, voucher: u64, expected: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(db)
            .await?;
        if rows >= expected {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {rows} of {expected} accepted orders persisted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn audit(db: &MySqlPool, voucher: u64, initial: u64, successes: &[u64]) -> anyhow::Result<Audit> {
    let stock_left: i64 = sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
        .bind(voucher)
        .fetch_one(db)
        .await?;
    // Live orders: a cancelled or refunded one gave its unit back.
    let rows: Vec<u64> =
        sqlx::query_scalar("SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? AND live_voucher = ?")
            .bind(voucher)
            .bind(voucher)
            .fetch_all(db)
            .await?;
    Ok(Audit::of(initial as i64, stock_left, &rows, successes))
}
