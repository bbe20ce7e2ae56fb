//! Writes whose replicas' acknowledgement is asked for on the connection
//! that made them, gathered the way a database group-commits.
//!
//! `WAIT n timeout` counts the replicas that acknowledged everything *the
//! connection it is sent on* wrote. Sent on another connection (one made
//! after the first was replaced or reconnected, or the node a moved slot
//! now names) it counts that connection's writes; on one that has written
//! nothing it answers at once with every replica its master still believes
//! online, which a master cut off from its replica does for `repl-timeout`
//! (60 s). An order answered 200 on such a count was on no replica, and a
//! demoted master throws it away when the cut heals. So a write and its
//! `WAIT` travel in one pipeline: one packed request on one node
//! connection, the `WAIT` after the writes. A connection that breaks
//! between them fails the pipeline; one that redis-rs sends again, whole,
//! on a new connection runs the writes again there, before the `WAIT`.
//!
//! `WAIT` also blocks its connection: a `WAIT` behind each write serialises
//! the writes, and when no replica can answer (right after a failover the
//! promoted master has none) 200 waiting orders cost 200 timeouts one after
//! the other. So the writes of one slot are gathered: while one pipeline of
//! the slot is out, the writes that arrive queue, and the next pipeline
//! carries them all, followed by one `WAIT`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, RetryMethod, Value, cluster_routing::Slot};
use tokio::sync::oneshot;

use crate::Redis;

/// Writes made with their replicas' acknowledgement. Cheap to clone and to
/// share; its map holds one small entry per slot written to, so it is
/// bounded by the 16384 slots.
#[derive(Clone)]
pub struct ReplicaBarrier {
    shared: Arc<Shared>,
}

struct Shared {
    redis: Redis,
    slots: Mutex<HashMap<Slot, Arc<Round>>>,
}

#[derive(Default)]
struct Round {
    queued: Mutex<Vec<Job>>,
    /// Held while a pipeline of this slot is out: one at a time.
    sending: tokio::sync::Mutex<()>,
}

struct Job {
    write: Cmd,
    answer: oneshot::Sender<RedisResult<Acknowledged>>,
}

/// What a write came to.
#[derive(Debug)]
pub struct Acknowledged {
    /// The write's own reply; a server error (a script's, `NOSCRIPT`,
    /// `MOVED`) is an `Err`.
    pub reply: RedisResult<Value>,
    /// How many replicas (up to those asked for) hold the write, counted by
    /// a `WAIT` that followed it on its connection; `None` when that `WAIT`
    /// failed and nobody knows.
    pub replicas: Option<u32>,
}

/// Writes one pipeline carries at most; the rest go in the next.
const BATCH_MAX: usize = 256;
/// Past its `WAIT`'s bound, how long a pipeline may take before its writes
/// are answered "timed out": a turn never holds its slot for good, whatever
/// the client's retries and reconnections do meanwhile (a master killed
/// mid-sale held orders for 30 s and more).
const PIPELINE_GRACE: Duration = Duration::from_secs(2);

impl ReplicaBarrier {
    /// `redis` should be a connection of its own: while a `WAIT` runs,
    /// every command queued behind it on the same node waits too. Its
    /// response timeout must outlast the longest `WAIT` asked for.
    pub fn new(redis: Redis) -> Self {
        Self { shared: Arc::new(Shared { redis, slots: Mutex::default() }) }
    }

    /// Runs `write` (a command whose first key is `key`: its slot picks the
    /// node) and then, on the same connection in the same pipeline, a
    /// `WAIT` for `replicas` of at most `timeout`. An `Err` is a pipeline
    /// that failed whole: whether the write ran is unknown.
    ///
    /// The write runs to its end even when the caller stops waiting: a
    /// write left queued and sent later would act for nobody.
    pub async fn write(&self, key: &str, write: Cmd, replicas: u32, timeout: Duration) -> RedisResult<Acknowledged> {
        let round = {
            let mut slots = self.shared.slots.lock().expect("replica barrier poisoned");
            Arc::clone(slots.entry(Slot::for_key(key)).or_default())
        };
        let (answer, answered) = oneshot::channel();
        round.queued.lock().expect("replica barrier poisoned").push(Job { write, answer });
        let shared = Arc::clone(&self.shared);
        let key = key.to_owned();
        // The turn is taken and used in a task of its own, so a caller that
        // is dropped neither strands its write in the queue nor cuts a
        // pipeline off halfway.
        let turn = tokio::spawn(async move {
            let _turn = round.sending.lock().await;
            let jobs: Vec<Job> = {
                let mut queued = round.queued.lock().expect("replica barrier poisoned");
                let n = queued.len().min(BATCH_MAX);
                queued.drain(..n).collect()
            };
            if !jobs.is_empty() {
                shared.send(&key, jobs, replicas, timeout).await;
            }
        });
        let _ = turn.await;
        // The turn is bounded (one pipeline ahead and its own, each bounded);
        // this only guards against a turn that ended without answering.
        match tokio::time::timeout(2 * (timeout + PIPELINE_GRACE), answered).await {
            Ok(Ok(written)) => written,
            Ok(Err(_)) => {
                Err(RedisError::from((ErrorKind::Io, "the pipeline carrying the write was dropped before it answered")))
            }
            Err(_) => Err(timed_out()),
        }
    }
}

impl Shared {
    async fn send(&self, key: &str, jobs: Vec<Job>, replicas: u32, timeout: Duration) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for job in &jobs {
            pipe.add_command(job.write.clone());
        }
        pipe.cmd("WAIT").arg(replicas).arg(timeout.as_millis().max(1) as u64);
        let mut redis = self.redis.clone();
        let replies = tokio::time::timeout(timeout + PIPELINE_GRACE, pipe.query_async(&mut redis)).await;
        let replies: RedisResult<Vec<RedisResult<Value>>> = replies.unwrap_or_else(|_| Err(timed_out()));
        let mut replies = match replies {
            Ok(replies) if replies.len() == jobs.len() + 1 => replies,
            Ok(replies) => {
                let err = RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "a pipeline of writes and WAIT answered the wrong number of replies",
                    format!("{} for {}", replies.len(), jobs.len() + 1),
                ));
                return answer_all(jobs, &err);
            }
            Err(err) => return answer_all(jobs, &err),
        };
        let waited =
            replies.pop().and_then(|r| r.and_then(|v| u32::from_redis_value(v).map_err(RedisError::from)).ok());
        // A slot moved (a failover): the pipeline's replies do not teach the
        // cluster connection its new map, as a single command's `MOVED`
        // does; one keyed read does.
        // (Beside the turn: the next pipeline need not wait for it.)
        if replies.iter().any(|r| matches!(r, Err(e) if matches!(e.retry_method(), RetryMethod::MovedRedirect))) {
            let (mut redis, key) = (self.redis.clone(), key.to_owned());
            tokio::spawn(async move {
                let mut exists = redis::cmd("EXISTS");
                exists.arg(key);
                let _ = tokio::time::timeout(PIPELINE_GRACE, exists.query_async::<bool>(&mut redis)).await;
            });
        }
        for (job, reply) in jobs.into_iter().zip(replies) {
            let _ = job.answer.send(Ok(Acknowledged { reply, replicas: waited }));
        }
    }
}

fn answer_all(jobs: Vec<Job>, err: &RedisError) {
    for job in jobs {
        let _ = job.answer.send(Err(err.clone()));
    }
}

/// A write whose pipeline outlasted its bound: it may have run or not.
fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "the pipeline of writes and WAIT timed out"))
}
