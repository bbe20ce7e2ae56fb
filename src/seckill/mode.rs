//! The one seam between the two modes. The mode is chosen here, once, at
//! start-up; the service and the after-sale call these hooks and never ask
//! which mode runs. Each mode builds itself in its own folder (`sync/`,
//! `asynchronous/`); this file only chooses and forwards.

use std::sync::Arc;

use sqlx::MySqlConnection;

use super::{
    asynchronous::AsyncMode,
    error::SeckillResult,
    model::{PathUse, PlacedOrder, StockSet},
    parts::{Dependencies, Workers},
    segments::SegmentMaps,
    sync::{GroupStats, SyncOrders},
};
use crate::config::{Config, SeckillMode};

/// Every hook the two modes differ in: an enum rather than a trait object,
/// so an order's call costs no allocation and no indirection.
pub(super) enum Mode {
    /// The per-user lock and the order committed in MariaDB under it.
    Sync(Arc<SyncOrders>),
    /// Redis decides and queues; the consumers persist in batches.
    Async(Box<AsyncMode>),
}

impl Mode {
    pub(super) async fn build(
        config: &Config,
        instance: &str,
        deps: &Dependencies,
        workers: &Workers,
        segments: &Arc<SegmentMaps>,
    ) -> anyhow::Result<Self> {
        Ok(match config.seckill.mode {
            SeckillMode::Sync => Self::Sync(Arc::new(SyncOrders::build(&config.seckill, deps, workers))),
            SeckillMode::Async => Self::Async(Box::new(AsyncMode::build(config, instance, deps, segments).await?)),
        })
    }

    /// `sync` or `async`, for logs and metrics labels.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::Sync(_) => "sync",
            Self::Async(_) => "async",
        }
    }

    /// The mode's own background work, owned by `workers`: the consumer
    /// (asynchronous). Group-commit workers start with their voucher's
    /// first order, under the same owner.
    pub(super) fn spawn_workers(&self, workers: &Workers) {
        match self {
            Self::Sync(_) => {}
            Self::Async(mode) => mode.spawn_workers(workers),
        }
    }

    /// One order; `spend`, a guarded voucher's sale path, is spent by it.
    pub(super) async fn place(
        &self,
        user_id: u64,
        voucher_id: u64,
        spend: Option<PathUse>,
    ) -> SeckillResult<PlacedOrder> {
        match self {
            Self::Sync(orders) => orders.place(user_id, voucher_id, spend).await.map(PlacedOrder::committed),
            Self::Async(mode) => mode.place(user_id, voucher_id, spend).await,
        }
    }

    /// Units left for sale, as the mode sells them: the row's (sync) or
    /// Redis's (async); `None` when it cannot tell yet.
    pub(super) async fn units_left(&self, voucher_id: u64) -> SeckillResult<Option<i64>> {
        match self {
            Self::Sync(orders) => orders.units_left(voucher_id).await,
            Self::Async(mode) => mode.units_left(voucher_id).await,
        }
    }

    /// A seckill voucher was created (its stale keys cleared before, in
    /// both modes); never fails the creation.
    pub(super) async fn open_sale(&self, voucher_id: u64) {
        match self {
            Self::Sync(_) => {}
            Self::Async(mode) => mode.open_sale(voucher_id).await,
        }
    }

    /// The voucher's `tb_voucher.status` is committed. Synchronous orders
    /// read it in their transaction; asynchronous ones in Redis.
    pub(super) async fn shelf_changed(&self, voucher_id: u64, status: i64) -> SeckillResult<()> {
        match self {
            Self::Sync(_) => Ok(()),
            Self::Async(mode) => mode.shelf_changed(voucher_id, status).await,
        }
    }

    pub(super) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        match self {
            Self::Sync(orders) => orders.set_stock(voucher_id, stock).await,
            Self::Async(mode) => mode.set_stock(voucher_id, stock).await,
        }
    }

    /// Units came back to the voucher in the transaction on `conn`, which
    /// holds the voucher's row lock (`db_stock`: the row's stock there):
    /// this instance's sold-out memory, or Redis's stock and buyers, learn
    /// it before the lock is let go, so it is taken once.
    pub(super) async fn units_returned(
        &self,
        conn: &mut MySqlConnection,
        voucher_id: u64,
        db_stock: i64,
        users: &[u64],
    ) {
        match self {
            Self::Sync(orders) => orders.units_returned(voucher_id),
            Self::Async(mode) => mode.units_returned(conn, voucher_id, db_stock, users).await,
        }
    }

    /// Each after-sale round: what another instance returned sells here
    /// (sync), what Redis missed is told again (async).
    pub(super) async fn settle(&self) {
        match self {
            Self::Sync(orders) => orders.settle().await,
            Self::Async(mode) => mode.settle().await,
        }
    }

    /// The mode's own gauges for a scrape.
    pub(super) async fn record_metrics(&self) -> redis::RedisResult<()> {
        match self {
            Self::Sync(_) => Ok(()),
            Self::Async(mode) => mode.record_metrics().await,
        }
    }

    /// Group commit's totals, and its workers running now (none in the
    /// asynchronous mode).
    pub(super) fn group_stats(&self) -> (GroupStats, usize) {
        match self {
            Self::Sync(orders) => (orders.group_stats(), orders.workers()),
            Self::Async(_) => (GroupStats::default(), 0),
        }
    }
}
