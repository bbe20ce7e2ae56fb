//! The paths an order can take. A behaviour common to them is written once,
//! as an `async fn(OrderPath)`, and run on each by `on_every_path!` (or on
//! the synchronous two by `on_both_sync_paths!`, beside this in the crate's
//! root): one test per path, named `<behaviour>::<path>`.

use hmdp::{Config, config::SeckillMode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderPath {
    /// Synchronous, each voucher's ready orders committed together.
    Grouped,
    /// Synchronous, the course's one transaction per order
    /// (`ORDER_BATCH_MAX=1`).
    OneTransaction,
    /// Redis decides, the consumers persist in batches; recovery bounds
    /// short enough for a test.
    Async,
}

impl OrderPath {
    pub fn configure(self, config: &mut Config) {
        let seckill = &mut config.seckill;
        match self {
            Self::Grouped => seckill.mode = SeckillMode::Sync,
            Self::OneTransaction => {
                seckill.mode = SeckillMode::Sync;
                seckill.sync.order_batch_max = 1;
            }
            Self::Async => {
                seckill.mode = SeckillMode::Async;
                seckill.asynchronous.async_claim_idle_ms = 300;
                seckill.asynchronous.async_max_deliveries = 2;
            }
        }
    }

    pub fn mode(self) -> SeckillMode {
        match self {
            Self::Grouped | Self::OneTransaction => SeckillMode::Sync,
            Self::Async => SeckillMode::Async,
        }
    }

    pub fn is_async(self) -> bool {
        self == Self::Async
    }
}
