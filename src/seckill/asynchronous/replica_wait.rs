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
/// and a slot whose `WAIT` came back short (its master lost its replica,
/// as after a failover) skips the wait for `SHORT_WAIT_BACKOFF` and is
/// answered 202 at once, instead of holding every order behind a wait no
/// replica can end.
pub(super) struct ReplicaWait {
    /// 0: no wait (one Redis, or a cluster without replicas).
    pub(crate) acks: u32,
    pub(crate) timeout: Duration,
    /// The waiting orders' own connection and their group `WAIT`.
    pub(crate) barrier: ReplicaBarrier,
    short: ShortSlots,
}

/// How long a slot whose replica did not answer skips the wait.
const SHORT_WAIT_BACKOFF: Duration = Duration::from_secs(1);
/// Slots remembered as short of a replica, at most.
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
            _ => {
                let mut own = connect_redis_with(settings, timeout + Duration::from_secs(2)).await?;
                // The order scripts go out here: uncounted, a hot voucher's
                // master would not see its crowd.
                redis.count_like(&mut own);
                own
            }
        };
        Ok(Self { acks, timeout, barrier: ReplicaBarrier::new(conn), short: ShortSlots::default() })
    }

    pub(super) fn recently_short(&self, key: &str) -> bool {
        self.short.recently_short(key)
    }

    pub(super) fn record(&self, key: &str, replicated: bool) {
        self.short.record(key, replicated)
    }
}

/// The slots whose last wait came back short, for `SHORT_WAIT_BACKOFF`.
/// By slot, not by voucher: a voucher sold in segments has one on each
/// master, and the segments whose master has its replica would clear a
/// voucher's mark at once, sending the orders of the segment whose master
/// has none through a wait no replica can end, one bound after the other
/// (a master killed mid-sale: requests held 27 s, nginx's upstreams marked
/// down).
struct ShortSlots(RecentIds);

impl Default for ShortSlots {
    fn default() -> Self {
        Self(RecentIds::new(SHORT_WAIT_MAX, Some(SHORT_WAIT_BACKOFF)))
    }
}

impl ShortSlots {
    fn recently_short(&self, key: &str) -> bool {
        self.0.contains(slot_id(key))
    }

    fn record(&self, key: &str, replicated: bool) {
        match replicated {
            true => self.0.remove(slot_id(key)),
            false => self.0.insert(slot_id(key), ()),
        }
    }
}

/// The slot of `key` (what names its master) as a number.
fn slot_id(key: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(redis::cluster_routing::Slot::for_key(key))
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

#[cfg(test)]
mod tests {
    use super::ShortSlots;

    #[test]
    fn a_segment_whose_master_has_no_replica_stays_short_while_the_others_wait_and_are_acknowledged() {
        let short = ShortSlots::default();
        // One voucher, two segments on two slots (their hash tags differ).
        let (lonely, backed) = ("seckill:stock:{7}", "seckill:stock:{7:s1}");
        short.record(lonely, false);
        short.record(backed, true);
        assert!(short.recently_short(lonely), "the other segment's acknowledged wait cleared this one's mark");
        assert!(!short.recently_short(backed));
        short.record(lonely, true);
        assert!(!short.recently_short(lonely), "an acknowledged wait clears the mark");
    }
}
