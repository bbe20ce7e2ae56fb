//! The envelope on the edges: bad bodies, unknown routes, wrong methods,
//! headers every response carries, health and readiness, course-style
//! answers. (Not in the metrics tests' binary: its order answers would move
//! the counters those tests measure exact deltas of.)

use hmdp_test_support as common;

use common::{TestApp, expect_error, expect_ok, phone};
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test]
async fn malformed_json_is_400_in_the_envelope() {
    let app = TestApp::spawn().await;
    let post = |body: &'static str, content_type: Option<&'static str>| {
        let mut req = app.client.post(app.url("/user/login")).body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        req.send()
    };
    expect_error(post("{", Some("application/json")).await.unwrap(), StatusCode::BAD_REQUEST, "VALIDATION").await;
    expect_error(
        post(r#"{"phone":13800000000}"#, Some("application/json")).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;
    expect_error(
        post(r#"{"phone":"13800000000"}"#, Some("application/json")).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;
    expect_error(
        post(r#"{"phone":"13800000000","code":"123456"}"#, None).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;
    expect_error(
        post(r#"{"phone":"13800000000","code":"123456"}"#, Some("text/plain")).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_answer_in_the_envelope() {
    let app = TestApp::spawn().await;
    expect_error(app.get("/no/such/route", None).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    expect_error(app.get("/user/login", None).await, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED").await;
    let del = app.client.delete(app.url("/health")).send().await.unwrap();
    expect_error(del, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED").await;
}

#[tokio::test]
async fn every_response_names_its_instance_and_request_id() {
    let app = TestApp::spawn().await;
    let resp = app.get("/health", None).await;
    let instance = resp.headers().get("x-instance").unwrap().to_str().unwrap().to_owned();
    assert!(instance.starts_with("127.0.0.1:"), "{instance}");
    let generated = resp.headers().get("x-request-id").unwrap().to_str().unwrap().to_owned();
    assert_eq!(uuid::Uuid::parse_str(&generated).map(|u| u.get_version_num()).ok(), Some(4));

    // A request id from the client (nginx) is kept and echoed.
    let resp = app.client.get(app.url("/no/such")).header("x-request-id", "from-nginx-42").send().await.unwrap();
    assert_eq!(resp.headers().get("x-request-id").unwrap(), "from-nginx-42");
    assert!(resp.headers().get("x-instance").is_some(), "errors carry it too");
}

#[tokio::test]
async fn health_and_ready_answer_200_when_dependencies_are_up() {
    let app = TestApp::spawn().await;
    expect_ok(app.get("/health", None).await).await;
    let ready = expect_ok(app.get("/ready", None).await).await;
    assert_eq!(ready["data"], "ready");
}

#[tokio::test]
async fn ready_is_503_when_mariadb_is_gone() {
    let app = TestApp::spawn().await;
    app.state.db.close().await;
    expect_error(app.get("/ready", None).await, StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE").await;
    expect_ok(app.get("/health", None).await).await;
}

#[tokio::test]
async fn a_missing_jwt_secret_is_a_clear_startup_error() {
    let (mut config, _, _) = common::test_config();
    config.auth.jwt_secret = String::new();
    let err = hmdp::startup::Application::build(config).await.err().expect("refuses to start");
    assert!(err.to_string().contains("JWT_SECRET"), "{err}");
}

#[tokio::test]
async fn when_redis_is_unreachable_ready_and_protected_routes_answer_503() {
    let proxy = common::proxy::Proxy::to_redis().await;
    let redis_url = proxy.redis_url();
    let app = TestApp::spawn_with(|c| {
        c.redis.url = redis_url;
        c.redis.cluster_nodes = None;
    })
    .await;
    let token = app.login("13900000077").await;
    expect_ok(app.get("/user/me", Some(&token)).await).await;

    proxy.cut();
    expect_error(app.get("/ready", None).await, StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE").await;
    // Not a misleading 401: the session could not be looked up at all.
    expect_error(app.get("/user/me", Some(&token)).await, StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE").await;
    expect_error(app.send_code("13900000078").await, StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE").await;
    // Without a token there is nothing to look up: still 401.
    expect_error(app.get("/user/me", None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    expect_ok(app.get("/health", None).await).await;
}

#[tokio::test]
async fn a_course_database_without_the_safety_constraints_is_refused_at_start_up() {
    use sqlx::Connection;
    let (config, database, _) = common::test_config();
    let mut conn =
        sqlx::MySqlConnection::connect(&format!("{}/information_schema", common::database_server_url())).await.unwrap();
    // The course's own tables, as its SQL script makes them: no unique
    // (user_id, voucher_id), no stock check.
    sqlx::raw_sql(&format!(
        "CREATE DATABASE `{database}`;
         CREATE TABLE `{database}`.tb_seckill_voucher (
             voucher_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, stock INT NOT NULL,
             create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, begin_time DATETIME NOT NULL,
             end_time DATETIME NOT NULL, update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP);
         CREATE TABLE `{database}`.tb_voucher_order (
             id BIGINT NOT NULL PRIMARY KEY, user_id BIGINT UNSIGNED NOT NULL, voucher_id BIGINT UNSIGNED NOT NULL,
             pay_type TINYINT UNSIGNED NOT NULL DEFAULT 1, status TINYINT UNSIGNED NOT NULL DEFAULT 1,
             create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, pay_time DATETIME NULL, use_time DATETIME NULL,
             refund_time DATETIME NULL, update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP);"
    ))
    .execute(&mut conn)
    .await
    .unwrap();

    let refused = hmdp::startup::Application::build(config).await.err().map(|e| format!("{e:#}"));
    sqlx::raw_sql(&format!("DROP DATABASE `{database}`")).execute(&mut conn).await.unwrap();
    let err = refused.expect("refuses to serve");
    // The one-live-order migration gives the orders table its unique index;
    // the stock check is still missing.
    assert!(err.contains("CHECK (stock >= 0)"), "{err}");
}

#[tokio::test]
async fn course_style_requests_get_business_failures_as_200_and_401_stays_401() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(0).await;
    let token = app.login(&phone(9_300)).await;
    let client = reqwest::Client::new();
    let order = |style: Option<&'static str>, token: Option<String>| {
        let mut req = client.post(app.url(&format!("/voucher-order/seckill/{voucher}")));
        if let Some(style) = style {
            req = req.header("x-api-style", style);
        }
        if let Some(token) = token {
            req = req.header("authorization", token);
        }
        req.send()
    };
    let rest = order(None, Some(token.clone())).await.unwrap();
    assert_eq!(rest.status(), StatusCode::CONFLICT);
    let course = order(Some("course"), Some(token.clone())).await.unwrap();
    assert_eq!(course.status(), StatusCode::OK);
    let body: Value = course.json().await.unwrap();
    assert_eq!(body["success"], false);
    assert_eq!(body["errorCode"], "SOLD_OUT");
    assert!(body["errorMsg"].as_str().is_some_and(|m| !m.is_empty()));
    let anonymous = order(Some("course"), None).await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let bad = client.post(app.url("/user/code?phone=123")).header("x-api-style", "course").send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::OK);
    assert_eq!(bad.json::<Value>().await.unwrap()["errorCode"], "VALIDATION");
}

/// Requests the instance works on until the returned transaction ends:
/// orders of a voucher whose stock row is held from outside, each stuck at
/// the row in its handler. (A request whose body has not all arrived no
/// longer counts: bodies are read whole before a request takes a place.)
async fn hold_requests(app: &TestApp, count: u32) -> sqlx::Transaction<'static, sqlx::MySql> {
    use redis::AsyncCommands;
    let voucher = app.open_seckill(10).await;
    let row = app.hold_stock_row(voucher).await;
    let users = app.seed_users(count).await;
    for (_, token) in users.clone() {
        let (client, url) = (app.client.clone(), app.url(&format!("/voucher-order/seckill/{voucher}")));
        tokio::spawn(async move { client.post(url).header("authorization", token).send().await });
    }
    // Each is in its handler, its places taken, once it holds its lock.
    let mut redis = app.redis.clone();
    for (user, _) in users {
        let lock = app.keys.order_lock(user);
        let started = std::time::Instant::now();
        while !redis.exists::<_, bool>(&lock).await.unwrap() {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "the held order never took its lock");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    row
}

#[tokio::test]
async fn an_instance_at_its_cap_answers_the_next_request_503_overloaded_at_once_and_health_still_answers() {
    let app = TestApp::spawn_with(|c| c.server.max_in_flight = 2).await;
    let held = hold_requests(&app, 2).await;

    // The held requests never finish; an answer while they are held is one
    // that did not wait for them. (They reach the handler a moment after
    // their headers: ask until the instance is full.)
    let refused = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let resp = app.get("/user/me", None).await;
            if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
                break resp;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the third request is refused while two are held");
    assert_eq!(refused.headers().get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    let body = expect_error(refused, StatusCode::SERVICE_UNAVAILABLE, "OVERLOADED").await;
    assert!(body["errorMsg"].as_str().unwrap().contains("retry"), "{body}");

    // Liveness and scrapes are never refused: a full instance is not dead.
    expect_ok(app.get("/health", None).await).await;
    assert_eq!(app.get("/metrics", None).await.status(), StatusCode::OK);

    // Held requests that end free their places.
    held.rollback().await.unwrap();
    let served = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let resp = app.get("/user/me", None).await;
            if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
                break resp;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the places come free");
    expect_error(served, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn past_its_cap_on_work_a_request_waits_in_line_and_is_served_when_a_place_comes_free() {
    let app = TestApp::spawn_with(|c| {
        c.server.max_in_flight = 10;
        c.server.max_working = 1;
    })
    .await;
    let held = hold_requests(&app, 1).await;

    // The only place for work is taken by the held request: the next one
    // is neither refused nor served while it holds it...
    let next = tokio::spawn({
        let (client, url) = (app.client.clone(), app.url("/user/me"));
        async move { client.get(url).send().await.unwrap() }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!next.is_finished(), "a request past the cap on work waits in line");
    // ...liveness skips the line...
    expect_ok(app.get("/health", None).await).await;
    // ...and when the place comes free, the one in line is served.
    held.rollback().await.unwrap();
    let served = tokio::time::timeout(std::time::Duration::from_secs(10), next)
        .await
        .expect("served once the place came free")
        .unwrap();
    expect_error(served, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}
