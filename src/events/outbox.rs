//! The outbox the order paths write through. Whether it is written is
//! decided once, at start-up (`ORDER_EVENTS`); a path calls it the same
//! either way, in the transaction that makes the change.

use std::sync::Arc;

use sqlx::MySqlConnection;
use tokio::sync::Notify;

use super::{
    change::{Change, OrderCreated},
    store,
};

/// Whether the order paths write their events, and the relay of this
/// instance they wake when they do; held by each path.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    written: bool,
    relay: Option<Arc<Notify>>,
}

impl Outbox {
    pub(crate) fn new(written: bool, relay: Option<Arc<Notify>>) -> Self {
        Self { written, relay }
    }

    /// Before the commit: the relay waits a little before it reads, and a
    /// commit it misses is found by its next read.
    fn wake_relay(&self) {
        if let Some(relay) = &self.relay {
            relay.notify_one();
        }
    }

    /// Orders just inserted on `conn`, of one voucher or of several: one
    /// statement for all, so a group over fifty vouchers writes its events
    /// as cheaply as a group over one.
    pub(crate) async fn created(&self, conn: &mut MySqlConnection, orders: &[OrderCreated]) -> sqlx::Result<()> {
        if !self.written || orders.is_empty() {
            return Ok(());
        }
        store::insert_created(conn, orders).await?;
        self.wake_relay();
        Ok(())
    }

    /// Orders whose status was just changed on `conn`, read back from their
    /// rows there (the transaction sees its own update); those not in the
    /// change's status get none.
    pub(crate) async fn changed(
        &self,
        conn: &mut MySqlConnection,
        change: Change,
        order_ids: &[i64],
    ) -> sqlx::Result<()> {
        if !self.written || order_ids.is_empty() {
            return Ok(());
        }
        store::insert_changed(conn, change, order_ids).await?;
        self.wake_relay();
        Ok(())
    }

    /// Orders recorded `FAILED` of one voucher: (order id, user id). They
    /// have no row, so their buyers come with them. One the outbox still
    /// holds is not written twice, so a caller unsure whether its commit
    /// landed records it again.
    pub(crate) async fn failed(
        &self,
        conn: &mut MySqlConnection,
        voucher_id: u64,
        orders: &[(i64, u64)],
    ) -> sqlx::Result<()> {
        if !self.written || orders.is_empty() {
            return Ok(());
        }
        store::insert_failed(conn, voucher_id, orders).await?;
        self.wake_relay();
        Ok(())
    }
}
