//! Admin voucher routes and the public listing.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use common::OrderPath;
use common::{ADMIN_KEY, TestApp, expect_error, expect_ok, seckill_body};
use redis::AsyncCommands;
use reqwest::StatusCode;
use serde_json::json;

const BEGIN: &str = "2026-11-22T10:00:00+08:00";
const END: &str = "2026-11-22T12:00:00+08:00";

on_every_path!(
    an_off_shelf_voucher_does_not_sell_until_it_is_back_on_the_shelf,
    a_seckill_voucher_created_off_the_shelf_does_not_sell,
    the_stock_route_puts_a_sold_out_voucher_back_on_sale,
);

#[tokio::test]
async fn admin_routes_need_the_right_key() {
    let app = TestApp::spawn().await;
    let body = seckill_body(10, BEGIN, END);
    for path in ["/voucher/seckill", "/voucher"] {
        expect_error(app.post_json(path, None, &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
        expect_error(app.post_json(path, Some("wrong-key"), &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
        expect_error(app.post_json(path, Some(""), &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    }
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher").fetch_one(&app.db).await.unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn without_a_configured_admin_key_admin_routes_are_closed_to_everyone() {
    let app = TestApp::spawn_with(|c| c.server.admin_key = None).await;
    let body = seckill_body(10, BEGIN, END);
    expect_error(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await, StatusCode::FORBIDDEN, "FORBIDDEN")
        .await;
    expect_error(app.post_json("/voucher/seckill", None, &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
}

#[tokio::test]
async fn a_seckill_voucher_is_created_with_both_rows_and_listed() {
    let app = TestApp::spawn().await;
    let created =
        expect_ok(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &seckill_body(200, BEGIN, END)).await).await;
    let id = created["data"].as_u64().unwrap();
    let ordinary = json!({"shopId": 1, "title": "50 off 100", "payValue": 5000, "actualValue": 10000});
    let plain = expect_ok(app.post_json("/voucher", Some(ADMIN_KEY), &ordinary).await).await["data"].as_u64().unwrap();
    let off_shelf = json!({"shopId": 1, "title": "hidden", "payValue": 1, "actualValue": 2, "status": 2});
    expect_ok(app.post_json("/voucher", Some(ADMIN_KEY), &off_shelf).await).await;
    let elsewhere = json!({"shopId": 2, "title": "other shop", "payValue": 1, "actualValue": 2});
    expect_ok(app.post_json("/voucher", Some(ADMIN_KEY), &elsewhere).await).await;

    let (stock, begin): (i32, chrono::NaiveDateTime) =
        sqlx::query_as("SELECT stock, begin_time FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .unwrap();
    assert_eq!(stock, 200);
    assert_eq!(begin.to_string(), "2026-11-22 02:00:00", "stored in UTC");

    let listed = expect_ok(app.get("/voucher/list/1", None).await).await;
    assert_eq!(listed["total"], 2, "{listed}");
    let items = listed["data"].as_array().unwrap();
    let seckill = items.iter().find(|v| v["id"] == id).unwrap();
    assert_eq!(seckill["stock"], 200);
    assert_eq!(seckill["type"], 1);
    assert_eq!(seckill["title"], "100 off 50");
    assert_eq!(seckill["payValue"], 8000);
    assert_eq!(seckill["beginTime"], "2026-11-22T02:00:00+00:00");
    assert_eq!(seckill["endTime"], "2026-11-22T04:00:00+00:00");
    let plain = items.iter().find(|v| v["id"] == plain).unwrap();
    assert!(plain.get("stock").is_none() && plain.get("beginTime").is_none(), "{plain}");

    let empty = expect_ok(app.get("/voucher/list/999", None).await).await;
    assert_eq!(empty["data"], json!([]));
    expect_error(app.get("/voucher/list/abc", None).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
}

#[tokio::test]
async fn a_voucher_in_segments_records_a_distinct_tag_for_each_and_lists_how_many() {
    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for segments in [None, Some(1), Some(3), Some(16)] {
        let mut body = seckill_body(100, BEGIN, END);
        if let Some(n) = segments {
            body["segments"] = json!(n);
        }
        ids.push((
            expect_ok(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await).await["data"].as_u64().unwrap(),
            segments.unwrap_or(1),
        ));
    }
    let listed = expect_ok(app.get("/voucher/list/1", None).await).await;
    for (id, segments) in ids {
        let (stored, tags): (u8, String) =
            sqlx::query_as("SELECT segments, segment_tags FROM tb_seckill_voucher WHERE voucher_id = ?")
                .bind(id)
                .fetch_one(&app.db)
                .await
                .unwrap();
        assert_eq!(stored, segments);
        // Segment 0's tag is the voucher id: not recorded, as a voucher of
        // one segment keeps the keys it always had.
        let tags: Vec<&str> = tags.split(',').filter(|t| !t.is_empty()).collect();
        assert_eq!(tags.len(), usize::from(segments) - 1, "{tags:?}");
        let mut all: std::collections::HashSet<String> = tags.iter().map(|t| t.to_string()).collect();
        all.insert(id.to_string());
        assert_eq!(all.len(), usize::from(segments), "distinct tags: {tags:?}");
        assert!(tags.iter().all(|t| t.starts_with(&format!("{id}."))), "{tags:?}");
        let item = listed["data"].as_array().unwrap().iter().find(|v| v["id"] == id).unwrap();
        assert_eq!(item["segments"], segments, "{item}");
    }
}

#[tokio::test]
async fn invalid_voucher_bodies_are_400_and_write_nothing() {
    let app = TestApp::spawn().await;
    let base = seckill_body(10, BEGIN, END);
    let with = |field: &str, value: serde_json::Value| {
        let mut b = base.clone();
        b[field] = value;
        b
    };
    let without = |field: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(field);
        b
    };
    let cases = vec![
        ("empty title", with("title", json!("   "))),
        ("negative payValue", with("payValue", json!(-1))),
        ("negative actualValue", with("actualValue", json!(-5))),
        ("negative stock", with("stock", json!(-1))),
        ("stock beyond INT", with("stock", json!(3_000_000_000i64))),
        ("stock as string", with("stock", json!("10"))),
        ("end before begin", with("endTime", json!("2026-11-22T09:00:00+08:00"))),
        ("end equal to begin", with("endTime", json!(BEGIN))),
        ("end within begin's second", with("endTime", json!("2026-11-22T10:00:00.350+08:00"))),
        ("time without offset", with("beginTime", json!("2026-11-22T10:00:00"))),
        ("not a time", with("beginTime", json!("tomorrow"))),
        ("missing stock", without("stock")),
        ("missing beginTime", without("beginTime")),
        ("missing title", without("title")),
        ("unknown field", with("stok", json!(10))),
        ("wrong type", with("type", json!(0))),
        ("bad status", with("status", json!(9))),
        ("zero shop", with("shopId", json!(0))),
        ("shop beyond BIGINT", with("shopId", json!(9_223_372_036_854_775_808u64))),
        ("title too long", with("title", json!("x".repeat(256)))),
        ("title too long as sent", with("title", json!(format!(" {} ", "x".repeat(254))))),
        ("title of a next-line character", with("title", json!("\u{85}"))),
        ("title of a byte-order mark", with("title", json!("\u{feff} "))),
        ("no segment", with("segments", json!(0))),
        ("more segments than 16", with("segments", json!(17))),
        ("negative segments", with("segments", json!(-1))),
        ("segments as string", with("segments", json!("2"))),
        ("a fraction of a segment", with("segments", json!(2.5))),
    ];
    for (what, body) in cases {
        let resp = app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await;
        let status = resp.status();
        let got: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {got}");
        assert_eq!(got["errorCode"], "VALIDATION", "{what}: {got}");
    }
    // Seckill fields on the ordinary route are refused too.
    expect_error(app.post_json("/voucher", Some(ADMIN_KEY), &base).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    let ordinary = json!({"shopId": 1, "title": "t", "payValue": 1, "actualValue": 2, "segments": 2});
    expect_error(app.post_json("/voucher", Some(ADMIN_KEY), &ordinary).await, StatusCode::BAD_REQUEST, "VALIDATION")
        .await;
    let raw = app
        .client
        .post(app.url("/voucher/seckill"))
        .header("x-admin-key", ADMIN_KEY)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    expect_error(raw, StatusCode::BAD_REQUEST, "VALIDATION").await;

    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher").fetch_one(&app.db).await.unwrap();
    assert_eq!(count, 0, "nothing written");
}

#[tokio::test]
async fn fractions_of_a_second_are_dropped_from_the_sale_window_as_the_table_drops_them() {
    let app = TestApp::spawn().await;
    let body = seckill_body(5, "2026-11-22T10:00:00.999+08:00", "2026-11-22T10:00:01.001+08:00");
    let id = expect_ok(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await).await["data"].as_u64().unwrap();
    let listed = expect_ok(app.get("/voucher/list/1", None).await).await;
    let voucher = listed["data"].as_array().unwrap().iter().find(|v| v["id"] == id).cloned().unwrap();
    assert_eq!(voucher["beginTime"], "2026-11-22T02:00:00+00:00", "{voucher}");
    assert_eq!(voucher["endTime"], "2026-11-22T02:00:01+00:00", "{voucher}");
}

#[tokio::test]
async fn times_that_mariadb_cannot_store_are_a_400_not_a_500() {
    let app = TestApp::spawn().await;
    for (begin, end) in [
        ("2026-01-01T00:00:00+08:00", "9999-12-31T23:30:00-01:00"),
        ("0001-01-01T00:00:00+00:00", "2026-01-01T00:00:00+08:00"),
        ("0999-12-31T23:59:59+00:00", "2026-01-01T00:00:00+00:00"),
    ] {
        let resp = app.post_json("/voucher/seckill", Some(ADMIN_KEY), &seckill_body(5, begin, end)).await;
        let body = expect_error(resp, StatusCode::BAD_REQUEST, "VALIDATION").await;
        assert!(body["errorMsg"].as_str().unwrap().contains("9999-12-31"), "{begin} .. {end}: {body}");
    }
    // The edges themselves are fine.
    let body = seckill_body(5, "1000-01-01T00:00:00+00:00", "9999-12-31T23:59:59+00:00");
    expect_ok(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await).await;
}

async fn set_shelf(app: &TestApp, voucher: u64, status: serde_json::Value, key: Option<&str>) -> reqwest::Response {
    let mut req = app.client.put(app.url(&format!("/voucher/{voucher}/status"))).json(&json!({ "status": status }));
    if let Some(key) = key {
        req = req.header("x-admin-key", key);
    }
    req.send().await.unwrap()
}

async fn listed(app: &TestApp, voucher: u64) -> bool {
    let list = expect_ok(app.get("/voucher/list/1", None).await).await;
    list["data"].as_array().unwrap().iter().any(|v| v["id"].as_u64() == Some(voucher))
}

/// Off the shelf stops the sale, on again resumes it; the units sold before
/// stay sold.
async fn an_off_shelf_voucher_does_not_sell_until_it_is_back_on_the_shelf(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(3).await;
    expect_ok(app.order(voucher, &users[0].1).await).await;

    expect_ok(set_shelf(&app, voucher, json!(2), Some(ADMIN_KEY)).await).await;
    assert!(!listed(&app, voucher).await);
    expect_error(app.order(voucher, &users[1].1).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    // The same status again changes nothing.
    expect_ok(set_shelf(&app, voucher, json!(2), Some(ADMIN_KEY)).await).await;
    expect_error(app.order(voucher, &users[2].1).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;

    expect_ok(set_shelf(&app, voucher, json!(1), Some(ADMIN_KEY)).await).await;
    assert!(listed(&app, voucher).await);
    expect_ok(app.order(voucher, &users[1].1).await).await;
}

/// Seen: a seckill voucher created with `"status": 2` was not listed, yet
/// sold (only its sale row was read).
async fn a_seckill_voucher_created_off_the_shelf_does_not_sell(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let now = chrono::Utc::now();
    let mut body = seckill_body(
        5,
        &(now - chrono::Duration::minutes(1)).to_rfc3339(),
        &(now + chrono::Duration::hours(1)).to_rfc3339(),
    );
    body["status"] = json!(2);
    let created = expect_ok(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await).await;
    let voucher = created["data"].as_u64().unwrap();
    let users = app.seed_users(1).await;
    expect_error(app.order(voucher, &users[0].1).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher_order").fetch_one(&app.db).await.unwrap();
    assert_eq!(rows, 0, "{path:?}");
}

#[tokio::test]
async fn the_shelf_route_answers_bad_input_in_the_envelope() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(1).await;
    expect_error(set_shelf(&app, voucher, json!(2), None).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    expect_error(set_shelf(&app, voucher, json!(3), Some(ADMIN_KEY)).await, StatusCode::BAD_REQUEST, "VALIDATION")
        .await;
    expect_error(set_shelf(&app, voucher, json!("off"), Some(ADMIN_KEY)).await, StatusCode::BAD_REQUEST, "VALIDATION")
        .await;
    expect_error(set_shelf(&app, voucher + 1000, json!(2), Some(ADMIN_KEY)).await, StatusCode::NOT_FOUND, "NOT_FOUND")
        .await;
    assert!(listed(&app, voucher).await, "nothing changed");
}

#[tokio::test]
async fn wrong_admin_keys_are_slowed_to_ten_per_address_and_then_even_the_right_key_waits() {
    let app = TestApp::spawn().await;
    let body = seckill_body(10, BEGIN, END);
    // Requests without any key guess nothing: refused, and not counted.
    for _ in 0..20 {
        expect_error(app.post_json("/voucher/seckill", None, &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    }
    for i in 0..10 {
        let wrong = format!("a-wrong-admin-key-guess-number-{i}");
        expect_error(app.post_json("/voucher/seckill", Some(&wrong), &body).await, StatusCode::FORBIDDEN, "FORBIDDEN")
            .await;
    }
    // The eleventh request from that address waits out the window, right key or not.
    let refused = app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await;
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=15 * 60).contains(&retry_after), "Retry-After {retry_after}");
    expect_error(refused, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;
    // A request without a key is still told it has none.
    expect_error(app.post_json("/voucher/seckill", None, &body).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    // Another client behind nginx (which sets X-Real-IP) is not held up.
    let other = app
        .behind_nginx
        .client
        .post(app.behind_nginx.url("/voucher/seckill"))
        .header("x-admin-key", ADMIN_KEY)
        .header("x-real-ip", "10.9.9.9")
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_ok(other).await;
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher").fetch_one(&app.db).await.unwrap();
    assert_eq!(count, 1, "only the other client's voucher");
}

/// The admin's stock route brings a sold-out voucher back on sale, on the
/// instance that served it at once and on the other within a second or so,
/// and the new stock is exactly what sells.
async fn the_stock_route_puts_a_sold_out_voucher_back_on_sale(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let peer = app.spawn_peer(|_| {}).await;
    let voucher = app.open_seckill(2).await;
    let users = app.seed_users(8).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let first = app.order_all(voucher, &tokens[..3]).await;
    assert_eq!(common::tally(&first).get("OK"), Some(&2), "{first:?}");
    // The peer learns of the sell-out too.
    expect_error(peer.order(voucher, tokens[3]).await, StatusCode::CONFLICT, "SOLD_OUT").await;

    let set = expect_ok(app.set_stock(voucher, json!(3)).await).await;
    assert_eq!(set["data"]["stock"], 3, "{set}");
    // The instance that served the route sells at once.
    expect_ok(app.order(voucher, tokens[3]).await).await;
    // The peer within its recheck.
    let started = std::time::Instant::now();
    loop {
        let resp = peer.order(voucher, tokens[4]).await;
        if resp.status() == StatusCode::OK {
            break;
        }
        expect_error(resp, StatusCode::CONFLICT, "SOLD_OUT").await;
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{path:?}: the peer never sold again");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let rest = app.order_all(voucher, &tokens[5..]).await;
    let counts = common::tally(&rest);
    assert_eq!(counts.get("OK"), Some(&1), "{path:?}: exactly the third new unit: {counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&2), "{path:?}: {counts:?}");

    // Every order lands; nothing is oversold.
    let started = std::time::Instant::now();
    while app.orders_of(voucher).await != (5, 5) {
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "{path:?}: {:?}", app.orders_of(voucher).await);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(app.stock_of(voucher).await, 0, "{path:?}");
}

#[tokio::test]
async fn the_stock_route_answers_bad_input_in_the_envelope() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(4).await;
    for bad in [json!(-1), json!(2_147_483_648_i64), json!("5"), json!(1.5), json!(null)] {
        expect_error(app.set_stock(voucher, bad.clone()).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
    let path = format!("/voucher/seckill/{voucher}/stock");
    expect_error(app.put_json(&path, None, &json!({ "stock": 9 })).await, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    expect_error(app.set_stock(voucher + 1000, json!(1)).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    let ordinary = expect_ok(
        app.post_json(
            "/voucher",
            Some(ADMIN_KEY),
            &json!({"shopId": 1, "title": "t", "payValue": 1, "actualValue": 2, "type": 0}),
        )
        .await,
    )
    .await["data"]
        .as_u64()
        .unwrap();
    expect_error(app.set_stock(ordinary, json!(1)).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    assert_eq!(app.stock_of(voucher).await, 4, "nothing changed");
    // Zero is a stock too: the voucher is sold out.
    expect_ok(app.set_stock(voucher, json!(0)).await).await;
    let users = app.seed_users(1).await;
    expect_error(app.order(voucher, &users[0].1).await, StatusCode::CONFLICT, "SOLD_OUT").await;
}

/// The OpenAPI document says a path id is an `int64` from 0: the server
/// agrees on both ends, and an integer written as a float is that integer.
#[tokio::test]
async fn ids_beyond_int64_are_a_400_and_integers_may_be_written_as_floats() {
    let app = TestApp::spawn().await;
    expect_ok(app.get("/voucher/list/9223372036854775807", None).await).await;
    expect_error(app.get("/voucher/list/9223372036854775808", None).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    expect_error(app.get("/voucher/list/-1", None).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    let voucher = app.open_seckill(3).await;
    let set = expect_ok(app.set_stock(voucher, json!(5.0)).await).await;
    assert_eq!(set["data"]["stock"], 5);
    expect_error(app.set_stock(voucher, json!(5.5)).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    assert_eq!(app.stock_of(voucher).await, 5);
}

/// The probe's finding: 60 wrong admin keys at once, 11 counted against a
/// limit of 10. Each wrong key takes its place in one step: exactly ten
/// are answered 403, the rest 429, and the count stops at the limit.
#[tokio::test]
async fn a_burst_of_wrong_admin_keys_never_counts_past_the_limit() {
    let app = TestApp::spawn().await;
    let body = seckill_body(10, BEGIN, END);
    let guesses: Vec<String> = (0..60).map(|i| format!("a-wrong-admin-key-guess-number-{i}")).collect();
    let sent = guesses.iter().map(|key| app.post_json("/voucher/seckill", Some(key), &body));
    let statuses: Vec<StatusCode> = futures::future::join_all(sent).await.into_iter().map(|r| r.status()).collect();
    let forbidden = statuses.iter().filter(|s| **s == StatusCode::FORBIDDEN).count();
    let refused = statuses.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert_eq!((forbidden, refused), (10, 50), "{statuses:?}");
    let counted: Option<u64> =
        app.redis.clone().get(app.keys.rate("admin-key-failures:addr", "loopback")).await.unwrap();
    assert_eq!(counted, Some(10));
    expect_error(
        app.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await,
        StatusCode::TOO_MANY_REQUESTS,
        "TOO_MANY_REQUESTS",
    )
    .await;
}

/// The right key sent many times at once is never refused for its own
/// sake: only wrong keys count.
#[tokio::test]
async fn the_right_admin_key_many_times_at_once_is_never_refused() {
    let app = &TestApp::spawn().await;
    let sent = (0..30).map(|i| {
        let body = json!({ "shopId": 1, "title": format!("v{i}"), "payValue": 1, "actualValue": 2 });
        async move { app.post_json("/voucher", Some(ADMIN_KEY), &body).await.status() }
    });
    let statuses = futures::future::join_all(sent).await;
    assert!(statuses.iter().all(|s| *s == StatusCode::OK), "{statuses:?}");
}
