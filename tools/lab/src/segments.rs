//! Segmented stock in Redis (`hmdp-segments`), without borrowing and with
//! it, side by side: what each refuses while another segment still holds
//! stock, and what borrowing costs. Each segment under its own hash tag,
//! placed on a master of its own when the lab runs on a cluster. Redis is
//! the whole store here: the audit reads the segments' stock and buyers
//! sets.

use std::{
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::Context;
use hmdp::{Config, startup};
use hmdp_segments::{Bought, SegmentKeys, SegmentedStock, SlotOwners, Take, choose_tags, route};
use redis::AsyncCommands;
use sqlx::MySqlPool;

use super::{
    drive::{self, Audit, Refusal},
    experiment::{Experiment, Scale},
    report::StrategyRun,
    textbook,
};

pub async fn run(
    db: &MySqlPool,
    config: &Config,
    lab_prefix: &str,
    experiment: Experiment,
    scale: &Scale,
    requests: Arc<Vec<u64>>,
) -> anyhow::Result<StrategyRun> {
    let borrowing = match experiment {
        Experiment::RedisSegments => false,
        Experiment::RedisSegmentsBorrowing => true,
        other => anyhow::bail!("{} is not a Redis segments strategy", other.name()),
    };
    let voucher = textbook::new_voucher(db, experiment).await?;
    let mut redis = startup::connect_redis(&config.redis).await?;
    let owners = SlotOwners::read(&mut redis).await;
    let segments = scale.segments as usize;
    anyhow::ensure!(
        segments <= hmdp_segments::MAX_SEGMENTS,
        "--segments {segments}: a voucher is sold in at most {} Redis segments",
        hmdp_segments::MAX_SEGMENTS
    );
    let keys = choose_tags(voucher, segments, &owners)
        .into_iter()
        .map(|tag| {
            let key = |what: &str| format!("{lab_prefix}segment:{what}:{{{tag}}}");
            SegmentKeys { stock: key("stock"), buyers: key("buyers"), lent: key("lent"), received: key("received") }
        })
        .collect::<Vec<_>>();
    let masters: std::collections::HashSet<_> =
        keys.iter().filter_map(|k| owners.master_of(hmdp_segments::slot(&k.stock))).collect();
    let stock = SegmentedStock::new(redis.clone(), keys);
    stock.put_on_sale(scale.stock as i64).await.context("putting the segments on sale")?;

    let cpu_before = masters_cpu(&mut redis).await;
    let clock = Arc::new(SaleClock::default());
    let driven = {
        let (stock, clock) = (stock.clone(), clock.clone());
        drive::drive(requests, scale.concurrency, move |user| order(stock.clone(), user, borrowing, clock.clone()))
            .await
    };

    let cpu_after = masters_cpu(&mut redis).await;
    let reading = stock.reading().await?;
    let mut rows = Vec::new();
    for keys in stock.segments() {
        let buyers: Vec<u64> = redis.smembers(&keys.buyers).await?;
        rows.extend(buyers);
    }
    let left: i64 = reading.stock.iter().sum::<i64>() + reading.in_flight;
    let audit = Audit::of(scale.stock as i64, left, &rows, &driven.successes);
    let wrong = clock.refused_before_the_last_sale();
    let mut notes = vec![
        format!("{segments} segments on {} master(s)", masters.len().max(1)),
        format!(
            "{wrong} refused SOLD_OUT while a segment held stock ({:.3} % of {} buyers)",
            wrong as f64 * 100.0 / driven.buyers.max(1) as f64,
            driven.buyers
        ),
    ];
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        let spent: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let busiest = spent.iter().copied().fold(0.0, f64::max);
        let each = spent.iter().map(|s| format!("{s:.3}")).collect::<Vec<_>>().join(" / ");
        notes.push(format!("busiest master {busiest:.3} s of CPU (each: {each})"));
    }
    if borrowing {
        let requests = driven.successes.len() as u64 + driven.refusals.values().sum::<u64>();
        notes.push(format!(
            "{} borrows ({:.3} % of {requests} requests)",
            reading.lends,
            reading.lends as f64 * 100.0 / requests.max(1) as f64
        ));
    }
    for keys in stock.segments() {
        let _: () = redis.del(&[&keys.stock, &keys.buyers, &keys.lent, &keys.received]).await?;
    }
    Ok(StrategyRun::new(experiment, voucher, &driven, audit, driven.wall, notes))
}

/// When sold-out refusals were answered and the last unit's order was
/// sent. A refusal answered before that send was decided while that unit
/// was still unsold somewhere: a wrong SOLD_OUT, counted the same way for
/// both strategies. (A lower bound: one decided a moment before the last
/// unit went, but answered after its order was sent, is not counted.)
#[derive(Default)]
struct SaleClock {
    refused_at: Mutex<Vec<Instant>>,
    last_sale_sent: Mutex<Option<Instant>>,
}

impl SaleClock {
    fn sold(&self, sent: Instant) {
        let mut last = self.last_sale_sent.lock().expect("not poisoned");
        *last = Some(last.map_or(sent, |l| l.max(sent)));
    }

    fn refused(&self) {
        self.refused_at.lock().expect("not poisoned").push(Instant::now());
    }

    fn refused_before_the_last_sale(&self) -> u64 {
        let Some(last) = *self.last_sale_sent.lock().expect("not poisoned") else { return 0 };
        self.refused_at.lock().expect("not poisoned").iter().filter(|at| **at < last).count() as u64
    }
}

/// One buyer.
async fn order(stock: SegmentedStock, user: u64, borrowing: bool, clock: Arc<SaleClock>) -> Result<(), Refusal> {
    let sent = Instant::now();
    let outcome = if borrowing {
        stock.buy(user).await
    } else {
        let segment = route(user, stock.segments().len());
        stock.take(segment, user).await.map(|take| match take {
            Take::Taken => Bought::Taken { segment },
            Take::AlreadyBought => Bought::AlreadyBought,
            Take::Dry => Bought::SoldOut,
        })
    };
    match outcome {
        Ok(Bought::Taken { .. }) => {
            clock.sold(sent);
            Ok(())
        }
        Ok(Bought::AlreadyBought) => Err("DUPLICATE_ORDER".into()),
        Ok(Bought::Unsettled) => Err("UNSETTLED".into()),
        Ok(Bought::SoldOut) => {
            clock.refused();
            Err("SOLD_OUT".into())
        }
        Err(err) => {
            tracing::warn!(%err, user, "a segmented order failed");
            Err("ERROR".into())
        }
    }
}

/// Each master's CPU seconds so far (user + system, `INFO cpu`), by
/// address (`CLUSTER NODES` lists them in another order from each node);
/// `None` when one cannot be read.
async fn masters_cpu(redis: &mut hmdp_redis::Redis) -> Option<Vec<f64>> {
    let mut masters = redis.masters().await.ok()?;
    masters.sort();
    let mut spent = Vec::new();
    for master in masters {
        let mut conn = redis.endpoint().client(&master).ok()?.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await.ok()?;
        let field = |name: &str| {
            info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
        };
        spent.push(field("used_cpu_user")? + field("used_cpu_sys")?);
    }
    Some(spent)
}
