//! The layer every request passes through, in one piece: its id (the
//! client's or nginx's `X-Request-Id` when it is a short token of safe
//! characters, else a new one, echoed on the way out), the span every log line of the request sits in, the `X-Instance`
//! header, the course's failure style, the request metrics, and a panic
//! turned into a 500 that has all of those. One layer instead of seven:
//! each `from_fn` or tower-http layer boxed a future or cloned the routes
//! for every request (tower-http's panic layer also boxed the body), and a
//! profile of the no-op showed the layers costing more than the session
//! lookup. It also holds the instance's caps: on requests in flight
//! (`MAX_IN_FLIGHT`), the cheapest place to refuse one, and on requests
//! worked on at once (`MAX_WORKING`), a first-come-first-served line in
//! front of the handlers; a request whose body the door refused
//! (`BodyRefused`: stalled, too large, unreadable) is answered before
//! either.

use std::{
    convert::Infallible,
    future::{Future, Ready, ready as ready_now},
    panic::{AssertUnwindSafe, catch_unwind},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use axum::{
    body::Body,
    extract::MatchedPath,
    http::{HeaderValue, Request, Response},
    response::IntoResponse,
};
use futures::future::Either;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;
use tower::{Layer, Service};
use tracing::{Instrument, instrument::Instrumented};

use super::{
    X_INSTANCE, X_REQUEST_ID, course,
    error::BodyRefused,
    metrics::{RequestMetrics, Series},
    request_id::{is_request_id, new_request_id, request_span},
};

#[derive(Clone)]
pub(super) struct PlumbingLayer {
    shared: Arc<Shared>,
}

struct Shared {
    instance: HeaderValue,
    metrics: RequestMetrics,
    /// Places for requests in flight, taken without waiting.
    in_flight: Arc<Semaphore>,
    /// Places for work; tokio's semaphore hands them out in arrival order.
    working: Arc<Semaphore>,
}

impl PlumbingLayer {
    pub(super) fn new(instance: HeaderValue, limits: super::Limits) -> Self {
        let shared = Shared {
            instance,
            metrics: RequestMetrics::default(),
            in_flight: Arc::new(Semaphore::new(limits.in_flight.min(Semaphore::MAX_PERMITS))),
            working: Arc::new(Semaphore::new(limits.working.min(Semaphore::MAX_PERMITS))),
        };
        Self { shared: Arc::new(shared) }
    }
}

/// Liveness and scrapes answer however busy the instance is: an operator
/// must see an overloaded instance, and it is not dead.
fn never_shed(path: Option<&MatchedPath>) -> bool {
    path.is_some_and(|p| matches!(p.as_str(), "/health" | "/metrics"))
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
    type Future = PlumbingFuture<Either<InLine<S::Future>, Ready<Result<Response<Body>, Infallible>>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let request_id = match req.headers().get(&X_REQUEST_ID) {
            Some(id) if is_request_id(id.as_bytes()) => id.clone(),
            _ => {
                let id = new_request_id();
                req.headers_mut().insert(X_REQUEST_ID, id.clone());
                id
            }
        };
        let span = request_span(&req, &request_id);
        let course_style = course::asks_for_course_style(req.headers());
        let matched = req.extensions().get::<MatchedPath>();
        let series = self.shared.metrics.series(req.method(), matched);
        // A body the door could not have whole is answered here, at once:
        // such a request takes no place and reaches no handler.
        let refused_body = req.extensions().get::<BodyRefused>().copied();
        let exempt = never_shed(matched) || refused_body.is_some();
        // Counted in flight until the response is done (or dropped); `None`
        // when the instance already serves all it may.
        let in_flight = if exempt { None } else { self.shared.in_flight.clone().try_acquire_owned().ok() };
        let inner = {
            let _entered = span.enter();
            if let Some(refused) = refused_body {
                Either::Right(ready_now(Ok(super::ApiError::from(refused).into_response())))
            } else if !exempt && in_flight.is_none() {
                let refused = super::ApiError::Overloaded("this instance is serving all the requests it can");
                Either::Right(ready_now(Ok(refused.into_response())))
            } else {
                match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
                    Ok(future) => Either::Left(InLine {
                        inner: future,
                        place: None,
                        line: (!exempt).then(|| PollSemaphore::new(self.shared.working.clone())),
                    }),
                    Err(panic) => Either::Right(ready_now(Ok(super::panic_response(panic)))),
                }
            }
        };
        PlumbingFuture {
            inner: inner.instrument(span),
            done: Some(Finish { request_id, instance: self.shared.instance.clone(), course_style, series }),
            started: Instant::now(),
            _in_flight: in_flight,
        }
    }
}

pin_project_lite::pin_project! {
    /// A handler's future that starts once it has a place for work (at
    /// once when one is free: no allocation then), and keeps the place
    /// until it is done. Liveness and scrapes skip the line.
    pub(super) struct InLine<F> {
        #[pin]
        inner: F,
        place: Option<OwnedSemaphorePermit>,
        line: Option<PollSemaphore>,
    }
}

impl<F: Future> Future for InLine<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if this.place.is_none()
            && let Some(line) = this.line.as_mut()
        {
            match line.poll_acquire(cx) {
                Poll::Pending => return Poll::Pending,
                // Never closed: the semaphore lives as long as the layer.
                Poll::Ready(place) => *this.place = place,
            }
        }
        this.inner.poll(cx)
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
        _in_flight: Option<OwnedSemaphorePermit>,
    }
}

impl<F> Future for PlumbingFuture<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let mut response = match catch_unwind(AssertUnwindSafe(|| this.inner.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(Ok(response))) => response,
            // The future is not polled again.
            Err(panic) => super::panic_response(panic),
        };
        let Some(finish) = this.done.take() else {
            panic!("PlumbingFuture polled after it completed");
        };
        if finish.course_style {
            course::answer_failure_with_200(&mut response);
        }
        let took = this.started.elapsed();
        let status = response.status();
        // A refusal that names its Retry-After (OVERLOADED) is the instance
        // doing its job under a crowd, counted in the metrics; an error log
        // line for each would flood the log when it matters most.
        if status.is_server_error() && !response.headers().contains_key(axum::http::header::RETRY_AFTER) {
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

#[cfg(test)]
mod tests {
    use axum::{Router, routing::get};
    use tower::ServiceExt;

    use super::*;

    fn app() -> Router {
        let router = Router::new()
            .route("/panics", get(panics))
            .route("/bad", get(|| async { crate::http::ApiError::validation("bad input") }));
        super::super::with_plumbing(router, "test-instance", super::super::Limits { in_flight: 100, working: 10 })
    }

    async fn panics() -> &'static str {
        panic!("a handler bug")
    }

    async fn body(response: Response<Body>) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_in_the_envelope_with_the_request_id_and_instance() {
        let request = Request::get("/panics").header(X_REQUEST_ID, "rid-7").body(Body::empty()).unwrap();
        let response = app().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 500);
        assert_eq!(response.headers()[X_REQUEST_ID], "rid-7");
        assert_eq!(response.headers()[X_INSTANCE], "test-instance");
        let envelope = body(response).await;
        assert_eq!(envelope["success"], false);
        assert_eq!(envelope["errorCode"], "INTERNAL");
    }

    #[tokio::test]
    async fn a_request_id_that_is_not_a_short_token_of_safe_characters_is_replaced() {
        let long = "a".repeat(65);
        for sent in ["abc status=500 user_id=1 injected", "a\"b", "x\ty", "id;drop", long.as_str()] {
            let request = Request::get("/bad").header(X_REQUEST_ID, sent).body(Body::empty()).unwrap();
            let response = app().oneshot(request).await.unwrap();
            let answered = response.headers()[X_REQUEST_ID].to_str().unwrap().to_owned();
            assert!(uuid::Uuid::parse_str(&answered).is_ok(), "{sent:?} was answered as {answered:?}");
        }
        for kept in ["rid-7", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "trace:span.1_2", &"a".repeat(64)] {
            let request = Request::get("/bad").header(X_REQUEST_ID, kept).body(Body::empty()).unwrap();
            let response = app().oneshot(request).await.unwrap();
            assert_eq!(response.headers()[X_REQUEST_ID], kept);
        }
    }

    #[tokio::test]
    async fn a_request_without_an_id_gets_a_new_one_and_the_course_style_turns_a_4xx_into_200() {
        let response = app().oneshot(Request::get("/bad").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(response.status(), 400);
        let id = response.headers()[X_REQUEST_ID].to_str().unwrap().to_owned();
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "a UUID: {id}");
        let course = Request::get("/bad").header("x-api-style", "course").body(Body::empty()).unwrap();
        let response = app().oneshot(course).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(body(response).await["errorCode"], "VALIDATION");
    }
}
