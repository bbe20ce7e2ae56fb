//! The course's and the study's strategies, written the way they are
//! taught, on lab tables that have neither the UNIQUE (user, voucher) index
//! nor the CHECK on stock: here only the strategy stands between the
//! buyers and an oversell or a second order.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use hmdp_redis::Redis;
use sqlx::MySqlPool;

use super::{
    drive::{self, Audit, Refusal},
    experiment::{Experiment, LOCK_WAIT, Scale},
    report::StrategyRun,
};
use hmdp::{
    Config,
    lock::{Holder, LockConfig, LockService},
    startup,
};

pub async fn prepare(db: &MySqlPool) -> sqlx::Result<()> {
    sqlx::query(concat!(
        "CREATE TABLE IF NOT EXISTS lab_stock (",
        " voucher_id BIGINT UNSIGNED NOT NULL, segment INT UNSIGNED NOT NULL,",
        " stock INT NOT NULL, version BIGINT UNSIGNED NOT NULL DEFAULT 0,",
        " PRIMARY KEY (voucher_id, segment)",
        ") ENGINE = InnoDB"
    ))
    .execute(db)
    .await?;
    sqlx::query(concat!(
        "CREATE TABLE IF NOT EXISTS lab_order (",
        " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, voucher_id BIGINT UNSIGNED NOT NULL,",
        " user_id BIGINT UNSIGNED NOT NULL, segment INT UNSIGNED NOT NULL,",
        " create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,",
        " PRIMARY KEY (id), KEY idx_voucher_user (voucher_id, user_id)",
        ") ENGINE = InnoDB"
    ))
    .execute(db)
    .await?;
    Ok(())
}

/// A fresh `tb_voucher` row names every lab run, so runs never share stock.
/// On the shelf (status 1), as the service sells only such vouchers; shop 0
/// keeps it out of every real shop's list.
pub async fn new_voucher(db: &MySqlPool, experiment: Experiment) -> sqlx::Result<u64> {
    let done = sqlx::query(concat!(
        "INSERT INTO tb_voucher (shop_id, title, sub_title, pay_value, actual_value, type, status)",
        " VALUES (0, ?, 'strategy lab', 0, 0, 1, 1)"
    ))
    .bind(format!("lab: {}", experiment.name()))
    .execute(db)
    .await?;
    Ok(done.last_insert_id())
}

pub async fn run(
    db: &MySqlPool,
    config: &Config,
    lab_prefix: &str,
    experiment: Experiment,
    scale: &Scale,
    requests: Arc<Vec<u64>>,
) -> anyhow::Result<StrategyRun> {
    let voucher = new_voucher(db, experiment).await?;
    let segments = match experiment {
        Experiment::Segmented => scale.segments,
        _ => 1,
    };
    put_on_sale(db, voucher, scale.stock, segments).await?;
    let pool = db.clone();
    let db = db.clone();
    let pause = Duration::from_millis(scale.race_pause_ms);
    let retries = Arc::new(AtomicU64::new(0));
    let refused_with_stock_left = Arc::new(AtomicU64::new(0));
    let driven = match experiment {
        Experiment::Naive => {
            drive::drive(requests, scale.concurrency, move |user| naive(db.clone(), voucher, user, pause)).await
        }
        Experiment::ForUpdate => {
            drive::drive(requests, scale.concurrency, move |user| for_update(db.clone(), voucher, user)).await
        }
        Experiment::VersionCas | Experiment::VersionCasRetry => {
            let retry = experiment == Experiment::VersionCasRetry;
            let retries = retries.clone();
            drive::drive(requests, scale.concurrency, move |user| {
                version_cas(db.clone(), voucher, user, retry, retries.clone())
            })
            .await
        }
        Experiment::OneLock | Experiment::Segmented => {
            let redis = startup::connect_redis(&config.redis).await?;
            let segmented = Arc::new(SegmentLocks::new(config, redis, lab_prefix, voucher, segments)?);
            let refused = refused_with_stock_left.clone();
            drive::drive(requests, scale.concurrency, move |user| {
                segmented.clone().order(db.clone(), user, refused.clone())
            })
            .await
        }
        other => anyhow::bail!("{} is not a textbook strategy", other.name()),
    };
    let audit = audit(&pool, voucher, scale.stock, &driven.successes).await?;
    let mut notes = Vec::new();
    match experiment {
        Experiment::VersionCasRetry => notes.push(format!("{} retries", retries.load(Ordering::Relaxed))),
        Experiment::Segmented | Experiment::OneLock => {
            notes.push(format!("{segments} segment(s), one Redis lock each"));
            let refused = refused_with_stock_left.load(Ordering::Relaxed);
            if segments > 1 {
                notes.push(format!("{refused} refused while other segments held stock"));
            }
        }
        Experiment::Naive => notes.push(format!(
            "{}-{} ms pause between read and write, one connection per buyer",
            scale.race_pause_ms,
            2 * scale.race_pause_ms
        )),
        _ => {}
    }
    Ok(StrategyRun::new(experiment, voucher, &driven, audit, driven.wall, notes))
}

async fn audit(db: &MySqlPool, voucher: u64, initial: u64, successes: &[u64]) -> anyhow::Result<Audit> {
    let stock_left: i64 =
        sqlx::query_scalar("SELECT CAST(COALESCE(SUM(stock), 0) AS SIGNED) FROM lab_stock WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(db)
            .await
            .context("reading the lab stock")?;
    let rows: Vec<u64> = sqlx::query_scalar("SELECT user_id FROM lab_order WHERE voucher_id = ?")
        .bind(voucher)
        .fetch_all(db)
        .await
        .context("reading the lab orders")?;
    Ok(Audit::of(initial as i64, stock_left, &rows, successes))
}

/// The stock, split over `segments` rows (the remainder to the first ones).
async fn put_on_sale(db: &MySqlPool, voucher: u64, stock: u64, segments: u32) -> sqlx::Result<()> {
    for segment in 0..segments {
        let share = stock / u64::from(segments) + u64::from(u64::from(segment) < stock % u64::from(segments));
        sqlx::query("INSERT INTO lab_stock (voucher_id, segment, stock) VALUES (?, ?, ?)")
            .bind(voucher)
            .bind(segment)
            .bind(share)
            .execute(db)
            .await?;
    }
    Ok(())
}

fn failed(err: impl std::fmt::Display) -> Refusal {
    tracing::warn!(error = %err, "lab order failed");
    Refusal::Borrowed("ERROR")
}

async fn stock_of<'e>(db: impl sqlx::MySqlExecutor<'e>, voucher: u64) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT stock FROM lab_stock WHERE voucher_id = ? AND segment = 0")
        .bind(voucher)
        .fetch_one(db)
        .await
}

async fn has_ordered<'e>(db: impl sqlx::MySqlExecutor<'e>, voucher: u64, user: u64) -> sqlx::Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM lab_order WHERE voucher_id = ? AND user_id = ?")
        .bind(voucher)
        .bind(user)
        .fetch_one(db)
        .await?;
    Ok(n > 0)
}

async fn insert_order<'e>(db: impl sqlx::MySqlExecutor<'e>, voucher: u64, user: u64, segment: u32) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO lab_order (voucher_id, user_id, segment) VALUES (?, ?, ?)")
        .bind(voucher)
        .bind(user)
        .bind(segment)
        .execute(db)
        .await
        .map(drop)
}

/// Read, check, write, with nothing to stop two buyers between the read
/// and the write: the course's first JMeter run.
///
/// The buyer keeps one connection from the read to the write, so the
/// pool's connections are as many buyers inside their window at once, and the
/// pause differs per buyer (1x to 2x): buyers that all took the same time
/// would move in waves, each reading only after the previous wave wrote,
/// and a stock that is a multiple of the wave would then end exactly at 0.
/// With the windows out of step, the buyers that read in the last pause
/// before the final unit went are still inside their window when it goes,
/// and every one of them oversells.
async fn naive(db: MySqlPool, voucher: u64, user: u64, pause: Duration) -> Result<(), Refusal> {
    let mut conn = db.acquire().await.map_err(failed)?;
    let stock = stock_of(&mut *conn, voucher).await.map_err(failed)?;
    if stock <= 0 {
        return Err("SOLD_OUT".into());
    }
    if has_ordered(&mut *conn, voucher, user).await.map_err(failed)? {
        return Err("DUPLICATE_ORDER".into());
    }
    tokio::time::sleep(pause + pause * (user % 5) as u32 / 4).await;
    sqlx::query("UPDATE lab_stock SET stock = stock - 1 WHERE voucher_id = ? AND segment = 0")
        .bind(voucher)
        .execute(&mut *conn)
        .await
        .map_err(failed)?;
    insert_order(&mut *conn, voucher, user, 0).await.map_err(failed)
}

/// The row lock is taken first, so everything after it runs one buyer at a
/// time: correct, and serialised.
async fn for_update(db: MySqlPool, voucher: u64, user: u64) -> Result<(), Refusal> {
    let mut tx = db.begin().await.map_err(failed)?;
    let stock: i64 = sqlx::query_scalar("SELECT stock FROM lab_stock WHERE voucher_id = ? AND segment = 0 FOR UPDATE")
        .bind(voucher)
        .fetch_one(&mut *tx)
        .await
        .map_err(failed)?;
    if stock <= 0 {
        return Err("SOLD_OUT".into());
    }
    if has_ordered(&mut *tx, voucher, user).await.map_err(failed)? {
        return Err("DUPLICATE_ORDER".into());
    }
    sqlx::query("UPDATE lab_stock SET stock = stock - 1 WHERE voucher_id = ? AND segment = 0")
        .bind(voucher)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
    insert_order(&mut *tx, voucher, user, 0).await.map_err(failed)?;
    tx.commit().await.map_err(failed)
}

/// Optimistic: the update succeeds only if nobody changed the row since it
/// was read. Without retries a buyer who lost the race is refused although
/// stock is left (the course's "100 of 200"); with them, every loser pays
/// another round.
async fn version_cas(
    db: MySqlPool,
    voucher: u64,
    user: u64,
    retry: bool,
    retries: Arc<AtomicU64>,
) -> Result<(), Refusal> {
    loop {
        let mut tx = db.begin().await.map_err(failed)?;
        let (stock, version): (i64, u64) =
            sqlx::query_as("SELECT stock, version FROM lab_stock WHERE voucher_id = ? AND segment = 0")
                .bind(voucher)
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
        if stock <= 0 {
            return Err("SOLD_OUT".into());
        }
        if has_ordered(&mut *tx, voucher, user).await.map_err(failed)? {
            return Err("DUPLICATE_ORDER".into());
        }
        let updated = sqlx::query(concat!(
            "UPDATE lab_stock SET stock = stock - 1, version = version + 1",
            " WHERE voucher_id = ? AND segment = 0 AND version = ?"
        ))
        .bind(voucher)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        if updated.rows_affected() == 0 {
            tx.rollback().await.map_err(failed)?;
            if !retry {
                return Err("VERSION_CONFLICT".into());
            }
            retries.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        insert_order(&mut *tx, voucher, user, 0).await.map_err(failed)?;
        return tx.commit().await.map_err(failed);
    }
}

/// Segmented stock: a buyer always goes to the same segment (by id), and a
/// segment is changed only under its own Redis lock. In front of each Redis
/// lock sits a local mutex, as Redisson users put one: without it every
/// release would wake every waiter of this process.
struct SegmentLocks {
    locks: LockService,
    names: Vec<String>,
    local: Vec<tokio::sync::Mutex<()>>,
    voucher: u64,
}

impl SegmentLocks {
    fn new(config: &Config, redis: Redis, prefix: &str, voucher: u64, segments: u32) -> anyhow::Result<Self> {
        let locks = LockService::new(
            redis,
            LockConfig { watchdog_ttl: Duration::from_millis(config.seckill.sync.lock_watchdog_ttl_ms) },
        );
        Ok(Self {
            locks,
            names: (0..segments).map(|s| format!("{prefix}lock:segment:{voucher}:{s}")).collect(),
            local: (0..segments).map(|_| tokio::sync::Mutex::new(())).collect(),
            voucher,
        })
    }

    async fn order(
        self: Arc<Self>,
        db: MySqlPool,
        user: u64,
        refused_with_stock_left: Arc<AtomicU64>,
    ) -> Result<(), Refusal> {
        let segment = (user % self.names.len() as u64) as usize;
        let _local = self.local[segment].lock().await;
        let holder = Holder::random();
        let guard = self
            .locks
            .try_lock(&self.names[segment], &holder, LOCK_WAIT, None)
            .await
            .map_err(failed)?
            .ok_or(Refusal::Borrowed("LOCK_TIMEOUT"))?;
        let placed = self.order_in_segment(&db, user, segment as u32, &refused_with_stock_left).await;
        guard.unlock().await.map_err(failed)?;
        placed
    }

    async fn order_in_segment(
        &self,
        db: &MySqlPool,
        user: u64,
        segment: u32,
        refused_with_stock_left: &AtomicU64,
    ) -> Result<(), Refusal> {
        let mut tx = db.begin().await.map_err(failed)?;
        let stock: i64 = sqlx::query_scalar("SELECT stock FROM lab_stock WHERE voucher_id = ? AND segment = ?")
            .bind(self.voucher)
            .bind(segment)
            .fetch_one(&mut *tx)
            .await
            .map_err(failed)?;
        if stock <= 0 {
            let left: i64 = sqlx::query_scalar(
                "SELECT CAST(COALESCE(SUM(stock), 0) AS SIGNED) FROM lab_stock WHERE voucher_id = ?",
            )
            .bind(self.voucher)
            .fetch_one(&mut *tx)
            .await
            .map_err(failed)?;
            if left > 0 {
                refused_with_stock_left.fetch_add(1, Ordering::Relaxed);
            }
            return Err("SOLD_OUT".into());
        }
        if has_ordered(&mut *tx, self.voucher, user).await.map_err(failed)? {
            return Err("DUPLICATE_ORDER".into());
        }
        sqlx::query("UPDATE lab_stock SET stock = stock - 1 WHERE voucher_id = ? AND segment = ?")
            .bind(self.voucher)
            .bind(segment)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        insert_order(&mut *tx, self.voucher, user, segment).await.map_err(failed)?;
        tx.commit().await.map_err(failed)
    }
}
