//! The error vocabulary, written once: the contract's codes, the trait each
//! feature's error speaks them through (its messages stay beside it), and
//! the one failure every feature shares when MariaDB or Redis fails it. A
//! leaf module, so the features and the HTTP edge use the same words
//! without importing each other; the edge maps a code to its status in one
//! table (`http/error.rs`).

use std::fmt;

use hmdp_lock::LockError;
use serde::Serialize;

use crate::{
    dependency::{db_failure, redis_failure},
    ids::IdError,
};

/// Declares the codes once: the enum, the wire spelling, and (for the test
/// that holds docs/api.md to it) the list of them all.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $code:ident = $wire:literal,)*) => {
        /// Every `errorCode` an instance answers with (nginx adds its own
        /// two, `BAD_GATEWAY` and `GATEWAY_TIMEOUT`). Stable: programs read
        /// it, people read `errorMsg`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub(crate) enum ErrorCode {
            $($(#[$doc])* $code,)*
        }

        impl ErrorCode {
            /// As the envelope spells it.
            pub(crate) fn as_str(self) -> &'static str {
                match self {
                    $(Self::$code => $wire,)*
                }
            }

            /// Only for the test: listing every code here would construct
            /// them all and so hide, from the dead-code lint, a code nothing
            /// answers with any more.
            #[cfg(test)]
            pub(crate) const ALL: &[ErrorCode] = &[$(Self::$code,)*];
        }
    };
}

error_codes! {
    Validation = "VALIDATION",
    Unauthorized = "UNAUTHORIZED",
    Forbidden = "FORBIDDEN",
    PathRequired = "PATH_REQUIRED",
    PathInvalid = "PATH_INVALID",
    PathExpired = "PATH_EXPIRED",
    ChallengeInvalid = "CHALLENGE_INVALID",
    NotFound = "NOT_FOUND",
    MethodNotAllowed = "METHOD_NOT_ALLOWED",
    RequestTimeout = "REQUEST_TIMEOUT",
    PayloadTooLarge = "PAYLOAD_TOO_LARGE",
    NotStarted = "NOT_STARTED",
    Ended = "ENDED",
    SoldOut = "SOLD_OUT",
    DuplicateOrder = "DUPLICATE_ORDER",
    OrderExpired = "ORDER_EXPIRED",
    OrderState = "ORDER_STATE",
    IdempotencyInFlight = "IDEMPOTENCY_IN_FLIGHT",
    IdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED",
    TooManyRequests = "TOO_MANY_REQUESTS",
    Unavailable = "UNAVAILABLE",
    Overloaded = "OVERLOADED",
    Internal = "INTERNAL",
}

/// A feature's error as the contract speaks it: its stable code, and its
/// message (`Display`, written beside the variant). The HTTP edge turns
/// any such error into the envelope; `UNAVAILABLE` and `INTERNAL` leave
/// with a fixed message, their cause only logged.
pub(crate) trait Coded: std::error::Error + Send + Sync + 'static {
    fn code(&self) -> ErrorCode;

    /// What a client needs beyond the message: the order a duplicate ran
    /// into, so a client told "failed" after a lost answer can find it.
    fn data(&self) -> Option<String> {
        None
    }

    /// How many seconds to wait before trying again, for a refusal that
    /// says so (`Retry-After`).
    fn retry_after(&self) -> Option<u64> {
        None
    }
}

/// MariaDB or Redis failed a request: unreachable (503, worth a retry) or
/// refused the command (500, a bug or a constraint nobody mapped). Every
/// feature's error carries this one, so the conversions from the
/// dependencies' errors are written here and nowhere else.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Nothing was committed unless the cause says the outcome is unknown.
    #[error("service unavailable: {0:#}")]
    Unavailable(anyhow::Error),
    #[error("internal error: {0:#}")]
    Internal(anyhow::Error),
}

impl Failure {
    pub(crate) fn unavailable(why: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Self {
        Self::Unavailable(anyhow::anyhow!(why))
    }

    pub(crate) fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Internal(err.into())
    }

    fn dependency(unavailable: bool, err: impl Into<anyhow::Error>) -> Self {
        if unavailable { Self::Unavailable(err.into()) } else { Self::Internal(err.into()) }
    }
}

impl Coded for Failure {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Unavailable(_) => ErrorCode::Unavailable,
            Self::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(err: sqlx::Error) -> Self {
        Self::dependency(db_failure(&err), err)
    }
}

impl From<redis::RedisError> for Failure {
    fn from(err: redis::RedisError) -> Self {
        Self::dependency(redis_failure(&err), err)
    }
}

impl From<IdError> for Failure {
    fn from(err: IdError) -> Self {
        Self::dependency(err.is_unavailable(), err)
    }
}

impl From<LockError> for Failure {
    fn from(err: LockError) -> Self {
        Self::dependency(err.is_unavailable(), err)
    }
}

/// Lets `?` turn a dependency's error into `$error` through its
/// `From<Failure>`: the classification above is the only one.
macro_rules! fails_like_a_dependency {
    ($error:ty) => {
        impl From<sqlx::Error> for $error {
            fn from(err: sqlx::Error) -> Self {
                crate::errors::Failure::from(err).into()
            }
        }

        impl From<redis::RedisError> for $error {
            fn from(err: redis::RedisError) -> Self {
                crate::errors::Failure::from(err).into()
            }
        }

        impl From<crate::ids::IdError> for $error {
            fn from(err: crate::ids::IdError) -> Self {
                crate::errors::Failure::from(err).into()
            }
        }

        impl From<hmdp_lock::LockError> for $error {
            fn from(err: hmdp_lock::LockError) -> Self {
                crate::errors::Failure::from(err).into()
            }
        }
    };
}

pub(crate) use fails_like_a_dependency;

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn each_code_is_spelled_on_the_wire_as_the_envelope_and_the_metrics_spell_it() {
        for &code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str(), "{code:?}");
        }
    }
}
