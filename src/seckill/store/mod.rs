//! Every statement on `tb_seckill_voucher`, `tb_voucher_order` and
//! `tb_seckill_path_use`, once, a file a table (the orders' in two: placed
//! and found, and their life after the sale).
//! The order paths (the card's transaction, group commit, the asynchronous
//! consumer and its recovery, the order views, reconciliation) differ in
//! how they combine these statements, never in the statements themselves,
//! so a change to the tables is a change here.
//!
//! Functions take any executor: a pool for a lone read, `&mut *tx` inside
//! a transaction.

mod after_sale;
mod orders;
mod padding;
mod paths;
#[cfg(test)]
mod plans;
mod sale;

pub(super) use after_sale::*;
pub use orders::UNIQUE_ORDER_INDEX;
pub(super) use orders::*;
pub(super) use paths::*;
pub use sale::insert_sale;
pub(super) use sale::*;
