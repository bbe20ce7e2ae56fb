//! The Redis mirror of a voucher: its keys verified as made for it, loaded
//! from MariaDB (atomically and once, even when both instances try at the
//! same moment), and retired once the sale has ended and drained. (Keys
//! another voucher left under a new one's id are cleared in both modes, by
//! `seckill::stale`.)

use std::{
    collections::{HashMap, HashSet},
    sync::LazyLock,
    time::Duration,
};

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

use super::{converge::with_stock_from_row, recovery::FAILED_KEPT, stream::PersistError};
use crate::{
    keys::Keys,
    recent::RecentIds,
    seckill::{
        error::{SeckillError, SeckillResult},
        store,
    },
};

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("../../../lua/seckill_load.lua")));
static RETIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_retire.lua")));

/// Members per SADD when staging a rebuilt buyers set.
const STAGE_CHUNK: usize = 5_000;
/// Vouchers remembered as verified, at most.
const VERIFIED_MAX: usize = 10_000;
/// How long an id found missing is answered 404 without a look at MariaDB,
/// and how many such ids are remembered.
const MISSING_MEMORY: Duration = Duration::from_secs(5);
const MISSING_MAX: usize = 10_000;
/// A retired sale's working keys stay this long (late requests are still
/// answered from them), then go; an order after that reads MariaDB.
const WORKING_KEYS_KEPT: Duration = Duration::from_secs(60 * 60);

pub(super) struct Mirror {
    db: MySqlPool,
    redis: Redis,
    keys: Keys,
    /// Vouchers whose keys this instance found made for them.
    verified: RecentIds,
    /// Ids recently found to be no seckill voucher.
    missing: RecentIds,
}

impl Mirror {
    pub(super) fn new(db: MySqlPool, redis: Redis, keys: Keys) -> Self {
        Self {
            db,
            redis,
            keys,
            verified: RecentIds::new(VERIFIED_MAX, None),
            missing: RecentIds::new(MISSING_MAX, Some(MISSING_MEMORY)),
        }
    }

    /// True for a voucher id found missing a moment ago: a flood of orders
    /// for it does not reach MariaDB.
    pub(super) fn recently_missing(&self, voucher_id: u64) -> bool {
        self.missing.contains(voucher_id)
    }

    /// Once per voucher and instance, before its first order here: keys
    /// made for another voucher under this id (`made` differs from
    /// MariaDB's stamp) would sell that voucher's stock and refuse its
    /// buyers; they are wiped and loaded again. Keys not loaded yet are
    /// left to the order script, which reports them.
    pub(super) async fn verify(&self, voucher_id: u64) -> SeckillResult<()> {
        if self.verified.contains(voucher_id) {
            return Ok(());
        }
        let made: Option<String> = self.redis.clone().hget(&self.keys.seckill(voucher_id).window, "made").await?;
        if let Some(made) = made {
            let Some(sale) = store::sale(&self.db, voucher_id).await? else {
                self.missing.insert(voucher_id, ());
                return Err(SeckillError::NoSuchVoucher);
            };
            // An ended sale is not loaded again: its stale keys stay unused,
            // as every order is answered ENDED here.
            if made != sale.stamp() {
                self.load(voucher_id).await?;
            }
        }
        self.verified.insert(voucher_id, ());
        Ok(())
    }

    /// Loads a voucher's keys from MariaDB unless they are all there, and makes
    /// the consumers read its stream. 404 when it is not a seckill voucher.
    ///
    /// Orders accepted but not yet persisted are in the pending hash: they are
    /// read first, then MariaDB in one snapshot, so an order persisted in
    /// between is found in MariaDB and counted once. While any key is missing
    /// the order script accepts nothing, so nothing else moves meanwhile.
    pub(super) async fn load(&self, voucher_id: u64) -> SeckillResult<()> {
        let loaded = self.load_from_db(voucher_id).await;
        if let Err(SeckillError::NoSuchVoucher) = loaded {
            self.missing.insert(voucher_id, ());
        }
        loaded
    }

    async fn load_from_db(&self, voucher_id: u64) -> SeckillResult<()> {
        let (keys, redis) = (&self.keys, &mut self.redis.clone());
        let sk = keys.seckill(voucher_id);
        let (made, mut pending): (Option<String>, HashMap<i64, String>) =
            redis::pipe().hget(&sk.window, "made").hgetall(&sk.pending).query_async(redis).await?;

        let mut tx = self.db.begin().await?;
        let sale = store::sale(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let (db_stock, begin, end) = (sale.stock, sale.begin_time, sale.end_time);
        let shelf = sale.shelf.unwrap_or(0);
        let stamp = sale.stamp();
        // Keys made for another voucher under this id: their pending orders
        // are not this voucher's (the script wipes them).
        if made.as_ref().is_some_and(|made| *made != stamp) {
            pending.clear();
        }
        // An ended sale with nothing left to persist is not loaded again (a
        // retired sale's keys expired): it would only sit in Redis and in
        // every instance's reads. Its orders are answered ENDED from here.
        if end <= chrono::Utc::now().naive_utc() && pending.is_empty() {
            tx.commit().await?;
            return Err(SeckillError::Ended);
        }
        let rows = store::orders_of_voucher(&mut *tx, voucher_id).await?;
        tx.commit().await?;

        let persisted: HashSet<i64> = rows.iter().map(|(id, _, _)| *id).collect();
        // Buyers are the users with a live order: a cancelled one may buy again.
        let mut buyers: HashSet<u64> = rows.iter().filter(|(_, _, live)| *live).map(|(_, user, _)| *user).collect();
        let mut holders: Vec<(u64, i64)> = Vec::new();
        let mut persisted_pending: Vec<i64> = Vec::new();
        for (order_id, accepted) in &pending {
            if persisted.contains(order_id) {
                persisted_pending.push(*order_id);
            } else if let Some(user) = accepted.split(':').next().and_then(|u| u.parse().ok()) {
                buyers.insert(user);
                holders.push((user, *order_id));
            }
        }
        // Who holds which pending order, as the order script records it.
        for chunk in holders.chunks(STAGE_CHUNK) {
            redis.hset_multiple::<_, _, _, ()>(&sk.holders, chunk).await?;
        }

        // Registered before the keys exist: once the order script can accept
        // an order, a consumer is already reading the voucher's stream (a
        // lost registration after the load left accepted orders unread).
        redis.sadd::<_, _, ()>(keys.seckill_active(), voucher_id).await?;
        // The buyers are staged under the same hash tag and renamed into place
        // by the script, so the set appears whole or not at all.
        let staging = format!("{}:staging:{}", sk.buyers, uuid::Uuid::new_v4().simple());
        let members: Vec<u64> = buyers.into_iter().collect();
        for chunk in members.chunks(STAGE_CHUNK) {
            redis::pipe().sadd(&staging, chunk).ignore().expire(&staging, 60).ignore().exec_async(redis).await?;
        }
        // The stock is counted by the script from MariaDB's and the pending
        // hash as it is then (stock_from_row).
        let mut script = LOAD.prepare_invoke();
        for key in sk.all() {
            script.key(key);
        }
        let (loaded, stock): (i64, i64) = script
            .key(&staging)
            .arg(db_stock)
            .arg(begin.and_utc().timestamp_millis())
            .arg(end.and_utc().timestamp_millis())
            .arg(shelf)
            .arg(&stamp)
            .arg(&persisted_pending)
            .invoke_async(redis)
            .await?;
        match loaded {
            1 => tracing::info!(voucher_id, stock, db_stock, "seckill keys loaded from MariaDB"),
            2 => tracing::warn!(
                voucher_id,
                stock,
                stale = ?made,
                "keys made for another voucher under this id were wiped; loaded from MariaDB"
            ),
            _ => {}
        }
        Ok(())
    }
}

/// Retires a sale that ended `retire_after` ago and has nothing left to
/// persist: its keys get a TTL and it leaves the active set, so what every
/// instance reads and every lookup scans stays the live sales. Returns
/// whether it was retired.
pub(super) async fn retire(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    voucher: u64,
    retire_after: Duration,
) -> Result<bool, PersistError> {
    // MariaDB's end: the window hash may be gone. A voucher deleted from
    // MariaDB ended long ago.
    let end_ms = store::sale(db, voucher).await?.map_or(0, |s| s.end_time.and_utc().timestamp_millis());
    let sk = keys.seckill(voucher);
    let mut script = RETIRE.prepare_invoke();
    for key in sk.all() {
        script.key(key);
    }
    let done: i64 = script
        .arg(end_ms)
        .arg(retire_after.as_millis() as u64)
        .arg(WORKING_KEYS_KEPT.as_millis() as u64)
        .arg(FAILED_KEPT.as_millis() as u64)
        .invoke_async(&mut redis.clone())
        .await?;
    if done == 1 {
        redis.clone().srem::<_, _, ()>(keys.seckill_active(), voucher).await?;
    }
    Ok(done == 1)
}
