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
pub(crate) mod time;
pub(crate) mod whole;

mod course;
mod metrics;

use std::any::Any;

use axum::{
    Router,
    body::Body,
    extract::DefaultBodyLimit,
    http::{HeaderName, HeaderValue, Request, Response},
    response::IntoResponse,
};
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    set_header::SetResponseHeaderLayer,
    trace::TraceLayer,
};

pub(crate) use envelope::Reply;
pub(crate) use error::{ApiError, ApiResult};

pub(crate) const X_INSTANCE: HeaderName = HeaderName::from_static("x-instance");
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Bodies of this API are small JSON documents; anything larger is a mistake
/// or an attack.
const BODY_LIMIT: usize = 64 * 1024;

/// Wraps the routes in the layers every request goes through. Outermost
/// first: the request id exists before the span opens, so every log line of
/// the request carries it, and it is echoed on the way out.
pub(crate) fn with_plumbing(router: Router, instance_id: &str) -> Router {
    let instance =
        HeaderValue::from_str(instance_id).unwrap_or_else(|_| HeaderValue::from_static("invalid-instance-id"));
    router
        .fallback(|| async { ApiError::NotFound("no such route") })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(X_REQUEST_ID, MakeRequestUuid))
                .layer(PropagateRequestIdLayer::new(X_REQUEST_ID))
                .layer(SetResponseHeaderLayer::overriding(X_INSTANCE, instance))
                .layer(TraceLayer::new_for_http().make_span_with(request_span))
                .layer(axum::middleware::from_fn(course::answer_failures_with_200))
                .layer(CatchPanicLayer::custom(panic_response)),
        )
        // Inside the router's layers, so the matched route is known.
        .layer(axum::middleware::from_fn(metrics::record_request))
}

fn request_span(req: &Request<Body>) -> tracing::Span {
    let request_id = req.headers().get(&X_REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
    // The path only: a query string can carry a phone (`/user/code?phone=`).
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = %request_id,
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
