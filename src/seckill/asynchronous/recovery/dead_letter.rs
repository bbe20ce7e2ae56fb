//! Dead letters: an entry the database kept refusing is moved to the
//! voucher's dead-letter stream and compensated (its buyer slot freed,
//! Redis's stock set from MariaDB's row), under the voucher's row lock so
//! that no batch persists it at the same time; an entry without the
//! script's fields is set aside as it is.

use std::time::Duration;

use redis::{AsyncCommands, streams::StreamId};

use super::{COMPENSATE, COMPENSATE_PATIENCE, FAILED_KEPT, Recovery};
use crate::{
    keys::SeckillKeys,
    seckill::{
        asynchronous::segments::Segments,
        asynchronous::{
            converge,
            stream::{Entry, GROUP, PersistError, acknowledge},
        },
        store,
    },
};

impl Recovery {
    /// Under the voucher's row lock, so no batch can persist the order at the
    /// same time: if its row exists after all it is simply acknowledged;
    /// otherwise it is moved to the dead-letter stream and compensated.
    pub(super) async fn dead_letter(
        &self,
        segments: &Segments,
        sk: &SeckillKeys,
        voucher: u64,
        entry: &Entry,
        reason: &str,
    ) -> Result<(), PersistError> {
        let mut tx = self.db.begin().await?;
        let db_stock = store::lock_stock(&mut *tx, voucher).await?;
        // The unit goes back to the segments the row records now.
        let recorded = segments.recorded_now(&mut tx, voucher).await?;
        let segments = recorded.as_ref().unwrap_or(segments);
        let mine = store::OrderOwner { user_id: entry.user_id, voucher_id: voucher };
        if store::existing_orders(&mut *tx, &[entry.order_id]).await?.get(&entry.order_id) == Some(&mine) {
            tx.commit().await?;
            return acknowledge(&self.redis, sk, std::slice::from_ref(entry)).await;
        }
        let holds_another = store::held_order(&mut *tx, entry.user_id, voucher).await?;
        // The unit goes back only as far as MariaDB has it: the script sets
        // Redis's stock from the row, this order no longer pending.
        let segmented = segments.count() > 1;
        // The pending orders with their row, which the script must not count.
        let persisted = if !segmented {
            converge::unpersisted(&mut tx, &self.redis, sk, voucher).await?.persisted
        } else {
            if let Some(db_stock) = db_stock {
                self.set_segments_without(&mut tx, segments, sk, voucher, entry, db_stock.into()).await?;
            }
            Vec::new()
        };
        let row_stock = db_stock.filter(|_| !segmented).map_or_else(String::new, |s| s.to_string());
        let mut compensate = COMPENSATE.prepare_invoke();
        compensate
            .key(&sk.stock)
            .key(&sk.buyers)
            .key(&sk.orders)
            .key(&sk.dead)
            .key(&sk.pending)
            .key(&sk.failed)
            .key(&sk.holders)
            .arg(&entry.stream_id)
            .arg(entry.order_id)
            .arg(entry.user_id)
            .arg(voucher)
            .arg(reason)
            .arg(u8::from(holds_another.is_some()))
            .arg(row_stock)
            .arg(&persisted);
        // A call whose answer was lost may still run later. The row lock is
        // held until a call is answered (the script is idempotent: a later
        // run of a lost call changes nothing), so no consumer can persist
        // the order in between and then see it dead-lettered after its row.
        let (compensated, before, after) = self.until_answered(&compensate, entry.order_id).await?;
        if let Some(db_stock) = db_stock.filter(|_| !segmented) {
            converge::report(voucher, db_stock.into(), before, after);
        }
        // Already compensated: a run before this one, whose commit (and so
        // its event) may have been lost, made it FAILED.
        if compensated == 1 || self.redis.clone().hexists(&sk.failed, entry.order_id).await? {
            self.outbox.failed(&mut tx, voucher, &[(entry.order_id, entry.user_id)]).await?;
        }
        tx.commit().await?;
        if compensated == 1 {
            self.record_failed(voucher, entry, reason).await;
        }
        Ok(())
    }

    /// In segments no one script sees every segment: each is set from the
    /// row first, this order already counted as gone, and the script then
    /// leaves the stock alone. Whoever sees the order gone (FAILED, or a
    /// drained stream) sees its unit back; should the script fail after
    /// this, Redis holds one unit more than MariaDB until the order's next
    /// dead-lettering sets it from the row again.
    async fn set_segments_without(
        &self,
        tx: &mut sqlx::MySqlConnection,
        segments: &Segments,
        sk: &SeckillKeys,
        voucher: u64,
        entry: &Entry,
        db_stock: i64,
    ) -> Result<(), PersistError> {
        let mut found = converge::unpersisted_each(&mut *tx, &self.redis, segments, voucher).await?;
        let waiting: bool = self.redis.clone().hexists(&sk.pending, entry.order_id).await?;
        if let Some(own) = segments.keys().iter().position(|k| k.orders == sk.orders)
            && waiting
            && !found[own].persisted.contains(&entry.order_id)
        {
            found[own].count -= 1;
            found[own].persisted.push(entry.order_id);
        }
        converge::set_from_row(&self.redis, segments, voucher, db_stock, &found).await?;
        Ok(())
    }

    /// The compensation script, asked again while Redis does not answer
    /// (within `COMPENSATE_PATIENCE`): the caller holds the row lock.
    async fn until_answered(
        &self,
        compensate: &redis::ScriptInvocation<'_>,
        order_id: i64,
    ) -> Result<(i64, i64, i64), PersistError> {
        let patience = tokio::time::Instant::now() + COMPENSATE_PATIENCE;
        loop {
            match compensate.invoke_async(&mut self.redis.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(err) if hmdp_redis::unavailable(&err) && tokio::time::Instant::now() < patience => {
                    tracing::warn!(order_id, error = %err, "dead-lettering unanswered; asking again under the row lock");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// A dead-lettered order: its FAILED stays findable once the sale
    /// leaves the active set, and the operator hears of it.
    async fn record_failed(&self, voucher: u64, entry: &Entry, reason: &str) {
        let indexed: redis::RedisResult<()> =
            self.redis.clone().set_ex(self.keys.failed_order(entry.order_id), voucher, FAILED_KEPT.as_secs()).await;
        if let Err(err) = indexed {
            tracing::warn!(order_id = entry.order_id, error = %err, "indexing a failed order failed; found while its sale is active");
        }
        tracing::error!(
            voucher,
            order_id = entry.order_id,
            user_id = entry.user_id,
            reason,
            "order dead-lettered; buyer slot freed, stock set from MariaDB"
        );
    }

    /// An entry without the fields the order script writes cannot be persisted
    /// or compensated; it is set aside so it blocks nothing.
    pub(in crate::seckill::asynchronous) async fn dead_letter_malformed(
        &self,
        sk: &SeckillKeys,
        voucher: u64,
        raw: &StreamId,
    ) {
        let fields: Vec<(String, String)> = raw
            .map
            .iter()
            .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap_or_default()))
            .collect();
        let mut xadd = redis::cmd("XADD");
        xadd.arg(&sk.dead).arg("*").arg("reason").arg("malformed entry").arg("entry").arg(&raw.id);
        for (k, v) in &fields {
            xadd.arg(k).arg(v);
        }
        let moved = redis::pipe()
            .atomic()
            .add_command(xadd)
            .ignore()
            .xack(&sk.orders, GROUP, &[&raw.id])
            .ignore()
            .xdel(&sk.orders, &[&raw.id])
            .ignore()
            .exec_async(&mut self.redis.clone())
            .await;
        match moved {
            Ok(()) => tracing::error!(voucher, entry = %raw.id, ?fields, "malformed order entry set aside"),
            Err(err) => {
                tracing::warn!(voucher, entry = %raw.id, error = %err, "setting a malformed entry aside failed")
            }
        }
    }
}
