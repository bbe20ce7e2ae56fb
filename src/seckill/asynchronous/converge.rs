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
use sqlx::MySqlConnection;

use super::stream::PersistError;
use crate::{keys::SeckillKeys, seckill::store};

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
