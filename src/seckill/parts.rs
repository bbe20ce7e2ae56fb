//! What the seckill is built from, and the owner of its background work.
//! A leaf of the seckill: each mode builds itself from these in its own
//! folder, so neither imports the service that holds it.

use std::future::Future;

use hmdp_lock::LockService;
use hmdp_redis::{Redis, hot::HotKeys};
use sqlx::MySqlPool;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{events::Outbox, ids::OrderIdGenerator, keys::Keys};

/// What the seckill is built from besides the settings; shared with the
/// rest of the app.
pub(crate) struct Dependencies {
    pub(crate) db: MySqlPool,
    /// A replica for the reads that may lag (`DATABASE_READ_URL`).
    pub(crate) replica: Option<MySqlPool>,
    pub(crate) redis: Redis,
    pub(crate) keys: Keys,
    pub(crate) order_ids: OrderIdGenerator,
    pub(crate) locks: LockService,
    /// Where each change of an order writes its event (or nothing, with
    /// `ORDER_EVENTS=off`).
    pub(crate) outbox: Outbox,
    /// The hash tags found hot: the asynchronous mode splits a hot voucher.
    pub(crate) hot_keys: HotKeys,
}

/// The owner of every background task of the seckill (the consumer, the
/// group-commit workers, the unpaid-order sweep): each is spawned here,
/// watches `stop`, and is waited for at shutdown.
#[derive(Clone, Default)]
pub(crate) struct Workers {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Workers {
    pub(crate) fn spawn<F>(&self, task: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task(self.stop.clone()));
    }

    /// For work that spawns its own tasks later (a voucher's group-commit
    /// worker starts with its first order).
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    pub(crate) fn tracker(&self) -> TaskTracker {
        self.tasks.clone()
    }

    /// Cancels every task and waits for it to finish what it holds.
    pub(crate) async fn stop(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
