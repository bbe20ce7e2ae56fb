//! Voucher shapes on the wire and in the tables, and the rules a voucher
//! must follow before it is written.

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, SubsecRound};
use serde::{Deserialize, Serialize};

use crate::{http::whole, salepath::Guard};

/// A voucher the admin described wrongly; answered 400 with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Invalid(String);

impl Invalid {
    fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

pub(super) const TYPE_ORDINARY: u8 = 0;
pub(super) const TYPE_SECKILL: u8 = 1;
pub(super) const STATUS_ON_SHELF: u8 = 1;
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

/// What an admin posts. Unknown fields are rejected, so a typo such as
/// `stok` is a 400 instead of a voucher silently created without stock.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct VoucherForm {
    #[serde(deserialize_with = "whole::number")]
    pub(crate) shop_id: u64,
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) sub_title: String,
    #[serde(default)]
    pub(crate) rules: String,
    #[serde(deserialize_with = "whole::number")]
    pub(crate) pay_value: i64,
    #[serde(deserialize_with = "whole::number")]
    pub(crate) actual_value: i64,
    #[serde(rename = "type", default, deserialize_with = "whole::optional")]
    pub(crate) kind: Option<u8>,
    #[serde(default, deserialize_with = "whole::optional")]
    pub(crate) status: Option<u8>,
    #[serde(default, deserialize_with = "whole::optional")]
    pub(crate) stock: Option<i64>,
    pub(crate) begin_time: Option<DateTime<FixedOffset>>,
    pub(crate) end_time: Option<DateTime<FixedOffset>>,
    #[serde(default, deserialize_with = "whole::optional")]
    pub(crate) segments: Option<i64>,
    #[serde(default)]
    pub(crate) guard: Option<String>,
    #[serde(default, deserialize_with = "whole::optional")]
    pub(crate) admit_per_second: Option<i64>,
}

/// `POST /voucher` as the OpenAPI document states it: `VoucherForm` with
/// every rule `into_ordinary` enforces that a schema can say. (The service
/// reads one form for both routes, so that a seckill field sent here is
/// named in the refusal.)
#[allow(dead_code)]
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = OrdinaryVoucherForm)]
pub(crate) struct OrdinaryVoucherSchema {
    #[schema(minimum = 1)]
    shop_id: i64,
    /// Not white space alone (stored without the white space around it);
    /// at most 255 characters as sent.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
    )]
    title: String,
    #[schema(max_length = 255)]
    #[serde(default)]
    sub_title: String,
    #[schema(max_length = 1024)]
    #[serde(default)]
    rules: String,
    /// In cents.
    #[schema(minimum = 0)]
    pay_value: i64,
    #[schema(minimum = 0)]
    actual_value: i64,
    /// 0, an ordinary voucher (the default).
    #[schema(minimum = 0, maximum = 0)]
    #[serde(rename = "type")]
    kind: Option<u8>,
    /// 1 on the shelf (the default), 2 off the shelf, 3 expired.
    #[schema(minimum = 1, maximum = 3)]
    status: Option<u8>,
}

/// `POST /voucher/seckill` as the OpenAPI document states it. What no
/// schema can say, the service still checks: `beginTime` before `endTime`
/// once both are cut to whole seconds (as they are stored), both between 1000-01-01 and 9999-12-31 in UTC (400 otherwise).
#[allow(dead_code)]
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = SeckillVoucherForm)]
pub(crate) struct SeckillVoucherSchema {
    #[schema(minimum = 1)]
    shop_id: i64,
    /// Not white space alone (stored without the white space around it);
    /// at most 255 characters as sent.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
    )]
    title: String,
    #[schema(max_length = 255)]
    #[serde(default)]
    sub_title: String,
    #[schema(max_length = 1024)]
    #[serde(default)]
    rules: String,
    /// In cents.
    #[schema(minimum = 0)]
    pay_value: i64,
    #[schema(minimum = 0)]
    actual_value: i64,
    /// 1, a seckill voucher (the default).
    #[schema(minimum = 1, maximum = 1)]
    #[serde(rename = "type")]
    kind: Option<u8>,
    /// 1 on the shelf (the default), 2 off the shelf, 3 expired.
    #[schema(minimum = 1, maximum = 3)]
    status: Option<u8>,
    /// Units for sale.
    #[schema(minimum = 0, maximum = 2147483647)]
    stock: i64,
    begin_time: DateTime<FixedOffset>,
    end_time: DateTime<FixedOffset>,
    /// How many segments the stock is sold in, each under a Redis hash tag
    /// of its own (on a cluster, on masters of their own): a voucher hotter
    /// than one Redis master. The asynchronous mode sells them; the
    /// synchronous mode sells from the row and records them only.
    #[schema(minimum = 1, maximum = 16, default = 1)]
    segments: Option<u8>,
    /// What a buyer must do before ordering: `none` (the order route as
    /// is), `path` (ask for a signed single-use path first, and wait in
    /// line past `admitPerSecond`) or `challenge` (solve a proof-of-work
    /// challenge for the path).
    #[schema(default = "none")]
    guard: Option<Guard>,
    /// Buyers a guarded voucher admits per second before the others wait
    /// in line; the stack's `SALE_ADMIT_PER_SECOND` when left out.
    #[schema(minimum = 1, maximum = 1000000)]
    admit_per_second: Option<u32>,
}

/// A validated `tb_voucher` row to insert.
pub(crate) struct NewVoucher {
    pub(crate) shop_id: u64,
    pub(crate) title: String,
    pub(crate) sub_title: String,
    pub(crate) rules: String,
    pub(crate) pay_value: i64,
    pub(crate) actual_value: i64,
    pub(crate) kind: u8,
    pub(crate) status: u8,
}

/// A validated `tb_seckill_voucher` row to insert.
pub(crate) struct NewSeckill {
    pub(crate) stock: i32,
    pub(crate) segments: u8,
    pub(crate) guard: Guard,
    pub(crate) admit_per_second: Option<u32>,
    pub(crate) begin_time: DateTime<FixedOffset>,
    pub(crate) end_time: DateTime<FixedOffset>,
}

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
        Ok((voucher, NewSeckill { stock, segments, guard, admit_per_second, begin_time, end_time }))
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

/// A voucher as listed, with its seckill fields when it has them.
#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VoucherView {
    pub(crate) id: u64,
    pub(crate) shop_id: u64,
    pub(crate) title: String,
    pub(crate) sub_title: String,
    pub(crate) rules: String,
    pub(crate) pay_value: u64,
    pub(crate) actual_value: i64,
    #[serde(rename = "type")]
    #[sqlx(rename = "type")]
    pub(crate) kind: u8,
    pub(crate) status: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stock: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::http::time::serialize_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) begin_time: Option<NaiveDateTime>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::http::time::serialize_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) end_time: Option<NaiveDateTime>,
    /// How many segments a seckill voucher's stock is sold in.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u8>)]
    pub(crate) segments: Option<u8>,
    /// A seckill voucher's guard: `none`, `path` or `challenge`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[sqlx(rename = "sale_guard")]
    #[schema(value_type = Option<String>)]
    pub(crate) guard: Option<String>,
    /// Buyers a guarded voucher admits per second, when it set its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) admit_per_second: Option<u32>,
}
