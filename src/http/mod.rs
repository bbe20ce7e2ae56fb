//! HTTP plumbing shared by every capability: the envelope, the error type,
//! extractors that answer in the envelope, and the layers every request
//! passes through (request id, tracing span, instance header, panics).

pub(crate) mod envelope;
pub(crate) mod error;
pub(crate) mod extract;
pub(crate) mod failures;
pub(crate) mod guards;
pub(crate) mod health;
pub(crate) mod idempotency;
pub(crate) mod ratelimit;
pub(crate) mod server;
pub(crate) mod time;
pub(crate) mod whole;

mod course;
mod malformed;
mod metrics;
mod plumbing;
mod request_id;

use std::any::Any;

use axum::{
    Router,
    body::Body,
    extract::DefaultBodyLimit,
    http::{HeaderName, HeaderValue, Response},
    response::IntoResponse,
};
use tower::ServiceBuilder;

pub(crate) use envelope::Reply;
use error::BODY_LIMIT;
pub(crate) use error::{ApiError, ApiResult};

pub(crate) const X_INSTANCE: HeaderName = HeaderName::from_static("x-instance");
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// An instance's caps on the requests it holds (`MAX_IN_FLIGHT`) and on
/// those it works on at once (`MAX_WORKING`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) in_flight: usize,
    pub(crate) working: usize,
}

/// Wraps the routes in the plumbing every request goes through (request id,
/// span, instance header, course style, metrics, panics) and the body
/// limit, refuses what is past the instance's cap on requests in flight and
/// lines up what is past its cap on work. A router layer, so the matched
/// route is known to the metrics.
pub(crate) fn with_plumbing(router: Router, instance_id: &str, limits: Limits) -> Router {
    let instance =
        HeaderValue::from_str(instance_id).unwrap_or_else(|_| HeaderValue::from_static("invalid-instance-id"));
    router
        .fallback(|| async { ApiError::NotFound("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // One `layer` call: each wraps every route in a boxed service of its
        // own, which costs a clone and a boxed future per request.
        .layer(
            ServiceBuilder::new()
                .layer(plumbing::PlumbingLayer::new(instance, limits))
                .layer(DefaultBodyLimit::max(BODY_LIMIT)),
        )
}

fn panic_response(payload: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let detail = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("non-string panic payload");
    ApiError::internal(anyhow::anyhow!("handler panicked: {detail}")).into_response()
}
