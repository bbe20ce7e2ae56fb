//! The failure responses many routes share, for their OpenAPI annotations:
//! a route lists `Unauthorized, Unavailable` instead of writing the same row
//! again. Route-specific failures (what a 404 or 409 means there) stay in
//! the route's own annotation.

use utoipa::IntoResponses;

use super::envelope::Failure;

/// A path parameter that does not parse.
#[derive(IntoResponses)]
#[response(status = 400, description = "VALIDATION: a path parameter is not a number")]
pub(crate) struct BadPath(#[allow(dead_code)] Failure);

/// A route that reads a body, whose body paused past `BODY_TIMEOUT_MS` or
/// was not whole by `BODY_DEADLINE_MS`.
#[derive(IntoResponses)]
#[response(
    status = 408,
    description = "REQUEST_TIMEOUT: the body paused longer than BODY_TIMEOUT_MS, or was not whole within BODY_DEADLINE_MS"
)]
pub(crate) struct BodyTimedOut(#[allow(dead_code)] Failure);

/// A route that reads a body, whose body is past the limit (64 KiB).
#[derive(IntoResponses)]
#[response(status = 413, description = "PAYLOAD_TOO_LARGE: the body is larger than 64 KiB")]
pub(crate) struct BodyTooLarge(#[allow(dead_code)] Failure);

/// A route behind the login layer.
#[derive(IntoResponses)]
#[response(status = 401, description = "UNAUTHORIZED: no token, or its session expired")]
pub(crate) struct Unauthorized(#[allow(dead_code)] Failure);

/// An admin route.
#[derive(IntoResponses)]
#[response(status = 403, description = "FORBIDDEN: admin key missing or wrong")]
pub(crate) struct Forbidden(#[allow(dead_code)] Failure);

/// A route answered by a rate limit.
#[derive(IntoResponses)]
#[response(status = 429, description = "TOO_MANY_REQUESTS (with Retry-After when a rate limit refused it)")]
pub(crate) struct RateLimited(#[allow(dead_code)] Failure);

/// Every route that reads MariaDB or Redis (and any route of a full
/// instance).
#[derive(IntoResponses)]
#[response(
    status = 503,
    description = "UNAVAILABLE: MariaDB or Redis unreachable; OVERLOADED: the instance serves all it can, refused before any work, with Retry-After"
)]
pub(crate) struct Unavailable(#[allow(dead_code)] Failure);
