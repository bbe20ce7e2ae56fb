//! A voucher's guard and admission rate, as its row records them. Both are
//! fixed at creation, so each instance reads them once per voucher: the
//! order route of a voucher without a guard pays one map lookup for it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use tokio::sync::Mutex;

use super::{guard::Guard, store};
use crate::recent::RecentIds;

/// One voucher's terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) guard: Guard,
    /// `None`: the stack's default.
    pub(crate) admit_per_second: Option<u32>,
    /// The sale window, UTC epoch ms.
    pub(crate) begin_ms: i64,
    pub(crate) end_ms: i64,
}

impl Terms {
    pub(super) fn from_row(row: store::TermsRow) -> Self {
        let ms = |t: NaiveDateTime| t.and_utc().timestamp_millis();
        Self {
            // The table's CHECK admits nothing else; a row edited past it
            // is guarded rather than opened.
            guard: Guard::parse(&row.sale_guard).unwrap_or(Guard::Path),
            admit_per_second: row.admit_per_second,
            begin_ms: ms(row.begin_time),
            end_ms: ms(row.end_time),
        }
    }
}

/// Vouchers whose terms an instance remembers, at most.
const KNOWN_MAX: usize = 10_000;
/// The sales a miss reads at once: those that opened within this before
/// it, or open within it after (a path asked for ahead of the opening).
const OPENED_WITHIN: chrono::TimeDelta = chrono::TimeDelta::minutes(1);
/// At most this many a read.
const OPENED_MAX: u32 = 1_024;
/// A miss reads the opened sales again only this long after the last read
/// began; sooner, it reads its voucher alone (one created since, or cut
/// by `OPENED_MAX`, or opened long ago).
const OPENED_REREAD: Duration = Duration::from_secs(1);
/// How long an id found to be no seckill voucher is believed: a voucher
/// created under it later is met within this.
const MISSING_KEPT: Duration = Duration::from_secs(1);

/// The terms of every voucher this instance has met.
pub(super) struct TermsCache {
    db: MySqlPool,
    known: RecentIds<Arc<Terms>>,
    missing: RecentIds,
    /// Held while the opened sales are read, with when they were last:
    /// the misses of an opening wait for the one read, not read each.
    opened_read: Mutex<Option<Instant>>,
}

impl TermsCache {
    pub(super) fn new(db: MySqlPool) -> Self {
        Self {
            db,
            known: RecentIds::new(KNOWN_MAX, None),
            missing: RecentIds::new(KNOWN_MAX, Some(MISSING_KEPT)),
            opened_read: Mutex::new(None),
        }
    }

    /// The voucher's terms; `None` when it is no seckill voucher.
    pub(super) async fn of(&self, voucher_id: u64) -> sqlx::Result<Option<Arc<Terms>>> {
        if let Some(known) = self.known.get(voucher_id) {
            return Ok(Some(known));
        }
        if self.missing.contains(voucher_id) {
            return Ok(None);
        }
        if let Some(opened) = self.read_opened(voucher_id).await {
            return Ok(Some(opened));
        }
        match store::terms(&self.db, voucher_id).await? {
            Some(row) => Ok(Some(self.remember(voucher_id, row))),
            None => {
                self.missing.insert(voucher_id, ());
                Ok(None)
            }
        }
    }

    /// The terms of every sale that opened around now, read once for a
    /// burst of misses: fifty or five hundred sales opening at the same
    /// second are each met by every instance's first orders at once, and a
    /// read per voucher and per order that arrived before the first read
    /// returned put a thousand reads in front of those orders. The misses
    /// queue here; the first reads, the others find their voucher known.
    ///
    /// The read counts as made when it begins: one that fails (a pool with
    /// no connection to give at an opening) or whose request went away is
    /// not made again by every miss queued behind it, each waiting out the
    /// pool's timeout in turn; they read their vouchers alone, side by
    /// side, as before.
    async fn read_opened(&self, voucher_id: u64) -> Option<Arc<Terms>> {
        let mut last = self.opened_read.lock().await;
        if let Some(known) = self.known.get(voucher_id) {
            return Some(known);
        }
        if last.is_some_and(|at| at.elapsed() < OPENED_REREAD) {
            return None;
        }
        *last = Some(Instant::now());
        let now = chrono::Utc::now().naive_utc();
        let opened = match store::terms_opened(&self.db, now - OPENED_WITHIN, now + OPENED_WITHIN, OPENED_MAX).await {
            Ok(opened) => opened,
            Err(err) => {
                tracing::warn!(error = %err, "reading the terms of the sales opening now failed; each is read alone");
                return None;
            }
        };
        // A full memory forgets everything (`RecentIds`): sales nobody
        // asked for yet must not be what fills it in the middle of an
        // opening, taking the live ones with them.
        let room = self.known.len() + opened.len() < KNOWN_MAX;
        let mut mine = None;
        for store::OpenedTerms { voucher_id: id, terms } in opened {
            if id == voucher_id {
                mine = Some(self.remember(id, terms));
            } else if room {
                self.remember(id, terms);
            }
        }
        mine
    }

    /// Keeps a voucher's terms as read.
    fn remember(&self, voucher_id: u64, row: store::TermsRow) -> Arc<Terms> {
        let terms = Arc::new(Terms::from_row(row));
        self.known.insert(voucher_id, terms.clone());
        terms
    }
}

#[cfg(test)]
mod tests {
    use sqlx::MySqlPool;

    use super::TermsCache;

    async fn sales(pool: &MySqlPool, first: u64, count: u64, opened_secs_ago: i64) {
        sqlx::query(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
             SELECT ? + seq, 5, UTC_TIMESTAMP() - INTERVAL ? SECOND, UTC_TIMESTAMP() + INTERVAL 2 HOUR
             FROM seq_0_to_10000 WHERE seq < ?",
        )
        .bind(first)
        .bind(opened_secs_ago)
        .bind(count)
        .execute(pool)
        .await
        .unwrap();
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn the_first_miss_of_an_opening_learns_every_sale_opening_with_it(pool: MySqlPool) {
        sales(&pool, 1, 500, 0).await;
        let cache = TermsCache::new(pool.clone());
        assert!(cache.of(250).await.unwrap().is_some());
        assert!((1..=500).all(|v| cache.known.get(v).is_some()), "the other 499 need no read of their own");
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn a_sale_opened_long_ago_and_an_unknown_id_are_still_answered(pool: MySqlPool) {
        sales(&pool, 1, 1, 0).await;
        sales(&pool, 100, 1, 3 * 60 * 60).await;
        let cache = TermsCache::new(pool.clone());
        assert!(cache.of(1).await.unwrap().is_some());
        assert!(cache.known.get(100).is_none(), "opened hours ago: not among the sales read at once");
        assert!(cache.of(100).await.unwrap().is_some(), "read alone");
        assert!(cache.of(7_777).await.unwrap().is_none());
    }
}
