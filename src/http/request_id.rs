//! A request's id: the client's or nginx's when it is a short token of safe
//! characters, else a new one; and the span every log line of the request
//! sits in.

use axum::{
    body::Body,
    http::{HeaderValue, Request},
};

/// The longest request id a client may bring: a UUID (36), nginx's
/// `$request_id` (32) and the usual tracing ids fit.
const MAX_REQUEST_ID_LEN: usize = 64;

/// A request id is logged as it is, so a client's may hold no space, quote,
/// `=` or control character that would let it write a log field of its own
/// (`abc status=500 user_id=1`): letters, digits and `-_.:` only. nginx
/// keeps the same rule (nginx/hmdp-http.conf).
pub(super) fn is_request_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

pub(super) fn new_request_id() -> HeaderValue {
    let mut buf = uuid::Uuid::encode_buffer();
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

pub(super) fn request_span(req: &Request<Body>, request_id: &HeaderValue) -> tracing::Span {
    // The path only: a query string can carry a phone (`/user/code?phone=`).
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = request_id.to_str().unwrap_or("-"),
    )
}
