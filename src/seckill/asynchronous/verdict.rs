//! The order script's answers, named: what placing an order does next
//! reads as words, not as the script's numbers.

/// What `lua/seckill_order.lua` answers, in its numbers' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// 0: a unit taken, the order pending in the stream.
    Accepted,
    /// 1: the voucher's keys are not in Redis (yet, or any more).
    NotLoaded,
    /// 2
    NotStarted,
    /// 3
    Ended,
    /// 4: the user is among the voucher's buyers.
    AlreadyBought,
    /// 5: the buyer's segment (the whole stock, unsegmented) is empty.
    Dry,
    /// 6
    OffShelf,
    /// 7: the sale path was spent by another order.
    PathUsed,
    /// 8: the call reached Redis past its last moment and placed nothing.
    TooLate,
    /// 9: the voucher was split into more segments than the caller knew
    /// of: its segments are read again.
    LayoutChanged,
    /// 10: the buyer's segment is not open yet at the caller's layout (a
    /// split under way, or one whose splitter died).
    Splitting,
    /// A number the script does not answer: a script and a service of
    /// different versions.
    Unknown(i64),
}

impl From<i64> for Verdict {
    fn from(answer: i64) -> Self {
        match answer {
            0 => Self::Accepted,
            1 => Self::NotLoaded,
            2 => Self::NotStarted,
            3 => Self::Ended,
            4 => Self::AlreadyBought,
            5 => Self::Dry,
            6 => Self::OffShelf,
            7 => Self::PathUsed,
            8 => Self::TooLate,
            9 => Self::LayoutChanged,
            10 => Self::Splitting,
            other => Self::Unknown(other),
        }
    }
}
