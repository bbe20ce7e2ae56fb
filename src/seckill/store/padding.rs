//! IN lists of a few lengths, so that a handful of statement texts serve
//! every group commit.

/// Lists longer than this are not padded.
const PADDED_MAX: usize = 1_024;

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
pub(super) fn padded<T: Copy>(items: &[T]) -> impl Iterator<Item = T> + '_ {
    let last = items.last().copied();
    let padding = if items.len() > PADDED_MAX { 0 } else { items.len().next_power_of_two() - items.len() };
    items.iter().copied().chain(std::iter::repeat_n(last, padding).flatten())
}

#[cfg(test)]
mod tests {
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
