//! Globally unique, roughly time-ordered order ids without a coordinator
//! beyond Redis.

use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use hmdp_redis::Redis;
use redis::Script;
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
/// What a day's counter is raised by when a reservation finds another
/// replication history than the last one (a failover), before it reserves:
/// more than an old master can hand out that its replica never sees.
///
/// The bound: a master cut off from the majority keeps answering the
/// instances on its side until `cluster-node-timeout` (15 s by default, 2 s
/// in this deployment) has passed, and its replica may lag it by a moment
/// before the cut: 16 s in all. An order costs an instance over 100 µs of
/// CPU (BENCHMARKS.md: 120-250 µs), so 16 instances (`MAX_INSTANCES`) of
/// 16 cores draw at most about 2.6 million ids a second, and each instance
/// wastes at most two blocks a second (1553 at most each). 2^26 covers 16 s
/// at 4.2 million a second; the sales measured here draw under 5,000.
///
/// The cost: 1/64 of a day's 2^32 sequences for each change of history,
/// and a day's first reservation is one (its marker is new).
pub const LINEAGE_GAP: i64 = 1 << 26;

static RESERVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/order_id_block.lua")));

/// Order ids: `(now_secs - EPOCH_SECS) << 32 | sequence`, the sequence
/// drawn from the day's counter `icr:order:<yyyy:MM:dd>`.
///
/// Why it is unique: the day key is derived from the same second as the
/// timestamp bits, so two ids with equal timestamps drew from the same
/// counter, and they are equal only if the counter handed out one value
/// twice. Within one replication history (a master and the replicas it
/// fed) it never does: it only grows. A failover takes it back: the
/// promoted replica lacks the increments its old master answered and never
/// passed on (a master cut off keeps answering the clients on its side for
/// up to `cluster-node-timeout`), and hands the same values out again. So
/// the counter keeps a marker beside it, `{icr:order:<day>}:lineage`, the
/// `master_replid` its last reservation was made under, and a reservation
/// under another (a promoted replica's is new; the marker it holds was
/// replicated from its old master) first raises the counter by
/// [`LINEAGE_GAP`], in the same script (`lua/order_id_block.lua`): every
/// value of the new history lies above all the old one handed out.
///
/// Nothing of this rests on the instances' clocks: how far apart they are,
/// or a clock that steps back, decides which second an id carries, never
/// whether two ids of one second share a sequence.
///
/// Sequences are reserved in blocks, so most ids cost no round trip. A
/// block serves only the second it was reserved in: its ids carry that
/// second, the day key matches it, and the argument above holds unchanged.
/// What is left of a block when the second turns is dropped. A block
/// answered in a later second than it was asked for is dropped too and
/// reserved again: a Redis that restarted without persistence meanwhile
/// (a new history, and a counter back at the gap) may have answered it,
/// and its ids must not share a second with those from before the restart.
///
/// Limits:
/// - at most 2^32 ids per UTC day (the counter's width), less a gap per
///   change of history; past that `next` refuses rather than bleed into
///   the timestamp bits;
/// - two failovers in a row, where the first promoted replica was cut off
///   before any of its writes reached a replica, lose its own gap with it:
///   the next one raises the counter from below it, and ids of the two may
///   meet (a row with another owner then fails that order, its unit given
///   back);
/// - a Redis that restarts without persistence starts the day again from
///   the gap: its ids are unique against earlier ones only while the
///   instances' clocks agree to within the restart's time;
/// - the timestamp has 31 bits before the id turns negative as an `i64`:
///   about 68 years after the epoch, until early 2090;
/// - ids from one caller increase strictly only while its clock does not
///   step back; uniqueness does not depend on it;
/// - a block costs one Redis round trip (the script), and no block is
///   reserved while Redis is down; each instance drops at most one
///   part-used block per second, so at the default block of 100 the
///   daily sequence lasts for over 4 billion ids less 17 million dropped;
/// - the ids reveal the order volume of a day to whoever sees two of them.
#[derive(Clone)]
pub struct OrderIdGenerator {
    redis: Redis,
    keys: Keys,
    block_size: u32,
    clock: Clock,
    /// Taken across the reservation, so concurrent callers share one.
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
    /// `block_size` sequences are reserved per round trip (1: one per id).
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
            let day = now.format("%Y:%m:%d").to_string();
            let last: i64 = RESERVE
                .key(self.keys.order_sequence(&day))
                .key(self.keys.order_sequence_lineage(&day))
                .arg(self.block_size)
                .arg(LINEAGE_GAP)
                .arg(SEQUENCE_KEY_TTL_SECS)
                .invoke_async(&mut self.redis.clone())
                .await?;
            *block = Block { elapsed_secs: elapsed, next: last - i64::from(self.block_size) + 1, end: last + 1 };
            // Answered in a later second: possibly by a Redis that restarted
            // meanwhile (see above), so reserved again for this second.
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
