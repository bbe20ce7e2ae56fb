//! An order stream's entry as the order script queues it, and what the
//! consumer and its recovery both do with one: tell why it was not
//! persisted, and take it off the stream once it was.

use hmdp_redis::Redis;
use redis::streams::StreamId;

use crate::keys::SeckillKeys;

/// The consumer group every instance reads the order streams in.
pub(super) const GROUP: &str = "orders";

/// One accepted order, as queued by the order script.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub stream_id: String,
    pub order_id: i64,
    pub user_id: u64,
    pub ts_ms: i64,
}

impl Entry {
    pub(super) fn parse(raw: &StreamId) -> Option<Self> {
        Some(Self {
            stream_id: raw.id.clone(),
            order_id: raw.get("id")?,
            user_id: raw.get("userId")?,
            ts_ms: raw.get("ts")?,
        })
    }
}

/// Why a batch was not persisted.
#[derive(Debug, thiserror::Error)]
pub(super) enum PersistError {
    /// MariaDB or Redis could not be reached: retry later, blame no entry.
    #[error("unavailable: {0:#}")]
    Unavailable(anyhow::Error),
    /// The database refused the batch (a constraint, a trigger, stock that
    /// is not there): one of its entries is bad.
    #[error("refused: {0:#}")]
    Refused(anyhow::Error),
}

impl From<sqlx::Error> for PersistError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Database(_) | sqlx::Error::RowNotFound => Self::Refused(err.into()),
            other => Self::Unavailable(other.into()),
        }
    }
}

impl From<redis::RedisError> for PersistError {
    fn from(err: redis::RedisError) -> Self {
        Self::Unavailable(err.into())
    }
}

/// Persisted (now or before): off the stream and out of the pending hash.
pub(super) async fn acknowledge(redis: &Redis, sk: &SeckillKeys, entries: &[Entry]) -> Result<(), PersistError> {
    let stream_ids: Vec<&str> = entries.iter().map(|e| e.stream_id.as_str()).collect();
    let order_ids: Vec<i64> = entries.iter().map(|e| e.order_id).collect();
    redis::pipe()
        .atomic()
        .xack(&sk.orders, GROUP, &stream_ids)
        .ignore()
        .xdel(&sk.orders, &stream_ids)
        .ignore()
        .hdel(&sk.pending, &order_ids)
        .ignore()
        .exec_async(&mut redis.clone())
        .await?;
    Ok(())
}
