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

/// `items` with the last repeated up to the next power of two (lists of
/// more than `PADDED_MAX` as they are). The IN lists of a group commit
/// (its vouchers, its buyers' pairs) are as long as the group is varied,
/// and each length is a statement text of its own, prepared afresh once
/// the connection's cache (100 texts) is full, which five hundred sales
/// at once made of many groups' statements. In powers of two, seven texts
/// serve each of these statements up to the default group of 64 (the
/// multi-row inserts still vary with the group). A repeated member changes
/// nothing an IN list finds, locks or updates. Past `PADDED_MAX` a padded
/// list would only add range elements for the optimizer to sort through.
const PADDED_MAX: usize = 1_024;

fn padded<T: Copy>(items: &[T]) -> impl Iterator<Item = T> + '_ {
    let last = items.last().copied();
    let padding = if items.len() > PADDED_MAX { 0 } else { items.len().next_power_of_two() - items.len() };
    items.iter().copied().chain(std::iter::repeat_n(last, padding).flatten())
}

#[cfg(test)]
mod padding_tests {
    use super::padded;

    #[test]
    fn a_list_is_padded_with_its_last_member_to_the_next_power_of_two() {
        assert_eq!(padded(&[7_u64]).collect::<Vec<_>>(), vec![7]);
        assert_eq!(padded(&[1_u64, 2, 3]).collect::<Vec<_>>(), vec![1, 2, 3, 3]);
        assert_eq!(padded(&[1_u64, 2, 3, 4]).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(padded(&(1..=33_u64).collect::<Vec<_>>()).count(), 64);
        assert_eq!(padded::<u64>(&[]).count(), 0);
        assert_eq!(padded(&(1..=1_025_u64).collect::<Vec<_>>()).count(), 1_025, "long lists as they are");
    }
}
