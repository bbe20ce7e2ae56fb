//! The seckill service: one value, built at start-up in its mode, that the
//! handlers call without knowing the mode.

use std::{sync::Arc, time::Duration};

use hmdp_redis::{Redis, ReplicaBarrier};
use sqlx::MySqlPool;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use hmdp_lock::LockService;

use super::{
    admission::VoucherGates,
    aftersale::AfterSale,
    asynchronous::{self, AsyncOrders, CONSUMER_BLOCK, Consumer, ReplicaWait},
    error::SeckillResult,
    model::{OrderView, PlacedOrder, StockSet},
    order,
    sync::{GroupCommitter, GroupStats, SyncOrders},
};
use crate::{
    config::{Config, SeckillMode},
    connect::connect_redis_with,
    ids::OrderIdGenerator,
    keys::Keys,
};

/// The seckill service: a sub-state handlers take with `State<Seckill>`.
/// Cheap to clone; the mode is fixed when it is built.
#[derive(Clone)]
pub struct Seckill(Arc<Service>);

struct Service {
    mode: Mode,
    db: MySqlPool,
    replica: Option<MySqlPool>,
    redis: Redis,
    keys: Keys,
    locks: LockService,
    /// Payment, cancellation, refund, redemption and the unpaid timeout.
    aftersale: Arc<AfterSale>,
    /// Cancelled at shutdown; every background task of the service (the
    /// consumer, the group-commit workers) watches it and is tracked here.
    stop: CancellationToken,
    tasks: TaskTracker,
}

enum Mode {
    Sync(Arc<SyncOrders>),
    Async { orders: Box<AsyncOrders>, consumer: Box<Consumer> },
}

/// What the seckill is built from besides the settings; shared with the
/// rest of the app.
pub(crate) struct Dependencies {
    pub db: MySqlPool,
    /// A replica for the reads that may lag (`DATABASE_READ_URL`).
    pub replica: Option<MySqlPool>,
    pub redis: Redis,
    pub keys: Keys,
    pub order_ids: OrderIdGenerator,
    pub locks: LockService,
}

impl Seckill {
    /// Builds the service in `config.seckill.mode`, the one place the mode
    /// is chosen. The asynchronous mode's consumer gets a Redis connection
    /// of its own; it starts with `start`.
    pub(crate) async fn build(config: &Config, instance: &str, deps: Dependencies) -> anyhow::Result<Self> {
        let Dependencies { db, replica, redis, keys, order_ids, locks } = deps;
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let gates = VoucherGates::new(config.seckill.hot_row_permits, config.seckill.hot_row_queue_max);
        let sync_gates = matches!(config.seckill.mode, SeckillMode::Sync).then(|| gates.clone());
        let deadline = Duration::from_millis(config.seckill.request_deadline_ms);
        let mode = match config.seckill.mode {
            SeckillMode::Sync => Mode::Sync(Arc::new(SyncOrders {
                group_commit: (config.seckill.order_batch_max > 1).then(|| {
                    GroupCommitter::new(
                        db.clone(),
                        config.seckill.order_batch_max,
                        Duration::from_millis(config.seckill.order_batch_wait_ms),
                        Duration::from_millis(config.seckill.order_batch_worker_idle_ms),
                        stop.clone(),
                        tasks.clone(),
                    )
                }),
                db: db.clone(),
                gates,
                locks: locks.clone(),
                order_ids,
                keys: keys.clone(),
                deadline,
            })),
            SeckillMode::Async => {
                // Blocking reads would hold up every command behind them on a
                // shared connection; the response timeout outlasts the block.
                let blocking = connect_redis_with(&config.redis, CONSUMER_BLOCK + Duration::from_secs(2)).await?;
                let claim_idle = Duration::from_millis(config.seckill.async_claim_idle_ms);
                let consumer = Consumer {
                    db: db.clone(),
                    blocking,
                    redis: redis.clone(),
                    keys: keys.clone(),
                    name: instance.to_owned(),
                    batch_max: config.seckill.async_batch_max,
                    claim_idle,
                    retire_after: Duration::from_millis(config.seckill.async_retire_after_ms),
                    recovery: asynchronous::Recovery {
                        db: db.clone(),
                        redis: redis.clone(),
                        keys: keys.clone(),
                        name: instance.to_owned(),
                        page: config.seckill.async_batch_max,
                        claim_idle,
                        max_deliveries: config.seckill.async_max_deliveries,
                    },
                };
                let acks = replica_acks(config.seckill.order_replica_acks, &mut redis.clone()).await;
                let replica_wait = ReplicaWait {
                    acks,
                    timeout: Duration::from_millis(config.seckill.order_replica_wait_ms),
                    // WAIT blocks its connection: the waiting orders get their own.
                    barrier: ReplicaBarrier::new(if acks > 0 {
                        connect_redis_with(&config.redis, Duration::from_secs(2)).await?
                    } else {
                        redis.clone()
                    }),
                    short: Default::default(),
                };
                let orders = AsyncOrders {
                    db: db.clone(),
                    redis: redis.clone(),
                    keys: keys.clone(),
                    order_ids,
                    gates,
                    deadline,
                    replica_wait,
                    verified: Default::default(),
                };
                Mode::Async { orders: Box::new(orders), consumer: Box::new(consumer) }
            }
        };
        let aftersale = Arc::new(AfterSale {
            db: db.clone(),
            redis: redis.clone(),
            keys: keys.clone(),
            pay_timeout_s: config.seckill.order_pay_timeout_s,
            asynchronous: matches!(mode, Mode::Async { .. }),
            gates: sync_gates,
            owed: Default::default(),
        });
        Ok(Self(Arc::new(Service { mode, db, replica, redis, keys, locks, aftersale, stop, tasks })))
    }

    /// `sync` or `async`, for logs and metrics labels.
    pub fn mode(&self) -> &'static str {
        match self.0.mode {
            Mode::Sync(_) => "sync",
            Mode::Async { .. } => "async",
        }
    }

    /// Starts the background work: the asynchronous consumer, and in both
    /// modes the unpaid-order sweep.
    /// Group-commit workers start with their voucher's first order.
    pub(crate) fn start(&self) {
        if let Mode::Async { consumer, .. } = &self.0.mode {
            self.0.tasks.spawn(Consumer::clone(consumer).run(self.0.stop.clone()));
        }
        self.0.tasks.spawn(self.0.aftersale.clone().run_sweeper(self.0.stop.clone()));
    }

    /// Stops every background task and waits for it: the consumer finishes
    /// its batch, group-commit workers answer what still waits.
    pub(crate) async fn shutdown(&self) {
        let groups = self.group_stats();
        if groups.groups > 0 {
            tracing::info!(?groups, mean = groups.committed as f64 / groups.groups as f64, "group commit totals");
        }
        self.0.stop.cancel();
        self.0.tasks.close();
        self.0.tasks.wait().await;
    }

    /// One order for a known user; returns its id. The strategy lab drives
    /// the service through here.
    pub async fn place(&self, user_id: u64, voucher_id: u64) -> SeckillResult<PlacedOrder> {
        match &self.0.mode {
            Mode::Sync(orders) => orders.place(user_id, voucher_id).await.map(PlacedOrder::committed),
            Mode::Async { orders, .. } => orders.place(user_id, voucher_id).await,
        }
    }

    /// A seckill voucher is being created, its row not yet committed: in
    /// the asynchronous mode whatever Redis held under its id goes. An
    /// error here fails the creation, with nothing created.
    pub async fn prepare_sale(&self, voucher_id: u64) -> SeckillResult<()> {
        match &self.0.mode {
            Mode::Sync(_) => Ok(()),
            Mode::Async { orders, .. } => orders.clear_stale(voucher_id).await,
        }
    }

    /// A seckill voucher was created: in the asynchronous mode its keys are
    /// loaded and the consumers start reading its stream. Only a head
    /// start: the first order loads what is missing, so a failure here is
    /// logged and the creation still succeeds (answering 503 for a voucher
    /// that exists would make the admin create it twice).
    pub async fn open_sale(&self, voucher_id: u64) {
        if let Mode::Async { orders, .. } = &self.0.mode
            && let Err(err) = orders.load(voucher_id).await
            && !matches!(err, super::error::SeckillError::Ended)
        {
            tracing::warn!(voucher_id, error = %err, "loading a new voucher's keys failed; its first order loads them");
        }
    }

    /// A voucher went on or off the shelf (its `tb_voucher.status` is
    /// committed). The synchronous orders read the status in their
    /// transaction; the asynchronous ones in Redis, which learns it here.
    pub(crate) async fn shelf_changed(&self, voucher_id: u64, status: i64) -> SeckillResult<()> {
        match &self.0.mode {
            Mode::Sync(_) => Ok(()),
            Mode::Async { .. } => {
                asynchronous::shelf_changed(&mut self.0.redis.clone(), &self.0.keys, voucher_id, status).await
            }
        }
    }

    /// The admin's stock route: `stock` units for sale from now on, in
    /// MariaDB and (asynchronous mode) Redis alike.
    pub(crate) async fn set_stock(&self, voucher_id: u64, stock: i32) -> SeckillResult<StockSet> {
        match &self.0.mode {
            Mode::Sync(orders) => orders.set_stock(voucher_id, stock).await,
            Mode::Async { orders, .. } => orders.set_stock(voucher_id, stock).await,
        }
    }

    /// The order if it exists and belongs to `user_id`, in whichever state.
    /// The buyer polls this right after ordering: a replica that does not
    /// have the row yet is followed by the primary, so an order the buyer
    /// was told about is never "not found".
    pub(crate) async fn find_order(&self, order_id: i64, user_id: u64) -> SeckillResult<Option<OrderView>> {
        let rows = order::Rows { primary: &self.0.db, replica: self.0.replica.as_ref() };
        let found = order::find_owned(rows, &mut self.0.redis.clone(), &self.0.keys, order_id, user_id).await?;
        Ok(found.map(|order| order.with_terms(self.0.aftersale.pay_timeout())))
    }

    /// The owner pays an unpaid order before its deadline (`payType` 1
    /// balance, 2 Alipay, 3 WeChat).
    pub(crate) async fn pay(&self, order_id: i64, user_id: u64, pay_type: u8) -> SeckillResult<OrderView> {
        self.0.aftersale.confirm_payment(order_id, Some(user_id), pay_type).await
    }

    pub(crate) async fn cancel(&self, order_id: i64, user_id: u64) -> SeckillResult<OrderView> {
        self.0.aftersale.cancel(order_id, user_id).await
    }

    pub(crate) async fn refund(&self, order_id: i64, user_id: u64) -> SeckillResult<OrderView> {
        self.0.aftersale.refund(order_id, user_id).await
    }

    /// The shop redeems a paid order (admin).
    pub(crate) async fn redeem(&self, order_id: i64) -> SeckillResult<OrderView> {
        self.0.aftersale.redeem(order_id).await
    }

    /// One page of the user's orders, newest first, and how many in all.
    pub(crate) async fn orders_of(
        &self,
        user_id: u64,
        page: u32,
        per_page: u32,
    ) -> SeckillResult<(Vec<OrderView>, u64)> {
        // Rows may lag a moment behind the orders (the replica's delay);
        // pending orders come from Redis, checked against the primary.
        let rows = order::Rows { primary: &self.0.db, replica: self.0.replica.as_ref() };
        let (orders, total) =
            order::list_owned(rows, &mut self.0.redis.clone(), &self.0.keys, user_id, page, per_page).await?;
        let terms = self.0.aftersale.pay_timeout();
        Ok((orders.into_iter().map(|o| o.with_terms(terms)).collect(), total))
    }

    /// The per-user lock service of the synchronous mode.
    pub fn locks(&self) -> &LockService {
        &self.0.locks
    }

    pub fn group_stats(&self) -> GroupStats {
        match &self.0.mode {
            Mode::Sync(orders) => orders.group_stats(),
            Mode::Async { .. } => GroupStats::default(),
        }
    }

    /// Group-commit workers running now (0 in the asynchronous mode).
    pub fn group_workers(&self) -> usize {
        match &self.0.mode {
            Mode::Sync(orders) => orders.workers(),
            Mode::Async { .. } => 0,
        }
    }

    /// Records the mode's own gauges for a scrape: the order streams' length,
    /// pending entries and lag in the asynchronous mode.
    pub(crate) async fn record_metrics(&self) -> redis::RedisResult<()> {
        match &self.0.mode {
            Mode::Sync(_) => Ok(()),
            Mode::Async { .. } => asynchronous::record_stream_metrics(&mut self.0.redis.clone(), &self.0.keys).await,
        }
    }
}

/// How many replicas an asynchronous order waits for: the setting, or 1
/// when every master has a replica now (a cluster made with
/// `--cluster-replicas 1`), else none: a `WAIT` no replica can answer would
/// only make every order wait out its bound.
async fn replica_acks(setting: Option<u32>, redis: &mut Redis) -> u32 {
    let acks = match setting {
        Some(acks) => acks,
        None => match redis.fewest_replicas().await {
            Ok(fewest) => u32::from(fewest >= 1),
            Err(err) => {
                tracing::warn!(error = %err, "could not count the Redis replicas; orders will not wait for one");
                0
            }
        },
    };
    tracing::info!(acks, "asynchronous orders wait for this many Redis replicas before a 200");
    acks
}
