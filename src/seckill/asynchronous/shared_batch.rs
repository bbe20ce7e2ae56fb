//! Several streams' batches persisted in one transaction. Vouchers opening
//! together fill many streams at once; a transaction per stream made five
//! hundred small transactions of what one voucher's sale persists in a few
//! dozen. Only the plain case is taken here: every entry well formed,
//! pending in Redis and without its row, every voucher's row there with
//! the stock its entries take. Anything else (a malformed entry, a clash,
//! a redelivery, Redis ahead of MariaDB, a refusal) and nothing is written:
//! the batches go one stream at a time through `Batch::handle`, which
//! knows what to do with each.

use std::collections::HashMap;

use redis::streams::StreamId;

use super::{
    batch::Batch,
    stream::{Entry, Held, PersistError, acknowledge, held},
};
use crate::{
    keys::SeckillKeys,
    seckill::store::{self, NewOrder},
};

/// One stream's entries as read: its voucher, its keys, the raw entries.
pub(super) type StreamBatch<'a> = (u64, &'a SeckillKeys, &'a [StreamId]);

impl Batch<'_> {
    /// `Ok(true)`: every batch persisted and acknowledged. `Ok(false)`: not
    /// the plain case, nothing written; each batch is for `handle`.
    pub(super) async fn persist_together(&self, batches: &[StreamBatch<'_>]) -> Result<bool, PersistError> {
        let mut parsed: Vec<(u64, &SeckillKeys, Vec<Entry>)> = Vec::with_capacity(batches.len());
        for (voucher, sk, raw) in batches {
            let Some(entries) = raw.iter().map(Entry::parse).collect::<Option<Vec<Entry>>>() else {
                return Ok(false);
            };
            parsed.push((*voucher, sk, entries));
        }
        let mut vouchers: Vec<u64> = parsed.iter().map(|(voucher, _, _)| *voucher).collect();
        vouchers.sort_unstable();
        vouchers.dedup();
        let mut tx = self.db.begin().await?;
        // Every voucher's row lock, in id order (two such transactions wait
        // for each other, never in a circle): batches and dead-lettering of
        // each voucher take turns, as in `Batch::persist`.
        let stocks = store::lock_stocks(&mut *tx, &vouchers).await?;
        if stocks.len() != vouchers.len() {
            return Ok(false);
        }
        // Under the locks: only what Redis still holds as accepted.
        let states = futures::future::try_join_all(parsed.iter().map(|(_, sk, entries)| {
            let ids: Vec<i64> = entries.iter().map(|e| e.order_id).collect();
            async move { held(self.redis, sk, &ids).await }
        }))
        .await?;
        if states.iter().flatten().any(|state| *state != Held::Pending) {
            return Ok(false);
        }
        let ids: Vec<i64> = parsed.iter().flat_map(|(_, _, entries)| entries.iter().map(|e| e.order_id)).collect();
        if !store::existing_orders(&mut *tx, &ids).await?.is_empty() {
            return Ok(false);
        }
        let mut takes: HashMap<u64, u64> = HashMap::new();
        for (voucher, _, entries) in &parsed {
            *takes.entry(*voucher).or_default() += entries.len() as u64;
        }
        if takes.iter().any(|(voucher, units)| i64::from(stocks[voucher]) < *units as i64) {
            return Ok(false);
        }
        let orders: Vec<(u64, NewOrder)> =
            parsed.iter().flat_map(|(voucher, _, entries)| entries.iter().map(|e| (*voucher, e.row()))).collect();
        if store::insert_orders_of(&mut *tx, orders.iter().map(|(voucher, order)| (*voucher, order))).await.is_err() {
            return Ok(false);
        }
        for (voucher, _, entries) in &parsed {
            let keys: Vec<(i64, u64)> = entries.iter().map(|e| (e.order_id, e.user_id)).collect();
            self.recovery.outbox.created(&mut tx, *voucher, &keys).await?;
        }
        let takes: Vec<(u64, u64)> = takes.into_iter().collect();
        if !store::take_stocks(&mut *tx, &takes).await? {
            return Ok(false);
        }
        tx.commit().await?;
        // Each stream's acknowledgement at once (a round trip for all, not
        // one per voucher); one that fails leaves its entries pending, to
        // be found persisted and acknowledged when claimed.
        futures::future::try_join_all(parsed.iter().map(|(_, sk, entries)| acknowledge(self.redis, sk, entries)))
            .await?;
        metrics::counter!("hmdp_async_shared_batches_total").increment(1);
        tracing::debug!(streams = parsed.len(), orders = orders.len(), "batches persisted together");
        Ok(true)
    }
}
