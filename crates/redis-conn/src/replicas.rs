//! Replicas' acknowledgement of writes, asked for the way a database
//! group-commits: one `WAIT` at a time per slot, covering every write whose
//! answer came back before it was sent.
//!
//! `WAIT n timeout` blocks the connection it is sent on, and counts the
//! replicas that acknowledged everything *that connection* wrote. A `WAIT`
//! behind each write (the obvious way) serialises the writes on the node's
//! one multiplexed connection: when no replica can answer (right after a
//! failover, the promoted master has none) 200 waiting orders cost 200
//! timeouts, one after the other, and the instance stops answering for
//! minutes. Here a write that finds a `WAIT` already under way waits for
//! the next one, which covers it and every other write that came back in
//! the meantime: a dead replica costs each write one or two timeouts, not
//! the queue's.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::{RedisResult, cluster_routing::Slot};

use crate::Redis;

/// Writes made on `redis()`, and the `WAIT`s that tell how many replicas
/// have them. Cheap to share; its map holds one small entry per slot
/// written to, so it is bounded by the 16384 slots.
pub struct ReplicaBarrier {
    redis: Redis,
    slots: Mutex<HashMap<Slot, Arc<Round>>>,
}

#[derive(Default)]
struct Round {
    /// Writes on this slot whose answers came back.
    written: AtomicU64,
    /// The last write a finished `WAIT` covered, and the replicas that
    /// acknowledged it. Held across the `WAIT`: one at a time per slot.
    covered: tokio::sync::Mutex<(u64, u32)>,
}

impl ReplicaBarrier {
    /// `redis` should be a connection of its own: while a `WAIT` runs,
    /// every command queued behind it on the same node waits too.
    pub fn new(redis: Redis) -> Self {
        Self { redis, slots: Mutex::default() }
    }

    /// The connection the writes must be made on: a `WAIT` on another one
    /// would count that one's writes, not these.
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    /// How many replicas (up to `replicas`) hold a write to `key`'s slot
    /// that has just been answered on `redis()`, waiting at most about
    /// `timeout` for them (twice that when a `WAIT` was already running).
    pub async fn acknowledged(&self, key: &str, replicas: u32, timeout: Duration) -> RedisResult<u32> {
        let round = {
            let mut slots = self.slots.lock().expect("replica barrier poisoned");
            Arc::clone(slots.entry(Slot::for_key(key)).or_default())
        };
        let mine = round.written.fetch_add(1, Ordering::SeqCst) + 1;
        let mut covered = round.covered.lock().await;
        if covered.0 >= mine {
            return Ok(covered.1);
        }
        // Every write counted so far has been answered, so it reached the
        // node before this WAIT does, on the same connection.
        let upto = round.written.load(Ordering::SeqCst);
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        let acked: u32 = self.redis.clone().query_on_master_of(key, wait).await?;
        *covered = (upto, acked);
        Ok(acked)
    }
}
