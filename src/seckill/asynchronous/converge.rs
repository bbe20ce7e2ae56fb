//! Redis's stock follows MariaDB's, never the other way round. Redis may
//! hold more than MariaDB can honour: an operator lowered the row, a write
//! to Redis was lost, a dead letter gave back a unit the database never
//! had. Each time the database says so (a batch refused for lack of stock,
//! a dead letter, the admin's stock route), Redis's stock is set from the
//! row: what MariaDB has left, less the orders accepted in Redis and not
//! persisted yet. A voucher sold in segments has that spread over its
//! segments, each set in a script of its own slot under a new epoch.

use std::sync::LazyLock;

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::{MySqlConnection, MySqlPool};

use super::stream::PersistError;
use crate::{
    keys::SeckillKeys,
    seckill::{
        asynchronous::segments::Segments,
        error::{SeckillError, SeckillResult},
        model::StockSet,
        store,
    },
};

/// A script of `lua/`, by its file name, with `stock_from_row`, the
/// function the stock-setting scripts share, prepended.
macro_rules! with_stock_from_row {
    ($script:literal) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/stock_from_row.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $script))
        )
    };
}
pub(super) use with_stock_from_row;

static ADD_BUYERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_buyers_add.lua")));
static CONVERGE: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("seckill_converge.lua")));
static CONVERGE_SEGMENT: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("segment_converge.lua")));

/// Order ids per `IN (...)` when looking pending orders up.
const LOOKUP_CHUNK: usize = 1_000;
/// Users per `SADD` when the buyers are learnt again.
const BUYERS_CHUNK: usize = 5_000;

/// The orders accepted in Redis and not persisted: how many, and the
/// pending ones that have their row after all (persisted, not yet
/// acknowledged), which the script must not count. Needs the voucher's row
/// lock in `conn`: no batch persists meanwhile.
pub(super) struct Unpersisted {
    pub(crate) count: i64,
    pub(crate) persisted: Vec<i64>,
}

pub(super) async fn unpersisted(
    conn: &mut MySqlConnection,
    redis: &Redis,
    sk: &SeckillKeys,
    voucher: u64,
) -> Result<Unpersisted, PersistError> {
    // Order id -> `<userId>:<ts ms>`: a row under the id is this order's
    // only if it is its user's (and voucher's); another's is an id met
    // twice, and this order still waits for its unit.
    let pending: Vec<(i64, String)> = redis.clone().hgetall(&sk.pending).await?;
    let mut persisted = Vec::new();
    for chunk in pending.chunks(LOOKUP_CHUNK) {
        let ids: Vec<i64> = chunk.iter().map(|(id, _)| *id).collect();
        let rows = store::existing_orders(&mut *conn, &ids).await?;
        persisted.extend(chunk.iter().filter_map(|(id, accepted)| {
            let user_id = accepted.split_once(':')?.0.parse().ok()?;
            (rows.get(id) == Some(&store::OrderOwner { user_id, voucher_id: voucher })).then_some(*id)
        }));
    }
    Ok(Unpersisted { count: (pending.len() - persisted.len()) as i64, persisted })
}

/// Each segment's unpersisted orders, segment 0 first.
pub(super) async fn unpersisted_each(
    conn: &mut MySqlConnection,
    redis: &Redis,
    segments: &Segments,
    voucher: u64,
) -> Result<Vec<Unpersisted>, PersistError> {
    let mut found = Vec::with_capacity(segments.count());
    for sk in segments.keys() {
        found.push(unpersisted(&mut *conn, redis, sk, voucher).await?);
    }
    Ok(found)
}

/// Sets Redis's stock to `db_stock` less the unpersisted orders, counted
/// again inside the script (orders accepted since `found` was read count
/// too). Returns the stock set (over every segment), `None` when the
/// voucher's keys are not loaded (its load reads MariaDB).
///
/// In segments: `db_stock` less every segment's orders waiting is spread
/// evenly, and each segment is set to its share (plus its own orders
/// waiting, which the script takes off again). A segment whose orders
/// waiting exceed that leaves the units it is short to the next one.
pub(super) async fn set_from_row(
    redis: &Redis,
    segments: &Segments,
    voucher: u64,
    db_stock: i64,
    found: &[Unpersisted],
) -> Result<Option<i64>, PersistError> {
    if segments.count() == 1 {
        let sk = &segments.keys()[0];
        let (before, after): (i64, i64) = CONVERGE
            .key(&sk.stock)
            .key(&sk.buyers)
            .key(&sk.pending)
            .arg(db_stock)
            .arg(&found[0].persisted)
            .invoke_async(&mut redis.clone())
            .await?;
        return Ok(report(voucher, db_stock, before, after));
    }
    let waiting: i64 = found.iter().map(|f| f.count).sum();
    let shares = hmdp_segments::spread(db_stock - waiting, segments.count());
    let epoch = uuid::Uuid::new_v4().simple().to_string();
    let (mut short, mut before_all, mut after_all, mut loaded) = (0, 0, 0, false);
    for ((sk, share), found) in segments.keys().iter().zip(shares).zip(found) {
        let (before, after, missing): (i64, i64, i64) = CONVERGE_SEGMENT
            .key(&sk.stock)
            .key(&sk.buyers)
            .key(&sk.pending)
            .key(&sk.lent)
            .arg(found.count + share - short)
            .arg(&epoch)
            .arg(&found.persisted)
            .invoke_async(&mut redis.clone())
            .await?;
        if after < 0 {
            // Not loaded: its load counts it from the row.
            continue;
        }
        (short, loaded) = (missing, true);
        before_all += before;
        after_all += after;
    }
    segments.reopen();
    Ok(if loaded { report(voucher, db_stock, before_all, after_all) } else { None })
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

/// Both steps, with the row lock held by the caller, over the segments
/// the row records (`Segments::recorded_now`).
pub(super) async fn converge(
    conn: &mut MySqlConnection,
    redis: &Redis,
    segments: &Segments,
    voucher: u64,
    db_stock: i64,
) -> Result<Option<i64>, PersistError> {
    let recorded = segments.recorded_now(&mut *conn, voucher).await?;
    let segments = recorded.as_ref().unwrap_or(segments);
    let found = unpersisted_each(conn, redis, segments, voucher).await?;
    set_from_row(redis, segments, voucher, db_stock, &found).await
}

/// After a failover: the new master may lack orders the old one accepted
/// and the consumers persisted (rows it knows nothing of). Under the row
/// lock, the users of every live row join the buyers set (in their
/// segments) and the stock is set from the row. Returns the stock set,
/// `None` when the keys are not loaded (their load reads MariaDB).
pub(super) async fn relearn(
    db: &MySqlPool,
    redis: &Redis,
    segments: &Segments,
    voucher: u64,
) -> Result<Option<i64>, PersistError> {
    let mut tx = db.begin().await?;
    let Some(db_stock) = store::lock_stock(&mut *tx, voucher).await? else { return Ok(None) };
    let recorded = segments.recorded_now(&mut tx, voucher).await?;
    let segments = recorded.as_ref().unwrap_or(segments);
    let mut buyers = vec![Vec::new(); segments.count()];
    for (_, user, live) in store::orders_of_voucher(&mut *tx, voucher).await? {
        if live {
            buyers[segments.of_user(user)].push(user);
        }
    }
    let mut missing = 0;
    for (sk, users) in segments.keys().iter().zip(&buyers) {
        for chunk in users.chunks(BUYERS_CHUNK) {
            let added: i64 = ADD_BUYERS.key(&sk.buyers).arg(chunk).invoke_async(&mut redis.clone()).await?;
            missing += added.max(0);
        }
    }
    let stock = converge(&mut tx, redis, segments, voucher, db_stock.into()).await?;
    tx.commit().await?;
    tracing::warn!(
        voucher,
        missing_buyers = missing,
        ?stock,
        "Redis learnt the voucher's buyers and stock again from MariaDB"
    );
    Ok(stock)
}

/// The admin's stock: `stock` more units for sale from now on. Orders
/// accepted in Redis and not persisted yet keep their units, so the row
/// gets `stock` plus those, and Redis `stock`, both under the row lock.
pub(super) async fn set_stock(
    db: &MySqlPool,
    redis: &Redis,
    segments: &Segments,
    voucher_id: u64,
    stock: i32,
) -> SeckillResult<StockSet> {
    let mut tx = db.begin().await?;
    let before = store::lock_stock(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
    let recorded = segments.recorded_now(&mut tx, voucher_id).await?;
    let segments = recorded.as_ref().unwrap_or(segments);
    let found = unpersisted_each(&mut tx, redis, segments, voucher_id).await?;
    let waiting: i64 = found.iter().map(|f| f.count).sum();
    let row = i32::try_from(i64::from(stock) + waiting).map_err(|_| SeckillError::StockOutOfRange)?;
    store::set_stock(&mut *tx, voucher_id, row).await?;
    let redis_stock = set_from_row(redis, segments, voucher_id, row.into(), &found).await?;
    tx.commit().await?;
    tracing::info!(voucher_id, stock, row, ?redis_stock, "seckill stock set");
    Ok(StockSet { stock, previous: i64::from(before) - waiting, awaiting_persistence: waiting.max(0) as u64 })
}

/// Units MariaDB got back (cancelled or refunded orders), told again
/// later: under the row lock of a transaction of its own. Idempotent.
pub(super) async fn units_returned(
    db: &MySqlPool,
    redis: &Redis,
    segments: &Segments,
    voucher_id: u64,
    users: &[u64],
) -> SeckillResult<()> {
    let mut tx = db.begin().await?;
    let Some(db_stock) = store::lock_stock(&mut *tx, voucher_id).await? else { return Ok(()) };
    units_returned_locked(&mut tx, redis, segments, voucher_id, db_stock.into(), users).await?;
    tx.commit().await?;
    Ok(())
}

/// Units MariaDB got back, told to Redis inside the transaction that
/// returned them, which holds the voucher's row lock (`db_stock` is the
/// row's stock there): Redis's stock is set from the row and the users'
/// buyer slots are freed (each in their segment), so they may buy again.
/// Idempotent.
///
/// Before the commit, so the lock is taken once: should the commit fail
/// after this, Redis holds units MariaDB lacks, and the first batch
/// MariaDB refuses for want of stock sets Redis from the row again (a
/// freed slot of a still-live order meets the UNIQUE index).
pub(super) async fn units_returned_locked(
    conn: &mut MySqlConnection,
    redis: &Redis,
    segments: &Segments,
    voucher_id: u64,
    db_stock: i64,
    users: &[u64],
) -> SeckillResult<()> {
    let recorded = segments.recorded_now(&mut *conn, voucher_id).await?;
    let segments = recorded.as_ref().unwrap_or(segments);
    let found = unpersisted_each(&mut *conn, redis, segments, voucher_id).await?;
    // Only users without another live order of the voucher lose their slot:
    // in their segment, and in segment 0, which holds buyers of a split
    // that has not moved them yet.
    let still_holding = store::held_orders(&mut *conn, voucher_id, users).await?;
    for (segment, sk) in segments.keys().iter().enumerate() {
        let freed: Vec<u64> = users
            .iter()
            .copied()
            .filter(|u| (segment == 0 || segments.of_user(*u) == segment) && !still_holding.contains_key(u))
            .collect();
        if !freed.is_empty() {
            redis.clone().srem::<_, _, ()>(&sk.buyers, &freed).await?;
        }
    }
    set_from_row(redis, segments, voucher_id, db_stock, &found).await?;
    Ok(())
}

/// A voucher's shelf status, where the order script reads it (in every
/// segment). A segment not loaded yet is left alone: its load reads the
/// status from MariaDB, which has it already.
pub(super) async fn shelf_changed(redis: &mut Redis, segments: &Segments, status: i64) -> SeckillResult<()> {
    for sk in segments.keys() {
        if redis.exists::<_, bool>(&sk.window).await? {
            redis.hset::<_, _, _, ()>(&sk.window, "shelf", status).await?;
        }
    }
    Ok(())
}
