//! How orders are placed (the mode, the deadline both modes keep, and a
//! group of each mode's own), and what every order carries (its id block,
//! its time to pay). The strategy lab takes `SeckillSettings`
//! only: it runs the service's order paths, not its after-sale.

use clap::{Args, ValueEnum};

use super::asynchronous::AsyncSettings;

const DEFAULT_REQUEST_DEADLINE_MS: u64 = 10_000;
const DEFAULT_LOCK_WATCHDOG_TTL_MS: u64 = 30_000;
const DEFAULT_ORDER_BATCH_MAX: usize = 64;
const DEFAULT_ORDER_BATCH_WAIT_MS: u64 = 0;
const DEFAULT_ORDER_BATCH_WORKER_IDLE_MS: u64 = 60_000;
const DEFAULT_ORDER_BATCH_WORKERS: u64 = 1;
const DEFAULT_HOT_ROW_PERMITS: usize = 8;
/// As many as the instance serves at once (`MAX_IN_FLIGHT`): a crowd at
/// the opening instant all wants the one voucher, and a group of 64 commits
/// in a few milliseconds, so a queue this long empties within about a
/// second; 4,096 turned thousands of buyers away while units remained.
const DEFAULT_HOT_ROW_QUEUE_MAX: usize = 12_000;
const DEFAULT_ORDER_PAY_TIMEOUT_S: u64 = 900;
const DEFAULT_ORDER_ID_BLOCK: u32 = 100;

/// Order ids one UTC day can hold (the sequence's 32 bits).
pub const IDS_PER_DAY: u64 = 1 << 32;
/// Instances the id generator's bound is made for: each may drop up to a
/// block a second (what is left of it when the second turns).
pub const MAX_INSTANCES: u64 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeckillMode {
    Sync,
    Async,
}

/// How orders are placed: the mode, what both modes share, and each
/// mode's own group, read by that mode alone.
#[derive(Clone, Debug, Args)]
pub struct SeckillSettings {
    /// `sync`: an order is decided and committed in MariaDB before the
    /// answer. `async`: decided in Redis by one script, answered at once,
    /// persisted in batches by the consumers. Chosen once, at start-up.
    #[arg(id = "seckill_mode", long = "seckill-mode", env = "SECKILL_MODE", value_enum, default_value_t = SeckillMode::Sync)]
    pub mode: SeckillMode,

    /// How long an order may take before it gives up, answered 503 with
    /// nothing committed; 100 to 25,000. Shorter than nginx's
    /// `proxy_read_timeout` (30 s), so that the client hears the truth
    /// rather than nginx's 504.
    #[arg(long, env = "REQUEST_DEADLINE_MS", default_value_t = DEFAULT_REQUEST_DEADLINE_MS)]
    pub request_deadline_ms: u64,

    #[command(flatten)]
    pub sync: SyncSettings,

    #[command(flatten)]
    pub asynchronous: AsyncSettings,
}

impl Default for SeckillSettings {
    fn default() -> Self {
        Self {
            mode: SeckillMode::Sync,
            request_deadline_ms: DEFAULT_REQUEST_DEADLINE_MS,
            sync: SyncSettings::default(),
            asynchronous: AsyncSettings::default(),
        }
    }
}

/// The synchronous mode's settings (`seckill/sync/`): the per-user lock,
/// group commit and the hot row's gate.
#[derive(Clone, Debug, Args)]
pub struct SyncSettings {
    /// Synchronous mode: the lease of the per-user order lock, renewed every
    /// third of it while held (Redisson's 30 s); at least 100. Shorter frees
    /// a crashed instance's locks sooner and costs more renewals.
    #[arg(long, env = "LOCK_WATCHDOG_TTL_MS", default_value_t = DEFAULT_LOCK_WATCHDOG_TTL_MS)]
    pub lock_watchdog_ttl_ms: u64,

    /// Synchronous mode: orders committed in one transaction at most, of
    /// one voucher or of several vouchers on sale at the same time, 1 to
    /// 5,000 (1: one transaction per order, the course's design).
    #[arg(long, env = "ORDER_BATCH_MAX", default_value_t = DEFAULT_ORDER_BATCH_MAX)]
    pub order_batch_max: usize,

    /// Synchronous mode: group-commit workers of one instance, 1 to 64,
    /// each for the vouchers whose id leaves one remainder. More
    /// commit several vouchers' groups side by side; fewer put more orders
    /// in each transaction. One voucher's orders always go to one worker.
    /// One by default: on the 2-core box, 50 and 500 vouchers opening
    /// together sold faster with one worker than with four (docs/history.md,
    /// "Why one worker"); a database with
    /// cores to spare may do better with more.
    #[arg(long, env = "ORDER_BATCH_WORKERS", default_value_t = DEFAULT_ORDER_BATCH_WORKERS)]
    pub order_batch_workers: u64,

    /// Synchronous mode: how long a group waits for more orders before it
    /// commits, at most 1,000. 0: it takes what is ready; while one group
    /// commits, the next gathers by itself.
    #[arg(long, env = "ORDER_BATCH_WAIT_MS", default_value_t = DEFAULT_ORDER_BATCH_WAIT_MS)]
    pub order_batch_wait_ms: u64,

    /// Synchronous mode: a group-commit worker that saw no order for this
    /// long ends (the next order starts another), so that ended sales leave
    /// no idle tasks behind; at least 100.
    #[arg(long, env = "ORDER_BATCH_WORKER_IDLE_MS", default_value_t = DEFAULT_ORDER_BATCH_WORKER_IDLE_MS)]
    pub order_batch_worker_idle_ms: u64,

    /// Synchronous mode: how many order transactions of one instance may
    /// wait on one voucher's stock row at once. InnoDB's throughput on a hot
    /// row collapses when hundreds of transactions queue on its lock; a few
    /// at a time keep it busy without the collapse. Only at
    /// `ORDER_BATCH_MAX` = 1: with group commit, one worker of each
    /// instance is all that reaches a voucher's row.
    #[arg(long, env = "HOT_ROW_PERMITS", default_value_t = DEFAULT_HOT_ROW_PERMITS)]
    pub hot_row_permits: usize,

    /// Synchronous mode: orders of one instance that may wait for one
    /// voucher's row (or for their group) at once; beyond that an order is
    /// answered 503 `OVERLOADED` with `Retry-After` at once.
    #[arg(long, env = "HOT_ROW_QUEUE_MAX", default_value_t = DEFAULT_HOT_ROW_QUEUE_MAX)]
    pub hot_row_queue_max: usize,
}

impl Default for SyncSettings {
    fn default() -> Self {
        Self {
            lock_watchdog_ttl_ms: DEFAULT_LOCK_WATCHDOG_TTL_MS,
            order_batch_max: DEFAULT_ORDER_BATCH_MAX,
            order_batch_wait_ms: DEFAULT_ORDER_BATCH_WAIT_MS,
            order_batch_worker_idle_ms: DEFAULT_ORDER_BATCH_WORKER_IDLE_MS,
            order_batch_workers: DEFAULT_ORDER_BATCH_WORKERS,
            hot_row_permits: DEFAULT_HOT_ROW_PERMITS,
            hot_row_queue_max: DEFAULT_HOT_ROW_QUEUE_MAX,
        }
    }
}

impl SeckillSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(100..=25_000).contains(&self.request_deadline_ms) {
            anyhow::bail!("REQUEST_DEADLINE_MS must be between 100 and 25000 (nginx waits 30 s)");
        }
        self.sync.validate()?;
        self.asynchronous.validate()
    }
}

impl SyncSettings {
    fn validate(&self) -> anyhow::Result<()> {
        if self.lock_watchdog_ttl_ms < 100 {
            anyhow::bail!("LOCK_WATCHDOG_TTL_MS must be at least 100");
        }
        if self.hot_row_permits == 0 {
            anyhow::bail!("HOT_ROW_PERMITS must be at least 1");
        }
        if self.order_batch_max > 1 && self.hot_row_permits != DEFAULT_HOT_ROW_PERMITS {
            tracing::warn!(
                hot_row_permits = self.hot_row_permits,
                order_batch_max = self.order_batch_max,
                "HOT_ROW_PERMITS has no effect with group commit (ORDER_BATCH_MAX > 1): one worker of each instance reaches a voucher's row"
            );
        }
        if self.hot_row_queue_max == 0 {
            anyhow::bail!("HOT_ROW_QUEUE_MAX must be at least 1");
        }
        if self.order_batch_max == 0 || self.order_batch_max > 5_000 {
            anyhow::bail!("ORDER_BATCH_MAX must be between 1 and 5000");
        }
        if self.order_batch_wait_ms > 1_000 {
            anyhow::bail!("ORDER_BATCH_WAIT_MS must be at most 1000");
        }
        if !(1..=64).contains(&self.order_batch_workers) {
            anyhow::bail!("ORDER_BATCH_WORKERS must be between 1 and 64");
        }
        if self.order_batch_worker_idle_ms < 100 {
            anyhow::bail!("ORDER_BATCH_WORKER_IDLE_MS must be at least 100");
        }
        Ok(())
    }
}

/// What every order of the service carries.
#[derive(Clone, Debug, Args)]
pub struct OrderSettings {
    /// An unpaid order not paid within this many seconds of its creation
    /// (`payDeadline`) is cancelled and its unit returned, by a sweep every
    /// instance runs each second (unpaid orders past their deadline, on
    /// `idx_unpaid`, voucher by voucher under the voucher's row lock, so
    /// that two sweeps never cancel an order twice); 1 to 604,800.
    #[arg(long, env = "ORDER_PAY_TIMEOUT_S", default_value_t = DEFAULT_ORDER_PAY_TIMEOUT_S)]
    pub order_pay_timeout_s: u64,

    /// Order id sequences reserved per Redis round trip (1: one reservation
    /// per id); at most 1553, so that 16 instances, each dropping what is
    /// left of a block every second of a day, leave half of the day's 2^32
    /// ids to orders.
    #[arg(long, env = "ORDER_ID_BLOCK", default_value_t = DEFAULT_ORDER_ID_BLOCK)]
    pub(crate) order_id_block: u32,
}

impl Default for OrderSettings {
    fn default() -> Self {
        Self { order_pay_timeout_s: DEFAULT_ORDER_PAY_TIMEOUT_S, order_id_block: DEFAULT_ORDER_ID_BLOCK }
    }
}

impl OrderSettings {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        // Each instance may drop what is left of a block every second of
        // the day; with the most instances, that waste must leave at least
        // half of a day's ids to real orders.
        let max_block = IDS_PER_DAY / 2 / (86_400 * MAX_INSTANCES);
        if self.order_id_block == 0 || u64::from(self.order_id_block) > max_block {
            anyhow::bail!(
                "ORDER_ID_BLOCK must be between 1 and {max_block}: {} instances, each dropping up to a block a second, must leave half of a day's {} ids to orders",
                MAX_INSTANCES,
                IDS_PER_DAY
            );
        }
        if !(1..=7 * 24 * 3_600).contains(&self.order_pay_timeout_s) {
            anyhow::bail!("ORDER_PAY_TIMEOUT_S must be between 1 and 604800 (a week)");
        }
        Ok(())
    }
}
