//! The synchronous order, the course's path: the per-user lock taken
//! without waiting, and inside it the order committed in MariaDB (one order
//! per user, `stock = stock - 1 ... AND stock > 0`, insert), only while the
//! lock is still held; the lock is released only after that commit. The
//! UNIQUE (user_id, voucher_id) index has the last word. With
//! `ORDER_BATCH_MAX` above 1 the commit is shared with the voucher's other
//! ready orders (`group_commit`); at 1 each order has its own transaction.

mod admission;
mod group_commit;
mod transaction;

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use group_commit::GroupCommitter;
pub(crate) use group_commit::GroupStats;
use transaction::{commit_reservation, reserve};

use hmdp_lock::{Holder, LockGuard, LockService};

use admission::{Gate, VoucherGates};

use super::{
    error::{SeckillError, SeckillResult},
    model::{PathUse, StockSet},
    parts::{Dependencies, Workers},
    store,
};
use crate::{config::SyncSettings, events::Outbox, ids::OrderIdGenerator, keys::Keys};

/// One order to place under its user's lock.
struct Order {
    user_id: u64,
    voucher_id: u64,
    /// The sale path it spends (guarded vouchers).
    spend: Option<PathUse>,
}

/// What the synchronous mode is made of; built once at start-up.
pub(crate) struct SyncOrders {
    db: MySqlPool,
    outbox: Outbox,
    gates: VoucherGates,
    locks: LockService,
    order_ids: OrderIdGenerator,
    keys: Keys,
    deadline: Duration,
    /// `None` at `ORDER_BATCH_MAX` = 1: one transaction per order.
    group_commit: Option<GroupCommitter>,
}

impl SyncOrders {
    /// The synchronous mode from its settings: group commit above one
    /// order per batch, its workers owned by `workers`.
    pub(crate) fn build(settings: &SyncSettings, deadline: Duration, deps: &Dependencies, workers: &Workers) -> Self {
        let group_commit = (settings.order_batch_max > 1).then(|| {
            GroupCommitter::new(deps.db.clone(), deps.outbox.clone(), settings, workers.stop_token(), workers.tracker())
        });
        Self {
            db: deps.db.clone(),
            outbox: deps.outbox.clone(),
            gates: VoucherGates::new(settings.hot_row_permits, settings.hot_row_queue_max),
            locks: deps.locks.clone(),
            order_ids: deps.order_ids.clone(),
            keys: deps.keys.clone(),
            deadline,
            group_commit,
        }
    }

    /// Units came back to the voucher (a cancel or refund committed here):
    /// this instance sells again at once.
    pub(crate) fn units_returned(&self, voucher_id: u64) {
        self.gates.units_returned(voucher_id);
    }

    /// Each after-sale round: units another instance returned sell here
    /// within a round, and the sales about to open are known before their
    /// first order.
    pub(crate) async fn settle(&self) {
        match self.gates.refresh(&self.db).await {
            Ok(refreshed) => {
                if refreshed.read_ahead > 0 {
                    tracing::debug!(
                        read = refreshed.read_ahead,
                        "sales on or opening soon read ahead of their first order"
                    );
                }
                for voucher_id in refreshed.selling_again {
                    tracing::info!(voucher_id, "stock came back to a sold-out voucher; selling again");
                }
            }
            Err(err) => tracing::warn!(error = %err, "reading the sales on now failed; the next round tries again"),
        }
        if let Err(err) = store::forget_spent_paths(&self.db).await {
            tracing::warn!(error = %err, "forgetting expired spent sale paths failed; the next round tries again");
        }
    }

    /// The row's stock; `None` for no seckill voucher.
    pub(crate) async fn units_left(&self, voucher_id: u64) -> SeckillResult<Option<i64>> {
        Ok(store::sale(&self.db, voucher_id).await?.map(|sale| i64::from(sale.stock)))
    }

    pub(crate) fn group_stats(&self) -> GroupStats {
        self.group_commit.as_ref().map(GroupCommitter::stats).unwrap_or_default()
    }

    /// Group-commit workers running now.
    pub(crate) fn workers(&self) -> usize {
        self.group_commit.as_ref().map_or(0, GroupCommitter::workers)
    }

    /// The admin's stock: the row gets it under its lock, and this
    /// instance's sold-out memory learns it at once.
    pub(crate) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        let mut tx = self.db.begin().await?;
        let previous = store::lock_stock(&mut *tx, voucher_id).await?.ok_or(SeckillError::NoSuchVoucher)?;
        store::set_stock(&mut *tx, voucher_id, stock).await?;
        tx.commit().await?;
        self.gates.stock_set(voucher_id, stock);
        tracing::info!(voucher_id, stock, previous, "seckill stock set");
        Ok(StockSet { stock, previous: previous.into(), awaiting_persistence: 0 })
    }

    /// Places one order; returns the order id. Runs in a task of its own,
    /// so a client that goes away mid-order cannot cut the order between
    /// its commit and its unlock.
    pub(crate) async fn place(
        self: &Arc<Self>,
        user_id: u64,
        voucher_id: u64,
        spend: Option<PathUse>,
    ) -> SeckillResult<i64> {
        let gate = self.gates.get_or_load(&self.db, voucher_id).await?;
        gate.admit(Utc::now().naive_utc())?;
        let this = self.clone();
        tokio::spawn(async move { this.place_under_lock(&gate, user_id, voucher_id, spend).await })
            .await
            .map_err(|e| SeckillError::internal(anyhow::anyhow!("the order task failed: {e}")))?
    }

    async fn place_under_lock(
        &self,
        gate: &Arc<Gate>,
        user_id: u64,
        voucher_id: u64,
        spend: Option<PathUse>,
    ) -> SeckillResult<i64> {
        // One request per user at a time, across instances: a second
        // in-flight request of the same user is refused rather than queued.
        let lock_name = self.keys.order_lock(user_id);
        let guard = self
            .locks
            .try_lock(&lock_name, &Holder::random(), Duration::ZERO, None)
            .await?
            .ok_or(SeckillError::InProgress)?;

        // Stops the order like a lost lock does: at the deadline, or when
        // the lock is lost, whichever comes first.
        let stop = guard.lost_token();
        let deadline = self.deadline;
        let expire = tokio::spawn({
            let stop = stop.clone();
            async move {
                tokio::time::sleep(deadline).await;
                stop.cancel();
            }
        });
        let order = Order { user_id, voucher_id, spend };
        let placed = self.under_lock(gate, order, &guard, &stop).await;
        expire.abort();
        // Released after the commit or rollback, never before.
        if let Err(err) = guard.unlock().await {
            tracing::warn!(error = %err, "releasing the order lock failed; its lease will free it");
        }
        placed
    }

    async fn under_lock(
        &self,
        gate: &Arc<Gate>,
        order: Order,
        guard: &LockGuard,
        stop: &CancellationToken,
    ) -> SeckillResult<i64> {
        let Order { user_id, voucher_id, spend } = order;
        if gate.is_sold_out() {
            return Err(SeckillError::SoldOut);
        }
        let _slot = gate.queue_slot()?;
        let order_id = self.order_ids.next().await?;
        if let Some(group_commit) = &self.group_commit {
            group_commit.commit(gate, voucher_id, user_id, order_id, spend, stop.clone()).await?;
        } else {
            let _turn = tokio::select! {
                biased;
                () = stop.cancelled() => return Err(SeckillError::lock_lost()),
                turn = gate.enter() => turn,
            };
            // If the lock is lost (or the deadline passes) mid-transaction,
            // the transaction is dropped, which rolls it back.
            let reservation = tokio::select! {
                biased;
                () = stop.cancelled() => return Err(SeckillError::lock_lost()),
                reservation = reserve(&self.db, &self.outbox, user_id, voucher_id, order_id, spend) => reservation,
            };
            let owner = store::OrderOwner { user_id, voucher_id };
            commit_reservation(&self.db, gate, (order_id, owner), stop, reservation).await?;
        }
        tracing::debug!(order_id, user_id, voucher_id, fence = guard.fencing_token(), "order placed");
        Ok(order_id)
    }
}
