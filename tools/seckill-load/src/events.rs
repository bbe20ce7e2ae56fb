//! The sale's order events (`ORDER_EVENTS=nats`): waited for until the
//! relay has published them all, and, where the service keeps published
//! events (`OUTBOX_RETENTION_S` above 0), the lag from each event's commit
//! to its broker's ack (`occurred_at`, `published_at`, both MariaDB's
//! clock).

use std::time::{Duration, Instant};

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLag {
    pub events: usize,
    pub unpublished: i64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl EventLag {
    pub fn render(&self) -> String {
        format!(
            "Order events of the sale (outbox -> NATS): {} published, {} not yet; lag from commit to ack p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms\n",
            self.events, self.unpublished, self.p50_ms, self.p99_ms, self.max_ms
        )
    }
}

/// Waits (up to `timeout`) until none of the voucher's events is left in
/// the outbox; `None` when there is no lag to tell: the service writes no
/// events (no outbox table), or keeps none once published
/// (`OUTBOX_RETENTION_S=0`, the default), so none of the voucher's is in
/// `tb_order_outbox_published`.
pub async fn relayed(db: &sqlx::MySqlPool, voucher: u64, timeout: Duration) -> anyhow::Result<Option<EventLag>> {
    let deadline = Instant::now() + timeout;
    let unpublished = loop {
        let counted: Result<i64, sqlx::Error> =
            sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox WHERE voucher_id = ?")
                .bind(voucher)
                .fetch_one(db)
                .await;
        match counted {
            // No such table: a service from before the outbox.
            Err(sqlx::Error::Database(err)) if err.code().as_deref() == Some("42S02") => return Ok(None),
            Err(err) => return Err(err.into()),
            Ok(0) => break 0,
            Ok(left) if Instant::now() >= deadline => break left,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut lags: Vec<f64> = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, occurred_at, published_at) / 1e3 AS DOUBLE)
         FROM tb_order_outbox_published WHERE voucher_id = ?",
    )
    .bind(voucher)
    .fetch_all(db)
    .await?;
    if lags.is_empty() && unpublished == 0 {
        return Ok(None);
    }
    lags.sort_by(f64::total_cmp);
    let at = |q: f64| lags.get(((lags.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    Ok(Some(EventLag {
        events: lags.len(),
        unpublished,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: lags.last().copied().unwrap_or(0.0),
    }))
}
