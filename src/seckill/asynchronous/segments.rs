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
use sqlx::MySqlPool;

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
    /// The voucher's stamp in MariaDB (`SaleRow::stamp`); `None` for a
    /// voucher whose row is gone.
    stamp: Option<String>,
    /// The borrowing between segments; `None` for a voucher of one segment.
    borrowing: Option<SegmentedStock>,
}

impl Segments {
    fn single(keys: Arc<SeckillKeys>, stamp: Option<String>) -> Self {
        Self { keys: vec![keys], stamp, borrowing: None }
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
    redis: Redis,
    keys: Keys,
    known: RecentIds<Arc<Segments>>,
}

impl SegmentMaps {
    pub(super) fn new(db: MySqlPool, redis: Redis, keys: Keys) -> Self {
        Self { db, redis, keys, known: RecentIds::new(KNOWN_MAX, None) }
    }

    /// The voucher's segments; `None` when it is no seckill voucher.
    pub(super) async fn of(&self, voucher_id: u64) -> sqlx::Result<Option<Arc<Segments>>> {
        if let Some(known) = self.known.get(voucher_id) {
            return Ok(Some(known));
        }
        let Some((tags, stamp)) = store::segment_tags_and_stamp(&self.db, voucher_id).await? else { return Ok(None) };
        let segments = Arc::new(self.build(voucher_id, &tags, stamp));
        self.known.insert(voucher_id, segments.clone());
        Ok(Some(segments))
    }

    /// The voucher's segments, or for a voucher whose row is gone its one
    /// segment of old: its stream is still drained (into dead letters).
    pub(super) async fn of_or_single(&self, voucher_id: u64) -> sqlx::Result<Arc<Segments>> {
        Ok(match self.of(voucher_id).await? {
            Some(segments) => segments,
            None => Arc::new(Segments::single(self.keys.seckill(voucher_id), None)),
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

    fn build(&self, voucher_id: u64, tags: &str, stamp: String) -> Segments {
        let tags = recorded_tags(voucher_id, tags);
        if tags.len() == 1 {
            return Segments::single(self.keys.seckill(voucher_id), Some(stamp));
        }
        let keys: Vec<Arc<SeckillKeys>> = std::iter::once(self.keys.seckill(voucher_id))
            .chain(tags[1..].iter().map(|tag| Arc::new(self.keys.seckill_segment(tag))))
            .collect();
        let borrowing = borrowing(&self.redis, keys.iter().map(|sk| &**sk));
        Segments { keys, stamp: Some(stamp), borrowing: Some(borrowing) }
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
