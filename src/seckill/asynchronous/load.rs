//! Loading a voucher's keys from MariaDB, segment by segment: the pending
//! orders read first, then the row and its orders in one snapshot, so an
//! order persisted in between is counted once (`Mirror::load`). The keys
//! record the layout they serve (how many segments), which the order
//! script checks against its caller's; a split's new segments are made
//! here too, closed until the split opens them.

use std::{
    collections::{HashMap, HashSet},
    sync::LazyLock,
};

use chrono::NaiveDateTime;
use hmdp_redis::Redis;
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

use super::{
    converge::{converge, with_stock_from_row},
    mirror::Mirror,
    segments::recorded_tags,
};
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::{
        asynchronous::segments::Segments,
        error::{SeckillError, SeckillResult},
        store,
    },
};

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("seckill_load.lua")));

/// Members per SADD when staging a rebuilt buyers set.
const STAGE_CHUNK: usize = 5_000;

/// One segment's keys as found before the load.
struct Found {
    /// The stamp of the voucher its keys were made for.
    made: Option<String>,
    /// Its orders accepted and not yet acknowledged: order id -> `user:ms`.
    pending: HashMap<i64, String>,
    has_stock: bool,
    /// Its buyers set carries the loaded mark (member 0).
    marked: bool,
}

/// The sale as the load script sets it on every segment.
struct Window<'a> {
    begin: NaiveDateTime,
    end: NaiveDateTime,
    shelf: i64,
    stamp: &'a str,
}

/// The voucher's orders in MariaDB: (order id, user, live).
type Rows = [(i64, u64, bool)];

impl Mirror {
    /// `Ok(false)`: the row names other segments than this instance knew
    /// (the voucher was split meanwhile): they are forgotten and nothing
    /// was loaded.
    pub(super) async fn load_from_db(&self, voucher_id: u64) -> SeckillResult<bool> {
        let redis = &mut self.redis.clone();
        let segments = self.segments(voucher_id).await?;
        let mut found = Vec::with_capacity(segments.count());
        for sk in segments.keys() {
            found.push(found_in(redis, sk).await?);
        }

        let mut tx = self.db.begin().await?;
        let sale = store::sale(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let recorded = store::segment_tags_and_stamp(&mut *tx, voucher_id).await?;
        if recorded.is_some_and(|(tags, _)| recorded_tags(voucher_id, &tags).len() != segments.count()) {
            tx.commit().await?;
            self.forget_segments(voucher_id);
            return Ok(false);
        }
        let stamp = sale.stamp();
        let window =
            Window { begin: sale.begin_time, end: sale.end_time, shelf: sale.shelf.unwrap_or(0), stamp: &stamp };
        // Keys made for another voucher under this id: their pending orders
        // are not this voucher's (the script wipes them).
        for segment in &mut found {
            if segment.made.as_ref().is_some_and(|made| *made != stamp) {
                segment.pending.clear();
            }
        }
        // An ended sale with nothing left to persist is not loaded again (a
        // retired sale's keys expired): it would only sit in Redis and in
        // every instance's reads. Its orders are answered ENDED from here.
        if window.end <= chrono::Utc::now().naive_utc() && found.iter().all(|segment| segment.pending.is_empty()) {
            tx.commit().await?;
            return Err(SeckillError::Ended);
        }
        let rows = store::orders_of_voucher(&mut *tx, voucher_id).await?;
        tx.commit().await?;
        let persisted: HashSet<i64> = rows.iter().map(|(id, _, _)| *id).collect();

        // Registered before the keys exist: once the order script can accept
        // an order, a consumer is already reading the voucher's stream (a
        // lost registration after the load left accepted orders unread).
        redis.sadd::<_, _, ()>(self.keys.seckill_active(), voucher_id).await?;

        let unpersisted: Vec<i64> = found
            .iter()
            .map(|segment| segment.pending.keys().filter(|id| !persisted.contains(id)).count() as i64)
            .collect();
        let some_loaded = found.iter().any(|f| f.has_stock && f.marked && f.made.as_deref() == Some(&stamp));
        let shares = shares(i64::from(sale.stock), &unpersisted, some_loaded);

        let mut outcomes = Vec::with_capacity(segments.count());
        for (segment, sk) in segments.keys().iter().enumerate() {
            let members = members_of(&segments, segment, &rows, &persisted, &found);
            let stock = shares[segment] + unpersisted[segment];
            let layout = layout_to_load(redis, &segments, segment).await?;
            let (loaded, stock) = load_segment(redis, sk, &members, stock, &window, layout).await?;
            match loaded {
                1 => tracing::info!(
                    voucher_id,
                    segment,
                    stock,
                    db_stock = sale.stock,
                    "seckill keys loaded from MariaDB"
                ),
                2 => tracing::warn!(
                    voucher_id,
                    segment,
                    stock,
                    stale = ?found[segment].made,
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
            self.converge_from_row(&segments, voucher_id).await?;
        }
        Ok(true)
    }

    async fn converge_from_row(&self, segments: &Segments, voucher_id: u64) -> SeckillResult<()> {
        let mut tx = self.db.begin().await?;
        if let Some(db_stock) = store::lock_stock(&mut *tx, voucher_id).await? {
            converge(&mut tx, &self.redis, segments, voucher_id, db_stock.into()).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// A split's new segments (`tags`), made with no stock and no buyers and
/// closed (layout 0, which no caller has) until the split has given them
/// their buyers; segments made already are left as they are, so a split
/// tried again finds its own.
pub(super) async fn make_closed_segments(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    voucher_id: u64,
    tags: &[String],
) -> SeckillResult<()> {
    let sale = store::sale(db, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
    let stamp = sale.stamp();
    let window = Window { begin: sale.begin_time, end: sale.end_time, shelf: sale.shelf.unwrap_or(0), stamp: &stamp };
    let redis = &mut redis.clone();
    for tag in tags {
        load_segment(redis, &keys.seckill_segment(tag), &Members::default(), 0, &window, 0).await?;
    }
    Ok(())
}

/// The layout a segment is loaded to serve: the voucher's count, but a
/// segment besides 0 only once segment 0 serves it too (loaded first, here
/// or before, or closed by a split). Until then a split is under way and
/// segment 0 still takes orders routed by the old count, so a segment
/// opened early would let a user buy in both: it is loaded closed (0), and
/// the split opens it.
async fn layout_to_load(redis: &mut Redis, segments: &Segments, segment: usize) -> SeckillResult<usize> {
    let count = segments.count();
    if segment == 0 {
        return Ok(count);
    }
    let zero: Option<usize> = redis.hget(&segments.keys()[0].window, "layout").await?;
    Ok(if zero == Some(count) { count } else { 0 })
}

/// What each segment is loaded with, besides its own orders waiting (the
/// script counts those). One segment: the row, less its orders waiting.
/// Several: the row less every segment's orders waiting, spread evenly,
/// unless a segment is loaded already and holds units of its own: then
/// the others start at 0, and the whole is set from the row afterwards.
fn shares(db_stock: i64, unpersisted: &[i64], some_loaded: bool) -> Vec<i64> {
    match unpersisted {
        [only] => vec![db_stock - only],
        _ if some_loaded => vec![0; unpersisted.len()],
        _ => hmdp_segments::spread(db_stock - unpersisted.iter().sum::<i64>(), unpersisted.len()),
    }
}

async fn found_in(redis: &mut Redis, sk: &SeckillKeys) -> SeckillResult<Found> {
    let (made, pending, has_stock, marked): (Option<String>, HashMap<i64, String>, bool, bool) = redis::pipe()
        .hget(&sk.window, "made")
        .hgetall(&sk.pending)
        .exists(&sk.stock)
        .sismember(&sk.buyers, 0)
        .query_async(redis)
        .await?;
    Ok(Found { made, pending, has_stock, marked })
}

/// Who a segment is loaded with.
#[derive(Default)]
struct Members {
    /// The users with a live order (a cancelled one may buy again) and
    /// those with an order waiting in any segment (one placed before a
    /// split waits in segment 0 whichever segment its user has now).
    buyers: Vec<u64>,
    /// Who holds which waiting order.
    holders: Vec<(u64, i64)>,
    /// Its own waiting orders already persisted.
    persisted_pending: Vec<i64>,
}

fn members_of(segments: &Segments, segment: usize, rows: &Rows, persisted: &HashSet<i64>, found: &[Found]) -> Members {
    let mut buyers: HashSet<u64> = rows
        .iter()
        .filter(|(_, user, live)| *live && segments.of_user(*user) == segment)
        .map(|(_, user, _)| *user)
        .collect();
    let mut holders: Vec<(u64, i64)> = Vec::new();
    for (order_id, accepted) in found.iter().flat_map(|f| &f.pending) {
        if persisted.contains(order_id) {
            continue;
        }
        if let Some(user) = accepted.split(':').next().and_then(|u| u.parse().ok())
            && segments.of_user(user) == segment
        {
            buyers.insert(user);
            holders.push((user, *order_id));
        }
    }
    let persisted_pending = found[segment].pending.keys().filter(|id| persisted.contains(id)).copied().collect();
    Members { buyers: buyers.into_iter().collect(), holders, persisted_pending }
}

/// Runs the load script on one segment, serving `layout`; returns what it
/// did (0 nothing, 1 loaded, 2 wiped another voucher's keys and loaded)
/// and the stock.
async fn load_segment(
    redis: &mut Redis,
    sk: &SeckillKeys,
    members: &Members,
    stock: i64,
    window: &Window<'_>,
    layout: usize,
) -> SeckillResult<(i64, i64)> {
    // Who holds which pending order, as the order script records it.
    for chunk in members.holders.chunks(STAGE_CHUNK) {
        redis.hset_multiple::<_, _, _, ()>(&sk.holders, chunk).await?;
    }
    // The buyers are staged under the same hash tag and renamed into
    // place by the script, so the set appears whole or not at all.
    let staging = format!("{}:staging:{}", sk.buyers, uuid::Uuid::new_v4().simple());
    for chunk in members.buyers.chunks(STAGE_CHUNK) {
        redis::pipe().sadd(&staging, chunk).ignore().expire(&staging, 60).ignore().exec_async(&mut *redis).await?;
    }
    // The stock is counted by the script from this share and the pending
    // hash as it is then (stock_from_row).
    let mut script = LOAD.prepare_invoke();
    for key in sk.all() {
        script.key(key);
    }
    Ok(script
        .key(&staging)
        .arg(stock)
        .arg(window.begin.and_utc().timestamp_millis())
        .arg(window.end.and_utc().timestamp_millis())
        .arg(window.shelf)
        .arg(window.stamp)
        .arg(layout)
        .arg(&members.persisted_pending)
        .invoke_async(redis)
        .await?)
}
