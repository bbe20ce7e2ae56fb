//! What can go wrong on the sale path, in its own words; the handlers turn
//! it into the contract's envelope.

use crate::seckill::SeckillError;

/// The sale's own refusals (no such voucher, outside the window, sold
/// out) and its dependencies' failures come as the seckill's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// A guarded voucher's order came without a path.
    #[error("this voucher is ordered with a sale path: POST /voucher-order/seckill/{{id}}/path first")]
    Required,
    /// Not a path of this user for this voucher, or one that placed an
    /// order already.
    #[error("this sale path is not yours, not for this voucher, or used")]
    Invalid,
    #[error("this sale path has expired; ask for another")]
    Expired,
    /// Says what was wrong with the solution.
    #[error("{0}")]
    ChallengeInvalid(&'static str),
    #[error("the waiting line is full; try again later")]
    LineFull,
    /// More path requests from this user than anyone told when to ask
    /// again makes.
    #[error("too many path requests; ask again when told")]
    TooFast,
    #[error(transparent)]
    Seckill(#[from] SeckillError),
}

impl From<sqlx::Error> for PathError {
    fn from(err: sqlx::Error) -> Self {
        Self::Seckill(err.into())
    }
}

impl From<redis::RedisError> for PathError {
    fn from(err: redis::RedisError) -> Self {
        Self::Seckill(err.into())
    }
}
