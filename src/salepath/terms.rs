//! A voucher's guard and admission rate, as its row records them. Both are
//! fixed at creation, so each instance reads them once per voucher: the
//! order route of a voucher without a guard pays one map lookup for it.

use std::{sync::Arc, time::Duration};

use chrono::NaiveDateTime;
use sqlx::MySqlPool;

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
/// How long an id found to be no seckill voucher is believed: a voucher
/// created under it later is met within this.
const MISSING_KEPT: Duration = Duration::from_secs(1);

/// The terms of every voucher this instance has met.
pub(super) struct TermsCache {
    db: MySqlPool,
    known: RecentIds<Arc<Terms>>,
    missing: RecentIds,
}

impl TermsCache {
    pub(super) fn new(db: MySqlPool) -> Self {
        Self { db, known: RecentIds::new(KNOWN_MAX, None), missing: RecentIds::new(KNOWN_MAX, Some(MISSING_KEPT)) }
    }

    /// The voucher's terms; `None` when it is no seckill voucher.
    pub(super) async fn of(&self, voucher_id: u64) -> sqlx::Result<Option<Arc<Terms>>> {
        if let Some(known) = self.known.get(voucher_id) {
            return Ok(Some(known));
        }
        if self.missing.contains(voucher_id) {
            return Ok(None);
        }
        match store::terms(&self.db, voucher_id).await? {
            Some(row) => {
                let terms = Arc::new(Terms::from_row(row));
                self.known.insert(voucher_id, terms.clone());
                Ok(Some(terms))
            }
            None => {
                self.missing.insert(voucher_id, ());
                Ok(None)
            }
        }
    }
}
