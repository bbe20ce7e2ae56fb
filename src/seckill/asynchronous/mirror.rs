//! The Redis mirror of a voucher: its keys verified as made for it, loaded
//! from MariaDB (atomically and once, even when both instances try at the
//! same moment), and retired once the sale has ended and drained. (Keys
//! another voucher left under a new one's id are cleared in both modes, by
//! `seckill::stale`.)

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, LazyLock},
    time::Duration,
};

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

use super::{
    converge::{converge, with_stock_from_row},
    recovery::FAILED_KEPT,
    stream::PersistError,
};
use crate::{
    keys::Keys,
    recent::RecentIds,
    seckill::{
        error::{SeckillError, SeckillResult},
        segments::{SegmentMaps, Segments},
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
    maps: Arc<SegmentMaps>,
    /// Vouchers whose keys this instance found made for them.
    verified: RecentIds,
    /// Ids recently found to be no seckill voucher.
    missing: RecentIds,
}

impl Mirror {
    pub(super) fn new(db: MySqlPool, redis: Redis, keys: Keys, maps: Arc<SegmentMaps>) -> Self {
        Self {
            db,
            redis,
            keys,
            maps,
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
                // Another voucher's segments may differ from this one's.
                self.maps.forget(voucher_id);
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
        let segments = self.segments(voucher_id).await?;
        // Per segment: what its keys were made for, its pending orders, and
        // whether it is loaded.
        let mut found = Vec::with_capacity(segments.count());
        for sk in segments.keys() {
            let state: (Option<String>, HashMap<i64, String>, bool, bool) = redis::pipe()
                .hget(&sk.window, "made")
                .hgetall(&sk.pending)
                .exists(&sk.stock)
                .sismember(&sk.buyers, 0)
                .query_async(redis)
                .await?;
            found.push(state);
        }

        let mut tx = self.db.begin().await?;
        let sale = store::sale(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let (db_stock, begin, end) = (sale.stock, sale.begin_time, sale.end_time);
        let shelf = sale.shelf.unwrap_or(0);
        let stamp = sale.stamp();
        // Keys made for another voucher under this id: their pending orders
        // are not this voucher's (the script wipes them).
        for (made, pending, ..) in &mut found {
            if made.as_ref().is_some_and(|made| *made != stamp) {
                pending.clear();
            }
        }
        // An ended sale with nothing left to persist is not loaded again (a
        // retired sale's keys expired): it would only sit in Redis and in
        // every instance's reads. Its orders are answered ENDED from here.
        if end <= chrono::Utc::now().naive_utc() && found.iter().all(|(_, pending, ..)| pending.is_empty()) {
            tx.commit().await?;
            return Err(SeckillError::Ended);
        }
        let rows = store::orders_of_voucher(&mut *tx, voucher_id).await?;
        tx.commit().await?;
        let persisted: HashSet<i64> = rows.iter().map(|(id, _, _)| *id).collect();

        // Registered before the keys exist: once the order script can accept
        // an order, a consumer is already reading the voucher's stream (a
        // lost registration after the load left accepted orders unread).
        redis.sadd::<_, _, ()>(keys.seckill_active(), voucher_id).await?;

        // What each segment is loaded with. One segment: the row, less its
        // orders waiting (the script counts them). Several: the row less
        // every segment's orders waiting, spread evenly, unless a segment
        // is loaded already and holds units of its own: then the others
        // start at 0, and the whole is set from the row afterwards.
        let unpersisted: Vec<i64> = found
            .iter()
            .map(|(_, pending, ..)| pending.keys().filter(|id| !persisted.contains(id)).count() as i64)
            .collect();
        let some_loaded =
            found.iter().any(|(made, _, stock, marked)| *stock && *marked && made.as_deref() == Some(&stamp));
        let shares = if segments.count() == 1 {
            vec![i64::from(db_stock) - unpersisted[0]]
        } else if some_loaded {
            vec![0; segments.count()]
        } else {
            hmdp_segments::spread(i64::from(db_stock) - unpersisted.iter().sum::<i64>(), segments.count())
        };

        let mut outcomes = Vec::with_capacity(segments.count());
        for (segment, (sk, (made, pending, ..))) in segments.keys().iter().zip(&found).enumerate() {
            // Buyers are the users with a live order (a cancelled one may buy
            // again) and those of the orders waiting, each in their segment.
            let mut buyers: HashSet<u64> = rows
                .iter()
                .filter(|(_, user, live)| *live && segments.of_user(*user) == segment)
                .map(|(_, user, _)| *user)
                .collect();
            let mut holders: Vec<(u64, i64)> = Vec::new();
            let mut persisted_pending: Vec<i64> = Vec::new();
            for (order_id, accepted) in pending {
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
            // The buyers are staged under the same hash tag and renamed into
            // place by the script, so the set appears whole or not at all.
            let staging = format!("{}:staging:{}", sk.buyers, uuid::Uuid::new_v4().simple());
            let members: Vec<u64> = buyers.into_iter().collect();
            for chunk in members.chunks(STAGE_CHUNK) {
                redis::pipe().sadd(&staging, chunk).ignore().expire(&staging, 60).ignore().exec_async(redis).await?;
            }
            // The stock is counted by the script from this share and the
            // pending hash as it is then (stock_from_row).
            let mut script = LOAD.prepare_invoke();
            for key in sk.all() {
                script.key(key);
            }
            let (loaded, stock): (i64, i64) = script
                .key(&staging)
                .arg(shares[segment] + unpersisted[segment])
                .arg(begin.and_utc().timestamp_millis())
                .arg(end.and_utc().timestamp_millis())
                .arg(shelf)
                .arg(&stamp)
                .arg(&persisted_pending)
                .invoke_async(redis)
                .await?;
            match loaded {
                1 => tracing::info!(voucher_id, segment, stock, db_stock, "seckill keys loaded from MariaDB"),
                2 => tracing::warn!(
                    voucher_id,
                    segment,
                    stock,
                    stale = ?made,
                    "keys made for another voucher under this id were wiped; loaded from MariaDB"
                ),
                _ => {}
            }
            outcomes.push(loaded);
        }
        // Segments loaded beside others that were loaded already (here, or
        // by another instance at the same moment): the whole is set from
        // the row, so no unit is counted twice or lost.
        let fresh = outcomes.iter().any(|o| *o != 0);
        if segments.count() > 1 && fresh && (some_loaded || outcomes.contains(&0)) {
            let mut tx = self.db.begin().await?;
            if let Some(db_stock) = store::lock_stock(&mut *tx, voucher_id).await? {
                converge(&mut tx, &self.redis, &segments, voucher_id, db_stock.into()).await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// The voucher's segments; 404 (remembered a moment) when it is no
    /// seckill voucher.
    pub(super) async fn segments(&self, voucher_id: u64) -> SeckillResult<Arc<Segments>> {
        match self.maps.of(voucher_id).await? {
            Some(segments) => Ok(segments),
            None => {
                self.missing.insert(voucher_id, ());
                Err(SeckillError::NoSuchVoucher)
            }
        }
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
    segments: &Segments,
    voucher: u64,
    retire_after: Duration,
) -> Result<bool, PersistError> {
    // MariaDB's end: the window hash may be gone. A voucher deleted from
    // MariaDB ended long ago.
    let end_ms = store::sale(db, voucher).await?.map_or(0, |s| s.end_time.and_utc().timestamp_millis());
    // Each segment on its own slot; the sale is retired once all are.
    let mut done = true;
    for sk in segments.keys() {
        let mut script = RETIRE.prepare_invoke();
        for key in sk.all().into_iter().chain(sk.borrowing()) {
            script.key(key);
        }
        let retired: i64 = script
            .arg(end_ms)
            .arg(retire_after.as_millis() as u64)
            .arg(WORKING_KEYS_KEPT.as_millis() as u64)
            .arg(FAILED_KEPT.as_millis() as u64)
            .invoke_async(&mut redis.clone())
            .await?;
        done &= retired == 1;
    }
    if done {
        redis.clone().srem::<_, _, ()>(keys.seckill_active(), voucher).await?;
    }
    Ok(done)
}
