//! Requests by route and status, and their latency, for `/metrics`. The
//! route is the matched pattern (`/voucher-order/{order_id}`), never the raw
//! path: ids in label values would grow the series without bound. Each
//! series' handle is looked up once and kept: building a labelled key and
//! finding it in the recorder for every request cost more than the rest of
//! the bookkeeping.

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock, RwLock},
    time::Duration,
};

use axum::{extract::MatchedPath, http::Method};
use metrics::{Counter, Histogram};

/// The methods with a label of their own; any other is counted as `other`,
/// so a client cannot grow the series with made-up methods.
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
const OTHER_METHOD: &str = "other";
const UNMATCHED: &str = "unmatched";

/// The handles of every (route, method) seen. Bounded: routes are the
/// router's patterns, methods the eight labels, statuses what handlers answer.
#[derive(Default)]
pub(super) struct RequestMetrics {
    routes: RwLock<HashMap<Box<str>, Arc<RouteSeries>>>,
}

#[derive(Default)]
struct RouteSeries {
    by_method: [OnceLock<Arc<Series>>; METHODS.len() + 1],
}

/// One route and method: its latency, and its count per status.
pub(super) struct Series {
    method: &'static str,
    route: Box<str>,
    duration: Histogram,
    by_status: RwLock<HashMap<u16, Counter>>,
}

impl RequestMetrics {
    pub(super) fn series(&self, method: &Method, route: Option<&MatchedPath>) -> Arc<Series> {
        let route = route.map_or(UNMATCHED, MatchedPath::as_str);
        let slot = METHODS.iter().position(|m| *m == method.as_str()).unwrap_or(METHODS.len());
        let method = METHODS.get(slot).copied().unwrap_or(OTHER_METHOD);
        let known = self.routes.read().unwrap_or_else(|e| e.into_inner()).get(route).cloned();
        let series = match known {
            Some(series) => series,
            None => self.routes.write().unwrap_or_else(|e| e.into_inner()).entry(route.into()).or_default().clone(),
        };
        series.by_method[slot]
            .get_or_init(|| {
                Arc::new(Series {
                    method,
                    route: route.into(),
                    duration: metrics::histogram!(
                        "hmdp_http_request_duration_seconds",
                        "method" => method,
                        "route" => route.to_owned()
                    ),
                    by_status: RwLock::default(),
                })
            })
            .clone()
    }
}

impl Series {
    pub(super) fn record(&self, status: u16, took: Duration) {
        self.duration.record(took.as_secs_f64());
        if let Some(counter) = self.by_status.read().unwrap_or_else(|e| e.into_inner()).get(&status) {
            counter.increment(1);
            return;
        }
        let mut by_status = self.by_status.write().unwrap_or_else(|e| e.into_inner());
        by_status
            .entry(status)
            .or_insert_with(|| {
                metrics::counter!(
                    "hmdp_http_requests_total",
                    "method" => self.method,
                    "route" => self.route.to_string(),
                    "status" => status.to_string()
                )
            })
            .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_and_method_get_one_series_and_made_up_methods_share_one() {
        let metrics = RequestMetrics::default();
        let get = metrics.series(&Method::GET, None);
        assert!(Arc::ptr_eq(&get, &metrics.series(&Method::GET, None)), "looked up again, not made again");
        assert_eq!((get.method, &*get.route), ("GET", UNMATCHED));
        let brew = metrics.series(&Method::from_bytes(b"BREW").unwrap(), None);
        let coffee = metrics.series(&Method::from_bytes(b"COFFEE").unwrap(), None);
        assert!(Arc::ptr_eq(&brew, &coffee), "every unknown method is one series");
        assert_eq!(brew.method, OTHER_METHOD);
        assert_eq!(metrics.routes.read().unwrap().len(), 1);
    }
}
