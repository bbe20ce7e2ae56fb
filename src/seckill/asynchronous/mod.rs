//! The asynchronous order: one Redis script decides it (window against
//! Redis's clock, one order per user, stock) and queues it on the voucher's
//! stream, and the answer goes out at once; the consumers persist it later
//! in batches. Besides the session lookup, an order costs one round trip:
//! its id comes from a block reserved earlier.
//!
//! When a voucher's keys are missing (never loaded, evicted, Redis restarted
//! without persistence) they are rebuilt from MariaDB, atomically and once
//! even when both instances try at the same moment.
//!
//! By file: `stream` (an entry and its acknowledgement), `consumer`
//! (batched persistence), `recovery` (idle entries taken over, dead
//! letters), `reconcile` (Redis against MariaDB).

mod consumer;
mod converge;
mod reconcile;
mod recovery;
mod stream;

use std::{
    collections::{HashMap, HashSet},
    sync::LazyLock,
    time::Duration,
};

use hmdp_redis::{Redis, ReplicaBarrier};
use redis::{AsyncCommands, Script};
use sqlx::MySqlPool;

pub(crate) use consumer::{BLOCK as CONSUMER_BLOCK, Consumer};
use converge::with_stock_from_row;
pub use reconcile::{Reconciliation, reconcile};
pub(crate) use recovery::Recovery;

use super::{
    admission::VoucherGates,
    error::{SeckillError, SeckillResult},
    model::{PlacedOrder, StockSet},
    store,
};
use crate::{dependency::redis_unreachable, ids::OrderIdGenerator, keys::Keys};

static ORDER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_order.lua")));
static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(with_stock_from_row!("../../../lua/seckill_load.lua")));

/// Members per SADD when staging a rebuilt buyers set.
const STAGE_CHUNK: usize = 5_000;

/// Between two tries of the order script after a lost answer.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Past the deadline, how long a lost call's order is still looked for
/// before the answer says "unknown": within nginx's 30 s with the largest
/// deadline (25 s) and a Redis response timeout (2 s).
const LAST_LOOK: Duration = Duration::from_secs(3);

/// Replicas an accepted order waits for before it is answered as safe.
///
/// `WAIT` blocks the connection it is sent on: every command queued behind
/// it waits too. So the waiting orders have a connection of their own
/// (sessions, limits and the consumer never queue behind a `WAIT`), one
/// `WAIT` at a time per slot covers every order answered before it (a
/// group wait, `ReplicaBarrier`), and a voucher whose `WAIT` came back short (its master lost its replica, as
/// after a failover) skips the wait for `SHORT_WAIT_BACKOFF` and is
/// answered 202 at once, instead of holding every order behind a wait no
/// replica can end.
pub(crate) struct ReplicaWait {
    /// 0: no wait (one Redis, or a cluster without replicas).
    pub acks: u32,
    pub timeout: Duration,
    /// The waiting orders' own connection and their group `WAIT`.
    pub barrier: ReplicaBarrier,
    /// Voucher -> when its last wait came back short; bounded.
    pub short: std::sync::Mutex<HashMap<u64, tokio::time::Instant>>,
}

/// How long a voucher whose replica did not answer skips the wait.
const SHORT_WAIT_BACKOFF: Duration = Duration::from_secs(1);
/// Vouchers remembered as short of a replica, at most.
const SHORT_WAIT_MAX: usize = 1_024;

impl ReplicaWait {
    fn recently_short(&self, voucher_id: u64) -> bool {
        let short = self.short.lock().expect("replica wait poisoned");
        short.get(&voucher_id).is_some_and(|at| at.elapsed() < SHORT_WAIT_BACKOFF)
    }

    fn record(&self, voucher_id: u64, replicated: bool) {
        let mut short = self.short.lock().expect("replica wait poisoned");
        if replicated {
            short.remove(&voucher_id);
            return;
        }
        if short.len() >= SHORT_WAIT_MAX {
            short.retain(|_, at| at.elapsed() < SHORT_WAIT_BACKOFF);
            if short.len() >= SHORT_WAIT_MAX {
                short.clear();
            }
        }
        short.insert(voucher_id, tokio::time::Instant::now());
    }
}

/// What the asynchronous mode's order path is made of; built once at
/// start-up. The consumer is built beside it and owned by the service.
pub(crate) struct AsyncOrders {
    pub db: MySqlPool,
    pub redis: Redis,
    pub keys: Keys,
    pub order_ids: OrderIdGenerator,
    /// Only its memory of ids that are no seckill voucher.
    pub gates: VoucherGates,
    pub deadline: Duration,
    pub replica_wait: ReplicaWait,
    /// Vouchers whose keys this instance found made for them; bounded.
    pub verified: std::sync::Mutex<HashSet<u64>>,
}

/// Vouchers remembered as verified, at most.
const VERIFIED_MAX: usize = 10_000;

impl AsyncOrders {
    /// Decides one order in Redis; returns its id once it is queued (and,
    /// when replicas are waited for, whether they acknowledged it).
    pub(super) async fn place(&self, user_id: u64, voucher_id: u64) -> SeckillResult<PlacedOrder> {
        if self.gates.recently_missing(voucher_id) {
            return Err(SeckillError::NoSuchVoucher);
        }
        self.verify(voucher_id).await?;
        let order_id = self.order_ids.next().await?;
        let keys = self.keys.seckill(voucher_id);
        let redis = &self.redis;
        let deadline = tokio::time::Instant::now() + self.deadline;
        let mut loaded_once = false;
        // Set once a call's answer was lost: that call may still run in Redis.
        let mut uncertain = false;
        loop {
            let called = self.run_order_script(redis, &keys, user_id, order_id, voucher_id).await;
            // A call whose answer was lost (Redis paused, a timeout) may be
            // executed later. The same call, same order id, is tried again until
            // the deadline: whichever runs first accepts the order, once (the
            // buyers set sees to it), and the answer comes from what Redis holds.
            let (verdict, acked) = match called {
                Ok(answer) => answer,
                Err(err) if redis_unreachable(&err) => {
                    uncertain = true;
                    if tokio::time::Instant::now() < deadline {
                        tracing::warn!(order_id, error = %err, "the order script's answer was lost; asking again");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    // Out of time, but a lost call may have run meanwhile:
                    // "unavailable" would be a lie about an order that exists.
                    let owner = store::OrderOwner { user_id, voucher_id };
                    return match self.accepted_after_all(owner, order_id).await {
                        Some(true) => Ok(self.accepted_on_a_lost_call(order_id)),
                        Some(false) => Err(err.into()),
                        None => Err(SeckillError::Unavailable(anyhow::anyhow!(
                            "order {order_id}: Redis did not answer; whether it was accepted is unknown (GET /voucher-order/{order_id} tells)"
                        ))),
                    };
                }
                Err(err) => return Err(err.into()),
            };
            match verdict {
                0 => {
                    let replicated = acked.unwrap_or(0) >= self.replica_wait.acks;
                    if acked.is_some() {
                        self.replica_wait.record(voucher_id, replicated);
                    }
                    if !replicated {
                        tracing::warn!(order_id, acked, "order accepted but not yet on a Redis replica");
                    }
                    tracing::debug!(order_id, user_id, voucher_id, "order accepted");
                    return Ok(PlacedOrder { id: order_id, replicated });
                }
                1 if !loaded_once => {
                    loaded_once = true;
                    let loaded = self.load(voucher_id).await;
                    if let Err(SeckillError::NoSuchVoucher) = loaded {
                        self.gates.remember_missing(voucher_id);
                    }
                    loaded?
                }
                1 => {
                    return Err(SeckillError::internal(anyhow::anyhow!(
                        "voucher {voucher_id}'s keys vanished right after loading"
                    )));
                }
                2 => return Err(SeckillError::NotStarted),
                3 => return Err(SeckillError::Ended),
                4 => {
                    // After a lost answer the order held may be this very one.
                    let owner = store::OrderOwner { user_id, voucher_id };
                    if uncertain && self.accepted_before(owner, order_id).await? {
                        return Ok(self.accepted_on_a_lost_call(order_id));
                    }
                    // The order the user holds: pending (by user in the holders
                    // hash), else its row.
                    let pending: Option<i64> = self.redis.clone().hget(&keys.holders, user_id).await.ok().flatten();
                    let held = match pending {
                        Some(id) => Some(id),
                        None => store::held_order(&self.db, user_id, voucher_id).await.ok().flatten(),
                    };
                    return Err(SeckillError::DuplicateOrder(held));
                }
                5 => return Err(SeckillError::SoldOut),
                6 => return Err(SeckillError::OffShelf),
                other => {
                    return Err(SeckillError::internal(anyhow::anyhow!(
                        "the order script answered {other} for voucher {voucher_id}"
                    )));
                }
            }
        }
    }

    /// The order script, followed by a `WAIT` for the replicas on the same
    /// connection when they are waited for. Returns the verdict and how
    /// many replicas acknowledged it (`None`: no wait was made).
    async fn run_order_script(
        &self,
        redis: &Redis,
        keys: &crate::keys::SeckillKeys,
        user_id: u64,
        order_id: i64,
        voucher_id: u64,
    ) -> redis::RedisResult<(i64, Option<u32>)> {
        let (acks, timeout) = (self.replica_wait.acks, self.replica_wait.timeout);
        let waiting = acks > 0 && !self.replica_wait.recently_short(voucher_id);
        // A waited-for order's script runs on the connection the WAIT will be
        // sent on: WAIT counts what its own connection wrote.
        let mut conn = if waiting { self.replica_wait.barrier.redis().clone() } else { redis.clone() };
        let verdict: i64 = ORDER
            .key(&keys.stock)
            .key(&keys.window)
            .key(&keys.buyers)
            .key(&keys.orders)
            .key(&keys.pending)
            .key(&keys.holders)
            .arg(user_id)
            .arg(order_id)
            .arg(voucher_id)
            .invoke_async(&mut conn)
            .await?;
        if !waiting || verdict != 0 {
            return Ok((verdict, None));
        }
        let acked = match self.replica_wait.barrier.acknowledged(&keys.stock, acks, timeout).await {
            Ok(acked) => acked,
            // Accepted: whether a replica has it is not known, and the
            // answer says so (202) instead of asking the script again.
            Err(err) => {
                tracing::warn!(order_id, error = %err, "the replicas' acknowledgement of an accepted order was lost");
                0
            }
        };
        Ok((verdict, Some(acked)))
    }

    fn accepted_on_a_lost_call(&self, order_id: i64) -> PlacedOrder {
        tracing::info!(order_id, "a lost call had accepted the order; answered as accepted");
        // Whether a replica has it is not known: said so when it matters.
        PlacedOrder { id: order_id, replicated: self.replica_wait.acks == 0 }
    }

    /// Once per voucher and instance, before its first order here: keys
    /// made for another voucher under this id (`made` differs from
    /// MariaDB's stamp) would sell that voucher's stock and refuse its
    /// buyers; they are wiped and loaded again. Keys not loaded yet are
    /// left to the order script, which reports them.
    async fn verify(&self, voucher_id: u64) -> SeckillResult<()> {
        if self.verified.lock().expect("verified vouchers poisoned").contains(&voucher_id) {
            return Ok(());
        }
        let made: Option<String> = self.redis.clone().hget(self.keys.seckill(voucher_id).window, "made").await?;
        if let Some(made) = made {
            let Some(sale) = store::sale(&self.db, voucher_id).await? else {
                self.gates.remember_missing(voucher_id);
                return Err(SeckillError::NoSuchVoucher);
            };
            // An ended sale is not loaded again: its stale keys stay unused,
            // as every order is answered ENDED here.
            if made != sale.stamp() {
                self.load(voucher_id).await?;
            }
        }
        let mut verified = self.verified.lock().expect("verified vouchers poisoned");
        if verified.len() >= VERIFIED_MAX {
            verified.clear();
        }
        verified.insert(voucher_id);
        Ok(())
    }

    /// `accepted_before`, asked until Redis answers or `LAST_LOOK` has
    /// passed (`None`: still unknown).
    async fn accepted_after_all(&self, owner: store::OrderOwner, order_id: i64) -> Option<bool> {
        let until = tokio::time::Instant::now() + LAST_LOOK;
        loop {
            match self.accepted_before(owner, order_id).await {
                Ok(accepted) => return Some(accepted),
                Err(err) if tokio::time::Instant::now() < until => {
                    tracing::warn!(order_id, error = %err, "looking for a lost call's order failed; again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(_) => return None,
            }
        }
    }

    /// Whether `order_id` itself was accepted: pending, persisted (its row,
    /// this user's for this voucher), or already dead-lettered.
    async fn accepted_before(&self, order: store::OrderOwner, order_id: i64) -> SeckillResult<bool> {
        let keys = self.keys.seckill(order.voucher_id);
        let (pending, failed): (bool, bool) = redis::pipe()
            .hexists(&keys.pending, order_id)
            .hexists(&keys.failed, order_id)
            .query_async(&mut self.redis.clone())
            .await?;
        if pending || failed {
            return Ok(true);
        }
        Ok(store::existing_orders(&self.db, &[order_id]).await?.get(&order_id) == Some(&order))
    }

    /// Clears the way for a voucher being created, before its row is
    /// committed. Nothing in Redis can belong to it yet: keys under its id
    /// were left by another database whose voucher had the same id (a Redis
    /// that outlived its database), and would sell its stock, refuse its
    /// buyers or persist its pending orders as this voucher's. They go, all
    /// of them in one DEL (one slot). Before the commit, so a Redis that
    /// cannot be reached fails the creation with nothing created; no order
    /// can load keys meanwhile, as MariaDB has no row for it yet.
    pub(super) async fn clear_stale(&self, voucher_id: u64) -> SeckillResult<()> {
        let sk = self.keys.seckill(voucher_id);
        let stale: u64 = redis::cmd("DEL")
            .arg(&sk.stock)
            .arg(&sk.window)
            .arg(&sk.buyers)
            .arg(&sk.orders)
            .arg(&sk.dead)
            .arg(&sk.pending)
            .arg(&sk.failed)
            .arg(&sk.holders)
            .query_async(&mut self.redis.clone())
            .await?;
        if stale > 0 {
            tracing::warn!(
                voucher_id,
                keys = stale,
                "a new voucher found keys another voucher left under its id; removed"
            );
        }
        Ok(())
    }

    /// Loads a voucher's keys from MariaDB unless they are all there, and makes
    /// the consumers read its stream. 404 when it is not a seckill voucher.
    ///
    /// Orders accepted but not yet persisted are in the pending hash: they are
    /// read first, then MariaDB in one snapshot, so an order persisted in
    /// between is found in MariaDB and counted once. While any key is missing
    /// the order script accepts nothing, so nothing else moves meanwhile.
    pub(super) async fn load(&self, voucher_id: u64) -> SeckillResult<()> {
        let (keys, redis) = (&self.keys, &mut self.redis.clone());
        let sk = keys.seckill(voucher_id);
        let (made, mut pending): (Option<String>, HashMap<i64, String>) =
            redis::pipe().hget(&sk.window, "made").hgetall(&sk.pending).query_async(redis).await?;

        let mut tx = self.db.begin().await?;
        let sale = store::sale(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let (db_stock, begin, end) = (sale.stock, sale.begin_time, sale.end_time);
        let shelf = sale.shelf.unwrap_or(0);
        let stamp = sale.stamp();
        // Keys made for another voucher under this id: their pending orders
        // are not this voucher's (the script wipes them).
        if made.as_ref().is_some_and(|made| *made != stamp) {
            pending.clear();
        }
        // An ended sale with nothing left to persist is not loaded again (a
        // retired sale's keys expired): it would only sit in Redis and in
        // every instance's reads. Its orders are answered ENDED from here.
        if end <= chrono::Utc::now().naive_utc() && pending.is_empty() {
            tx.commit().await?;
            return Err(SeckillError::Ended);
        }
        let rows = store::orders_of_voucher(&mut *tx, voucher_id).await?;
        tx.commit().await?;

        let persisted: HashSet<i64> = rows.iter().map(|(id, _, _)| *id).collect();
        // Buyers are the users with a live order: a cancelled one may buy again.
        let mut buyers: HashSet<u64> = rows.iter().filter(|(_, _, live)| *live).map(|(_, user, _)| *user).collect();
        let mut holders: Vec<(u64, i64)> = Vec::new();
        let mut persisted_pending: Vec<i64> = Vec::new();
        for (order_id, accepted) in &pending {
            if persisted.contains(order_id) {
                persisted_pending.push(*order_id);
            } else if let Some(user) = accepted.split(':').next().and_then(|u| u.parse().ok()) {
                buyers.insert(user);
                holders.push((user, *order_id));
            }
        }
        // Who holds which pending order, as the order script records it.
        for chunk in holders.chunks(STAGE_CHUNK) {
            redis.hset_multiple::<_, _, _, ()>(&sk.holders, chunk).await?;
        }

        // Registered before the keys exist: once the order script can accept
        // an order, a consumer is already reading the voucher's stream (a
        // lost registration after the load left accepted orders unread).
        redis.sadd::<_, _, ()>(keys.seckill_active(), voucher_id).await?;
        // The buyers are staged under the same hash tag and renamed into place
        // by the script, so the set appears whole or not at all.
        let staging = format!("{}:staging:{}", sk.buyers, uuid::Uuid::new_v4().simple());
        let members: Vec<u64> = buyers.into_iter().collect();
        for chunk in members.chunks(STAGE_CHUNK) {
            redis::pipe().sadd(&staging, chunk).ignore().expire(&staging, 60).ignore().exec_async(redis).await?;
        }
        // The stock is counted by the script from MariaDB's and the pending
        // hash as it is then (stock_from_row).
        let (loaded, stock): (i64, i64) = LOAD
            .key(&sk.stock)
            .key(&sk.window)
            .key(&sk.buyers)
            .key(&sk.orders)
            .key(&staging)
            .key(&sk.pending)
            .key(&sk.holders)
            .key(&sk.failed)
            .key(&sk.dead)
            .arg(db_stock)
            .arg(begin.and_utc().timestamp_millis())
            .arg(end.and_utc().timestamp_millis())
            .arg(shelf)
            .arg(&stamp)
            .arg(&persisted_pending)
            .invoke_async(redis)
            .await?;
        match loaded {
            1 => tracing::info!(voucher_id, stock, db_stock, "seckill keys loaded from MariaDB"),
            2 => tracing::warn!(
                voucher_id,
                stock,
                stale = ?made,
                "keys made for another voucher under this id were wiped; loaded from MariaDB"
            ),
            _ => {}
        }
        Ok(())
    }
}

impl AsyncOrders {
    /// The admin's stock: `stock` more units for sale from now on. Orders
    /// accepted in Redis and not persisted yet keep their units, so the row
    /// gets `stock` plus those, and Redis `stock`, both under the row lock.
    pub(super) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        let sk = self.keys.seckill(voucher_id);
        let mut tx = self.db.begin().await?;
        let before = store::lock_stock(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        let found = converge::unpersisted(&mut tx, &self.redis, &sk, voucher_id).await?;
        let row = i32::try_from(i64::from(stock) + found.count).map_err(|_| SeckillError::StockOutOfRange)?;
        store::set_stock(&mut *tx, voucher_id, row).await?;
        let redis_stock = converge::set_from_row(&self.redis, &sk, voucher_id, row.into(), &found).await?;
        tx.commit().await?;
        tracing::info!(voucher_id, stock, row, ?redis_stock, "seckill stock set");
        Ok(StockSet {
            stock,
            previous: i64::from(before) - found.count,
            awaiting_persistence: found.count.max(0) as u64,
        })
    }
}

/// Units MariaDB got back (cancelled or refunded orders, committed): Redis's
/// stock is set from the row and the users' buyer slots are freed, so they
/// may buy again. Idempotent.
pub(super) async fn units_returned(
    db: &MySqlPool,
    redis: &Redis,
    keys: &Keys,
    voucher_id: u64,
    users: &[u64],
) -> SeckillResult<()> {
    let sk = keys.seckill(voucher_id);
    let mut tx = db.begin().await?;
    let Some(db_stock) = store::lock_stock(&mut *tx, voucher_id).await? else { return Ok(()) };
    let found = converge::unpersisted(&mut tx, redis, &sk, voucher_id).await?;
    // Only users without another live order of the voucher lose their slot.
    let still_holding = store::held_orders(&mut *tx, voucher_id, users).await?;
    let freed: Vec<u64> = users.iter().copied().filter(|u| !still_holding.contains_key(u)).collect();
    if !freed.is_empty() {
        redis.clone().srem::<_, _, ()>(&sk.buyers, &freed).await?;
    }
    converge::set_from_row(redis, &sk, voucher_id, db_stock.into(), &found).await?;
    tx.commit().await?;
    Ok(())
}

/// A voucher's shelf status, where the order script reads it. A voucher
/// not loaded yet is left alone: its load reads the status from MariaDB,
/// which has it already.
pub(super) async fn shelf_changed(redis: &mut Redis, keys: &Keys, voucher_id: u64, status: i64) -> SeckillResult<()> {
    let window = keys.seckill(voucher_id).window;
    if redis.exists::<_, bool>(&window).await? {
        redis.hset::<_, _, _, ()>(&window, "shelf", status).await?;
    }
    Ok(())
}

/// Per active voucher: the stream's length, entries delivered but not yet
/// acknowledged, and the group's lag (entries not yet delivered).
pub(super) async fn record_stream_metrics(redis: &mut Redis, keys: &Keys) -> redis::RedisResult<()> {
    use redis::AsyncCommands;
    let vouchers: Vec<u64> = redis.smembers(keys.seckill_active()).await?;
    for voucher in vouchers {
        let stream = keys.seckill(voucher).orders;
        let label = voucher.to_string();
        let length: u64 = redis.xlen(&stream).await?;
        metrics::gauge!("hmdp_async_stream_length", "voucher" => label.clone()).set(length as f64);
        let groups: redis::streams::StreamInfoGroupsReply = match redis.xinfo_groups(&stream).await {
            Ok(groups) => groups,
            // No group yet: nothing consumed, nothing pending.
            Err(err)
                if err.code() == Some("NOGROUP")
                    || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
            {
                continue;
            }
            Err(err) => return Err(err),
        };
        for group in groups.groups.iter().filter(|g| g.name == stream::GROUP) {
            metrics::gauge!("hmdp_async_pending_entries", "voucher" => label.clone()).set(group.pending as f64);
            if let Some(lag) = group.lag {
                metrics::gauge!("hmdp_async_consumer_lag", "voucher" => label.clone()).set(lag as f64);
            }
        }
    }
    Ok(())
}
