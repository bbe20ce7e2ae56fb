//! Requests by route and status, and their latency, for `/metrics`. The
//! route is the matched pattern (`/voucher-order/{order_id}`), never the raw
//! path: ids in label values would grow the series without bound.

use std::time::Instant;

use axum::{
    extract::{MatchedPath, Request},
    middleware::Next,
    response::Response,
};

pub(super) async fn record_request(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!("hmdp_http_request_duration_seconds", "method" => method.clone(), "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!("hmdp_http_requests_total", "method" => method, "route" => route, "status" => status)
        .increment(1);
    response
}
