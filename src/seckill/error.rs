//! What can go wrong with an order, in the seckill's own words and codes:
//! the message beside each variant, the contract's code in `code` below.
//! The handlers hand it to the HTTP edge as it is; the domain never speaks
//! HTTP.

use crate::errors::{Coded, ErrorCode, Failure, fails_like_a_dependency};

#[derive(Debug, thiserror::Error)]
pub enum SeckillError {
    #[error("no such seckill voucher")]
    NoSuchVoucher,
    #[error("the sale has not started")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("sold out")]
    SoldOut,
    /// The voucher was taken off the shelf (`tb_voucher.status` not 1).
    #[error("the voucher is off the shelf")]
    OffShelf,
    /// With the id of the order the user holds, when it is known.
    #[error("you already hold an order for this voucher")]
    DuplicateOrder(Option<i64>),
    /// A stock the row cannot hold once the orders awaiting persistence
    /// are added to it.
    #[error("stock plus the orders awaiting persistence must stay within {max}", max = i32::MAX)]
    StockOutOfRange,
    /// No such order of this user (or, for the shop, at all).
    #[error("no such order")]
    NoSuchOrder,
    /// Paying an unpaid order after its deadline.
    #[error("the order's payment deadline has passed")]
    OrderExpired,
    /// A transition the order's state does not allow; says which.
    #[error("{0}")]
    OrderState(&'static str),
    /// The sale path came with an order before, which it placed: to the
    /// buyer, the same as any path that is not theirs to use.
    #[error("this sale path is not yours, not for this voucher, or used")]
    PathUsed,
    /// The user's lock is held by another of their orders.
    #[error("another order of yours is in progress")]
    InProgress,
    /// So many orders already wait for this voucher on this instance that
    /// one more would only wait out its deadline; nothing was tried.
    #[error("{0}; retry after a second")]
    Busy(&'static str),
    /// MariaDB or Redis failed the order, or it ran out of time before its
    /// commit: nothing was committed unless the cause says the outcome is
    /// unknown.
    #[error(transparent)]
    Failed(#[from] Failure),
}

pub type SeckillResult<T> = Result<T, SeckillError>;

fails_like_a_dependency!(SeckillError);

impl Coded for SeckillError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::NoSuchVoucher | Self::OffShelf | Self::NoSuchOrder => ErrorCode::NotFound,
            Self::NotStarted => ErrorCode::NotStarted,
            Self::Ended => ErrorCode::Ended,
            Self::SoldOut => ErrorCode::SoldOut,
            Self::DuplicateOrder(_) => ErrorCode::DuplicateOrder,
            Self::StockOutOfRange => ErrorCode::Validation,
            Self::OrderExpired => ErrorCode::OrderExpired,
            Self::OrderState(_) => ErrorCode::OrderState,
            Self::PathUsed => ErrorCode::PathInvalid,
            Self::InProgress => ErrorCode::TooManyRequests,
            Self::Busy(_) => ErrorCode::Overloaded,
            Self::Failed(failure) => failure.code(),
        }
    }

    fn data(&self) -> Option<String> {
        match self {
            Self::DuplicateOrder(Some(id)) => Some(id.to_string()),
            _ => None,
        }
    }
}

impl SeckillError {
    pub(crate) fn unavailable(why: &'static str) -> Self {
        Self::Failed(Failure::unavailable(why))
    }

    pub(crate) fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Failed(Failure::internal(err))
    }

    /// The order stopped before its commit: its lock was lost or its
    /// deadline passed. Nothing was committed.
    pub(crate) fn lock_lost() -> Self {
        Self::unavailable("the order lost its lock or ran out of time before the commit; nothing was committed")
    }

    /// The commit may have happened or not: its answer was lost. 503, and
    /// the order's own route tells which.
    pub(crate) fn outcome_unknown(why: anyhow::Error) -> Self {
        Self::Failed(Failure::Unavailable(why))
    }

    /// MariaDB or Redis could not be reached (503), as opposed to any other
    /// failure or refusal.
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, Self::Failed(Failure::Unavailable(_)))
    }

    /// The contract's code for this error, as the order route answers it:
    /// the strategy lab counts refusals by it.
    pub fn error_code(&self) -> &'static str {
        self.code().as_str()
    }
}
