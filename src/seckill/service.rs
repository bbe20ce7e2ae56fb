//! The seckill service: one value, built at start-up in its mode, that the
//! handlers call without knowing the mode. Each call that differs by mode
//! chooses here, in one `match`, and goes straight into the mode's own
//! function.

use std::sync::Arc;

use hmdp_lock::LockService;
use hmdp_redis::Redis;
use hmdp_segments::{SlotOwners, choose_tags};
use sqlx::MySqlPool;

use super::{
    aftersale::AfterSale,
    error::SeckillResult,
    mode::Mode,
    model::{OrderView, PathUse, PlacedOrder, StockSet},
    order,
    parts::{Dependencies, Workers},
    stale, store,
    sync::GroupStats,
};
use crate::{config::Config, keys::Keys};

/// The seckill service: a sub-state handlers take with `State<Seckill>`.
/// Cheap to clone; the mode is fixed when it is built.
#[derive(Clone)]
pub struct Seckill(Arc<Service>);

struct Service {
    mode: Arc<Mode>,
    db: MySqlPool,
    replica: Option<MySqlPool>,
    redis: Redis,
    keys: Keys,
    locks: LockService,
    /// Payment, cancellation, refund, redemption and the unpaid timeout.
    aftersale: Arc<AfterSale>,
    /// Owns every background task of the service.
    workers: Workers,
}

impl Seckill {
    /// Builds the service in `config.seckill.mode`; its background work
    /// starts with `start`.
    pub(crate) async fn build(config: &Config, instance: &str, deps: Dependencies) -> anyhow::Result<Self> {
        let workers = Workers::default();
        let mode = Arc::new(Mode::build(config, instance, &deps, &workers).await?);
        let Dependencies { db, replica, redis, keys, locks, outbox, .. } = deps;
        let aftersale = Arc::new(AfterSale {
            db: db.clone(),
            pay_timeout_s: config.orders.order_pay_timeout_s,
            outbox,
            mode: mode.clone(),
        });
        Ok(Self(Arc::new(Service { mode, db, replica, redis, keys, locks, aftersale, workers })))
    }

    /// `sync` or `async`, for logs and metrics labels.
    pub(crate) fn mode(&self) -> &'static str {
        self.0.mode.name()
    }

    /// Starts the background work: the asynchronous mode's consumer (the
    /// synchronous mode's group-commit workers start with their voucher's
    /// first order, under the same owner), and in both modes the
    /// unpaid-order sweep.
    pub(crate) fn start(&self) {
        if let Mode::Async(mode) = &*self.0.mode {
            mode.spawn_workers(&self.0.workers);
        }
        let aftersale = self.0.aftersale.clone();
        self.0.workers.spawn(|stop| aftersale.run_sweeper(stop));
    }

    /// Stops every background task and waits for it: the consumer finishes
    /// its batch, group-commit workers answer what still waits.
    pub(crate) async fn shutdown(&self) {
        let groups = self.group_stats();
        if groups.groups > 0 {
            tracing::info!(?groups, mean = groups.committed as f64 / groups.groups as f64, "group commit totals");
        }
        self.0.workers.stop().await;
    }

    /// One order; `spend`, a guarded voucher's sale path, is spent by it
    /// (`None` for a voucher without a guard): a path places one order at
    /// most. Here the mode is chosen: the synchronous order takes its
    /// user's lock and updates the stock row, the asynchronous one runs the
    /// order script.
    pub async fn place(&self, user_id: u64, voucher_id: u64, spend: Option<PathUse>) -> SeckillResult<PlacedOrder> {
        match &*self.0.mode {
            Mode::Sync(orders) => orders.place(user_id, voucher_id, spend).await.map(PlacedOrder::committed),
            Mode::Async(mode) => mode.place(user_id, voucher_id, spend).await,
        }
    }

    /// The live order the user holds for the voucher, if any: what an
    /// earlier attempt whose answer was lost may have placed. The
    /// asynchronous order script finds its buyer before the stock, so only
    /// the synchronous mode, whose stock gate answers first, looks.
    pub(crate) async fn held_order(&self, user_id: u64, voucher_id: u64) -> SeckillResult<Option<i64>> {
        match &*self.0.mode {
            Mode::Sync(_) => Ok(store::held_order(&self.0.db, user_id, voucher_id).await?),
            Mode::Async(_) => Ok(None),
        }
    }

    /// Units left for sale, as the mode sells them: the row's (sync) or
    /// Redis's (async); `None` when it cannot tell yet. A hint for those
    /// asking to buy (the order itself decides).
    pub(crate) async fn units_left(&self, voucher_id: u64) -> SeckillResult<Option<i64>> {
        match &*self.0.mode {
            Mode::Sync(orders) => orders.units_left(voucher_id).await,
            Mode::Async(mode) => mode.units_left(voucher_id).await,
        }
    }

    /// Before a new seckill voucher's rows are committed: its segments'
    /// hash tags are chosen, for masters of their own on a Redis Cluster
    /// (segment 0's is the voucher id), and whatever another voucher left
    /// under them is cleared (an error fails the creation, with nothing
    /// created). Returns the tags of segments 1.., which the
    /// row records so that every instance finds the same keys.
    pub async fn prepare_sale(&self, voucher_id: u64, segments: u8) -> SeckillResult<Vec<String>> {
        let owners = SlotOwners::read(&mut self.0.redis.clone()).await;
        let tags = choose_tags(voucher_id, usize::from(segments.max(1)), &owners);
        stale::clear(&self.0.redis, &self.0.keys, voucher_id, &tags).await?;
        Ok(tags.into_iter().skip(1).collect())
    }

    /// A seckill voucher was created: in the asynchronous mode its keys are
    /// loaded and the consumers start reading its stream. Only a head
    /// start: the first order loads what is missing, so a failure here is
    /// logged and the creation still succeeds (answering 503 for a voucher
    /// that exists would make the admin create it twice).
    pub async fn open_sale(&self, voucher_id: u64) {
        if let Mode::Async(mode) = &*self.0.mode {
            mode.open_sale(voucher_id).await;
        }
    }

    /// A voucher went on or off the shelf (its `tb_voucher.status` is
    /// committed). The synchronous orders read the status in their
    /// transaction; the asynchronous ones in Redis, which learns it here.
    pub(crate) async fn shelf_changed(&self, voucher_id: u64, status: i64) -> SeckillResult<()> {
        match &*self.0.mode {
            Mode::Sync(_) => Ok(()),
            Mode::Async(mode) => mode.shelf_changed(voucher_id, status).await,
        }
    }

    /// The admin's stock route: `stock` units for sale from now on, in
    /// MariaDB and (asynchronous mode) Redis alike.
    pub(crate) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        match &*self.0.mode {
            Mode::Sync(orders) => orders.set_stock(voucher_id, stock).await,
            Mode::Async(mode) => mode.set_stock(voucher_id, stock).await,
        }
    }

    /// The order if it exists and belongs to `user_id`, in whichever state.
    /// The buyer polls this right after ordering: a replica that does not
    /// have the row yet is followed by the primary, so an order the buyer
    /// was told about is never "not found".
    pub(crate) async fn find_order(&self, order_id: i64, user_id: u64) -> SeckillResult<Option<OrderView>> {
        let rows = order::Rows { primary: &self.0.db, replica: self.0.replica.as_ref() };
        let found = self.0.mode.find_owned(rows, order_id, user_id).await?;
        Ok(found.map(|order| order.with_terms(self.0.aftersale.pay_timeout())))
    }

    /// Payment, cancellation, refund and redemption: the order routes
    /// take it as a sub-state of its own.
    pub(crate) fn after_sale(&self) -> Arc<AfterSale> {
        self.0.aftersale.clone()
    }

    /// One page of the user's orders, newest first, and how many in all.
    pub(crate) async fn orders_of(
        &self,
        user_id: u64,
        page: u32,
        per_page: u32,
    ) -> SeckillResult<(Vec<OrderView>, u64)> {
        // Rows may lag a moment behind the orders (the replica's delay);
        // pending orders (asynchronous mode) come from Redis, checked
        // against the primary.
        let pending = self.0.mode.pending_of(user_id).await?;
        let rows = order::Rows { primary: &self.0.db, replica: self.0.replica.as_ref() };
        let (orders, total) = order::page_owned(rows, pending, user_id, page, per_page).await?;
        let terms = self.0.aftersale.pay_timeout();
        Ok((orders.into_iter().map(|o| o.with_terms(terms)).collect(), total))
    }

    /// The per-user lock service of the synchronous mode.
    pub fn locks(&self) -> &LockService {
        &self.0.locks
    }

    pub fn group_stats(&self) -> GroupStats {
        match &*self.0.mode {
            Mode::Sync(orders) => orders.group_stats(),
            Mode::Async(_) => GroupStats::default(),
        }
    }

    /// Group-commit workers running now (0 in the asynchronous mode).
    pub fn group_workers(&self) -> usize {
        match &*self.0.mode {
            Mode::Sync(orders) => orders.workers(),
            Mode::Async(_) => 0,
        }
    }

    /// Records the mode's own gauges for a scrape: the order streams' length,
    /// pending entries and lag in the asynchronous mode.
    pub(crate) async fn record_metrics(&self) -> redis::RedisResult<()> {
        match &*self.0.mode {
            Mode::Sync(_) => Ok(()),
            Mode::Async(mode) => mode.record_metrics().await,
        }
    }
}
