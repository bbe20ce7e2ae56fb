//! The layer every request passes through, in one piece: its id (the
//! client's or nginx's `X-Request-Id`, else a new one, echoed on the way
//! out), the span every log line of the request sits in, the `X-Instance`
//! header, the course's failure style, and the request metrics. One layer
//! instead of six: each `from_fn` or tower-http layer boxed a future or
//! cloned the routes for every request, and a profile of the no-op showed
//! the layers costing more than the session lookup.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Instant,
};

use axum::{
    body::Body,
    extract::MatchedPath,
    http::{HeaderValue, Request, Response},
};
use tower::{Layer, Service};
use tracing::{Instrument, instrument::Instrumented};

use super::{
    X_INSTANCE, X_REQUEST_ID, course,
    metrics::{RequestMetrics, Series},
};

#[derive(Clone)]
pub(super) struct PlumbingLayer {
    shared: Arc<Shared>,
}

struct Shared {
    instance: HeaderValue,
    metrics: RequestMetrics,
}

impl PlumbingLayer {
    pub(super) fn new(instance: HeaderValue) -> Self {
        Self { shared: Arc::new(Shared { instance, metrics: RequestMetrics::default() }) }
    }
}

impl<S> Layer<S> for PlumbingLayer {
    type Service = Plumbing<S>;

    fn layer(&self, inner: S) -> Plumbing<S> {
        Plumbing { inner, shared: self.shared.clone() }
    }
}

#[derive(Clone)]
pub(super) struct Plumbing<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Service<Request<Body>> for Plumbing<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = PlumbingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let request_id = match req.headers().get(&X_REQUEST_ID) {
            Some(id) => id.clone(),
            None => {
                let id = new_request_id();
                req.headers_mut().insert(X_REQUEST_ID, id.clone());
                id
            }
        };
        let span = request_span(&req, &request_id);
        let course_style = course::asks_for_course_style(req.headers());
        let series = self.shared.metrics.series(req.method(), req.extensions().get::<MatchedPath>());
        let inner = {
            let _entered = span.enter();
            self.inner.call(req)
        };
        PlumbingFuture {
            inner: inner.instrument(span),
            done: Some(Finish { request_id, instance: self.shared.instance.clone(), course_style, series }),
            started: Instant::now(),
        }
    }
}

/// What is done to the response once it is there.
struct Finish {
    request_id: HeaderValue,
    instance: HeaderValue,
    course_style: bool,
    series: Arc<Series>,
}

pin_project_lite::pin_project! {
    pub(super) struct PlumbingFuture<F> {
        #[pin]
        inner: Instrumented<F>,
        done: Option<Finish>,
        started: Instant,
    }
}

impl<F> Future for PlumbingFuture<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Ok(mut response) = ready!(this.inner.as_mut().poll(cx));
        let Some(finish) = this.done.take() else {
            panic!("PlumbingFuture polled after it completed");
        };
        if finish.course_style {
            course::answer_failure_with_200(&mut response);
        }
        let took = this.started.elapsed();
        let status = response.status();
        if status.is_server_error() {
            let _entered = this.inner.span().enter();
            tracing::error!(status = status.as_u16(), latency_ms = took.as_millis() as u64, "request failed");
        }
        finish.series.record(status.as_u16(), took);
        let headers = response.headers_mut();
        headers.insert(X_REQUEST_ID, finish.request_id);
        headers.insert(X_INSTANCE, finish.instance);
        Poll::Ready(Ok(response))
    }
}

fn new_request_id() -> HeaderValue {
    let mut buf = uuid::Uuid::encode_buffer();
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(id).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

fn request_span(req: &Request<Body>, request_id: &HeaderValue) -> tracing::Span {
    // The path only: a query string can carry a phone (`/user/code?phone=`).
    tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = request_id.to_str().unwrap_or("-"),
    )
}
