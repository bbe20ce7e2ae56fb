//! Globally unique, roughly time-ordered order ids without a coordinator
//! beyond Redis.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use hmdp_redis::Redis;
use tokio::sync::Mutex;

use crate::keys::Keys;

/// 2022-01-01T00:00:00Z: the generator's epoch.
pub const EPOCH_SECS: i64 = 1_640_995_200;
const SEQUENCE_BITS: u32 = 32;
/// The per-day counters are kept a while for "orders per day" statistics,
/// then left to expire instead of accumulating forever.
const SEQUENCE_KEY_TTL_SECS: i64 = 40 * 24 * 3600;
/// Reservations tried for one id before it is refused as unavailable.
const RESERVE_TRIES: usize = 3;

/// Order ids: `(now_secs - EPOCH_SECS) << 32 | INCR icr:order:<yyyy:MM:dd>`.
///
/// Why it is unique: the day key is derived from the same second as the
/// timestamp bits, so two ids with equal timestamps drew from the same
/// counter and differ in their low bits, whichever instance made them and
/// however far apart the instances' clocks are.
///
/// Sequences are reserved in blocks (`INCRBY block`), so most ids cost no
/// round trip. A block serves only the second it was reserved in: its ids
/// carry that second, the day key matches it, and the argument above holds
/// unchanged. What is left of a block when the second turns is dropped.
///
/// The argument needs a counter that never goes back, and a Redis
/// failover can take it back: increments the old master answered and
/// never passed on are lost with it. A reservation still in flight when
/// its master was cut off is retried by the cluster client on the
/// promoted replica seconds later, where the counter hands out the same
/// values again. So a block is kept only if its `INCRBY` was answered in
/// the second it was reserved for; otherwise it is reserved again for the
/// second it is now. A promoted replica answers its first write well over
/// a second after its old master answered its last one (the old master
/// stops when it loses the majority, the replica waits
/// `cluster-node-timeout` and an election), so the two cannot serve one
/// second. An id that collides all the same is caught at persistence (a
/// row with another owner): that order fails with its unit given back.
///
/// Limits:
/// - at most 2^32 ids per UTC day (the counter's width); past that `next`
///   refuses rather than bleed into the timestamp bits;
/// - the timestamp has 31 bits before the id turns negative as an `i64`:
///   about 68 years after the epoch, until early 2090;
/// - ids from one caller increase strictly only while the wall clock does
///   not step back; uniqueness does not depend on it;
/// - a block costs one Redis round trip (INCRBY and EXPIRE pipelined), and
///   no block is reserved while Redis is down; each instance drops at most
///   one part-used block per second, so at the default block of 100 the
///   daily sequence lasts for over 4 billion ids less 17 million dropped;
/// - the ids reveal the order volume of a day to whoever sees two of them.
#[derive(Clone)]
pub struct OrderIdGenerator {
    redis: Redis,
    keys: Keys,
    block_size: u32,
    clock: Clock,
    /// Taken across the INCRBY, so concurrent callers share one reservation.
    block: Arc<Mutex<Block>>,
}

/// Where a generator reads the time: the wall clock, or a test's (two
/// instances whose clocks differ, without waiting for real time to pass).
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Reserved sequences `next..end` of the second `elapsed_secs`.
#[derive(Default)]
struct Block {
    elapsed_secs: i64,
    next: i64,
    end: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum IdError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("the clock is before the id epoch")]
    ClockBeforeEpoch,
    #[error("the daily sequence is exhausted")]
    SequenceExhausted,
    #[error("no id block was answered within the second it was asked for")]
    Unsettled,
}

impl IdError {
    /// An unreachable or slow Redis; the other errors are this service's own.
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unsettled) || matches!(self, Self::Redis(err) if crate::dependency::redis_unreachable(err))
    }
}

impl OrderIdGenerator {
    /// `block_size` sequences are reserved per round trip (1: one INCR per id).
    pub fn new(redis: Redis, keys: Keys, block_size: u32) -> Self {
        Self { redis, keys, block_size: block_size.max(1), clock: Arc::new(Utc::now), block: Arc::default() }
    }

    /// The same generator reading its time from `clock`.
    pub fn with_clock(self, clock: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        Self { clock: Arc::new(clock), ..self }
    }

    pub async fn next(&self) -> Result<i64, IdError> {
        // The second is read once the block is ours: a caller that waited
        // for the lock across a turn of the second asks for the new one.
        let mut block = self.block.lock().await;
        let mut now = (self.clock)();
        let mut elapsed = now.timestamp() - EPOCH_SECS;
        if elapsed < 0 {
            return Err(IdError::ClockBeforeEpoch);
        }
        for _ in 0..RESERVE_TRIES {
            if block.elapsed_secs == elapsed && block.next < block.end {
                break;
            }
            let key = self.keys.order_sequence(&now.format("%Y:%m:%d").to_string());
            let (last,): (i64,) = redis::pipe()
                .incr(&key, self.block_size)
                .expire(&key, SEQUENCE_KEY_TTL_SECS)
                .ignore()
                .query_async(&mut self.redis.clone())
                .await?;
            *block = Block { elapsed_secs: elapsed, next: last - i64::from(self.block_size) + 1, end: last + 1 };
            // Answered in a later second: possibly by another master than
            // the one asked (see above), so reserved again for this second.
            let answered = (self.clock)();
            if answered.timestamp() - EPOCH_SECS != elapsed {
                *block = Block::default();
                (now, elapsed) = (answered, answered.timestamp() - EPOCH_SECS);
            }
        }
        if block.elapsed_secs != elapsed || block.next >= block.end {
            return Err(IdError::Unsettled);
        }
        let sequence = block.next;
        block.next += 1;
        compose(block.elapsed_secs, sequence)
    }
}

fn compose(elapsed_secs: i64, sequence: i64) -> Result<i64, IdError> {
    if !(0..1 << SEQUENCE_BITS).contains(&sequence) {
        return Err(IdError::SequenceExhausted);
    }
    Ok(elapsed_secs << SEQUENCE_BITS | sequence)
}

/// The second an id was issued, for debugging and support.
pub fn issued_at(id: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp((id >> SEQUENCE_BITS) + EPOCH_SECS, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_its_second_and_sequence() {
        let id = compose(1_000, 7).unwrap();
        assert_eq!(id >> 32, 1_000);
        assert_eq!(id & 0xffff_ffff, 7);
        assert_eq!(issued_at(id).unwrap().timestamp(), EPOCH_SECS + 1_000);
    }

    #[test]
    fn a_sequence_past_32_bits_is_refused() {
        assert!(matches!(compose(1, 1 << 32), Err(IdError::SequenceExhausted)));
        assert!(compose(1, (1 << 32) - 1).is_ok());
    }
}
