//! Voucher shapes on the wire and in the tables (the rules a voucher must
//! follow before it is written are `rules.rs`).

use chrono::{DateTime, FixedOffset, NaiveDateTime};
use serde::{Deserialize, Serialize};

use crate::{
    http::{time, whole},
    salepath::Guard,
};

pub(super) const TYPE_ORDINARY: u8 = 0;
pub(super) const TYPE_SECKILL: u8 = 1;
pub(super) const STATUS_ON_SHELF: u8 = 1;
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
    #[serde(default, deserialize_with = "time::optional")]
    pub(crate) begin_time: Option<DateTime<FixedOffset>>,
    #[serde(default, deserialize_with = "time::optional")]
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
    /// The request named the segments: a voucher found hot keeps them.
    pub(crate) segments_by_admin: bool,
    pub(crate) guard: Guard,
    pub(crate) admit_per_second: Option<u32>,
    pub(crate) begin_time: DateTime<FixedOffset>,
    pub(crate) end_time: DateTime<FixedOffset>,
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
