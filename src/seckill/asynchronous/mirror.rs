//! The Redis mirror of a voucher: its keys verified as made for it, loaded
//! from MariaDB (atomically and once, even when both instances try at the
//! same moment), and retired once the sale has ended and drained. (Keys
//! another voucher left under a new one's id are cleared in both modes, by
//! `seckill::stale`.)

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

use super::{recovery::FAILED_KEPT, stream::PersistError};
use crate::{
    keys::Keys,
    recent::RecentIds,
    seckill::{
        asynchronous::segments::{SegmentMaps, Segments},
        error::{SeckillError, SeckillResult},
        store,
    },
};

static RETIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_retire.lua")));

/// The least a retired sale's orders stream stays, whatever
/// `working_keys_kept` says: longer than a consumer's round, which may
/// have chosen the stream just before the sale left `seckill:active`.
const STREAM_KEPT_AT_LEAST: Duration = Duration::from_secs(10);
/// Vouchers remembered as verified, at most.
const VERIFIED_MAX: usize = 10_000;
/// How long an id found missing is answered 404 without a look at MariaDB,
/// and how many such ids are remembered.
const MISSING_MEMORY: Duration = Duration::from_secs(5);
const MISSING_MAX: usize = 10_000;
/// How long a voucher found ended (its keys retired and gone) is answered
/// `ENDED` without a look at Redis or MariaDB, and how many are
/// remembered: a sale's window never changes, so this only bounds memory.
const ENDED_MEMORY: Duration = Duration::from_secs(60);
const ENDED_MAX: usize = 10_000;

pub(super) struct Mirror {
    pub(super) db: MySqlPool,
    pub(super) redis: Redis,
    pub(super) keys: Keys,
    maps: Arc<SegmentMaps>,
    /// Vouchers whose keys this instance found made for them.
    verified: RecentIds,
    /// Ids recently found to be no seckill voucher.
    missing: RecentIds,
    /// Vouchers recently found ended with their keys gone.
    ended: RecentIds,
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
            ended: RecentIds::new(ENDED_MAX, Some(ENDED_MEMORY)),
        }
    }

    /// True for a voucher id found missing a moment ago: a flood of orders
    /// for it does not reach MariaDB.
    pub(super) fn recently_missing(&self, voucher_id: u64) -> bool {
        self.missing.contains(voucher_id)
    }

    /// True for a voucher found ended a moment ago, its keys retired: a
    /// flood of late orders for it reaches neither Redis nor MariaDB.
    pub(super) fn recently_ended(&self, voucher_id: u64) -> bool {
        self.ended.contains(voucher_id)
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
            // The stamp comes with the segments, read once per voucher (by
            // the consumers as soon as the sale is active, before it
            // opens): a first order costs Redis one read, not MariaDB one.
            let segments = self.segments(voucher_id).await?;
            // An ended sale is not loaded again: its stale keys stay unused,
            // as every order is answered ENDED here.
            if segments.stamp() != Some(made.as_str()) {
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
    ///
    /// A voucher split since this instance read its segments is loaded at
    /// the segments its row names now.
    pub(super) async fn load(&self, voucher_id: u64) -> SeckillResult<()> {
        let mut loaded = self.load_from_db(voucher_id).await;
        if matches!(loaded, Ok(false)) {
            loaded = self.load_from_db(voucher_id).await;
        }
        match loaded {
            Ok(true) => Ok(()),
            Ok(false) => Err(SeckillError::unavailable("the voucher's segments changed while it loaded; ask again")),
            Err(err) => {
                match err {
                    SeckillError::NoSuchVoucher => self.missing.insert(voucher_id, ()),
                    SeckillError::Ended => self.ended.insert(voucher_id, ()),
                    _ => {}
                }
                Err(err)
            }
        }
    }

    /// Forgets the voucher's segments: they are read again from its row.
    pub(super) fn forget_segments(&self, voucher_id: u64) {
        self.maps.forget(voucher_id);
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

/// When an ended sale leaves Redis (`ASYNC_RETIRE_AFTER_MS`,
/// `ASYNC_RETIRED_KEYS_KEPT_MS`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retirement {
    /// How long after its end a drained sale is retired.
    pub(crate) after: Duration,
    /// How long a retired sale's working keys stay: late orders are
    /// answered `ENDED` from them without a look at MariaDB; after that
    /// each late order reads the voucher's row once.
    pub(crate) working_keys_kept: Duration,
}

/// Retires a sale that ended `retirement.after` ago and has nothing left
/// to persist: its keys get a TTL and it leaves the active set, so what
/// every instance reads and every lookup scans stays the live sales, and
/// Redis does not grow with every sale ever sold. Returns whether it was
/// retired.
pub(super) async fn retire(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    segments: &Segments,
    voucher: u64,
    retirement: Retirement,
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
            .arg(retirement.after.as_millis() as u64)
            .arg(retirement.working_keys_kept.as_millis() as u64)
            .arg(FAILED_KEPT.as_millis() as u64)
            .arg(STREAM_KEPT_AT_LEAST.as_millis() as u64)
            .invoke_async(&mut redis.clone())
            .await?;
        done &= retired == 1;
    }
    if done {
        redis.clone().srem::<_, _, ()>(keys.seckill_active(), voucher).await?;
    }
    Ok(done)
}
