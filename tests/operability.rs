//! What an operator and an integrator see: Prometheus metrics that move
//! with the orders, an OpenAPI document that covers every route of the
//! router, Swagger UI served from compiled-in assets, and the course-style
//! answers nginx asks for under `/api/`.

use hmdp_test_support as common;

use std::{collections::BTreeSet, time::Duration};

use common::{OrderPath, TestApp, phone};
use reqwest::StatusCode;
use serde_json::Value;

/// The value of one sample of the exposition, 0 when absent: `name` is the
/// metric name with its labels exactly as rendered, e.g.
/// `hmdp_seckill_orders_total{mode="sync",outcome="SUCCESS"}`.
fn sample(exposition: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let Some(rest) = series.strip_prefix(metric) else { return false };
            let rest = rest.trim_start_matches('{').trim_end_matches('}');
            let have: BTreeSet<&str> = rest.split(',').filter(|s| !s.is_empty()).collect();
            (rest.is_empty() || series.as_bytes().get(metric.len()) == Some(&b'{'))
                && labels.iter().all(|(k, v)| have.contains(format!("{k}=\"{v}\"").as_str()))
        })
        .map(|(_, value)| value.parse::<f64>().unwrap_or(0.0))
        .sum()
}

async fn scrape(app: &TestApp) -> String {
    let resp = app.get("/metrics", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    resp.text().await.unwrap()
}

const ORDER_ROUTE: &str = "/voucher-order/seckill/{voucher_id}";

/// One test for every order-placing check: the recorder is shared by the
/// whole test binary, so the deltas are only exact when nothing else in it
/// places orders at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_move_with_the_orders_in_both_modes() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(2).await;
    let mut tokens = Vec::new();
    for i in 0..3 {
        tokens.push(app.login(&phone(9_100 + i)).await);
    }
    let before = scrape(&app).await;
    let sync = |outcome: &'static str| [("mode", "sync"), ("outcome", outcome)];
    for token in &tokens {
        app.order(voucher, token).await;
    }
    app.order(voucher, &tokens[0]).await;
    let after = scrape(&app).await;
    let delta =
        |metric: &str, labels: &[(&str, &str)]| sample(&after, metric, labels) - sample(&before, metric, labels);
    assert_eq!(delta("hmdp_seckill_orders_total", &sync("SUCCESS")), 2.0, "{after}");
    // The third buyer meets an empty stock, the first buyer's second try
    // its own order (or the sold-out flag, which is checked first).
    assert_eq!(
        delta("hmdp_seckill_orders_total", &sync("SOLD_OUT"))
            + delta("hmdp_seckill_orders_total", &sync("DUPLICATE_ORDER")),
        2.0,
        "{after}"
    );
    let route = [("method", "POST"), ("route", ORDER_ROUTE)];
    assert_eq!(delta("hmdp_http_requests_total", &[route[0], route[1], ("status", "200")]), 2.0);
    assert_eq!(delta("hmdp_http_requests_total", &[route[0], route[1], ("status", "409")]), 2.0);
    assert_eq!(delta("hmdp_http_request_duration_seconds_count", &route), 4.0);
    assert!(
        after.contains("hmdp_http_request_duration_seconds_bucket{method=\"POST\",route=\"/voucher-order/seckill/{voucher_id}\",le=\"0.005\"}"),
        "latency histogram with buckets"
    );
    assert!(sample(&after, "hmdp_lock_events_total", &[("event", "acquired")]) >= 2.0, "{after}");
    assert!(after.contains("hmdp_db_pool_connections{state=\"idle\"}"));
    assert!(after.contains("hmdp_db_pool_connections{state=\"in_use\"}"));
    drop(app);

    // The asynchronous mode: stream length, pending entries and lag per
    // voucher.
    let app = TestApp::spawn_on(OrderPath::Async).await;
    let voucher = app.open_seckill(5).await;
    let token = app.login(&phone(9_200)).await;
    let before = scrape(&app).await;
    assert_eq!(app.order(voucher, &token).await.status(), StatusCode::OK);
    let v = voucher.to_string();
    let mut last = String::new();
    for _ in 0..50 {
        last = scrape(&app).await;
        // Present, and at 0 once the consumer has read the entry.
        if last.contains(&format!("hmdp_async_consumer_lag{{voucher=\"{v}\"}} 0")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sample(&last, "hmdp_seckill_orders_total", &[("mode", "async"), ("outcome", "SUCCESS")])
            - sample(&before, "hmdp_seckill_orders_total", &[("mode", "async"), ("outcome", "SUCCESS")]),
        1.0
    );
    assert!(last.contains(&format!("hmdp_async_stream_length{{voucher=\"{v}\"}}")), "{last}");
    assert!(last.contains(&format!("hmdp_async_pending_entries{{voucher=\"{v}\"}}")), "{last}");
    assert!(last.contains(&format!("hmdp_async_consumer_lag{{voucher=\"{v}\"}}")), "{last}");
    // The consumer persisted the order: nothing is left undelivered.
    assert_eq!(sample(&last, "hmdp_async_consumer_lag", &[("voucher", &v)]), 0.0, "{last}");
    assert_every_family_is_explained(&last);
}

/// What `promtool check metrics` asks first: a HELP line for every family.
fn assert_every_family_is_explained(exposition: &str) {
    let described: BTreeSet<&str> =
        exposition.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next()).collect();
    let typed: BTreeSet<&str> =
        exposition.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    assert!(typed.len() >= 10, "expected the service's families, got {typed:?}");
    let unexplained: Vec<_> = typed.difference(&described).collect();
    assert!(unexplained.is_empty(), "families without a HELP line: {unexplained:?}");
}

/// Vouchers opening together: the consumer persists the entries of every
/// stream it read in one round in one transaction, each voucher's stock
/// taken by its own orders.
#[tokio::test]
async fn entries_of_several_vouchers_read_in_one_round_are_persisted_together() {
    let app = TestApp::spawn_on(OrderPath::Async).await;
    let (busy, mut vouchers) = (app.open_seckill(5).await, Vec::new());
    for _ in 0..6 {
        vouchers.push(app.open_seckill(3).await);
    }
    let users = app.seed_users(13).await;
    let before = scrape(&app).await;
    // The consumer is kept on the busy voucher's batch (its row held) while
    // the six vouchers' orders queue in their streams: its next round reads
    // them all at once.
    let held = app.hold_stock_row(busy).await;
    assert_eq!(app.order(busy, &users[12].1).await.status(), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, (_, token)) in users.iter().take(12).enumerate() {
        assert_eq!(app.order(vouchers[i % 6], token).await.status(), StatusCode::OK);
    }
    held.rollback().await.unwrap();
    for &voucher in &vouchers {
        let report = app.drained(voucher, Duration::from_secs(15)).await;
        assert!(report.agrees(), "{report:?}");
        assert_eq!(app.orders_of(voucher).await, (2, 2), "voucher {voucher}");
        assert_eq!(app.stock_of(voucher).await, 1, "voucher {voucher}");
    }
    let after = scrape(&app).await;
    let together = sample(&after, "hmdp_async_shared_batches_total", &[])
        - sample(&before, "hmdp_async_shared_batches_total", &[]);
    assert!(together >= 1.0, "no round persisted several streams together: {together}");
}

#[tokio::test]
async fn a_voucher_in_segments_shows_each_segments_stock_buyers_and_stream() {
    let app = TestApp::spawn_on(OrderPath::Async).await;
    let voucher = app.open_seckill_in_segments(12, 3).await;
    let users = app.seed_users(5).await;
    for (_, token) in &users {
        assert_eq!(app.order(voucher, token).await.status(), StatusCode::OK);
    }
    app.drained(voucher, Duration::from_secs(15)).await;
    let last = scrape(&app).await;
    let v = voucher.to_string();
    let each = |metric: &str| -> Vec<f64> {
        (0..3).map(|segment| sample(&last, metric, &[("voucher", &v), ("segment", &segment.to_string())])).collect()
    };
    assert_eq!(each("hmdp_segment_stock").iter().sum::<f64>(), 7.0, "{last}");
    assert_eq!(each("hmdp_segment_buyers").iter().sum::<f64>(), 5.0, "{last}");
    assert_eq!(each("hmdp_segment_borrows_in_flight"), vec![0.0; 3], "{last}");
    for segment in 0..3 {
        let (voucher, segment) = (format!("voucher=\"{v}\""), format!("segment=\"{segment}\""));
        let streams = last.lines().filter(|l| l.starts_with("hmdp_async_stream_length{"));
        assert!(streams.into_iter().any(|l| l.contains(&voucher) && l.contains(&segment)), "{last}");
    }
    assert_every_family_is_explained(&last);
}

#[tokio::test]
async fn a_dependency_error_is_counted() {
    let app = TestApp::spawn().await;
    let before = sample(&scrape(&app).await, "hmdp_dependency_errors_total", &[("dependency", "database")]);
    app.state.db.close().await;
    let resp = app.get("/voucher/list/1", None).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let after = sample(&scrape(&app).await, "hmdp_dependency_errors_total", &[("dependency", "database")]);
    assert!(after > before, "before {before}, after {after}");
}

/// `.route("<path>", get(..))` calls in the source: what the router serves.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Routes of unit tests are never served.
            let served = text.split("#[cfg(test)]").next().unwrap_or_default();
            for piece in served.split(".route(").skip(1) {
                let Some(rest) = piece.trim_start().strip_prefix('"') else { continue };
                let (route, rest) = rest.split_once('"').unwrap();
                let rest = rest.trim_start_matches([',', ' ', '\n']).trim_start_matches("axum::routing::");
                let method: String = rest.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
                found.insert((method, route.to_owned()));
            }
        }
    }
    found
}

#[tokio::test]
async fn the_openapi_document_covers_every_route_of_the_router() {
    let app = TestApp::spawn().await;
    let resp = app.get("/openapi.json", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let doc: Value = resp.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc["openapi"]);

    let routes = routes_in_source();
    assert!(routes.len() >= 13, "the source scan found too few routes: {routes:?}");
    for (method, path) in &routes {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is routed but missing from the OpenAPI document");
        let responses = op["responses"].as_object().unwrap();
        assert!(responses.contains_key("200"), "{method} {path}: no success answer documented");
    }
    // Every documented operation is served, with its documented error
    // answers in the envelope.
    let mut documented = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            documented += 1;
            assert!(routes.contains(&(method.clone(), path.clone())), "{method} {path} is documented but not routed");
            for (status, answer) in op["responses"].as_object().unwrap() {
                let schema = &answer["content"]["application/json"]["schema"]["$ref"];
                if status == "200" {
                    continue;
                }
                if status.starts_with('2') {
                    // The asynchronous order's 202: a success in the envelope.
                    assert!(
                        schema.as_str().is_some_and(|s| s.contains("Success")),
                        "{method} {path} {status}: {schema}"
                    );
                } else {
                    assert_eq!(schema, "#/components/schemas/Failure", "{method} {path} {status}");
                    let code = answer["description"].as_str().unwrap().split([':', ' ', ';']).next().unwrap();
                    assert!(
                        doc["components"]["schemas"]["ErrorCode"]["enum"].as_array().unwrap().iter().any(|c| c == code),
                        "{method} {path} {status}: '{code}' is not an errorCode"
                    );
                }
            }
        }
    }
    assert_eq!(documented, routes.len());
    // The order route names every business failure of an order.
    let order = doc["paths"][ORDER_ROUTE]["post"]["responses"]["409"]["description"].as_str().unwrap();
    for code in ["SOLD_OUT", "DUPLICATE_ORDER", "NOT_STARTED", "ENDED"] {
        assert!(order.contains(code), "{order}");
    }
}

#[tokio::test]
async fn swagger_ui_is_served_from_compiled_in_assets() {
    let app = TestApp::spawn().await;
    let page = app.get("/docs/", None).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("swagger-ui"));
    let css = app.get("/docs/swagger-ui.css", None).await;
    assert_eq!(css.status(), StatusCode::OK);
    assert!(css.bytes().await.unwrap().len() > 10_000);
    let init = app.get("/docs/swagger-initializer.js", None).await;
    assert!(init.text().await.unwrap().contains("/openapi.json"));
}

/// Every family an instance can record has its HELP line, the ones only a
/// guarded sale or a stalled connection records included (`promtool check
/// metrics` refuses a family without one, and a scrape that happened to
/// miss them would not show it).
#[tokio::test]
async fn every_family_has_a_help_line_the_guards_and_the_connections_included() {
    let app = TestApp::spawn_with(|c| c.server.header_timeout_ms = 200).await;
    let now = chrono::Utc::now();
    let mut body = common::seckill_body(
        5,
        &(now - chrono::Duration::minutes(1)).to_rfc3339(),
        &(now + chrono::Duration::hours(1)).to_rfc3339(),
    );
    body["guard"] = serde_json::json!("path");
    let created: Value = app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body).await.json().await.unwrap();
    let voucher = created["data"].as_u64().unwrap();
    let (_, token) = app.seed_users(1).await.remove(0);
    let asked = app.post(&format!("/voucher-order/seckill/{voucher}/path"), Some(&token)).await;
    assert_eq!(asked.status(), StatusCode::OK);
    // A connection that never says anything, closed at its deadline.
    let mut silent = tokio::net::TcpStream::connect(app.base.trim_start_matches("http://")).await.unwrap();
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), tokio::io::AsyncReadExt::read(&mut silent, &mut buf));
    assert!(matches!(closed.await, Ok(Ok(0)) | Ok(Err(_))), "the silent connection was closed");

    let last = scrape(&app).await;
    for family in ["hmdp_sale_path_asks_total", "hmdp_connections_open", "hmdp_connections_timed_out_total"] {
        assert!(last.contains(&format!("# TYPE {family} ")), "{family} was recorded: {last}");
    }
    assert_every_family_is_explained(&last);
}
