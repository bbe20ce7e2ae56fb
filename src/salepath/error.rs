//! What can go wrong on the sale path, in its own words and codes; the
//! handlers hand it to the HTTP edge as it is.

use crate::{
    errors::{Coded, ErrorCode, Failure, fails_like_a_dependency},
    seckill::SeckillError,
};

/// The sale's own refusals (no such voucher, outside the window, sold
/// out) and its dependencies' failures come as the seckill's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// A guarded voucher's order came without a path.
    #[error("this voucher is ordered with a sale path: POST /voucher-order/seckill/{{voucherId}}/path first")]
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

fails_like_a_dependency!(PathError);

impl From<Failure> for PathError {
    fn from(failure: Failure) -> Self {
        Self::Seckill(failure.into())
    }
}

impl Coded for PathError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Required => ErrorCode::PathRequired,
            Self::Invalid => ErrorCode::PathInvalid,
            Self::Expired => ErrorCode::PathExpired,
            Self::ChallengeInvalid(_) => ErrorCode::ChallengeInvalid,
            Self::LineFull | Self::TooFast => ErrorCode::TooManyRequests,
            Self::Seckill(err) => err.code(),
        }
    }

    fn data(&self) -> Option<String> {
        match self {
            Self::Seckill(err) => err.data(),
            _ => None,
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::TooFast => Some(1),
            Self::Seckill(err) => err.retry_after(),
            _ => None,
        }
    }
}
