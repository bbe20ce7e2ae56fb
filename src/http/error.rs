//! The one error type of the HTTP surface. Every failure, from a bad JSON
//! body to a lost database, ends here and leaves as the contract's envelope.

use axum::{
    extract::rejection::{JsonRejection, PathRejection, QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};

use super::envelope::Envelope;
use crate::dependency::{db_failure, redis_failure};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    Unauthorized(&'static str),
    #[error("admin key missing or wrong")]
    Forbidden,
    #[error("{0}")]
    NotFound(&'static str),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the sale has not started")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("sold out")]
    SoldOut,
    /// With the id of the order the user holds, when it is known.
    #[error("you already hold an order for this voucher")]
    DuplicateOrder(Option<i64>),
    #[error("the order's payment deadline has passed")]
    OrderExpired,
    #[error("{0}")]
    OrderState(&'static str),
    /// The same `Idempotency-Key` while its first request still runs.
    #[error("a request with this Idempotency-Key is still running; retry shortly")]
    IdempotencyInFlight,
    /// The same `Idempotency-Key` with another request.
    #[error("this Idempotency-Key was used for another request")]
    IdempotencyKeyReused,
    /// A guarded voucher ordered without its sale path.
    #[error("this voucher is ordered with a sale path: POST /voucher-order/seckill/{{voucherId}}/path first")]
    PathRequired,
    /// Another user's or voucher's path, a forged one, or one already used.
    #[error("this sale path is not yours, not for this voucher, or used")]
    PathInvalid,
    #[error("this sale path has expired; ask for another")]
    PathExpired,
    /// A wrong, expired, foreign or replayed solution; says which.
    #[error("{0}")]
    ChallengeInvalid(&'static str),
    #[error("{0}")]
    TooManyRequests(&'static str),
    /// A rate limit; the number is `Retry-After` in seconds.
    #[error("{0}")]
    RateLimited(&'static str, u64),
    /// The instance, or a voucher's queue on it, holds all it can: told at
    /// once with `Retry-After`, before any work, so a retry is safe.
    #[error("{0}; retry after a second")]
    Overloaded(&'static str),
    /// A dependency (MariaDB, Redis) cannot be reached; the cause is logged.
    #[error("service unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// Anything else; the cause is logged, never sent.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// A shed request comes back after this long: by then a crowd the instance
/// could not hold has mostly been answered (a sale of 20,000 units sells out
/// in about three seconds on two instances).
const OVERLOADED_RETRY_AFTER_S: u64 = 1;

impl ApiError {
    pub(crate) fn validation(msg: impl Into<String>) -> Self {
        Self::Validation(msg.into())
    }

    pub(crate) fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Internal(err.into())
    }

    /// An error of one of the app's own libraries (ids, lock), which knows
    /// whether it means "a dependency is unreachable"; plumbing does not.
    pub(crate) fn dependency(unavailable: bool, err: impl Into<anyhow::Error>) -> Self {
        if unavailable { Self::Unavailable(err.into()) } else { Self::Internal(err.into()) }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::Validation(_) | Self::ChallengeInvalid(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden | Self::PathRequired | Self::PathInvalid | Self::PathExpired => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotStarted
            | Self::Ended
            | Self::SoldOut
            | Self::DuplicateOrder(_)
            | Self::OrderExpired
            | Self::OrderState(_)
            | Self::IdempotencyInFlight => StatusCode::CONFLICT,
            Self::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::TooManyRequests(_) | Self::RateLimited(..) => StatusCode::TOO_MANY_REQUESTS,
            Self::Overloaded(_) | Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::Validation(_) => "VALIDATION",
            Self::Unauthorized(_) => "UNAUTHORIZED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound(_) => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::NotStarted => "NOT_STARTED",
            Self::Ended => "ENDED",
            Self::SoldOut => "SOLD_OUT",
            Self::DuplicateOrder(_) => "DUPLICATE_ORDER",
            Self::OrderExpired => "ORDER_EXPIRED",
            Self::OrderState(_) => "ORDER_STATE",
            Self::IdempotencyInFlight => "IDEMPOTENCY_IN_FLIGHT",
            Self::IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            Self::PathRequired => "PATH_REQUIRED",
            Self::PathInvalid => "PATH_INVALID",
            Self::PathExpired => "PATH_EXPIRED",
            Self::ChallengeInvalid(_) => "CHALLENGE_INVALID",
            Self::TooManyRequests(_) | Self::RateLimited(..) => "TOO_MANY_REQUESTS",
            Self::Overloaded(_) => "OVERLOADED",
            Self::Unavailable(_) => "UNAVAILABLE",
            Self::Internal(_) => "INTERNAL",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            Self::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "request failed")
            }
            Self::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "dependency unavailable")
            }
            _ => {}
        }
        // The order a duplicate ran into, so a client told "failed" after a
        // lost answer can find it. Order ids are strings on the wire.
        let data = match &self {
            Self::DuplicateOrder(Some(id)) => Some(id.to_string()),
            _ => None,
        };
        let body = Envelope::failure(self.to_string(), self.code(), data);
        let mut response = (self.status(), body).into_response();
        let retry_after = match &self {
            Self::RateLimited(_, seconds) => Some(*seconds),
            Self::Overloaded(_) => Some(OVERLOADED_RETRY_AFTER_S),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        Self::dependency(db_failure(&err), err)
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        Self::dependency(redis_failure(&err), err)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let msg = match &rejection {
            JsonRejection::MissingJsonContentType(_) => "expected a body with content-type application/json".to_owned(),
            other => other.body_text(),
        };
        Self::Validation(msg)
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::Validation(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::Validation(rejection.body_text())
    }
}
