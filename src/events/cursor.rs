//! Where the relay's next read of the outbox starts.
//!
//! A read from the outbox's first row steps over every row deleted since
//! InnoDB's purge last caught up: they stay in the index, delete-marked,
//! until it does, and under a sale that is thousands of rows every round.
//! So a round reads from a floor instead, below which every `seq` is
//! published or will never hold a row.
//!
//! A `seq` the reads have passed without returning it is a gap: a
//! transaction that took its `seq` and has not committed, or one that
//! rolled back (auto-increment values are not handed out again). Below
//! the first row a relay reads, everything is a gap until asked about:
//! it may have been published by the relay before, or not yet committed.
//! The floor stays at the oldest gap until it fills. A gap open for
//! `GAP_SETTLE` is asked about with a locking read that does not wait
//! (`LOCK IN SHARE MODE NOWAIT`): a transaction still holding a `seq` in
//! it makes the read fail, and the gap is asked about again later;
//! otherwise what it holds is committed and read next, and the rest of it
//! stays empty for good.

use std::time::{Duration, Instant};

/// How long a gap waits before it is asked about: far longer than a
/// statement takes between taking its `seq` and writing its row. (No
/// statement on the outbox locks a gap an insert could wait on: the
/// relay's reads do not lock, its deletes lock the rows they name, and
/// the check before a `failed` event is a plain read. Should a row still
/// come in below the floor, the relay finds it within a second: it reads
/// from the first row again when the oldest row is below its floor.)
pub(super) const GAP_SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(super) struct Cursor {
    /// Where the next read starts.
    floor: u64,
    /// Past the newest row read so far (0: nothing read yet).
    past: u64,
    /// The oldest row read and left in the outbox, to be read again.
    left: Option<u64>,
    /// `seq`s passed without a row, oldest first.
    gaps: Vec<Gap>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Gap {
    from: u64,
    to: u64,
    seen: Instant,
}

impl Cursor {
    pub(super) fn floor(&self) -> u64 {
        self.floor
    }

    /// After a round that read `read` (ascending, each at or above the
    /// floor) and left `left` in the outbox (not acknowledged, or an
    /// order's later event). `cut_off`: the read stopped at its limit, so
    /// rows past the newest it returned were not seen this time, among
    /// them rows an earlier round read and left.
    pub(super) fn advance(&mut self, read: &[u64], left: &[u64], cut_off: bool, now: Instant) {
        let mut gaps: Vec<Gap> = Vec::with_capacity(self.gaps.len() + 1);
        for gap in &self.gaps {
            let mut from = gap.from;
            let inside = read.partition_point(|&s| s < gap.from)..read.partition_point(|&s| s <= gap.to);
            for &seq in &read[inside] {
                if seq > from {
                    gaps.push(Gap { from, to: seq - 1, seen: gap.seen });
                }
                from = seq + 1;
            }
            if from <= gap.to {
                gaps.push(Gap { from, to: gap.to, seen: gap.seen });
            }
        }
        let mut next = self.past;
        for &seq in read.iter().filter(|&&s| s >= self.past) {
            if seq > next {
                gaps.push(Gap { from: next, to: seq - 1, seen: now });
            }
            next = seq + 1;
        }
        self.past = next;
        gaps.sort_unstable_by_key(|g| g.from);
        self.gaps = gaps;
        self.left = left.iter().copied().min();
        if cut_off && let Some(&newest) = read.last() {
            self.left = Some(self.left.map_or(newest + 1, |lowest| lowest.min(newest + 1)));
        }
        self.settle();
    }

    /// Gaps open for `GAP_SETTLE` or longer: (from, to).
    pub(super) fn settled_gaps(&self, now: Instant) -> Vec<(u64, u64)> {
        self.gaps.iter().filter(|g| now.duration_since(g.seen) >= GAP_SETTLE).map(|g| (g.from, g.to)).collect()
    }

    /// `from..=to` was asked about and no transaction holds any of it: it
    /// holds `rows`, committed, and nothing else ever.
    pub(super) fn found(&mut self, from: u64, to: u64, rows: &[u64]) {
        let mut gaps = Vec::with_capacity(self.gaps.len() + 1);
        for gap in &self.gaps {
            if gap.from < from {
                gaps.push(Gap { to: gap.to.min(from - 1), ..*gap });
            }
            if gap.to > to {
                gaps.push(Gap { from: gap.from.max(to + 1), ..*gap });
            }
        }
        self.gaps = gaps;
        if let Some(lowest) = rows.iter().copied().filter(|s| (from..=to).contains(s)).min() {
            self.left = Some(self.left.map_or(lowest, |left| left.min(lowest)));
        }
        self.settle();
    }

    fn settle(&mut self) {
        let gap = self.gaps.first().map(|g| g.from);
        self.floor = [self.left, gap, Some(self.past)].into_iter().flatten().min().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled(start: Instant) -> Instant {
        start + GAP_SETTLE + Duration::from_millis(1)
    }

    #[test]
    fn the_floor_passes_what_was_read_and_taken_out() {
        let mut cursor = Cursor::default();
        let now = Instant::now();
        cursor.advance(&[0, 1, 2, 3], &[], false, now);
        assert_eq!(cursor.floor(), 4);
        cursor.advance(&[4, 5], &[5], false, now);
        assert_eq!(cursor.floor(), 5, "an event left in the outbox is read again");
        cursor.advance(&[], &[], false, now);
        assert_eq!(cursor.floor(), 6, "5 was taken out by the round that read nothing");
    }

    #[test]
    fn the_floor_waits_at_a_gap_until_it_fills() {
        let mut cursor = Cursor::default();
        let now = Instant::now();
        cursor.advance(&[0, 1, 4, 5], &[], false, now);
        assert_eq!(cursor.floor(), 2, "2 and 3 may belong to a transaction not yet committed");
        cursor.advance(&[6], &[], false, now);
        assert_eq!(cursor.floor(), 2, "a read that does not fill the gap leaves the floor at it");
        assert!(cursor.settled_gaps(now).is_empty());
        cursor.advance(&[2, 3, 7], &[], false, now + Duration::from_millis(10));
        assert_eq!(cursor.floor(), 8, "the gap filled; 4 to 6 were taken out before");
    }

    #[test]
    fn a_gap_found_empty_is_passed_and_one_still_held_is_kept() {
        let mut cursor = Cursor::default();
        let start = Instant::now();
        cursor.advance(&[0, 3, 4, 8], &[], false, start);
        assert_eq!(cursor.floor(), 1);
        let later = settled(start);
        cursor.advance(&[9], &[], false, later);
        assert_eq!(cursor.settled_gaps(later), vec![(1, 2), (5, 7)], "each as old as its first sight");
        cursor.found(1, 2, &[]);
        assert_eq!(cursor.floor(), 5, "past the empty gap, up to the next one");
        cursor.found(5, 7, &[6]);
        assert_eq!(cursor.floor(), 6, "6 committed meanwhile: it is read next");
        cursor.advance(&[6, 10], &[], false, later);
        assert_eq!(cursor.floor(), 11, "5 and 7 are empty for good, 8 and 9 were read");
        assert!(cursor.settled_gaps(later).is_empty());
    }

    #[test]
    fn what_lies_below_a_relays_first_read_is_a_gap_until_asked_about() {
        let mut cursor = Cursor::default();
        let start = Instant::now();
        cursor.advance(&[100, 101], &[], false, start);
        assert_eq!(cursor.floor(), 0, "0 to 99: published by a relay before, or not committed yet");
        assert_eq!(cursor.settled_gaps(settled(start)), vec![(0, 99)]);
        cursor.found(0, 99, &[42]);
        assert_eq!(cursor.floor(), 42);
        cursor.advance(&[42], &[], false, settled(start));
        assert_eq!(cursor.floor(), 102);
    }

    #[test]
    fn rows_past_a_read_cut_off_at_its_limit_are_read_again() {
        let mut cursor = Cursor::default();
        let now = Instant::now();
        cursor.advance(&[0, 1, 2, 3], &[0, 1, 2, 3], false, now);
        assert_eq!(cursor.floor(), 0, "nothing acknowledged");
        // The broker is back; this read stops at its limit, at 2.
        cursor.advance(&[0, 1, 2], &[], true, now);
        assert_eq!(cursor.floor(), 3, "3 was left by the round before and not read this time");
        cursor.advance(&[3, 4], &[], false, now);
        assert_eq!(cursor.floor(), 5);
    }

    #[test]
    fn a_gap_partly_filled_keeps_its_age() {
        let mut cursor = Cursor::default();
        let start = Instant::now();
        cursor.advance(&[0, 5], &[], false, start);
        cursor.advance(&[2], &[], false, start + Duration::from_millis(500));
        assert_eq!(cursor.floor(), 1);
        assert_eq!(cursor.settled_gaps(settled(start)), vec![(1, 1), (3, 4)]);
    }
}
