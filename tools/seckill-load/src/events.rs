//! The sale's order events (`ORDER_EVENTS=nats`): waited for until the
//! relay has published them all, and, where the service keeps published
//! events (`OUTBOX_RETENTION_S` above 0), the lag from each event's commit
//! to its broker's ack (`occurred_at`, `published_at`, both MariaDB's
//! clock). With `--events-audit`, they are also consumed from the broker
//! and held against the sale's orders (`order_events::audit_sale`).

use std::time::{Duration, Instant};

use order_events::audit::EventsAudit;
use serde::Serialize;

#[derive(clap::Args, Debug, Clone)]
pub struct EventsArgs {
    /// After the sale, consume its order events from NATS (from a second
    /// before its first request) and audit them: every order row has the
    /// events its status implies, each once, in its life's order, and no
    /// event names an order without a row but an asynchronous `failed`
    /// one. For a service run with ORDER_EVENTS=nats.
    #[arg(long)]
    pub events_audit: bool,
    #[command(flatten)]
    pub broker: order_events::consume::Broker,
    /// The consumer's own database (created when missing); by default
    /// `hmdp_downstream` beside the service's, with its account.
    #[arg(long, env = "EVENTS_DATABASE_URL")]
    pub events_database_url: Option<String>,
}

/// The sale's events at a consumer, against its orders; `None` without
/// `--events-audit`.
pub async fn audit(
    args: &EventsArgs,
    database_url: &str,
    orders: &sqlx::MySqlPool,
    vouchers: &[u64],
    sale_started_ms: i64,
    wait: Duration,
) -> anyhow::Result<Option<EventsAudit>> {
    if !args.events_audit {
        return Ok(None);
    }
    let downstream_url = match &args.events_database_url {
        Some(url) => url.clone(),
        None => format!("{}/hmdp_downstream", database_url.rsplit_once('/').map_or(database_url, |(server, _)| server)),
    };
    let downstream = hmdp::startup::connect_database(&downstream_url, 4).await?;
    let since_ms = sale_started_ms - 1_000;
    let (run, audit) = order_events::audit_sale(orders, &downstream, &args.broker, vouchers, since_ms, wait).await?;
    eprintln!("order events consumed for the audit: {}", serde_json::to_string(&run)?);
    Ok(Some(audit))
}

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

/// Waits (up to `timeout`) until none of the vouchers' events is left in
/// the outbox; `None` when there is no lag to tell: the service writes no
/// events (no outbox table), or keeps none once published
/// (`OUTBOX_RETENTION_S=0`, the default), so none of the vouchers' is in
/// `tb_order_outbox_published`.
pub async fn relayed(db: &sqlx::MySqlPool, vouchers: &[u64], timeout: Duration) -> anyhow::Result<Option<EventLag>> {
    let deadline = Instant::now() + timeout;
    let unpublished = loop {
        let mut query = sqlx::QueryBuilder::new("SELECT COUNT(*) FROM tb_order_outbox WHERE voucher_id IN (");
        let mut ids = query.separated(", ");
        for voucher in vouchers {
            ids.push_bind(*voucher);
        }
        query.push(")");
        let counted: Result<i64, sqlx::Error> = query.build_query_scalar().fetch_one(db).await;
        match counted {
            // No such table: a service from before the outbox.
            Err(sqlx::Error::Database(err)) if err.code().as_deref() == Some("42S02") => return Ok(None),
            Err(err) => return Err(err.into()),
            Ok(0) => break 0,
            Ok(left) if Instant::now() >= deadline => break left,
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let mut query = sqlx::QueryBuilder::new(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, occurred_at, published_at) / 1e3 AS DOUBLE)
         FROM tb_order_outbox_published WHERE voucher_id IN (",
    );
    let mut ids = query.separated(", ");
    for voucher in vouchers {
        ids.push_bind(*voucher);
    }
    query.push(")");
    let mut lags: Vec<f64> = query.build_query_scalar().fetch_all(db).await?;
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
