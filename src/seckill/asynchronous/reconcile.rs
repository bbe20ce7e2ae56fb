//! Once a voucher's stream is drained, Redis and MariaDB must agree: the
//! stock left and the set of buyers. `hmdp reconcile` and the load tool's
//! audit print the differences. A voucher sold in segments is summed over
//! them: the stock of every segment plus the units in flight between them,
//! and the union of their buyers sets (each user in their own segment).

use std::collections::{BTreeSet, HashMap};

use hmdp_redis::Redis;
use redis::AsyncCommands;
use serde::Serialize;
use sqlx::MySqlPool;

use super::stream::GROUP;
use crate::{
    keys::{Keys, SeckillKeys},
    seckill::{asynchronous::segments::recorded_tags, store},
};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconciliation {
    pub(crate) voucher_id: u64,
    /// Accepted orders not yet persisted nor dead-lettered.
    pub pending_orders: u64,
    /// Stream entries delivered to a consumer and not yet acknowledged.
    pub unacknowledged: u64,
    /// `None` when the voucher's keys are not in Redis; in segments, the
    /// sum of theirs and the units in flight between them.
    pub redis_stock: Option<i64>,
    /// Each segment's stock (one entry for a voucher of one segment).
    pub segment_stock: Vec<Option<i64>>,
    /// Units lent by one segment and not yet credited to another.
    pub units_in_flight: i64,
    /// Buyers found in a segment other than their own.
    pub(crate) misrouted: u64,
    pub db_stock: i64,
    pub redis_buyers: Option<u64>,
    pub db_buyers: u64,
    /// Users with a row but not in the buyers set, and the other way round.
    pub only_in_db: Vec<u64>,
    pub only_in_redis: Vec<u64>,
    pub dead_letters: u64,
    /// The voucher's keys were loaded but it was missing from
    /// `seckill:active`, so no consumer read its stream: it was registered
    /// again by this reconciliation.
    pub reregistered: bool,
}

impl Reconciliation {
    /// At rest: every accepted order persisted or dead-lettered, and no
    /// units in flight between segments (a borrow whose borrower died is
    /// returned by the consumers within seconds).
    pub fn drained(&self) -> bool {
        self.pending_orders == 0 && self.unacknowledged == 0 && self.units_in_flight == 0
    }

    /// Drained, and Redis says what MariaDB says.
    pub fn agrees(&self) -> bool {
        self.drained()
            && self.redis_stock == Some(self.db_stock)
            && self.redis_buyers == Some(self.db_buyers)
            && self.only_in_db.is_empty()
            && self.only_in_redis.is_empty()
            && self.misrouted == 0
    }

    pub fn render(&self) -> String {
        let show = |v: Option<i64>| v.map_or_else(|| "absent".to_owned(), |n| n.to_string());
        let sample = |ids: &[u64]| ids.iter().take(10).map(u64::to_string).collect::<Vec<_>>().join(",");
        format!(
            "voucher {}: {}{}\n  pending orders {}, unacknowledged entries {}, dead letters {}\n  stock   redis {} / mariadb {}{}\n  buyers  redis {} / mariadb {}\n  users only in mariadb {} [{}], only in redis {} [{}]\n",
            self.voucher_id,
            if self.agrees() {
                "Redis = MariaDB"
            } else if self.drained() {
                "DRIFT"
            } else {
                "not drained yet"
            },
            if self.reregistered { " (was missing from seckill:active: registered again)" } else { "" },
            self.pending_orders,
            self.unacknowledged,
            self.dead_letters,
            show(self.redis_stock),
            self.db_stock,
            if self.segment_stock.len() > 1 {
                let each: Vec<String> = self.segment_stock.iter().map(|s| show(*s)).collect();
                format!(
                    "\n  segments {} [{}], units in flight {}, buyers in another's segment {}",
                    each.len(),
                    each.join(" "),
                    self.units_in_flight,
                    self.misrouted
                )
            } else {
                String::new()
            },
            show(self.redis_buyers.map(|b| b as i64)),
            self.db_buyers,
            self.only_in_db.len(),
            sample(&self.only_in_db),
            self.only_in_redis.len(),
            sample(&self.only_in_redis),
        )
    }
}

/// Reads both sides of one voucher. The buyers set's marker member `0` is
/// not a user. A voucher whose keys are loaded but which is missing from
/// `seckill:active` (a registration lost before the load) would never be
/// persisted: it is registered again here, and said so.
pub async fn reconcile(
    db: &MySqlPool,
    redis: &mut Redis,
    keys: &Keys,
    voucher_id: u64,
) -> anyhow::Result<Reconciliation> {
    let (tags, _stamp) = store::segment_tags_and_stamp(db, voucher_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("voucher {voucher_id} is not a seckill voucher"))?;
    let segments: Vec<SeckillKeys> =
        recorded_tags(voucher_id, &tags).iter().map(|tag| keys.seckill_segment(tag)).collect();
    let (mut segment_stock, mut buyers, mut pending, mut dead, mut unacknowledged) =
        (Vec::new(), BTreeSet::new(), 0, 0, 0);
    let (mut loaded, mut units_in_flight, mut misrouted) = (true, 0, 0);
    for (segment, sk) in segments.iter().enumerate() {
        let (stock, members, waiting, dead_letters, orders_exist, lent): (
            Option<i64>,
            BTreeSet<u64>,
            u64,
            u64,
            bool,
            HashMap<String, String>,
        ) = redis::pipe()
            .get(&sk.stock)
            .smembers(&sk.buyers)
            .hlen(&sk.pending)
            .xlen(&sk.dead)
            .exists(&sk.orders)
            .hgetall(&sk.lent)
            .query_async(redis)
            .await?;
        if orders_exist {
            let summary: redis::Value = redis::cmd("XPENDING").arg(&sk.orders).arg(GROUP).query_async(redis).await?;
            if let redis::Value::Array(items) = summary {
                unacknowledged += items.first().and_then(|v| redis::from_redis_value_ref::<u64>(v).ok()).unwrap_or(0);
            }
        }
        units_in_flight += hmdp_segments::Lent::read(&lent).units;
        loaded &= members.contains(&0);
        if segments.len() > 1 {
            misrouted +=
                members.iter().filter(|&&u| u != 0 && hmdp_segments::route(u, segments.len()) != segment).count()
                    as u64;
        }
        buyers.extend(members);
        segment_stock.push(stock);
        (pending, dead) = (pending + waiting, dead + dead_letters);
    }
    let stock = segment_stock.iter().copied().sum::<Option<i64>>().map(|s| s + units_in_flight);
    let reregistered = loaded && redis.sadd::<_, _, u64>(keys.seckill_active(), voucher_id).await? == 1;
    if reregistered {
        tracing::warn!(voucher_id, "a loaded voucher was missing from seckill:active; registered again");
    }
    let redis_buyers: BTreeSet<u64> = buyers.into_iter().filter(|&u| u != 0).collect();

    let db_stock = store::sale(db, voucher_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("voucher {voucher_id} is not a seckill voucher"))?
        .stock;
    let db_buyers: BTreeSet<u64> =
        store::orders_of_voucher(db, voucher_id).await?.into_iter().filter(|o| o.2).map(|(_, user, _)| user).collect();
    Ok(Reconciliation {
        voucher_id,
        pending_orders: pending,
        unacknowledged,
        redis_stock: stock,
        segment_stock,
        units_in_flight,
        misrouted,
        db_stock: db_stock.into(),
        redis_buyers: loaded.then_some(redis_buyers.len() as u64),
        db_buyers: db_buyers.len() as u64,
        only_in_db: if loaded { db_buyers.difference(&redis_buyers).copied().collect() } else { Vec::new() },
        only_in_redis: redis_buyers.difference(&db_buyers).copied().collect(),
        dead_letters: dead,
        reregistered,
    })
}
