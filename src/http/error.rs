//! The one error type of the HTTP surface. Every failure, from a bad JSON
//! body to a lost database, ends here and leaves as the contract's envelope.
//! It knows only what HTTP itself knows (validation, auth, limits,
//! idempotency, unknown routes); a feature's error comes with its own code
//! and message (`crate::errors::Coded`), and the status of every code is
//! the one table below.

use axum::{
    extract::rejection::{BytesRejection, FailedToBufferBody, PathRejection, QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
};

use super::envelope::Envelope;
use crate::errors::{Coded, ErrorCode, Failure, fails_like_a_dependency};

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
    /// The body paused longer than `BODY_TIMEOUT_MS`, or was not whole
    /// within `BODY_DEADLINE_MS`.
    #[error("the request body did not arrive in time; send it whole")]
    RequestTimeout,
    /// The body is past the limit every route has.
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The same `Idempotency-Key` while its first request still runs.
    #[error("a request with this Idempotency-Key is still running; retry shortly")]
    IdempotencyInFlight,
    /// The same `Idempotency-Key` with another request.
    #[error("this Idempotency-Key was used for another request")]
    IdempotencyKeyReused,
    /// A rate limit; the number is `Retry-After` in seconds.
    #[error("{0}")]
    RateLimited(&'static str, u64),
    /// The instance holds all it can: told at once with `Retry-After`,
    /// before any work, so a retry is safe.
    #[error("{0}; retry after a second")]
    Overloaded(&'static str),
    /// A feature's own error, with the code and message written beside it;
    /// also MariaDB or Redis failing (`Failure`).
    #[error("{0}")]
    Feature(Box<dyn Coded>),
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// Bodies of this API are small JSON documents; anything larger is a mistake
/// or an attack, answered 413 (`with_plumbing` applies the limit).
pub(crate) const BODY_LIMIT: usize = 64 * 1024;

/// A shed request comes back after this long: by then a crowd the instance
/// could not hold has mostly been answered (a sale of 20,000 units sells out
/// in about three seconds on two instances).
const OVERLOADED_RETRY_AFTER_S: u64 = 1;

/// The status of every code: the one table.
fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Validation | ErrorCode::ChallengeInvalid => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden | ErrorCode::PathRequired | ErrorCode::PathInvalid | ErrorCode::PathExpired => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::NotStarted
        | ErrorCode::Ended
        | ErrorCode::SoldOut
        | ErrorCode::DuplicateOrder
        | ErrorCode::OrderExpired
        | ErrorCode::OrderState
        | ErrorCode::IdempotencyInFlight => StatusCode::CONFLICT,
        ErrorCode::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Overloaded | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl<E: Coded> From<E> for ApiError {
    fn from(err: E) -> Self {
        Self::Feature(Box::new(err))
    }
}

fails_like_a_dependency!(ApiError);

impl ApiError {
    pub(crate) fn validation(msg: impl Into<String>) -> Self {
        Self::Validation(msg.into())
    }

    pub(crate) fn internal(err: impl Into<anyhow::Error>) -> Self {
        Failure::internal(err).into()
    }

    /// A dependency that cannot be reached; `cause` is logged, never sent.
    pub(crate) fn unavailable(cause: anyhow::Error) -> Self {
        Failure::Unavailable(cause).into()
    }

    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Self::Validation(_) => ErrorCode::Validation,
            Self::Unauthorized(_) => ErrorCode::Unauthorized,
            Self::Forbidden => ErrorCode::Forbidden,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            Self::RequestTimeout => ErrorCode::RequestTimeout,
            Self::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            Self::IdempotencyInFlight => ErrorCode::IdempotencyInFlight,
            Self::IdempotencyKeyReused => ErrorCode::IdempotencyKeyReused,
            Self::RateLimited(..) => ErrorCode::TooManyRequests,
            Self::Overloaded(_) => ErrorCode::Overloaded,
            Self::Feature(err) => err.code(),
        }
    }

    /// For people: a failure's cause is logged, never sent.
    fn message(&self) -> String {
        match self.code() {
            ErrorCode::Unavailable => "service unavailable".to_owned(),
            ErrorCode::Internal => "internal error".to_owned(),
            _ => self.to_string(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited(_, seconds) => Some(*seconds),
            Self::Feature(err) => err.retry_after(),
            _ => None,
        }
        .or((self.code() == ErrorCode::Overloaded).then_some(OVERLOADED_RETRY_AFTER_S))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        match code {
            ErrorCode::Internal => tracing::error!(error = %self, "request failed"),
            ErrorCode::Unavailable => tracing::warn!(error = %self, "dependency unavailable"),
            _ => {}
        }
        let data = match &self {
            Self::Feature(err) => err.data(),
            _ => None,
        };
        let body = Envelope::failure(self.message(), code, data);
        let mut response = (status_of(code), body).into_response();
        if let Some(seconds) = self.retry_after() {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        // The rest of such a body was never read: the connection closes
        // after the answer instead of waiting for it (a trickle would hold
        // it while it drained).
        if matches!(code, ErrorCode::RequestTimeout | ErrorCode::PayloadTooLarge) {
            let close = axum::http::HeaderValue::from_static("close");
            response.headers_mut().insert(axum::http::header::CONNECTION, close);
        }
        response
    }
}

/// The door hands on only whole bodies within the limit (`BodyRefused`
/// answers the others): this is for a router served some other way (the
/// tests' `oneshot`).
impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        match &rejection {
            BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => BodyRefused::TooLarge.into(),
            _ => BodyRefused::Unreadable.into(),
        }
    }
}

/// Why the door could not hand a request's body on whole (`http::server`):
/// the plumbing answers such a request at once, before it takes any place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyRefused {
    /// It paused past `BODY_TIMEOUT_MS`, or was not whole by
    /// `BODY_DEADLINE_MS`.
    Stalled,
    /// It is past `BODY_LIMIT`.
    TooLarge,
    /// Its reading failed (the client went away, or sent no valid body).
    Unreadable,
}

impl From<BodyRefused> for ApiError {
    fn from(refused: BodyRefused) -> Self {
        match refused {
            BodyRefused::Stalled => Self::RequestTimeout,
            BodyRefused::TooLarge => Self::PayloadTooLarge(BODY_LIMIT),
            BodyRefused::Unreadable => Self::validation("the request body could not be read"),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::Validation(super::malformed::explain_path(&rejection))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::Validation(super::malformed::explain_query(&rejection))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::status_of;
    use crate::errors::ErrorCode;

    /// (code, status) of each row of docs/api.md's table of error codes; a
    /// row may name several codes (`NOT_STARTED` / `ENDED`).
    fn documented() -> BTreeSet<(String, u16)> {
        let page = include_str!("../../docs/api.md");
        let table = page.split("| errorCode | status | when |").nth(1).expect("the table of error codes");
        let rows = table.lines().skip(2).take_while(|line| line.starts_with('|'));
        rows.flat_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let status: u16 = cells[2].parse().unwrap_or_else(|_| panic!("a status in {row}"));
            cells[1].split('/').map(move |code| (code.trim().trim_matches('`').to_owned(), status))
        })
        .collect()
    }

    /// What nginx answers with itself, from its `return NNN '{...}'` lines.
    fn from_nginx() -> BTreeSet<(String, u16)> {
        include_str!("../../nginx/hmdp-errors.conf")
            .lines()
            .filter_map(|line| {
                let rest = line.trim().strip_prefix("return ")?;
                let status = rest.get(..3)?.parse().ok()?;
                let code = rest.split("\"errorCode\":\"").nth(1)?.split('"').next()?;
                Some((code.to_owned(), status))
            })
            .collect()
    }

    /// Every code an instance can answer with is in `ErrorCode`, the one
    /// the envelope takes; that each of them is produced somewhere is the
    /// dead-code lint's to say (`ErrorCode::ALL` exists only in tests), so a
    /// code nothing answers with any more fails `cargo clippy -D warnings`.
    #[test]
    fn docs_list_every_code_with_its_status_and_nothing_else() {
        let mut answered: BTreeSet<(String, u16)> =
            ErrorCode::ALL.iter().map(|&code| (code.as_str().to_owned(), status_of(code).as_u16())).collect();
        let nginx = from_nginx();
        assert!(nginx.len() >= 4, "nginx's own answers were not found: {nginx:?}");
        answered.extend(nginx);
        let documented = documented();
        assert!(documented.len() >= 20, "the table was not read: {documented:?}");
        let missing: Vec<_> = answered.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&answered).collect();
        assert!(missing.is_empty() && stale.is_empty(), "not in docs/api.md: {missing:?}; not answered: {stale:?}");
    }
}
