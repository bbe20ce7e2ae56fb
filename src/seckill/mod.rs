//! Placing seckill orders and showing them to their owners. One service,
//! built at start-up in its mode; the handlers call it without knowing
//! which. Where an order goes, by folder and file:
//!
//! - `sync/`: the per-user lock and the order committed under it, alone or
//!   with the voucher's other ready orders (`group_commit`), behind the
//!   sale window, the sold-out flag and the hot-row gate each instance
//!   keeps per voucher (`admission`);
//! - `asynchronous/`: one Redis script decides and queues the order; the
//!   consumer persists the queue in batches, recovery takes over idle
//!   entries and dead letters, reconcile compares Redis with MariaDB; a
//!   voucher's segments (`segments`), each a set of its keys under a hash
//!   tag of its own, read from its row once;
//! - `store`: every statement on the seckill and order tables;
//! - `model`: the order as its owner sees it; `order` finds its row;
//! - `service`: the `Seckill` service, built once in its mode;
//! - `routes`: the HTTP handlers of an order after it is placed;
//! - `error`: `SeckillError`, its messages and codes.

mod aftersale;
mod asynchronous;
mod error;
mod mode;
mod model;
mod order;
mod parts;
pub(crate) mod routes;
mod service;
mod stale;
mod store;
mod sync;

pub(crate) use aftersale::AfterSale;
pub use asynchronous::{Reconciliation, reconcile};
pub use error::{SeckillError, SeckillResult};
pub(crate) use model::OrderView;
pub use model::PathUse;
pub(crate) use model::PlacedOrder;
pub(crate) use model::StockSet;
pub(crate) use parts::Dependencies;
pub(crate) use routes::routes;
pub(crate) use service::Seckill;
pub use store::{UNIQUE_ORDER_INDEX, insert_sale};
