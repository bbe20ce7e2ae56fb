//! What can go wrong with an order, in the seckill's own words. The
//! handlers turn it into the contract's envelope (`routes.rs`); the domain
//! never speaks HTTP.

use hmdp_lock::LockError;

use crate::{
    dependency::{db_failure, redis_failure},
    ids::IdError,
};

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
    #[error("the stock is too large")]
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
    /// The sale path came with an order before, which it placed.
    #[error("this sale path was used already")]
    PathUsed,
    /// The user's lock is held by another of their orders.
    #[error("another order of yours is in progress")]
    InProgress,
    /// So many orders already wait for this voucher on this instance that
    /// one more would only wait out its deadline; nothing was tried.
    #[error("{0}")]
    Busy(&'static str),
    /// MariaDB or Redis cannot be reached, or
    /// the order ran out of time before its commit: nothing was committed
    /// unless the cause says the outcome is unknown.
    #[error("service unavailable: {0:#}")]
    Unavailable(anyhow::Error),
    #[error("internal error: {0:#}")]
    Internal(anyhow::Error),
}

pub type SeckillResult<T> = Result<T, SeckillError>;

impl SeckillError {
    pub(crate) fn unavailable(why: &'static str) -> Self {
        Self::Unavailable(anyhow::anyhow!(why))
    }

    pub(crate) fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Internal(err.into())
    }

    fn dependency(unavailable: bool, err: impl Into<anyhow::Error>) -> Self {
        if unavailable { Self::Unavailable(err.into()) } else { Self::Internal(err.into()) }
    }

    /// The order stopped before its commit: its lock was lost or its
    /// deadline passed. Nothing was committed.
    pub(crate) fn lock_lost() -> Self {
        Self::unavailable("the order lost its lock or ran out of time before the commit; nothing was committed")
    }
}

impl From<sqlx::Error> for SeckillError {
    fn from(err: sqlx::Error) -> Self {
        Self::dependency(db_failure(&err), err)
    }
}

impl From<redis::RedisError> for SeckillError {
    fn from(err: redis::RedisError) -> Self {
        Self::dependency(redis_failure(&err), err)
    }
}

impl From<IdError> for SeckillError {
    fn from(err: IdError) -> Self {
        Self::dependency(err.is_unavailable(), err)
    }
}

impl From<LockError> for SeckillError {
    fn from(err: LockError) -> Self {
        Self::dependency(err.is_unavailable(), err)
    }
}
