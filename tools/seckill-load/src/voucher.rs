//! The seckill voucher a run sells, created through the admin's route, as
//! an admin would: the sale and the crowd describe it, this sends it.

use anyhow::Context;
use serde_json::{Value, json};

/// What a run's voucher is; the optional parts are sent only when asked
/// for, so a service without them (an older build, the course's own),
/// which refuses unknown fields, still takes the rest.
pub(crate) struct SaleVoucher<'a> {
    pub(crate) title: String,
    pub(crate) stock: i64,
    pub(crate) begin: chrono::DateTime<chrono::Utc>,
    /// From `begin` to the sale's end.
    pub(crate) lasts: chrono::Duration,
    /// Sent only when set: a voucher without it may be split by the
    /// service when found hot.
    pub(crate) segments: Option<u8>,
    pub(crate) guard: Option<&'a str>,
    pub(crate) admit_per_second: Option<u32>,
}

/// Creates the voucher at `base_url`; returns its id.
pub(crate) async fn create(
    client: &reqwest::Client,
    base_url: &str,
    admin_key: &str,
    voucher: &SaleVoucher<'_>,
) -> anyhow::Result<u64> {
    let mut body = json!({
        "shopId": 1, "title": voucher.title, "payValue": 100, "actualValue": 1000,
        "type": 1, "stock": voucher.stock,
        "beginTime": voucher.begin.to_rfc3339(),
        "endTime": (voucher.begin + voucher.lasts).to_rfc3339(),
    });
    if let Some(segments) = voucher.segments {
        body["segments"] = json!(segments);
    }
    if let Some(guard) = voucher.guard {
        body["guard"] = json!(guard);
    }
    if let Some(rate) = voucher.admit_per_second {
        body["admitPerSecond"] = json!(rate);
    }
    let answer: Value = client
        .post(format!("{}/voucher/seckill", base_url.trim_end_matches('/')))
        .header("x-admin-key", admin_key)
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    answer["data"].as_u64().with_context(|| format!("creating the voucher: {answer}"))
}
