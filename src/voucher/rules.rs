//! The rules a voucher must follow before it is written: what the admin
//! posts (`VoucherForm`) becomes a `NewVoucher` (and a `NewSeckill`) or a
//! 400 with the reason.

use chrono::{NaiveDate, NaiveDateTime, SubsecRound};

use super::model::{NewSeckill, NewVoucher, STATUS_ON_SHELF, TYPE_ORDINARY, TYPE_SECKILL, VoucherForm};
use crate::{
    errors::{Coded, ErrorCode},
    salepath::Guard,
};

/// A voucher the admin described wrongly; answered 400 with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Invalid(String);

impl Coded for Invalid {
    fn code(&self) -> ErrorCode {
        ErrorCode::Validation
    }
}

impl Invalid {
    fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

const MAX_TITLE: usize = 255;
const MAX_RULES: usize = 1024;
/// The most buyers a guarded voucher admits per second.
const MAX_ADMIT_PER_SECOND: u32 = 1_000_000;
/// The most segments a voucher is sold in (`hmdp_segments::MAX_SEGMENTS`).
const MAX_SEGMENTS: u8 = hmdp_segments::MAX_SEGMENTS as u8;

/// What a title may not consist of alone: Unicode's white space, which
/// `char::is_whitespace` knows, and the byte-order mark, which ECMAScript's
/// `\s` counts. The schema's pattern lists the same characters one by one,
/// as `\s` means something else in every regex engine a client may check
/// it with (ECMAScript, Python, Rust).
fn is_blank(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// What a `DATETIME` column holds; an offset can push a valid-looking time
/// (year 9999 at -01:00) outside it.
const STORABLE_TIMES: std::ops::RangeInclusive<NaiveDateTime> =
    NaiveDate::from_ymd_opt(1000, 1, 1).expect("valid").and_hms_opt(0, 0, 0).expect("valid")
        ..=NaiveDate::from_ymd_opt(9999, 12, 31).expect("valid").and_hms_opt(23, 59, 59).expect("valid");

impl VoucherForm {
    pub(crate) fn into_ordinary(self) -> Result<NewVoucher, Invalid> {
        if self.stock.is_some()
            || self.begin_time.is_some()
            || self.end_time.is_some()
            || self.segments.is_some()
            || self.guard.is_some()
            || self.admit_per_second.is_some()
        {
            return Err(Invalid::new(
                "stock, beginTime, endTime, segments, guard and admitPerSecond belong to POST /voucher/seckill",
            ));
        }
        if self.kind.is_some_and(|k| k != TYPE_ORDINARY) {
            return Err(Invalid::new("type must be 0 here; seckill vouchers go to POST /voucher/seckill"));
        }
        self.common(TYPE_ORDINARY)
    }

    pub(crate) fn into_seckill(mut self) -> Result<(NewVoucher, NewSeckill), Invalid> {
        if self.kind.is_some_and(|k| k != TYPE_SECKILL) {
            return Err(Invalid::new("type must be 1 for a seckill voucher"));
        }
        let stock = self.stock.take().ok_or_else(|| Invalid::new("stock is required"))?;
        let stock = i32::try_from(stock)
            .ok()
            .filter(|s| *s >= 0)
            .ok_or_else(|| Invalid::new(format!("stock must be between 0 and {}", i32::MAX)))?;
        // A `DATETIME` keeps whole seconds (MariaDB drops the rest), so the
        // window is judged as it will be stored: 10:00:00 to 10:00:00.35
        // is an empty window, not a 500 from the table's CHECK.
        let begin_time = self.begin_time.take().ok_or_else(|| Invalid::new("beginTime is required"))?.trunc_subsecs(0);
        let end_time = self.end_time.take().ok_or_else(|| Invalid::new("endTime is required"))?.trunc_subsecs(0);
        if begin_time >= end_time {
            return Err(Invalid::new(
                "beginTime must be before endTime, to the second (times are kept in whole seconds)",
            ));
        }
        for (field, time) in [("beginTime", begin_time), ("endTime", end_time)] {
            if !STORABLE_TIMES.contains(&time.naive_utc()) {
                return Err(Invalid::new(format!(
                    "{field} must be between 1000-01-01 and 9999-12-31 (UTC), the range MariaDB can store"
                )));
            }
        }
        let segments_by_admin = self.segments.is_some();
        let segments = self.segments.take().unwrap_or(1);
        let segments = u8::try_from(segments)
            .ok()
            .filter(|n| (1..=MAX_SEGMENTS).contains(n))
            .ok_or_else(|| Invalid::new(format!("segments must be between 1 and {MAX_SEGMENTS}")))?;
        let guard = match self.guard.take() {
            None => Guard::None,
            Some(name) => Guard::parse(&name).ok_or_else(|| Invalid::new("guard must be none, path or challenge"))?,
        };
        let admit_per_second = match self.admit_per_second.take() {
            None => None,
            Some(rate) => {
                Some(u32::try_from(rate).ok().filter(|r| (1..=MAX_ADMIT_PER_SECOND).contains(r)).ok_or_else(|| {
                    Invalid::new(format!("admitPerSecond must be between 1 and {MAX_ADMIT_PER_SECOND}"))
                })?)
            }
        };
        let voucher = self.common(TYPE_SECKILL)?;
        Ok((voucher, NewSeckill { stock, segments, segments_by_admin, guard, admit_per_second, begin_time, end_time }))
    }

    fn common(self, kind: u8) -> Result<NewVoucher, Invalid> {
        // Counted as sent, as the schema's maxLength counts.
        if self.title.chars().count() > MAX_TITLE || self.sub_title.chars().count() > MAX_TITLE {
            return Err(Invalid::new(format!("title and subTitle are at most {MAX_TITLE} characters")));
        }
        let title = self.title.trim_matches(is_blank).to_owned();
        if title.is_empty() {
            return Err(Invalid::new("title must not be empty"));
        }
        if self.rules.chars().count() > MAX_RULES {
            return Err(Invalid::new(format!("rules are at most {MAX_RULES} characters")));
        }
        // An id is at most i64::MAX everywhere (paths, the OpenAPI schema).
        if self.shop_id == 0 || i64::try_from(self.shop_id).is_err() {
            return Err(Invalid::new(format!("shopId must be between 1 and {}", i64::MAX)));
        }
        if self.pay_value < 0 || self.actual_value < 0 {
            return Err(Invalid::new("payValue and actualValue must be >= 0"));
        }
        let status = self.status.unwrap_or(STATUS_ON_SHELF);
        if !(1..=3).contains(&status) {
            return Err(Invalid::new("status must be 1 (on shelf), 2 (off shelf) or 3 (expired)"));
        }
        Ok(NewVoucher {
            shop_id: self.shop_id,
            title,
            sub_title: self.sub_title,
            rules: self.rules,
            pay_value: self.pay_value,
            actual_value: self.actual_value,
            kind,
            status,
        })
    }
}
