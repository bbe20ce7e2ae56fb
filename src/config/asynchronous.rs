//! The asynchronous mode's settings (`seckill/asynchronous/`): the
//! consumers, recovery, retirement and the replicas an order waits for.

use clap::Args;

const DEFAULT_ASYNC_BATCH_MAX: usize = 500;
const DEFAULT_ASYNC_CLAIM_IDLE_MS: u64 = 5_000;
const DEFAULT_ASYNC_MAX_DELIVERIES: u64 = 3;
const DEFAULT_ASYNC_RETIRE_AFTER_MS: u64 = 60_000;
const DEFAULT_ASYNC_RETIRED_KEYS_KEPT_MS: u64 = 3_600_000;
const DEFAULT_ORDER_REPLICA_WAIT_MS: u64 = 500;

/// Read by `SECKILL_MODE=async` alone; the synchronous mode ignores them.
#[derive(Clone, Debug, Args)]
pub struct AsyncSettings {
    /// Asynchronous mode: stream entries read, and orders persisted in one
    /// transaction, at most; 1 to 5,000.
    #[arg(long, env = "ASYNC_BATCH_MAX", default_value_t = DEFAULT_ASYNC_BATCH_MAX)]
    pub async_batch_max: usize,

    /// Asynchronous mode: an entry unacknowledged this long is taken over by
    /// another consumer (its own died or is stuck) and retried; at least
    /// 100.
    #[arg(long, env = "ASYNC_CLAIM_IDLE_MS", default_value_t = DEFAULT_ASYNC_CLAIM_IDLE_MS)]
    pub async_claim_idle_ms: u64,

    /// Asynchronous mode: an order the database refused this many times is
    /// dead-lettered, and its unit and its buyer's place given back.
    #[arg(long, env = "ASYNC_MAX_DELIVERIES", default_value_t = DEFAULT_ASYNC_MAX_DELIVERIES)]
    pub async_max_deliveries: u64,

    /// Asynchronous mode: this long after a sale ended, once nothing is left
    /// to persist, the sale is retired: out of `seckill:active` (no consumer
    /// reads it, no lookup scans it) and its keys given a TTL (the working
    /// keys `ASYNC_RETIRED_KEYS_KEPT_MS`, the failed hash and dead letters
    /// 7 days), so that Redis does not grow with every sale ever sold. An
    /// ended sale is not loaded again when its keys are gone: its orders
    /// are answered `ENDED` from MariaDB.
    #[arg(long, env = "ASYNC_RETIRE_AFTER_MS", default_value_t = DEFAULT_ASYNC_RETIRE_AFTER_MS)]
    pub async_retire_after_ms: u64,

    /// Asynchronous mode: how long a retired sale's working keys (stock,
    /// window, buyers, stream, pending, holders, a segment's borrowing)
    /// stay in Redis, 0 to 86,400,000; 0 deletes them at retirement (the
    /// stream 10 s after, as a consumer's round may still read it). While
    /// they stay, a late order is answered `ENDED` by Redis alone; after,
    /// each instance reads the voucher's row once a minute and answers
    /// the rest from memory.
    #[arg(long, env = "ASYNC_RETIRED_KEYS_KEPT_MS", default_value_t = DEFAULT_ASYNC_RETIRED_KEYS_KEPT_MS)]
    pub async_retired_keys_kept_ms: u64,

    /// Asynchronous mode: Redis replicas that must acknowledge an order
    /// (`WAIT`) before it is answered 200, so that a master's death cannot
    /// take it; at most 16. Unset: 1 when every Redis master has a replica
    /// at start-up, else 0 (off).
    #[arg(long, env = "ORDER_REPLICA_ACKS")]
    pub order_replica_acks: Option<u32>,

    /// Asynchronous mode: the bound of that wait, 1 to 10,000. An order no
    /// replica acknowledged in time is answered 202 with its id (`success:
    /// true`, `errorMsg` says so), and `GET /voucher-order/{id}` tells
    /// whether it lasted. The `WAIT` follows the order's script in one
    /// pipeline on one connection (it counts what its own connection
    /// wrote), and the orders of one slot that arrive while a pipeline is
    /// out go together in the next, behind one `WAIT`: a master without a
    /// replica costs each order one or two bounds, not the queue's. The
    /// orders of a slot whose wait came back short (a voucher's, or one of
    /// its segments') skip the wait for 1 s (202 at once), and an order
    /// still queued for its wait at its deadline (`REQUEST_DEADLINE_MS`)
    /// is settled as a lost call is.
    #[arg(long, env = "ORDER_REPLICA_WAIT_MS", default_value_t = DEFAULT_ORDER_REPLICA_WAIT_MS)]
    pub order_replica_wait_ms: u64,
}

impl Default for AsyncSettings {
    fn default() -> Self {
        Self {
            async_batch_max: DEFAULT_ASYNC_BATCH_MAX,
            async_claim_idle_ms: DEFAULT_ASYNC_CLAIM_IDLE_MS,
            async_max_deliveries: DEFAULT_ASYNC_MAX_DELIVERIES,
            async_retire_after_ms: DEFAULT_ASYNC_RETIRE_AFTER_MS,
            async_retired_keys_kept_ms: DEFAULT_ASYNC_RETIRED_KEYS_KEPT_MS,
            order_replica_acks: None,
            order_replica_wait_ms: DEFAULT_ORDER_REPLICA_WAIT_MS,
        }
    }
}

impl AsyncSettings {
    pub(super) fn validate(&self) -> anyhow::Result<()> {
        if self.async_batch_max == 0 || self.async_batch_max > 5_000 {
            anyhow::bail!("ASYNC_BATCH_MAX must be between 1 and 5000");
        }
        if self.async_claim_idle_ms < 100 {
            anyhow::bail!("ASYNC_CLAIM_IDLE_MS must be at least 100");
        }
        if self.async_max_deliveries == 0 {
            anyhow::bail!("ASYNC_MAX_DELIVERIES must be at least 1");
        }
        if self.async_retired_keys_kept_ms > 86_400_000 {
            anyhow::bail!("ASYNC_RETIRED_KEYS_KEPT_MS must be at most 86400000 (a day)");
        }
        if self.order_replica_acks.is_some_and(|n| n > 16) {
            anyhow::bail!("ORDER_REPLICA_ACKS must be at most 16");
        }
        if !(1..=10_000).contains(&self.order_replica_wait_ms) {
            anyhow::bail!("ORDER_REPLICA_WAIT_MS must be between 1 and 10000");
        }
        Ok(())
    }
}
