//! Waiting for a sale to come to rest before it is audited: its rows in
//! MariaDB, its Redis stream drained. Polls only; a poll that fails is
//! tried again until its deadline (a fault run kills every connection to
//! the database, this tool's idle ones included, and a poll is safe to
//! repeat).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use hmdp::keys::Keys;

/// When every voucher's order count reached its expected one (polled, all
/// vouchers in one query, so a sale of 500 vouchers is timed as finely as
/// a sale of one), or `None` after the timeout.
pub async fn rows(db: &sqlx::MySqlPool, expected: &[(u64, i64)], timeout: Duration) -> anyhow::Result<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut query =
            sqlx::QueryBuilder::new("SELECT voucher_id, COUNT(*) FROM tb_voucher_order WHERE voucher_id IN (");
        let mut ids = query.separated(", ");
        for (voucher, _) in expected {
            ids.push_bind(*voucher);
        }
        query.push(") GROUP BY voucher_id");
        match query.build_query_as::<(u64, i64)>().fetch_all(db).await {
            Ok(counts) => {
                let counts: HashMap<u64, i64> = counts.into_iter().collect();
                if expected.iter().all(|(voucher, want)| counts.get(voucher).copied().unwrap_or(0) >= *want) {
                    return Ok(Some(Instant::now()));
                }
            }
            Err(err) => retry_until(deadline, "polling the orders", err)?,
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// For a voucher sold in the asynchronous mode (its keys are in Redis):
/// waits until its stream is drained and compares Redis with MariaDB.
pub async fn drain(
    db: &sqlx::MySqlPool,
    redis: &mut hmdp_redis::Redis,
    keys: &Keys,
    voucher: u64,
    timeout: Duration,
) -> anyhow::Result<Option<hmdp::seckill::Reconciliation>> {
    let deadline = Instant::now() + timeout;
    loop {
        match hmdp::seckill::reconcile(db, redis, keys, voucher).await {
            Ok(report) if report.redis_stock.is_none() => return Ok(None),
            Ok(report) if report.drained() || Instant::now() >= deadline => return Ok(Some(report)),
            Ok(_) => {}
            Err(err) => retry_until(deadline, "reading the drain", err)?,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn retry_until(deadline: Instant, what: &str, err: impl Into<anyhow::Error>) -> anyhow::Result<()> {
    let err = err.into();
    if Instant::now() >= deadline {
        return Err(err);
    }
    eprintln!("{what} failed, retrying: {err:#}");
    Ok(())
}
