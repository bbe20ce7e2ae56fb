//! The one error type of the HTTP surface. Every failure, from a bad JSON
//! body to a lost database, ends here and leaves as the contract's envelope.

use axum::{
    extract::rejection::{JsonRejection, PathRejection, QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};

use super::envelope::Envelope;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
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
    #[error("{0}")]
    TooManyRequests(&'static str),
    /// A rate limit; the number is `Retry-After` in seconds.
    #[error("{0}")]
    RateLimited(&'static str, u64),
    /// A dependency (MariaDB, Redis) cannot be reached; the cause is logged.
    #[error("service unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// Anything else; the cause is logged, never sent.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn validation(msg: impl Into<String>) -> Self {
        Self::Validation(msg.into())
    }

    pub fn internal(err: impl Into<anyhow::Error>) -> Self {
        Self::Internal(err.into())
    }

    /// An error of one of the app's own libraries (ids, lock), which knows
    /// whether it means "a dependency is unreachable"; plumbing does not.
    pub fn dependency(unavailable: bool, err: impl Into<anyhow::Error>) -> Self {
        if unavailable { Self::Unavailable(err.into()) } else { Self::Internal(err.into()) }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Validation(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotStarted | Self::Ended | Self::SoldOut | Self::DuplicateOrder(_) => StatusCode::CONFLICT,
            Self::TooManyRequests(_) | Self::RateLimited(..) => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
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
            Self::TooManyRequests(_) | Self::RateLimited(..) => "TOO_MANY_REQUESTS",
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
        if let Self::RateLimited(_, retry_after) = &self {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, (*retry_after).into());
        }
        response
    }
}

/// Every database and Redis error that reaches a handler's answer passes
/// through the conversions below, so they are counted here, by kind.
fn count_dependency_error(dependency: &'static str, unavailable: bool) {
    let kind = if unavailable { "unavailable" } else { "error" };
    metrics::counter!("hmdp_dependency_errors_total", "dependency" => dependency, "kind" => kind).increment(1);
}

impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> Self {
        let unavailable = matches!(
            err,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_)
        );
        count_dependency_error("database", unavailable);
        match err {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
                Self::Unavailable(err.into())
            }
            other => Self::Internal(other.into()),
        }
    }
}

impl From<redis::RedisError> for ApiError {
    fn from(err: redis::RedisError) -> Self {
        let unavailable = redis_unreachable(&err);
        count_dependency_error("redis", unavailable);
        Self::dependency(unavailable, err)
    }
}

/// Redis could not be reached or did not answer in time, as opposed to a
/// command that Redis refused.
pub fn redis_unreachable(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_timeout() || err.is_connection_refusal()
}

/// The unique index a statement ran into, by name. MariaDB reports it only
/// in the message (`Duplicate entry '1-2' for key 'uk_user_voucher'`;
/// MySQL 8 writes `'tb_voucher_order.uk_user_voucher'`), with error 1062.
pub fn unique_violation(err: &sqlx::Error) -> Option<String> {
    let db = err.as_database_error()?;
    if db.code().as_deref() != Some("23000") || !db.message().starts_with("Duplicate entry") {
        return None;
    }
    let (_, tail) = db.message().rsplit_once(" for key '")?;
    let key = tail.strip_suffix('\'')?;
    Some(key.rsplit('.').next().unwrap_or(key).to_owned())
}

/// Maps a violation of the unique index `index` to `to`, where the statement
/// that can run into it is made (realworld-axum-sqlx's `on_constraint`):
/// the index is named by the code that knows what it means.
pub trait ResultExt<T> {
    fn on_unique(self, index: &str, to: impl FnOnce() -> ApiError) -> ApiResult<T>;
}

impl<T> ResultExt<T> for Result<T, sqlx::Error> {
    fn on_unique(self, index: &str, to: impl FnOnce() -> ApiError) -> ApiResult<T> {
        self.map_err(|err| if unique_violation(&err).as_deref() == Some(index) { to() } else { err.into() })
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
