//! One batch of a stream's entries persisted: one transaction under the
//! voucher's row lock (one multi-row insert, one stock update by the rows
//! inserted), then the acknowledgement. Redelivery is harmless: entries
//! with their row, dead-lettered, or no longer pending, are skipped.

use hmdp_redis::Redis;
use redis::streams::StreamId;
use sqlx::MySqlPool;

use super::{
    converge::converge,
    recovery::Recovery,
    stream::{Entry, Held, PersistError, acknowledge, held},
};
use crate::{
    events::OrderCreated,
    keys::SeckillKeys,
    seckill::{
        asynchronous::segments::Segments,
        store::{self, NewOrder, OrderOwner},
    },
};

/// What persisting a batch takes: the consumer's connections and its
/// recovery (for entries that cannot be persisted).
pub(super) struct Batch<'a> {
    pub(super) db: &'a MySqlPool,
    pub(super) redis: &'a Redis,
    pub(super) recovery: &'a Recovery,
}

impl Batch<'_> {
    /// Persists what can be persisted and acknowledges it. A batch the
    /// database refuses is retried entry by entry, so one bad entry holds up
    /// no other; the bad one stays pending until recovery retries it or, past
    /// the delivery limit, dead-letters it.
    pub(super) async fn handle(&self, voucher: u64, segments: &Segments, sk: &SeckillKeys, raw: Vec<StreamId>) {
        let mut entries = Vec::with_capacity(raw.len());
        for r in &raw {
            match Entry::parse(r) {
                Some(entry) => entries.push(entry),
                None => self.recovery.dead_letter_malformed(sk, voucher, r).await,
            }
        }
        if entries.is_empty() {
            return;
        }
        match self.persist(voucher, segments, sk, &entries).await {
            Ok(()) => {}
            Err(PersistError::Unavailable(err)) => {
                metrics::counter!("hmdp_async_consumer_failures_total", "what" => "batch_unavailable").increment(1);
                tracing::warn!(voucher, count = entries.len(), error = %format!("{err:#}"), "batch not persisted; will retry");
            }
            Err(PersistError::Refused(err)) => {
                metrics::counter!("hmdp_async_consumer_failures_total", "what" => "batch_refused").increment(1);
                tracing::warn!(voucher, count = entries.len(), error = %format!("{err:#}"), "batch refused; persisting one by one");
                for entry in &entries {
                    match self.persist(voucher, segments, sk, std::slice::from_ref(entry)).await {
                        Ok(()) => {}
                        Err(PersistError::Refused(err)) => {
                            self.recovery.refused(segments, sk, voucher, entry, &format!("{err:#}")).await;
                        }
                        Err(PersistError::Unavailable(err)) => {
                            tracing::warn!(voucher, order_id = entry.order_id, error = %format!("{err:#}"), "order not persisted; will retry");
                        }
                    }
                }
            }
        }
    }

    /// One transaction for the batch, then the acknowledgement.
    async fn persist(
        &self,
        voucher: u64,
        segments: &Segments,
        sk: &SeckillKeys,
        entries: &[Entry],
    ) -> Result<(), PersistError> {
        let mut tx = self.db.begin().await?;
        // The voucher's row lock: batches and dead-lettering of one voucher
        // take turns, so the checks below stay true until the commit.
        let db_stock = store::lock_stock(&mut *tx, voucher).await?.ok_or(sqlx::Error::RowNotFound)?;
        // Only what Redis still holds as accepted: never an order
        // dead-lettered and given back, nor one whose pending entry is gone
        // (acknowledged after its commit, or taken along by a demoted
        // master, which `failover` records as failed).
        let order_ids: Vec<i64> = entries.iter().map(|e| e.order_id).collect();
        let states = held(self.redis, sk, &order_ids).await?;
        let mut candidates: Vec<&Entry> =
            entries.iter().zip(&states).filter(|(_, h)| **h == Held::Pending).map(|(e, _)| e).collect();
        let ids: Vec<i64> = candidates.iter().map(|e| e.order_id).collect();
        let persisted = store::existing_orders(&mut *tx, &ids).await?;
        // A row under the id with another owner is not this order: a
        // collision (an id sequence that went backwards). Alarmed and
        // refused, so the order is dead-lettered and its unit given back,
        // instead of acknowledged as if it had been persisted.
        if let Some(clash) = candidates.iter().find(|e| {
            persisted
                .get(&e.order_id)
                .is_some_and(|owner| *owner != OrderOwner { user_id: e.user_id, voucher_id: voucher })
        }) {
            metrics::counter!("hmdp_order_id_collisions_total").increment(1);
            tracing::error!(
                order_id = clash.order_id,
                user_id = clash.user_id,
                voucher,
                held_by = ?persisted.get(&clash.order_id),
                "order id collision: another order's row holds this id"
            );
            return Err(PersistError::Refused(anyhow::anyhow!(
                "order id {} is held by another order's row",
                clash.order_id
            )));
        }
        candidates.retain(|e| !persisted.contains_key(&e.order_id));
        // Redis accepted more than MariaDB has: Redis learns the row's stock
        // now, so it stops accepting orders the database cannot honour.
        if i64::from(db_stock) < candidates.len() as i64 {
            converge(&mut tx, self.redis, segments, voucher, db_stock.into()).await?;
            return Err(PersistError::Refused(anyhow::anyhow!(
                "MariaDB has {db_stock} left, fewer than the {} orders accepted in Redis",
                candidates.len()
            )));
        }
        if !candidates.is_empty() {
            let orders: Vec<NewOrder> = candidates.iter().map(|e| e.row()).collect();
            let inserted = store::insert_orders(&mut *tx, voucher, &orders).await?;
            let created: Vec<OrderCreated> = candidates.iter().map(|e| e.created(voucher)).collect();
            self.recovery.outbox.created(&mut tx, &created).await?;
            if !store::take_stock(&mut *tx, voucher, inserted).await? {
                return Err(PersistError::Refused(anyhow::anyhow!(
                    "MariaDB has less stock than {inserted} orders accepted in Redis"
                )));
            }
        }
        tx.commit().await?;
        acknowledge(self.redis, sk, entries).await?;
        tracing::debug!(voucher, batch = entries.len(), inserted = candidates.len(), "batch persisted");
        Ok(())
    }
}
