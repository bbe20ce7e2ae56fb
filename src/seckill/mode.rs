//! The one seam between the two modes: the mode is chosen here, once, at
//! start-up, and each call that differs by mode `match`es on it in one
//! place (the service, `service.rs`, and the hooks below, which the
//! after-sale calls too), then goes straight into the mode's own function. Each mode
//! builds itself in its own folder (`sync/`, `asynchronous/`).

use std::{sync::Arc, time::Duration};

use sqlx::MySqlConnection;

use super::{
    asynchronous::AsyncMode,
    error::SeckillResult,
    model::OrderView,
    order::{self, Rows},
    parts::{Dependencies, Workers},
    sync::SyncOrders,
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
    ) -> anyhow::Result<Self> {
        Ok(match config.seckill.mode {
            SeckillMode::Sync => {
                let deadline = Duration::from_millis(config.seckill.request_deadline_ms);
                Self::Sync(Arc::new(SyncOrders::build(&config.seckill.sync, deadline, deps, workers)))
            }
            SeckillMode::Async => Self::Async(Box::new(AsyncMode::build(config, instance, deps).await?)),
        })
    }

    /// `sync` or `async`, for logs and metrics labels.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::Sync(_) => "sync",
            Self::Async(_) => "async",
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

    /// The order if it exists and belongs to `user_id`: its row, or (the
    /// asynchronous mode) wherever the order is on its way, pending in
    /// Redis, its row, or a dead letter.
    pub(super) async fn find_owned(
        &self,
        rows: Rows<'_>,
        order_id: i64,
        user_id: u64,
    ) -> SeckillResult<Option<OrderView>> {
        match self {
            Self::Sync(_) => order::owned_row(rows, order_id, user_id).await,
            Self::Async(mode) => mode.find_owned(rows, order_id, user_id).await,
        }
    }

    /// The user's orders accepted but not yet rows, newest first: none in
    /// the synchronous mode, which answers after the commit.
    pub(super) async fn pending_of(&self, user_id: u64) -> SeckillResult<Vec<OrderView>> {
        match self {
            Self::Sync(_) => Ok(Vec::new()),
            Self::Async(mode) => mode.pending_of(user_id).await,
        }
    }
}
