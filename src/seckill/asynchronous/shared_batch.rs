//! Several streams' batches persisted in one transaction. Vouchers opening
//! together fill many streams at once; a transaction per stream made five
//! hundred small transactions of what one voucher's sale persists in a few
//! dozen. Only the plain case is taken here: every entry well formed,
//! pending in Redis and without its row, every voucher's row there with
//! the stock its entries take. Anything else (a malformed entry, a clash,
//! a redelivery, Redis ahead of MariaDB, a refusal, an error before the
//! commit) and nothing is written: the batches go one stream at a time
//! through `Batch::handle`, which knows what to do with each. The consumer
//! hands over at most `ASYNC_BATCH_MAX` entries at once, as a stream's
//! batch holds at most.

use std::collections::HashMap;

use redis::streams::StreamId;
use sqlx::{MySql, Transaction};

use super::{
    batch::Batch,
    stream::{Entry, Held, PersistError, acknowledge, held},
};
use crate::{
    events::OrderCreated,
    keys::SeckillKeys,
    seckill::store::{self, NewOrder},
};

/// One stream's entries as read: its voucher, its keys, the raw entries.
pub(super) type StreamBatch<'a> = (u64, &'a SeckillKeys, &'a [StreamId]);

/// One stream's entries, parsed.
type Parsed<'a> = (u64, &'a SeckillKeys, Vec<Entry>);

impl Batch<'_> {
    /// `Ok(true)`: every batch persisted and acknowledged. `Ok(false)`:
    /// nothing written (not the plain case, or an error before the commit);
    /// each batch is for `handle`. An error from the commit on (its answer
    /// lost, an acknowledgement that failed) leaves the entries pending, to
    /// be found persisted, or persisted, once claimed.
    pub(super) async fn persist_together(&self, batches: &[StreamBatch<'_>]) -> Result<bool, PersistError> {
        let mut parsed: Vec<Parsed<'_>> = Vec::with_capacity(batches.len());
        for (voucher, sk, raw) in batches {
            let Some(entries) = raw.iter().map(Entry::parse).collect::<Option<Vec<Entry>>>() else {
                return Ok(false);
            };
            parsed.push((*voucher, sk, entries));
        }
        let tx = match self.write_together(&parsed).await {
            Ok(Some(tx)) => tx,
            Ok(None) => return Ok(false),
            Err(err) => {
                tracing::debug!(error = %err, "a shared batch failed before its commit; stream by stream");
                return Ok(false);
            }
        };
        tx.commit().await?;
        // Each stream's acknowledgement at once (a round trip for all, not
        // one per voucher); one that fails leaves its entries pending, to
        // be found persisted and acknowledged when claimed.
        futures::future::try_join_all(parsed.iter().map(|(_, sk, entries)| acknowledge(self.redis, sk, entries)))
            .await?;
        metrics::counter!("hmdp_async_shared_batches_total").increment(1);
        let orders: usize = parsed.iter().map(|(_, _, entries)| entries.len()).sum();
        tracing::debug!(streams = parsed.len(), orders, "batches persisted together");
        Ok(true)
    }

    /// The shared transaction up to its commit; `None` when the batches are
    /// not the plain case (the transaction is dropped, and so rolled back).
    async fn write_together(&self, parsed: &[Parsed<'_>]) -> Result<Option<Transaction<'static, MySql>>, PersistError> {
        let mut vouchers: Vec<u64> = parsed.iter().map(|(voucher, _, _)| *voucher).collect();
        vouchers.sort_unstable();
        vouchers.dedup();
        let mut tx = self.db.begin().await?;
        // Every voucher's row lock, in id order (two such transactions wait
        // for each other, never in a circle): batches and dead-lettering of
        // each voucher take turns, as in `Batch::persist`.
        let stocks = store::lock_stocks(&mut *tx, &vouchers).await?;
        if stocks.len() != vouchers.len() {
            return Ok(None);
        }
        // Under the locks: only what Redis still holds as accepted.
        let states = futures::future::try_join_all(parsed.iter().map(|(_, sk, entries)| {
            let ids: Vec<i64> = entries.iter().map(|e| e.order_id).collect();
            async move { held(self.redis, sk, &ids).await }
        }))
        .await?;
        if states.iter().flatten().any(|state| *state != Held::Pending) {
            return Ok(None);
        }
        let ids: Vec<i64> = parsed.iter().flat_map(|(_, _, entries)| entries.iter().map(|e| e.order_id)).collect();
        if !store::existing_orders(&mut *tx, &ids).await?.is_empty() {
            return Ok(None);
        }
        let mut takes: HashMap<u64, u64> = HashMap::new();
        for (voucher, _, entries) in parsed {
            *takes.entry(*voucher).or_default() += entries.len() as u64;
        }
        if takes.iter().any(|(voucher, units)| i64::from(stocks[voucher]) < *units as i64) {
            return Ok(None);
        }
        let orders: Vec<(u64, NewOrder)> =
            parsed.iter().flat_map(|(voucher, _, entries)| entries.iter().map(|e| (*voucher, e.row()))).collect();
        store::insert_orders_of(&mut *tx, orders.iter().map(|(voucher, order)| (*voucher, order))).await?;
        let created: Vec<OrderCreated> =
            parsed.iter().flat_map(|(voucher, _, entries)| entries.iter().map(|e| e.created(*voucher))).collect();
        self.recovery.outbox.created(&mut tx, &created).await?;
        let takes: Vec<(u64, u64)> = takes.into_iter().collect();
        if !store::take_stocks(&mut *tx, &takes).await? {
            return Ok(None);
        }
        Ok(Some(tx))
    }
}
