//! A voucher's segments (asynchronous mode): its stock split over several
//! Redis hash tags, so that on a Redis Cluster one hot voucher is served by
//! several masters. Each segment is a whole set of the voucher's keys under
//! its own tag (stock, window, buyers, stream, pending, holders, failed,
//! dead), so the order script, the consumer and recovery work on a segment
//! as they work on a voucher of one segment; segment 0's tag is the voucher
//! id, so a voucher of one segment keeps the keys it always had.
//!
//! A user always goes to the same segment (`hmdp_segments::route`), whose
//! buyers set sees every order of theirs; a dry segment borrows from the
//! fullest (`hmdp_segments::SegmentedStock`). The tags were chosen when the
//! voucher was created and recorded in its row; this module reads them
//! once per voucher and instance.

use std::sync::Arc;

use hmdp_redis::Redis;
use hmdp_segments::{MAX_SEGMENTS, SegmentKeys, SegmentedStock, route};
use sqlx::{MySqlConnection, MySqlPool};

use crate::seckill::store;
use crate::{
    keys::{Keys, SeckillKeys},
    recent::RecentIds,
};

/// Every segment's hash tag, segment 0's (the voucher id) first, from what
/// the voucher's row records (`segment_tags`: the tags of segments 1..,
/// comma-separated). A row edited by hand past the most a voucher has
/// keeps its first ones.
pub(super) fn recorded_tags(voucher_id: u64, recorded: &str) -> Vec<String> {
    std::iter::once(voucher_id.to_string())
        .chain(recorded.split(',').filter(|tag| !tag.is_empty()).take(MAX_SEGMENTS - 1).map(str::to_owned))
        .collect()
}

/// Vouchers whose segments an instance remembers, at most.
const KNOWN_MAX: usize = 10_000;

/// One voucher's segments.
pub(super) struct Segments {
    keys: Vec<Arc<SeckillKeys>>,
    /// The tags of segments 1.. as the row recorded them when read.
    recorded: String,
    /// The voucher's stamp in MariaDB (`SaleRow::stamp`); `None` for a
    /// voucher whose row is gone.
    stamp: Option<String>,
    /// The borrowing between segments; `None` for a voucher of one segment.
    borrowing: Option<SegmentedStock>,
    /// What the segments of another layout are made with.
    maker: Maker,
}

impl Segments {
    /// The segments the voucher's row records now, read under the row lock
    /// that `conn` holds; `None` when they are these. A split recorded
    /// after this instance read them (its news not heard yet, or lost) has
    /// new segments holding units lent from segment 0: Redis's stock set
    /// from the row by the old layout counts those units twice, so every
    /// stock set from the row asks this first.
    pub(super) async fn recorded_now(&self, conn: &mut MySqlConnection, voucher_id: u64) -> sqlx::Result<Option<Self>> {
        let Some(recorded) = store::lock_segment_tags(conn, voucher_id).await? else { return Ok(None) };
        if recorded == self.recorded {
            return Ok(None);
        }
        tracing::info!(
            voucher_id,
            segments = recorded_tags(voucher_id, &recorded).len(),
            "a split this instance had not heard of is read from the voucher's row"
        );
        Ok(Some(self.maker.build(voucher_id, &recorded, self.stamp.clone())))
    }

    /// What the voucher's keys must have been made for (`made`).
    pub(super) fn stamp(&self) -> Option<&str> {
        self.stamp.as_deref()
    }

    /// Every segment's keys, segment 0 (the voucher's own) first.
    pub(super) fn keys(&self) -> &[Arc<SeckillKeys>] {
        &self.keys
    }

    pub(super) fn count(&self) -> usize {
        self.keys.len()
    }

    /// The segment whose buyers set holds `user_id`'s orders.
    pub(super) fn of_user(&self, user_id: u64) -> usize {
        if self.keys.len() == 1 { 0 } else { route(user_id, self.keys.len()) }
    }

    pub(super) fn borrowing(&self) -> Option<&SegmentedStock> {
        self.borrowing.as_ref()
    }

    /// Units came back (returned orders, more stock, a converged row): the
    /// sold-out this instance remembers no longer stands.
    pub(super) fn reopen(&self) {
        if let Some(borrowing) = &self.borrowing {
            borrowing.reopen();
        }
    }
}

/// The segments of every voucher this instance has met, read from the
/// voucher's row once.
pub(super) struct SegmentMaps {
    db: MySqlPool,
    maker: Maker,
    known: RecentIds<Arc<Segments>>,
}

impl SegmentMaps {
    pub(super) fn new(db: MySqlPool, redis: Redis, keys: Keys) -> Self {
        Self { db, maker: Maker { redis, keys }, known: RecentIds::new(KNOWN_MAX, None) }
    }

    /// The voucher's segments; `None` when it is no seckill voucher.
    pub(super) async fn of(&self, voucher_id: u64) -> sqlx::Result<Option<Arc<Segments>>> {
        if let Some(known) = self.known.get(voucher_id) {
            return Ok(Some(known));
        }
        let Some((tags, stamp)) = store::segment_tags_and_stamp(&self.db, voucher_id).await? else { return Ok(None) };
        let segments = Arc::new(self.maker.build(voucher_id, &tags, Some(stamp)));
        self.known.insert(voucher_id, segments.clone());
        Ok(Some(segments))
    }

    /// The voucher's segments, or for a voucher whose row is gone its one
    /// segment of old: its stream is still drained (into dead letters).
    pub(super) async fn of_or_single(&self, voucher_id: u64) -> sqlx::Result<Arc<Segments>> {
        Ok(match self.of(voucher_id).await? {
            Some(segments) => segments,
            None => Arc::new(self.maker.build(voucher_id, "", None)),
        })
    }

    /// The voucher's segments if this instance has read them.
    pub(super) fn known(&self, voucher_id: u64) -> Option<Arc<Segments>> {
        self.known.get(voucher_id)
    }

    /// Forgets what was read for `voucher_id`: its keys were found made for
    /// another voucher under the same id (a Redis that outlived its
    /// database), whose segments may differ, or it was split.
    pub(super) fn forget(&self, voucher_id: u64) {
        self.known.remove(voucher_id);
    }
}

/// Makes a voucher's segments from the tags its row records.
#[derive(Clone)]
struct Maker {
    redis: Redis,
    keys: Keys,
}

impl Maker {
    fn build(&self, voucher_id: u64, recorded: &str, stamp: Option<String>) -> Segments {
        let tags = recorded_tags(voucher_id, recorded);
        let keys: Vec<Arc<SeckillKeys>> = std::iter::once(self.keys.seckill(voucher_id))
            .chain(tags[1..].iter().map(|tag| Arc::new(self.keys.seckill_segment(tag))))
            .collect();
        let borrowing = (keys.len() > 1).then(|| borrowing(&self.redis, keys.iter().map(|sk| &**sk)));
        Segments { keys, recorded: recorded.to_owned(), stamp, borrowing, maker: self.clone() }
    }
}

/// The borrowing between these segments, on their keys.
pub(super) fn borrowing<'a>(redis: &Redis, segments: impl Iterator<Item = &'a SeckillKeys>) -> SegmentedStock {
    let keys = segments
        .map(|sk| SegmentKeys {
            stock: sk.stock.clone(),
            buyers: sk.buyers.clone(),
            lent: sk.lent.clone(),
            received: sk.received.clone(),
        })
        .collect();
    SegmentedStock::new(redis.clone(), keys)
}
