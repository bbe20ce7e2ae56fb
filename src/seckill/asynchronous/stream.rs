//! An order stream's entry as the order script queues it, and what the
//! consumer and its recovery both do with one: tell why it was not
//! persisted, and take it off the stream once it was.

use std::{collections::HashMap, sync::LazyLock};

use chrono::DateTime;
use hmdp_redis::Redis;
use redis::{AsyncCommands, Script, streams::StreamId};

use crate::{
    dependency::refused_by_the_data,
    events::OrderCreated,
    keys::{Keys, SeckillKeys},
    seckill::{asynchronous::segments::SegmentMaps, store::NewOrder},
};

static ACKNOWLEDGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/seckill_acknowledge.lua")));

/// The consumer group every instance reads the order streams in.
pub(super) const GROUP: &str = "orders";

/// One accepted order, as queued by the order script.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(crate) stream_id: String,
    pub(crate) order_id: i64,
    pub(crate) user_id: u64,
    pub(crate) ts_ms: i64,
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

    /// The order's row, stamped with the time Redis accepted it.
    pub(super) fn row(&self) -> NewOrder {
        NewOrder {
            id: self.order_id,
            user_id: self.user_id,
            create_time: Some(DateTime::from_timestamp_millis(self.ts_ms).unwrap_or_default().naive_utc()),
        }
    }

    /// What the order's `created` event names (the entry does not carry
    /// its voucher: the stream does).
    pub(super) fn created(&self, voucher_id: u64) -> OrderCreated {
        OrderCreated { voucher_id, order_id: self.order_id, user_id: self.user_id }
    }
}

/// Where Redis holds an accepted order now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Accepted and not yet acknowledged.
    Pending,
    /// Dead-lettered (or vanished with a demoted master) and given back.
    Failed,
    /// Neither: acknowledged after its commit, or never here.
    Gone,
}

/// Each of `order_ids` as the segment's pending and failed hashes hold it,
/// in one round trip; a failed order is `Failed` even if still pending.
pub(super) async fn held(redis: &Redis, sk: &SeckillKeys, order_ids: &[i64]) -> redis::RedisResult<Vec<Held>> {
    let (failed, pending): (Vec<Option<String>>, Vec<Option<String>>) = redis::pipe()
        .cmd("HMGET")
        .arg(&sk.failed)
        .arg(order_ids)
        .cmd("HMGET")
        .arg(&sk.pending)
        .arg(order_ids)
        .query_async(&mut redis.clone())
        .await?;
    Ok(failed
        .into_iter()
        .zip(pending)
        .map(|(failed, pending)| match (failed, pending) {
            (Some(_), _) => Held::Failed,
            (None, Some(_)) => Held::Pending,
            (None, None) => Held::Gone,
        })
        .collect())
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

/// Only a refusal of the data blames the batch: a lock wait, a deadlock or a
/// read-only server counted as a refusal would dead-letter, after a few
/// deliveries, orders already answered success.
impl From<sqlx::Error> for PersistError {
    fn from(err: sqlx::Error) -> Self {
        if refused_by_the_data(&err) { Self::Refused(err.into()) } else { Self::Unavailable(err.into()) }
    }
}

impl From<redis::RedisError> for PersistError {
    fn from(err: redis::RedisError) -> Self {
        Self::Unavailable(err.into())
    }
}

impl From<PersistError> for crate::seckill::SeckillError {
    fn from(err: PersistError) -> Self {
        match err {
            PersistError::Unavailable(cause) => Self::Failed(crate::errors::Failure::Unavailable(cause)),
            PersistError::Refused(cause) => Self::internal(cause),
        }
    }
}

/// Persisted (now or before): acknowledged, out of the pending and holders
/// hashes, and the stream trimmed up to the oldest entry still pending, in
/// one script (`lua/seckill_acknowledge.lua`).
pub(super) async fn acknowledge(redis: &Redis, sk: &SeckillKeys, entries: &[Entry]) -> Result<(), PersistError> {
    let mut call = ACKNOWLEDGE.prepare_invoke();
    call.key(&sk.orders).key(&sk.pending).key(&sk.holders).arg(GROUP).arg(entries.len());
    for entry in entries {
        call.arg(&entry.stream_id);
    }
    for entry in entries {
        call.arg(entry.order_id);
    }
    // A user holds one order per voucher in Redis (the buyers set): the
    // holder entry is this order's.
    for entry in entries {
        call.arg(entry.user_id);
    }
    let _trimmed: u64 = call.invoke_async(&mut redis.clone()).await?;
    Ok(())
}

/// Per active voucher: the stream's length, entries delivered but not yet
/// acknowledged, and the group's lag (entries not yet delivered); for a
/// voucher sold in segments, each segment's stream, stock, buyers and
/// units lent and still in flight, labelled `segment`.
pub(super) async fn record_stream_metrics(
    redis: &mut Redis,
    keys: &Keys,
    maps: &SegmentMaps,
) -> redis::RedisResult<()> {
    let vouchers: Vec<u64> = redis.smembers(keys.seckill_active()).await?;
    for voucher in vouchers {
        let segments = match maps.of_or_single(voucher).await {
            Ok(segments) => segments,
            Err(err) => {
                tracing::warn!(voucher, error = %err, "reading a voucher's segments failed; its gauges wait for the next scrape");
                continue;
            }
        };
        for (segment, sk) in segments.keys().iter().enumerate() {
            if segments.count() == 1 {
                record_stream(redis, &sk.orders, vec![("voucher", voucher.to_string())]).await?;
                continue;
            }
            let labels = vec![("voucher", voucher.to_string()), ("segment", segment.to_string())];
            record_stream(redis, &sk.orders, labels.clone()).await?;
            let (stock, buyers, lent): (Option<i64>, u64, HashMap<String, String>) =
                redis::pipe().get(&sk.stock).scard(&sk.buyers).hgetall(&sk.lent).query_async(redis).await?;
            let lent = hmdp_segments::Lent::read(&lent);
            metrics::gauge!("hmdp_segment_stock", &labels).set(stock.unwrap_or(0) as f64);
            // The member 0 marks the set as loaded.
            metrics::gauge!("hmdp_segment_buyers", &labels).set(buyers.saturating_sub(1) as f64);
            metrics::gauge!("hmdp_segment_borrows_in_flight", &labels).set(lent.borrows as f64);
            metrics::gauge!("hmdp_segment_lends", &labels).set(lent.lends as f64);
        }
    }
    Ok(())
}

async fn record_stream(redis: &mut Redis, stream: &str, labels: Vec<(&'static str, String)>) -> redis::RedisResult<()> {
    let length: u64 = redis.xlen(stream).await?;
    metrics::gauge!("hmdp_async_stream_length", &labels).set(length as f64);
    let groups: redis::streams::StreamInfoGroupsReply = match redis.xinfo_groups(stream).await {
        Ok(groups) => groups,
        // No group yet: nothing consumed, nothing pending.
        Err(err)
            if err.code() == Some("NOGROUP")
                || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
        {
            return Ok(());
        }
        Err(err) => return Err(err),
    };
    for group in groups.groups.iter().filter(|g| g.name == GROUP) {
        metrics::gauge!("hmdp_async_pending_entries", &labels).set(group.pending as f64);
        if let Some(lag) = group.lag {
            metrics::gauge!("hmdp_async_consumer_lag", &labels).set(lag as f64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection, MySqlPool};

    use super::PersistError;

    async fn voucher(pool: &MySqlPool) -> u64 {
        let id = sqlx::query(
            "INSERT INTO tb_voucher (shop_id, title, pay_value, actual_value, type, status) VALUES (1, 't', 1, 2, 1, 1)",
        )
        .execute(pool)
        .await
        .unwrap()
        .last_insert_id();
        sqlx::query("INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, 1, NOW(), NOW() + INTERVAL 1 HOUR)")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
        id
    }

    #[sqlx::test(migrations = "./migrations")]
    async fn a_lock_wait_or_a_read_only_server_blames_no_order_and_a_constraint_does(pool: MySqlPool) {
        let id = voucher(&pool).await;

        // A lock wait that times out (1205): another transaction holds the row.
        let mut holder = pool.acquire().await.unwrap();
        let mut held = holder.begin().await.unwrap();
        sqlx::query("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE")
            .bind(id)
            .execute(&mut *held)
            .await
            .unwrap();
        let mut waiter = pool.acquire().await.unwrap();
        sqlx::query("SET SESSION innodb_lock_wait_timeout = 1").execute(&mut *waiter).await.unwrap();
        let mut tx = waiter.begin().await.unwrap();
        let lock_wait = sqlx::query("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE")
            .bind(id)
            .execute(&mut *tx)
            .await
            .expect_err("the row is held");
        drop(tx);
        held.rollback().await.unwrap();
        assert!(matches!(PersistError::from(lock_wait), PersistError::Unavailable(_)), "a lock wait blames the batch");

        // A read-only transaction, as on a server set read-only (1792).
        let mut ro = pool.acquire().await.unwrap();
        sqlx::query("SET SESSION TRANSACTION READ ONLY").execute(&mut *ro).await.unwrap();
        let read_only = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ?")
            .bind(id)
            .execute(&mut *ro)
            .await
            .expect_err("the session is read-only");
        assert!(matches!(PersistError::from(read_only), PersistError::Unavailable(_)), "read-only blames the batch");

        // The refusals that are the order's own: the CHECK on the stock, and
        // the unique (user, voucher) index.
        let check = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 2 WHERE voucher_id = ?")
            .bind(id)
            .execute(&pool)
            .await
            .expect_err("stock >= 0");
        assert!(matches!(PersistError::from(check), PersistError::Refused(_)));
        let insert = |order: i64| {
            sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, 7, ?)").bind(order).bind(id)
        };
        insert(1).execute(&pool).await.unwrap();
        let duplicate = insert(2).execute(&pool).await.expect_err("one order per user");
        assert!(matches!(PersistError::from(duplicate), PersistError::Refused(_)));
        assert!(matches!(PersistError::from(sqlx::Error::RowNotFound), PersistError::Refused(_)));
    }
}
