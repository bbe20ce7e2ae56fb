//! A downstream consumer of hmdp's order events, the one docs/events.md
//! describes, as a library: the `order-events` command and the load tool's
//! audit (`seckill-load --events-audit`) both use it.
//!
//! - `consume`: the durable subscriber, each event applied once;
//! - `inbox`: the consumer's tables (its inbox and the order view);
//! - `audit`: what it saw, held against the orders.

pub mod audit;
pub mod consume;
pub mod inbox;

use std::time::{Duration, Instant};

use hmdp::config::without_password;
use sqlx::MySqlPool;

use crate::{
    audit::EventsAudit,
    consume::{Broker, Run},
};

/// How long the consumer waits for one more event before it holds what it
/// has against the orders.
const QUIET: Duration = Duration::from_secs(2);

/// A sale's events held against its orders, as a load run asks for them:
/// consumes from `since_ms` (a little before the sale's first request)
/// through a durable of its own, audits `vouchers`, and consumes more
/// until the audit passes or `wait` is over; the durable is deleted after.
/// What the inbox held of `vouchers` before is forgotten first.
pub async fn audit_sale(
    orders: &MySqlPool,
    downstream: &MySqlPool,
    broker: &Broker,
    vouchers: &[u64],
    since_ms: i64,
    wait: Duration,
) -> anyhow::Result<(Run, EventsAudit)> {
    let started = Instant::now();
    inbox::forget_vouchers(downstream, vouchers).await?;
    let options = consume::Options {
        broker: broker.clone(),
        durable: format!("audit-{}-{}", vouchers.first().copied().unwrap_or(0), std::process::id()),
        idle_exit: Some(QUIET),
        since_ms: Some(since_ms),
    };
    let mut total = Run::default();
    let audit = loop {
        // The client waits for a broker that is away; the audit does not.
        let left = wait.saturating_sub(started.elapsed()) + QUIET * 2;
        let run = tokio::time::timeout(left, consume::consume(downstream, &options)).await.map_err(|_| {
            anyhow::anyhow!("no answer from NATS at {} within {left:?}", without_password(&broker.nats_url))
        })??;
        total.add(&run);
        let audit = EventsAudit::run(orders, downstream, vouchers).await?;
        if audit.passed || started.elapsed() >= wait {
            break audit;
        }
    };
    if let Err(err) = consume::delete_durable(broker, &options.durable).await {
        eprintln!("the audit's durable {} is left on the broker: {err}", options.durable);
    }
    Ok((total, audit))
}
