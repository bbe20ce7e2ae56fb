//! Placing an asynchronous order: one Redis script decides it (window
//! against Redis's clock, one order per user, stock) and queues it on the
//! voucher's stream, and the answer goes out at once. Besides the session
//! lookup, an order costs one round trip: its id comes from a block
//! reserved earlier. A call whose answer was lost is asked again with the
//! same order id, so an order is accepted once and never answered wrongly.
//! In a voucher sold in segments the script runs in the buyer's segment,
//! and a segment found dry borrows from the fullest before the buyer hears
//! sold out. A voucher split while this instance routed by its old
//! segments is read again and the order asked in the buyer's new segment;
//! a segment a split has not opened yet is waited for (`split`).

use std::{sync::LazyLock, time::Duration};

use hmdp_redis::Redis;
use hmdp_segments::Refill;
use redis::{AsyncCommands, Script};

use super::{AsyncMode, verdict::Verdict};
use crate::{
    dependency::redis_unreachable,
    keys::SeckillKeys,
    seckill::{
        asynchronous::segments::Segments,
        error::{SeckillError, SeckillResult},
        model::{PathUse, PlacedOrder},
        store,
    },
};

static ORDER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_order.lua")));

/// Between two tries of the order script after a lost answer.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Between two tries in a segment a split has not opened yet: a split
/// copies a sale's buyers in tens of milliseconds.
const SPLIT_PAUSE: Duration = Duration::from_millis(20);

/// Past the deadline, how long a lost call's order is still looked for
/// before the answer says "unknown": within nginx's 30 s with the largest
/// deadline (25 s) and a Redis response timeout (2 s).
const LAST_LOOK: Duration = Duration::from_secs(3);
/// Past the deadline, how long a call may still place its order: half the
/// last look, whose second half can then settle "not placed" for good.
const LAST_PLACING: Duration = Duration::from_millis(1_500);

impl AsyncMode {
    /// The asynchronous order: decided in Redis; returns its id once it is
    /// queued (and, when replicas are waited for, whether they
    /// acknowledged it).
    pub(crate) async fn place(
        &self,
        user_id: u64,
        voucher_id: u64,
        spend: Option<PathUse>,
    ) -> SeckillResult<PlacedOrder> {
        let mirror = &self.mirror;
        if mirror.recently_missing(voucher_id) {
            return Err(SeckillError::NoSuchVoucher);
        }
        if mirror.recently_ended(voucher_id) {
            return Err(SeckillError::Ended);
        }
        mirror.verify(voucher_id).await?;
        let mut segments = mirror.segments(voucher_id).await?;
        let mut segment = segments.of_user(user_id);
        let mut keys = segments.keys()[segment].clone();
        let order_id = self.order_ids.next().await?;
        let owner = store::OrderOwner { user_id, voucher_id };
        let redis = &self.redis;
        let deadline = tokio::time::Instant::now() + self.deadline;
        // A call Redis runs past this places nothing (a call held in a cut
        // link's queue and delivered when it heals): the last look can
        // then tell "not placed" for good.
        let not_after_ms = chrono::Utc::now().timestamp_millis() + (self.deadline + LAST_PLACING).as_millis() as i64;
        let mut order = OrderCall { user_id, order_id, voucher_id, spend, not_after_ms, layout: segments.count() };
        let mut loaded_once = false;
        let mut layouts_read = 0;
        // Set once a call's answer was lost: that call may still run in Redis.
        let mut uncertain = false;
        loop {
            // Bounded by the deadline: a call queued behind slow waits of
            // its slot answers "lost" at the deadline, and the last look
            // settles it, instead of holding the request past nginx's 30 s.
            let called = tokio::time::timeout_at(deadline, self.run_order_script(redis, &keys, &order))
                .await
                .unwrap_or_else(|_| Err(deadline_passed()));
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
                    return self.out_of_time(&keys, &order, err).await;
                }
                Err(err) => return Err(err.into()),
            };
            match verdict {
                Verdict::Accepted => return Ok(self.accepted(&keys, owner, order_id, acked)),
                Verdict::NotLoaded if !loaded_once => {
                    loaded_once = true;
                    mirror.load(voucher_id).await?;
                }
                Verdict::NotLoaded => {
                    return Err(SeckillError::internal(anyhow::anyhow!(
                        "voucher {voucher_id}'s keys vanished right after loading"
                    )));
                }
                Verdict::NotStarted => return Err(SeckillError::NotStarted),
                Verdict::Ended => return Err(SeckillError::Ended),
                Verdict::AlreadyBought => return self.already_bought(&keys, owner, order_id, uncertain).await,
                // The buyer's segment is dry: it borrows from the fullest,
                // and the order is asked again there.
                Verdict::Dry => {
                    let refilled = refill(&segments, segment, deadline).await;
                    if matches!(refilled, Err(SeckillError::SoldOut)) && segments.borrowing().is_some() {
                        self.news.tell_sold_out(voucher_id).await;
                    }
                    refilled?;
                }
                // Split since this instance read the segments: read again,
                // and asked in the buyer's segment of the new layout (a
                // split happens once, so twice is plenty).
                Verdict::LayoutChanged if layouts_read < 2 => {
                    layouts_read += 1;
                    mirror.forget_segments(voucher_id);
                    segments = mirror.segments(voucher_id).await?;
                    segment = segments.of_user(user_id);
                    keys = segments.keys()[segment].clone();
                    order.layout = segments.count();
                }
                Verdict::LayoutChanged => {
                    return Err(SeckillError::unavailable("the voucher's segments keep changing; ask again"));
                }
                Verdict::Splitting if tokio::time::Instant::now() + SPLIT_PAUSE < deadline => {
                    // A splitter that died leaves the split to whoever
                    // meets its closed segments.
                    self.split.finish_if_abandoned(voucher_id).await;
                    tokio::time::sleep(SPLIT_PAUSE).await;
                }
                Verdict::Splitting => {
                    return Err(SeckillError::unavailable(
                        "the voucher is being spread over more segments; ask again in a moment",
                    ));
                }
                Verdict::OffShelf => return Err(SeckillError::OffShelf),
                Verdict::PathUsed => return Err(SeckillError::PathUsed),
                // Only where this instance's clock runs behind Redis's by
                // more than the deadline: nothing was placed.
                Verdict::TooLate => {
                    return Err(SeckillError::unavailable(
                        "the order reached Redis after its deadline and was not placed; ask again",
                    ));
                }
                Verdict::Unknown(other) => {
                    return Err(SeckillError::internal(anyhow::anyhow!(
                        "the order script answered {other} for voucher {voucher_id}"
                    )));
                }
            }
        }
    }

    /// The order script, and when the replicas are waited for, a `WAIT` that
    /// follows it in one pipeline on its connection (`ReplicaBarrier`).
    /// Returns the verdict and how many replicas acknowledged it (`None`:
    /// no wait was made).
    async fn run_order_script(
        &self,
        redis: &Redis,
        keys: &SeckillKeys,
        order: &OrderCall,
    ) -> redis::RedisResult<(Verdict, Option<u32>)> {
        let &OrderCall { user_id, order_id, voucher_id, spend, not_after_ms, layout } = order;
        let waiting = self.replica_wait.acks > 0 && !self.replica_wait.recently_short(&keys.stock);
        let mut call = redis::cmd("EVALSHA");
        call.arg(ORDER.get_hash())
            .arg(if spend.is_some() { 7 } else { 6 })
            .arg(&keys.stock)
            .arg(&keys.window)
            .arg(&keys.buyers)
            .arg(&keys.orders)
            .arg(&keys.pending)
            .arg(&keys.holders);
        if let Some(spend) = spend {
            call.arg(keys.path_use(spend.id));
        }
        call.arg(user_id).arg(order_id).arg(voucher_id).arg(not_after_ms).arg(layout);
        if let Some(spend) = spend {
            call.arg(spend.keep_ms(chrono::Utc::now().timestamp_millis()));
        }
        // A script not loaded yet (a Redis restarted or promoted) is loaded
        // and the call made once more.
        let mut called = self.call_order(redis, keys, &call, waiting).await?;
        if matches!(&called.0, Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)) {
            ORDER.prepare_invoke().load_async(&mut redis.clone()).await?;
            called = self.call_order(redis, keys, &call, waiting).await?;
        }
        let (reply, acked) = called;
        let verdict = Verdict::from(redis::from_redis_value::<i64>(reply?)?);
        if !waiting || verdict != Verdict::Accepted {
            return Ok((verdict, None));
        }
        // Accepted: whether a replica has it is not known when the WAIT
        // failed, and the answer says so (202) instead of asking again.
        if acked.is_none() {
            tracing::warn!(order_id, "the replicas' acknowledgement of an accepted order was lost");
        }
        Ok((verdict, Some(acked.unwrap_or(0))))
    }

    /// The order script's reply, and for a waited-for order the replicas
    /// its `WAIT` counted (`None`: not known).
    async fn call_order(
        &self,
        redis: &Redis,
        keys: &SeckillKeys,
        call: &redis::Cmd,
        waiting: bool,
    ) -> redis::RedisResult<(redis::RedisResult<redis::Value>, Option<u32>)> {
        if !waiting {
            return Ok((call.query_async(&mut redis.clone()).await, None));
        }
        let (acks, timeout) = (self.replica_wait.acks, self.replica_wait.timeout);
        // The script and its WAIT go in one pipeline, on one connection:
        // WAIT counts what its own connection wrote (`ReplicaBarrier`).
        let written = self.replica_wait.barrier.write(&keys.stock, call.clone(), acks, timeout).await?;
        Ok((written.reply, written.replicas))
    }

    fn accepted(&self, keys: &SeckillKeys, owner: store::OrderOwner, order_id: i64, acked: Option<u32>) -> PlacedOrder {
        let voucher_id = owner.voucher_id;
        let replicated = acked.unwrap_or(0) >= self.replica_wait.acks;
        if acked.is_some() {
            self.replica_wait.record(&keys.stock, replicated);
        }
        if !replicated {
            tracing::warn!(order_id, acked, "order accepted but not yet on a Redis replica");
            self.failover.watch(order_id, owner.user_id, voucher_id);
        }
        tracing::debug!(order_id, voucher_id, "order accepted");
        PlacedOrder { id: order_id, replicated }
    }

    /// Out of time after lost answers, but a lost call may have run
    /// meanwhile: "unavailable" would be a lie about an order that exists.
    async fn out_of_time(
        &self,
        keys: &SeckillKeys,
        order: &OrderCall,
        err: redis::RedisError,
    ) -> SeckillResult<PlacedOrder> {
        let (owner, order_id) = (order.owner(), order.order_id);
        match self.accepted_after_all(keys, order).await {
            Some(true) => Ok(self.accepted_on_a_lost_call(owner, order_id)),
            Some(false) => Err(err.into()),
            None => Err(SeckillError::outcome_unknown(anyhow::anyhow!(
                "order {order_id}: Redis did not answer; whether it was accepted is unknown (GET /voucher-order/{order_id} tells)"
            ))),
        }
    }

    /// The user is among the buyers: after a lost answer the order held
    /// may be this very one; else the answer names the order the user
    /// holds, pending (by user in the holders hash) or its row.
    async fn already_bought(
        &self,
        keys: &SeckillKeys,
        owner: store::OrderOwner,
        order_id: i64,
        uncertain: bool,
    ) -> SeckillResult<PlacedOrder> {
        if uncertain && self.accepted_before(keys, owner, order_id).await?.accepted {
            return Ok(self.accepted_on_a_lost_call(owner, order_id));
        }
        let pending: Option<i64> = self.redis.clone().hget(&keys.holders, owner.user_id).await.ok().flatten();
        // The order held is this very one: a call sent again whole (a
        // pipeline redis-rs repeated on a new connection) found it placed.
        if pending == Some(order_id) {
            return Ok(self.accepted_on_a_lost_call(owner, order_id));
        }
        let held = match pending {
            Some(id) => Some(id),
            None => store::held_order(&self.db, owner.user_id, owner.voucher_id).await.ok().flatten(),
        };
        Err(SeckillError::DuplicateOrder(held))
    }

    fn accepted_on_a_lost_call(&self, owner: store::OrderOwner, order_id: i64) -> PlacedOrder {
        tracing::info!(order_id, "a lost call had accepted the order; answered as accepted");
        // Whether a replica has it is not known: said so when it matters.
        let replicated = self.replica_wait.acks == 0;
        if !replicated {
            self.failover.watch(order_id, owner.user_id, owner.voucher_id);
        }
        PlacedOrder { id: order_id, replicated }
    }

    /// `accepted_before`, asked until it finds the order, or finds it not
    /// placed at a moment (Redis's clock) past which no call of the order
    /// can place it, or `LAST_LOOK` has passed (`None`: still unknown).
    async fn accepted_after_all(&self, keys: &SeckillKeys, order: &OrderCall) -> Option<bool> {
        let until = tokio::time::Instant::now() + LAST_LOOK;
        loop {
            match self.accepted_before(keys, order.owner(), order.order_id).await {
                Ok(look) if look.accepted => return Some(true),
                Ok(look) if look.redis_ms > order.not_after_ms => return Some(false),
                // A call of it may still be on its way.
                Ok(_) if tokio::time::Instant::now() < until => tokio::time::sleep(RETRY_PAUSE).await,
                Err(err) if tokio::time::Instant::now() < until => {
                    tracing::warn!(order_id = order.order_id, error = %err, "looking for a lost call's order failed; again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                _ => return None,
            }
        }
    }

    /// Whether `order_id` itself was accepted: pending, persisted (its row),
    /// or already dead-lettered (`keys`: the user's segment), each time as
    /// this user's order for this voucher: another user's under the id is
    /// another order that drew the same id.
    async fn accepted_before(
        &self,
        keys: &SeckillKeys,
        order: store::OrderOwner,
        order_id: i64,
    ) -> SeckillResult<Look> {
        // Redis's clock first: a call that runs after it is read and before
        // the hashes are runs past it too.
        let ((secs, micros), pending, failed): ((i64, i64), Option<String>, Option<String>) = redis::pipe()
            .cmd("TIME")
            .hget(&keys.pending, order_id)
            .hget(&keys.failed, order_id)
            .query_async(&mut self.redis.clone())
            .await?;
        let redis_ms = secs * 1_000 + micros / 1_000;
        let accepted = [pending, failed].iter().flatten().any(|accepted| accepted_by(accepted, order.user_id))
            || store::existing_orders(&self.db, &[order_id]).await?.get(&order_id) == Some(&order);
        Ok(Look { accepted, redis_ms })
    }
}

/// What Redis and MariaDB held of an order at a moment of Redis's clock.
struct Look {
    accepted: bool,
    redis_ms: i64,
}

/// A pending or failed hash's `<userId>:<ts ms>` is this user's.
fn accepted_by(accepted: &str, user_id: u64) -> bool {
    accepted.split_once(':').is_some_and(|(owner, _)| owner.parse() == Ok(user_id))
}

/// One order's call of the order script, the same on every try.
struct OrderCall {
    user_id: u64,
    order_id: i64,
    voucher_id: u64,
    spend: Option<PathUse>,
    /// Unix ms past which Redis places nothing for it.
    not_after_ms: i64,
    /// How many segments the buyer's segment was chosen among.
    layout: usize,
}

impl OrderCall {
    fn owner(&self) -> store::OrderOwner {
        store::OrderOwner { user_id: self.user_id, voucher_id: self.voucher_id }
    }
}

/// A dry segment borrows from the fullest, so the order can be asked
/// again; no borrowing (one segment), or nothing left anywhere, is sold out.
async fn refill(segments: &Segments, segment: usize, deadline: tokio::time::Instant) -> SeckillResult<()> {
    let Some(stock) = segments.borrowing() else { return Err(SeckillError::SoldOut) };
    match stock.refill(segment).await? {
        Refill::Refilled { .. } if tokio::time::Instant::now() < deadline => Ok(()),
        Refill::Refilled { .. } => Err(SeckillError::unavailable(
            "the voucher's segments kept running dry before this order could take a unit; ask again",
        )),
        Refill::SoldOut => Err(SeckillError::SoldOut),
        Refill::Unsettled => Err(SeckillError::unavailable(
            "units of this voucher are moving between its segments; ask again in a moment",
        )),
    }
}

/// An order call still out at the request's deadline: whether it ran is
/// not known yet.
fn deadline_passed() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the order call was still out at the request's deadline",
    ))
}

#[cfg(test)]
mod tests {
    use super::accepted_by;

    #[test]
    fn an_entry_under_the_id_is_the_orders_only_if_it_is_its_users() {
        assert!(accepted_by("42:1700000000000", 42));
        assert!(!accepted_by("43:1700000000000", 42), "another user's order that drew the same id");
        assert!(!accepted_by("42", 42), "malformed");
    }
}
