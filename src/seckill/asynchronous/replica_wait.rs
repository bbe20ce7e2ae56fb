//! Replicas an accepted order waits for before it is answered as safe.

use std::time::Duration;

use hmdp_redis::{Redis, barrier::ReplicaBarrier};

use crate::{config::RedisSettings, connect::connect_redis_with, recent::RecentIds};

/// Replicas an accepted order waits for before it is answered as safe.
///
/// `WAIT` counts what its own connection wrote, and blocks that connection:
/// every command queued behind it waits too. So a waited-for order's script
/// and its `WAIT` go in one pipeline on a connection of the waiting orders'
/// own (sessions, limits and the consumer never queue behind a `WAIT`),
/// the orders of one slot gathered behind one `WAIT` (`ReplicaBarrier`);
/// and a voucher whose `WAIT` came back short (its master lost its replica,
/// as after a failover) skips the wait for `SHORT_WAIT_BACKOFF` and is
/// answered 202 at once, instead of holding every order behind a wait no
/// replica can end.
pub(super) struct ReplicaWait {
    /// 0: no wait (one Redis, or a cluster without replicas).
    pub(crate) acks: u32,
    pub(crate) timeout: Duration,
    /// The waiting orders' own connection and their group `WAIT`.
    pub(crate) barrier: ReplicaBarrier,
    /// Vouchers whose last wait came back short.
    short: RecentIds,
}

/// How long a voucher whose replica did not answer skips the wait.
const SHORT_WAIT_BACKOFF: Duration = Duration::from_secs(1);
/// Vouchers remembered as short of a replica, at most.
const SHORT_WAIT_MAX: usize = 1_024;

impl ReplicaWait {
    /// `acks` from the setting, or counted (`replica_acks`); the waiting
    /// orders get a connection of their own only when they wait.
    pub(super) async fn build(
        settings: &RedisSettings,
        acks: Option<u32>,
        timeout: Duration,
        redis: &Redis,
    ) -> anyhow::Result<Self> {
        let acks = replica_acks(acks, &mut redis.clone()).await;
        // Its pipelines end with a WAIT of up to `timeout`.
        let conn = match acks {
            0 => redis.clone(),
            _ => connect_redis_with(settings, timeout + Duration::from_secs(2)).await?,
        };
        Ok(Self {
            acks,
            timeout,
            barrier: ReplicaBarrier::new(conn),
            short: RecentIds::new(SHORT_WAIT_MAX, Some(SHORT_WAIT_BACKOFF)),
        })
    }

    pub(super) fn recently_short(&self, voucher_id: u64) -> bool {
        self.short.contains(voucher_id)
    }

    pub(super) fn record(&self, voucher_id: u64, replicated: bool) {
        if replicated {
            self.short.remove(voucher_id);
        } else {
            self.short.insert(voucher_id, ());
        }
    }
}

/// How many replicas an asynchronous order waits for: the setting, or 1
/// when every master has a replica now (a cluster made with
/// `--cluster-replicas 1`), else none: a `WAIT` no replica can answer would
/// only make every order wait out its bound.
async fn replica_acks(setting: Option<u32>, redis: &mut Redis) -> u32 {
    let acks = match setting {
        Some(acks) => acks,
        None => match redis.fewest_replicas().await {
            Ok(fewest) => u32::from(fewest >= 1),
            Err(err) => {
                tracing::warn!(error = %err, "could not count the Redis replicas; orders will not wait for one");
                0
            }
        },
    };
    tracing::info!(acks, "asynchronous orders wait for this many Redis replicas before a 200");
    acks
}
