//! Redis's stock follows MariaDB's, never the other way round. Redis may
//! hold more than MariaDB can honour: an operator lowered the row, a write
//! to Redis was lost, a dead letter gave back a unit the database never
//! had. Each time the database says so (a batch refused for lack of stock,
//! a dead letter, the admin's stock route), Redis's stock is set from the
//! row: what MariaDB has left, less the orders accepted in Redis and not
//! persisted yet.

use std::sync::LazyLock;

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::{MySqlConnection, MySqlPool};

use super::stream::PersistError;
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::{
        error::{SeckillError, SeckillResult},
        model::StockSet,
        store,
    },
};

/// A script with `stock_from_row`, the function both stock-setting scripts
/// share, prepended.
macro_rules! with_stock_from_row {
    ($script:literal) => {
        concat!(include_str!("../../../lua/stock_from_row.lua"), include_str!($script))
    };
}
pub(super) use with_stock_from_row;

static CONVERGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_stock_from_row!("../../../lua/seckill_converge.lua")));

/// Order ids per `IN (...)` when looking pending orders up.
const LOOKUP_CHUNK: usize = 1_000;

/// The orders accepted in Redis and not persisted: how many, and the
/// pending ones that have their row after all (persisted, not yet
/// acknowledged), which the script must not count. Needs the voucher's row
/// lock in `conn`: no batch persists meanwhile.
pub(super) struct Unpersisted {
    pub count: i64,
    pub persisted: Vec<i64>,
}

pub(super) async fn unpersisted(
    conn: &mut MySqlConnection,
    redis: &Redis,
    sk: &SeckillKeys,
    voucher: u64,
) -> Result<Unpersisted, PersistError> {
    let pending: Vec<i64> = redis.clone().hkeys(&sk.pending).await?;
    let mut persisted = Vec::new();
    for chunk in pending.chunks(LOOKUP_CHUNK) {
        let rows = store::existing_orders(&mut *conn, chunk).await?;
        persisted.extend(rows.into_iter().filter(|(_, owner)| owner.voucher_id == voucher).map(|(id, _)| id));
    }
    Ok(Unpersisted { count: (pending.len() - persisted.len()) as i64, persisted })
}

/// Sets Redis's stock to `db_stock` less the unpersisted orders, counted
/// again inside the script (orders accepted since `found` was read count
/// too). Returns the stock set, `None` when the voucher's keys are not
/// loaded (its load reads MariaDB).
pub(super) async fn set_from_row(
    redis: &Redis,
    sk: &SeckillKeys,
    voucher: u64,
    db_stock: i64,
    found: &Unpersisted,
) -> Result<Option<i64>, PersistError> {
    let (before, after): (i64, i64) = CONVERGE
        .key(&sk.stock)
        .key(&sk.buyers)
        .key(&sk.pending)
        .arg(db_stock)
        .arg(&found.persisted)
        .invoke_async(&mut redis.clone())
        .await?;
    Ok(report(voucher, db_stock, before, after))
}

/// What a stock-setting script answered: the stock set (`None`: keys not
/// loaded), counted and logged when it changed.
pub(super) fn report(voucher: u64, db_stock: i64, before: i64, after: i64) -> Option<i64> {
    if after < 0 {
        return None;
    }
    if before != after {
        metrics::counter!("hmdp_redis_stock_corrections_total").increment(1);
        tracing::warn!(voucher, redis_before = before, redis_now = after, db_stock, "Redis stock set from MariaDB's");
    }
    Some(after)
}

/// Both steps, with the row lock held by the caller.
pub(super) async fn converge(
    conn: &mut MySqlConnection,
    redis: &Redis,
    sk: &SeckillKeys,
    voucher: u64,
    db_stock: i64,
) -> Result<Option<i64>, PersistError> {
    let found = unpersisted(conn, redis, sk, voucher).await?;
    set_from_row(redis, sk, voucher, db_stock, &found).await
}

/// The admin's stock: `stock` more units for sale from now on. Orders
/// accepted in Redis and not persisted yet keep their units, so the row
/// gets `stock` plus those, and Redis `stock`, both under the row lock.
pub(super) async fn set_stock(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    voucher_id: u64,
    stock: i32,
) -> SeckillResult<StockSet> {
    let sk = keys.seckill(voucher_id);
    let mut tx = db.begin().await?;
    let before = store::lock_stock(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
    let found = unpersisted(&mut tx, redis, &sk, voucher_id).await?;
    let row = i32::try_from(i64::from(stock) + found.count).map_err(|_| SeckillError::StockOutOfRange)?;
    store::set_stock(&mut *tx, voucher_id, row).await?;
    let redis_stock = set_from_row(redis, &sk, voucher_id, row.into(), &found).await?;
    tx.commit().await?;
    tracing::info!(voucher_id, stock, row, ?redis_stock, "seckill stock set");
    Ok(StockSet { stock, previous: i64::from(before) - found.count, awaiting_persistence: found.count.max(0) as u64 })
}

/// Units MariaDB got back (cancelled or refunded orders), told again
/// later: under the row lock of a transaction of its own. Idempotent.
pub(super) async fn units_returned(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    voucher_id: u64,
    users: &[u64],
) -> SeckillResult<()> {
    let mut tx = db.begin().await?;
    let Some(db_stock) = store::lock_stock(&mut *tx, voucher_id).await? else { return Ok(()) };
    units_returned_locked(&mut tx, redis, keys, voucher_id, db_stock.into(), users).await?;
    tx.commit().await?;
    Ok(())
}

/// Units MariaDB got back, told to Redis inside the transaction that
/// returned them, which holds the voucher's row lock (`db_stock` is the
/// row's stock there): Redis's stock is set from the row and the users'
/// buyer slots are freed, so they may buy again. Idempotent.
///
/// Before the commit, so the lock is taken once: should the commit fail
/// after this, Redis holds units MariaDB lacks, and the first batch
/// MariaDB refuses for want of stock sets Redis from the row again (a
/// freed slot of a still-live order meets the UNIQUE index).
pub(super) async fn units_returned_locked(
    conn: &mut MySqlConnection,
    redis: &Redis,
    keys: &Keys,
    voucher_id: u64,
    db_stock: i64,
    users: &[u64],
) -> SeckillResult<()> {
    let sk = keys.seckill(voucher_id);
    let found = unpersisted(&mut *conn, redis, &sk, voucher_id).await?;
    // Only users without another live order of the voucher lose their slot.
    let still_holding = store::held_orders(&mut *conn, voucher_id, users).await?;
    let freed: Vec<u64> = users.iter().copied().filter(|u| !still_holding.contains_key(u)).collect();
    if !freed.is_empty() {
        redis.clone().srem::<_, _, ()>(&sk.buyers, &freed).await?;
    }
    set_from_row(redis, &sk, voucher_id, db_stock, &found).await?;
    Ok(())
}

/// A voucher's shelf status, where the order script reads it. A voucher
/// not loaded yet is left alone: its load reads the status from MariaDB,
/// which has it already.
pub(super) async fn shelf_changed(redis: &mut Redis, keys: &Keys, voucher_id: u64, status: i64) -> SeckillResult<()> {
    let window = &keys.seckill(voucher_id).window;
    if redis.exists::<_, bool>(window).await? {
        redis.hset::<_, _, _, ()>(window, "shelf", status).await?;
    }
    Ok(())
}
