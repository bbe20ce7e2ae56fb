//! A voucher found hot during its sale is split into segments while it
//! sells, one per Redis master, with nobody to set it: the instance that
//! finds one of its own vouchers' tags hot (`hmdp_redis::hot`) splits it.
//!
//! The steps, each safe to run twice, so that a splitter killed between
//! any two leaves a split that the next one finishes:
//!
//! 1. the new segments are made closed (layout 0, which no caller has),
//!    with no stock and no buyers;
//! 2. the voucher's row records their tags: from here on the split
//!    happens, and an instance that reads the row routes by them;
//! 3. segment 0's layout becomes the new count: from then on it refuses
//!    every order routed by the old layout (the caller reads the segments
//!    again), so its buyers set stops taking users of other segments;
//! 4. those users of segment 0 move to their new segment's buyers (with
//!    the order each holds while it waits), so that none buys twice;
//! 5. each new segment borrows its share of segment 0's units (a borrow as
//!    a dry segment makes, so a splitter that dies between its two halves
//!    leaves the units in flight for recovery, not lost), and the new
//!    segments open (their layout becomes the count): their first buyers
//!    find units instead of all borrowing from segment 0 at once.
//!
//! A failure before step 2 leaves the voucher as it was (its closed
//! segments are removed); after it, the split is finished by this
//! instance's next round, and by any instance whose buyer meets a closed
//! segment once the splitter's claim has lapsed.

use std::{
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use hmdp_redis::{Redis, hot::HotKeys};
use hmdp_segments::{EPOCH, MAX_SEGMENTS, SlotOwners, choose_tags, route};
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use super::{
    load::make_closed_segments,
    news::{News, Told},
    segments::{SegmentMaps, borrowing, recorded_tags},
};
use crate::{
    keys::{Keys, SeckillKeys},
    recent::RecentIds,
    seckill::store,
};

static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_split_fence.lua")));

/// How long a splitter's claim on a voucher stands: a split takes tens of
/// milliseconds, and a splitter that died holds up the buyers of the
/// closed segments no longer than this.
const CLAIM_FOR: Duration = Duration::from_secs(2);
/// Buyers of segment 0 read per page while they are copied.
const COPY_PAGE: usize = 2_000;
/// A voucher looked at is not looked at again for this long: a quiet one
/// found hot once, or one that may not be split, costs one read of its
/// row, not one every window.
const LOOKED_AT_FOR: Duration = Duration::from_secs(30);
/// How often one instance tries to finish a split it found abandoned.
const FINISH_TRIED_FOR: Duration = Duration::from_millis(500);
/// Vouchers remembered by each of those, at most.
const REMEMBERED_MAX: usize = 10_000;

/// What segment 0 held when it took the new layout.
struct Fenced {
    /// Every unit not sold before the split.
    units_left: i64,
}

/// Why a split did not happen or did not finish.
#[derive(Debug, thiserror::Error)]
enum SplitError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Seckill(String),
}

impl From<crate::seckill::error::SeckillError> for SplitError {
    fn from(err: crate::seckill::error::SeckillError) -> Self {
        Self::Seckill(err.to_string())
    }
}

/// What finds a voucher hot, and what it is split into.
pub(super) struct HotVouchers {
    pub(super) hot_keys: HotKeys,
    /// How many segments a hot voucher gets: 0 one per master, 1 none.
    pub(super) split_into: u8,
}

pub(super) struct Split {
    db: MySqlPool,
    redis: Redis,
    keys: Keys,
    maps: Arc<SegmentMaps>,
    found: HotVouchers,
    news: Arc<News>,
    /// What this instance's claims say, for the log of whoever meets one.
    instance: String,
    looked_at: RecentIds,
    finish_tried: RecentIds,
    /// Splits recorded and not finished: tried again each round.
    unfinished: RecentIds,
}

impl Split {
    pub(super) fn new(
        db: MySqlPool,
        redis: Redis,
        keys: Keys,
        maps: Arc<SegmentMaps>,
        found: HotVouchers,
        news: Arc<News>,
        instance: &str,
    ) -> Self {
        Self {
            db,
            redis,
            keys,
            maps,
            found,
            news,
            instance: instance.to_owned(),
            looked_at: RecentIds::new(REMEMBERED_MAX, Some(LOOKED_AT_FOR)),
            finish_tried: RecentIds::new(REMEMBERED_MAX, Some(FINISH_TRIED_FOR)),
            unfinished: RecentIds::new(REMEMBERED_MAX, None),
        }
    }

    /// Each window of the hot-key count: the vouchers found hot are split,
    /// and splits left unfinished are finished.
    pub(super) async fn run(self: Arc<Self>, stop: CancellationToken) {
        if self.found.split_into == 1 {
            return;
        }
        let mut tick = tokio::time::interval(self.found.hot_keys.settings().window);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            for (voucher_id, ()) in self.unfinished.take_all() {
                self.finish(voucher_id).await;
            }
            for hot in self.found.hot_keys.current().iter() {
                // A voucher's segment 0 has its id for tag; other tags
                // (a segment's `<id>.<n>`, a phone's) are no voucher's.
                let Ok(voucher_id) = hot.tag.parse::<u64>() else { continue };
                if self.looked_at.contains(voucher_id) {
                    continue;
                }
                self.looked_at.insert(voucher_id, ());
                self.split(voucher_id, hot.share).await;
            }
        }
    }

    async fn split(&self, voucher_id: u64, share: f64) {
        let started = Instant::now();
        match self.try_split(voucher_id).await {
            Ok(None) => {}
            Ok(Some((segments, Fenced { units_left }, since_opening_ms))) => {
                let took = started.elapsed();
                metrics::counter!("hmdp_hot_splits_total", "outcome" => "split").increment(1);
                metrics::histogram!("hmdp_hot_split_seconds").record(took.as_secs_f64());
                tracing::info!(
                    voucher_id,
                    segments,
                    share,
                    took_ms = took.as_millis() as u64,
                    since_opening_ms,
                    units_left,
                    "a voucher found hot was split over more segments"
                );
            }
            Err((recorded, err)) => {
                metrics::counter!("hmdp_hot_splits_total", "outcome" => "failed").increment(1);
                if recorded {
                    self.unfinished.insert(voucher_id, ());
                    tracing::warn!(voucher_id, error = %err, "a hot voucher's split did not finish; tried again");
                } else {
                    tracing::warn!(
                        voucher_id,
                        error = %err,
                        "a hot voucher could not be split; it sells from the segment it has"
                    );
                }
            }
        }
    }

    /// The split, if the voucher may be split: `Some((segments, what segment
    /// 0 had when it took the layout, ms since the sale's opening))` once
    /// done. The error says whether the row recorded the split (then it
    /// must be finished).
    async fn try_split(&self, voucher_id: u64) -> Result<Option<(usize, Fenced, i64)>, (bool, SplitError)> {
        let not_recorded = |err: SplitError| (false, err);
        let row = store::split_row(&self.db, voucher_id).await.map_err(|e| not_recorded(e.into()))?;
        let now = chrono::Utc::now().naive_utc();
        let Some(row) = row.filter(|r| !r.segments_by_admin && r.end_time > now) else { return Ok(None) };
        if row.segments > 1 {
            // Split before: finished here if its splitter died after
            // recording it and no buyer has met a closed segment since
            // (every instance still routing by the old layout).
            self.finish(voucher_id).await;
            return Ok(None);
        }
        let owners = SlotOwners::read(&mut self.redis.clone()).await;
        let wanted = usize::from(self.found.split_into);
        let count = if wanted == 0 { owners.masters() } else { wanted }.min(MAX_SEGMENTS);
        if count < 2 || !self.claim(voucher_id).await.map_err(|e| not_recorded(e.into()))? {
            return Ok(None);
        }
        let tags = choose_tags(voucher_id, count, &owners);
        if let Err(err) = make_closed_segments(&self.db, &self.redis, &self.keys, voucher_id, &tags[1..]).await {
            self.remove_closed(&tags[1..]).await;
            self.release(voucher_id).await;
            return Err(not_recorded(err.into()));
        }
        // A failed update may have been made: the closed segments stay, and
        // the split is finished (or found never recorded) by a later round.
        let recorded = store::record_split(&self.db, voucher_id, &tags[1..]).await;
        let recorded = match recorded {
            Ok(recorded) => recorded,
            Err(err) => {
                self.release(voucher_id).await;
                return Err((true, err.into()));
            }
        };
        if !recorded {
            // Another layout was recorded meanwhile (segments set by hand).
            self.remove_closed(&tags[1..]).await;
            self.release(voucher_id).await;
            return Ok(None);
        }
        let finished = self.open(voucher_id, &tags).await;
        self.release(voucher_id).await;
        let fenced = finished.map_err(|err| (true, err))?;
        Ok(Some((count, fenced, (now - row.begin_time).num_milliseconds())))
    }

    /// A buyer met a closed segment: the split is finished here when its
    /// splitter's claim has lapsed (it died), at most once in a while per
    /// voucher and instance.
    pub(super) async fn finish_if_abandoned(&self, voucher_id: u64) {
        if self.finish_tried.contains(voucher_id) {
            return;
        }
        self.finish_tried.insert(voucher_id, ());
        self.finish(voucher_id).await;
    }

    /// Steps 3 to 5 of a split the row records, under a claim of its own,
    /// unless every segment is open at the layout already.
    async fn finish(&self, voucher_id: u64) {
        let finished = async {
            let Some(row) = store::split_row(&self.db, voucher_id).await? else { return Ok(false) };
            let tags = recorded_tags(voucher_id, &row.segment_tags);
            if tags.len() < 2 || self.open_already(&tags).await? || !self.claim(voucher_id).await? {
                return Ok(false);
            }
            let opened = self.open(voucher_id, &tags).await;
            self.release(voucher_id).await;
            opened.map(|_| true)
        };
        match finished.await {
            Ok(false) => {}
            Ok(true) => tracing::info!(voucher_id, "a split another splitter left was finished"),
            Err(err) => {
                metrics::counter!("hmdp_hot_splits_total", "outcome" => "failed").increment(1);
                self.unfinished.insert(voucher_id, ());
                tracing::warn!(voucher_id, error = %err, "finishing a split failed; tried again");
            }
        }
    }

    /// Steps 3 to 5: segment 0 refuses the old layout, its buyers go where
    /// they now belong, and the new segments open.
    async fn open(&self, voucher_id: u64, tags: &[String]) -> Result<Fenced, SplitError> {
        let redis = &mut self.redis.clone();
        let layout = tags.len();
        let segments: Vec<SeckillKeys> = tags.iter().map(|tag| self.keys.seckill_segment(tag)).collect();
        let (_at, units_left): (i64, i64) =
            FENCE.key(&segments[0].window).key(&segments[0].stock).arg(layout).invoke_async(redis).await?;
        move_buyers(redis, &segments).await?;
        lend_shares(redis, &segments).await?;
        for segment in &segments[1..] {
            redis.hset::<_, _, _, ()>(&segment.window, "layout", layout).await?;
        }
        // When buyers could order in every segment (this instance's clock).
        let opened_at = chrono::Utc::now().timestamp_millis();
        redis.hset_nx::<_, _, _, ()>(&segments[0].window, "split_opened_at", opened_at).await?;
        // Every instance's consumer and orders read the segments again at
        // once (this one's here, the others' when told; one that missed
        // it, when the order script turns its order round).
        self.maps.forget(voucher_id);
        self.news.tell(Told::Split, voucher_id).await;
        Ok(Fenced { units_left })
    }

    /// Every segment serves the layout of `tags`: nothing is left to do.
    async fn open_already(&self, tags: &[String]) -> redis::RedisResult<bool> {
        for tag in tags {
            let layout: Option<usize> =
                self.redis.clone().hget(self.keys.seckill_segment(tag).window, "layout").await?;
            if layout != Some(tags.len()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn claim(&self, voucher_id: u64) -> redis::RedisResult<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(self.keys.seckill_split(voucher_id))
            .arg(&self.instance)
            .arg("NX")
            .arg("PX")
            .arg(CLAIM_FOR.as_millis() as u64)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(set.is_some())
    }

    /// Every step is safe twice, so a claim that lapsed and was taken by
    /// another is no harm to remove: it only saves the next one a wait.
    async fn release(&self, voucher_id: u64) {
        if let Err(err) = self.redis.clone().del::<_, ()>(self.keys.seckill_split(voucher_id)).await {
            tracing::debug!(voucher_id, error = %err, "a split's claim was left to lapse");
        }
    }

    async fn remove_closed(&self, tags: &[String]) {
        for tag in tags {
            let segment = self.keys.seckill_segment(tag);
            let keys: Vec<&str> = segment.all().into_iter().chain(segment.borrowing()).collect();
            if let Err(err) = self.redis.clone().del::<_, ()>(keys).await {
                tracing::warn!(tag, error = %err, "a closed segment of a split that did not happen was left");
            }
        }
    }
}

/// Each new segment borrows an even share of what segment 0 has left,
/// through the segments' own borrow (lend, then credit): the new segments
/// take segment 0's epoch first, so the credit lands.
async fn lend_shares(redis: &mut Redis, segments: &[SeckillKeys]) -> redis::RedisResult<()> {
    let epoch: Option<String> = redis.hget(&segments[0].lent, EPOCH).await?;
    if let Some(epoch) = &epoch {
        for segment in &segments[1..] {
            redis.hset_nx::<_, _, _, ()>(&segment.lent, EPOCH, epoch).await?;
        }
    }
    let left: Option<i64> = redis.get(&segments[0].stock).await?;
    let share = left.unwrap_or(0) / segments.len() as i64;
    if share <= 0 {
        return Ok(());
    }
    let stock = borrowing(redis, segments.iter());
    for segment in 1..segments.len() {
        if let Some(borrow) = stock.lend(0, segment, share).await? {
            stock.complete(&borrow).await?;
        }
    }
    Ok(())
}

/// One page's buyers bound for one segment, and the orders they hold.
#[derive(Clone, Default)]
struct Moving {
    users: Vec<u64>,
    holders: Vec<(u64, i64)>,
}

/// Segment 0's buyers who belong to another segment in the new layout move
/// to its buyers set, with the order each holds while it waits (segment 0
/// keeps that entry too: its acknowledgement removes it there). Added
/// before removed, so a buyer is always in one set or both, and a page
/// moved twice is moved once.
async fn move_buyers(redis: &mut Redis, segments: &[SeckillKeys]) -> redis::RedisResult<()> {
    let mut cursor = 0_u64;
    loop {
        let (next, page): (u64, Vec<u64>) = redis::cmd("SSCAN")
            .arg(&segments[0].buyers)
            .arg(cursor)
            .arg("COUNT")
            .arg(COPY_PAGE)
            .query_async(redis)
            .await?;
        let moving: Vec<u64> = page.into_iter().filter(|user| *user != 0).collect();
        if !moving.is_empty() {
            let held: Vec<Option<i64>> =
                redis::cmd("HMGET").arg(&segments[0].holders).arg(&moving).query_async(redis).await?;
            let mut per_segment = vec![Moving::default(); segments.len()];
            for (user, held) in moving.iter().zip(held) {
                let segment = route(*user, segments.len());
                per_segment[segment].users.push(*user);
                if let Some(order) = held {
                    per_segment[segment].holders.push((*user, order));
                }
            }
            for (segment, to) in per_segment.iter().enumerate().skip(1) {
                if !to.users.is_empty() {
                    redis.sadd::<_, _, ()>(&segments[segment].buyers, &to.users).await?;
                }
                if !to.holders.is_empty() {
                    redis.hset_multiple::<_, _, _, ()>(&segments[segment].holders, &to.holders).await?;
                }
            }
            let moved: Vec<u64> = per_segment.iter().skip(1).flat_map(|to| to.users.iter().copied()).collect();
            if !moved.is_empty() {
                redis.srem::<_, _, ()>(&segments[0].buyers, moved).await?;
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}
