//! `Idempotency-Key` on the order route and on voucher creation, black-box:
//! a retry gets the first answer, whichever instance it reaches; a key
//! still running is a 409, a key reused for another request a 422; answers
//! that say nothing final are not kept.

use hmdp_test_support as common;

use std::time::Duration;

use common::{ADMIN_KEY, Api, OrderPath, TestApp, expect_error, expect_ok, on_every_path, seckill_body};
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};

async fn order_with_key(app: &Api, voucher: u64, token: &str, key: &str) -> Response {
    app.client
        .post(app.url(&format!("/voucher-order/seckill/{voucher}")))
        .header("authorization", token)
        .header("idempotency-key", key)
        .send()
        .await
        .unwrap()
}

fn replayed(resp: &Response) -> bool {
    resp.headers().get("idempotent-replayed").is_some_and(|v| v == "true")
}

#[tokio::test]
async fn a_retried_order_gets_its_first_answer_from_either_instance_and_makes_no_second_row() {
    let app = TestApp::spawn().await;
    let peer = app.spawn_peer(|_| {}).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(2).await;
    let (_, token) = &users[0];

    let first = order_with_key(&app, voucher, token, "key-1").await;
    assert!(!replayed(&first));
    let id = expect_ok(first).await["data"].clone();
    for target in [&app, &peer, &app] {
        let again = order_with_key(target, voucher, token, "key-1").await;
        assert!(replayed(&again), "{:?}", again.headers());
        assert_eq!(expect_ok(again).await["data"], id, "the first answer, again");
    }
    assert_eq!(app.orders_of(voucher).await, (1, 1));

    // The key is the user's own: another user's same key is another request.
    expect_ok(order_with_key(&app, voucher, &users[1].1, "key-1").await).await;
    assert_eq!(app.orders_of(voucher).await, (2, 2));

    // The same key for another voucher is refused, and orders nothing.
    let other = app.open_seckill(5).await;
    expect_error(
        order_with_key(&app, other, token, "key-1").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "IDEMPOTENCY_KEY_REUSED",
    )
    .await;
    assert_eq!(app.orders_of(other).await, (0, 0));
}

#[tokio::test]
async fn a_failure_is_replayed_too_while_a_new_key_is_asked_afresh() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(0).await;
    let users = app.seed_users(1).await;
    let token = &users[0].1;
    expect_error(order_with_key(&app, voucher, token, "sold-out").await, StatusCode::CONFLICT, "SOLD_OUT").await;
    expect_ok(app.set_stock(voucher, json!(1)).await).await;
    let again = order_with_key(&app, voucher, token, "sold-out").await;
    assert!(replayed(&again));
    expect_error(again, StatusCode::CONFLICT, "SOLD_OUT").await;
    expect_ok(order_with_key(&app, voucher, token, "fresh").await).await;
}

#[tokio::test]
async fn the_same_key_while_its_first_request_runs_is_a_conflict_and_a_503_is_not_kept() {
    let app = TestApp::spawn_with(|c| c.seckill.request_deadline_ms = 1_500).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(1).await;
    let token = users[0].1.clone();

    // The first order waits at the held row; its twin is told to wait.
    let held = app.hold_stock_row(voucher).await;
    let api = app.api.clone();
    let first = {
        let token = token.clone();
        tokio::spawn(async move { order_with_key(&api, voucher, &token, "slow").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    expect_error(order_with_key(&app, voucher, &token, "slow").await, StatusCode::CONFLICT, "IDEMPOTENCY_IN_FLIGHT")
        .await;
    // The held row outlasts the deadline: 503, nothing committed, not kept.
    expect_error(first.await.unwrap(), StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE").await;
    held.rollback().await.unwrap();
    let retried = order_with_key(&app, voucher, &token, "slow").await;
    assert!(!replayed(&retried), "a 503 says nothing final: the retry runs");
    let id = expect_ok(retried).await["data"].clone();
    let again = order_with_key(&app, voucher, &token, "slow").await;
    assert_eq!(expect_ok(again).await["data"], id);
    assert_eq!(app.orders_of(voucher).await, (1, 1));
}

#[tokio::test]
async fn twenty_racing_retries_of_one_key_make_one_order_and_every_success_names_it() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(1).await;
    let token = &users[0].1;
    let answers = futures::future::join_all((0..20).map(|_| order_with_key(&app, voucher, token, "race"))).await;
    let mut ids = std::collections::BTreeSet::new();
    for resp in answers {
        match resp.status() {
            StatusCode::OK => {
                ids.insert(expect_ok(resp).await["data"].as_str().unwrap().to_owned());
            }
            _ => {
                expect_error(resp, StatusCode::CONFLICT, "IDEMPOTENCY_IN_FLIGHT").await;
            }
        }
    }
    assert_eq!(ids.len(), 1, "one order, named by every success: {ids:?}");
    assert_eq!(app.orders_of(voucher).await, (1, 1));
}

#[tokio::test]
async fn bad_keys_are_refused_in_the_envelope() {
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(1).await;
    for bad in [String::new(), "k".repeat(256), "with space".to_owned()] {
        expect_error(order_with_key(&app, voucher, &users[0].1, &bad).await, StatusCode::BAD_REQUEST, "VALIDATION")
            .await;
    }
    // 255 is fine.
    expect_ok(order_with_key(&app, voucher, &users[0].1, &"k".repeat(255)).await).await;
}

async fn create_with_key(app: &TestApp, body: &Value, key: &str) -> Response {
    app.client
        .post(app.url("/voucher/seckill"))
        .header("x-admin-key", ADMIN_KEY)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_retried_voucher_creation_makes_one_voucher_and_another_body_under_its_key_is_refused() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now();
    let body = seckill_body(
        7,
        &(now - chrono::Duration::minutes(1)).to_rfc3339(),
        &(now + chrono::Duration::hours(1)).to_rfc3339(),
    );
    let first = expect_ok(create_with_key(&app, &body, "create-1").await).await["data"].clone();
    let again = create_with_key(&app, &body, "create-1").await;
    assert!(replayed(&again));
    assert_eq!(expect_ok(again).await["data"], first);
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_seckill_voucher").fetch_one(&app.db).await.unwrap();
    assert_eq!(count, 1);

    let mut other = body.clone();
    other["stock"] = json!(8);
    expect_error(
        create_with_key(&app, &other, "create-1").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "IDEMPOTENCY_KEY_REUSED",
    )
    .await;
    // A wrong admin key claims nothing: the right one still creates.
    let wrong = app
        .client
        .post(app.url("/voucher/seckill"))
        .header("x-admin-key", "not-the-key-not-the-key-not")
        .header("idempotency-key", "create-2")
        .json(&other)
        .send()
        .await
        .unwrap();
    expect_error(wrong, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    let second = expect_ok(create_with_key(&app, &other, "create-2").await).await["data"].clone();
    assert_ne!(second, first);
}

#[tokio::test]
async fn a_running_request_keeps_its_key_past_the_claim_bound_and_a_dead_ones_key_lapses() {
    let app = TestApp::spawn_with(|c| c.seckill.request_deadline_ms = 9_000).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(2).await;
    let token = users[0].1.clone();

    // A request held for 6.5 s at the row renews its 5 s claim meanwhile.
    let held = app.hold_stock_row(voucher).await;
    let api = app.api.clone();
    let first = {
        let token = token.clone();
        tokio::spawn(async move { order_with_key(&api, voucher, &token, "long").await })
    };
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    expect_error(order_with_key(&app, voucher, &token, "long").await, StatusCode::CONFLICT, "IDEMPOTENCY_IN_FLIGHT")
        .await;
    held.rollback().await.unwrap();
    let id = expect_ok(first.await.unwrap()).await["data"].clone();
    assert_eq!(expect_ok(order_with_key(&app, voucher, &token, "long").await).await["data"], id);

    // The claim of a request whose instance died is never renewed: it
    // lapses within the bound, and the retry runs.
    let (other_user, other_token) = users[1].clone();
    let claim = json!({ "request": format!("order voucher {voucher}"), "claim": "of-a-dead-instance" }).to_string();
    let key = app.keys.idempotency(&format!("user:{other_user}"), "orphan");
    let _: () =
        redis::cmd("SET").arg(&key).arg(&claim).arg("PX").arg(5_000).query_async(&mut app.redis.clone()).await.unwrap();
    expect_error(
        order_with_key(&app, voucher, &other_token, "orphan").await,
        StatusCode::CONFLICT,
        "IDEMPOTENCY_IN_FLIGHT",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    expect_ok(order_with_key(&app, voucher, &other_token, "orphan").await).await;
    assert_eq!(app.orders_of(voucher).await, (2, 2));
}

/// The first attempt's order stands but its answer was lost (its instance
/// died between the commit and the answer, as when its machine is lost):
/// the retry under the same key is told of that order, even though the
/// voucher sold out meanwhile, and makes no second one.
async fn a_retry_whose_first_attempts_answer_was_lost_is_told_of_its_order_even_once_sold_out(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(1).await;
    let users = app.seed_users(1).await;
    let (user, token) = users[0].clone();
    let id = expect_ok(order_with_key(&app, voucher, &token, "lost-answer").await).await["data"].clone();
    app.settled(path, voucher).await;
    // The answer never kept: the record goes as a lapsed claim goes.
    let record = app.keys.idempotency(&format!("user:{user}"), "lost-answer");
    let _: () = redis::cmd("DEL").arg(&record).query_async(&mut app.redis.clone()).await.unwrap();

    let retried = order_with_key(&app, voucher, &token, "lost-answer").await;
    assert!(!replayed(&retried), "no answer was kept: the retry runs");
    let body = expect_error(retried, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    assert_eq!(body["data"], id, "{path:?}: the retry names the order its first attempt placed");
    // A new key is a new click, answered as any: by whichever of the stock
    // and the buyer check its path makes first.
    let other = order_with_key(&app, voucher, &token, "a-new-click").await;
    assert_eq!(other.status(), StatusCode::CONFLICT, "{path:?}");
    let code = other.json::<Value>().await.unwrap()["errorCode"].clone();
    assert!(code == "SOLD_OUT" || code == "DUPLICATE_ORDER", "{path:?}: {code}");
    app.settled(path, voucher).await;
    assert_eq!(app.orders_of(voucher).await, (1, 1), "{path:?}");
}

on_every_path!(a_retry_whose_first_attempts_answer_was_lost_is_told_of_its_order_even_once_sold_out);
