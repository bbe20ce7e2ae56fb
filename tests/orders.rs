//! What every order path must do, written once and run on each: the
//! synchronous mode with group commit and with one transaction per order,
//! and the asynchronous mode (answers first, rows after the drain, and then
//! Redis and MariaDB must agree). Audited in the tables.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::collections::BTreeSet;

use chrono::{Duration as ChronoDuration, Utc};
use common::{OrderPath, TestApp, expect_error, expect_ok, tally};
use reqwest::StatusCode;

on_every_path!(
    two_thousand_users_racing_for_five_hundred_get_exactly_five_hundred_orders,
    one_user_firing_fifty_concurrent_orders_gets_exactly_one,
    a_user_who_already_ordered_gets_duplicate_order_later,
    an_order_is_visible_to_its_owner_only,
    orders_outside_the_window_or_for_unknown_vouchers_are_refused,
    a_sold_out_voucher_answers_sold_out,
    a_duplicate_answer_names_the_order_held_and_mine_lists_the_orders_newest_first,
    an_unknown_voucher_is_remembered_so_a_flood_of_it_does_not_reach_mariadb,
    a_new_voucher_ignores_keys_another_database_left_under_its_id,
);

async fn two_thousand_users_racing_for_five_hundred_get_exactly_five_hundred_orders(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(500).await;
    let users = app.seed_users(2_000).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();

    let outcomes = app.order_all(voucher, &tokens).await;
    let counts = tally(&outcomes);
    assert_eq!(counts.get("OK"), Some(&500), "{counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&1_500), "{counts:?}");
    assert_eq!(counts.len(), 2, "nothing else: {counts:?}");

    if let Some(report) = app.settled(path, voucher).await {
        assert_eq!(report.redis_stock, Some(0));
        assert_eq!(report.dead_letters, 0);
    }
    assert_eq!(app.stock_of(voucher).await, 0);
    assert_eq!(app.orders_of(voucher).await, (500, 500), "(orders, distinct users)");
    let answered: BTreeSet<String> = outcomes.iter().filter_map(|o| o.order_id.clone()).collect();
    assert_eq!(app.order_ids_of(voucher).await, answered, "every success answer has its row, and only those");
}

async fn one_user_firing_fifty_concurrent_orders_gets_exactly_one(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(100).await;
    let (_, token) = app.seed_users(1).await.remove(0);

    let outcomes = tally(&app.order_all(voucher, &vec![token; 50]).await);

    assert_eq!(outcomes.get("OK"), Some(&1), "{outcomes:?}");
    if path.is_async() {
        // One script decides each: no lock to be refused at.
        assert_eq!(outcomes.get("DUPLICATE_ORDER"), Some(&49), "{outcomes:?}");
    }
    let refused = outcomes.get("TOO_MANY_REQUESTS").unwrap_or(&0) + outcomes.get("DUPLICATE_ORDER").unwrap_or(&0);
    assert_eq!(refused, 49, "{outcomes:?}");
    app.settled(path, voucher).await;
    assert_eq!(app.orders_of(voucher).await, (1, 1));
    assert_eq!(app.stock_of(voucher).await, 99);
}

async fn a_user_who_already_ordered_gets_duplicate_order_later(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(10).await;
    let (user_id, token) = app.seed_users(1).await.remove(0);

    let first = expect_ok(app.order(voucher, &token).await).await;
    let order_id = first["data"].as_str().unwrap().to_owned();
    let refused = expect_error(app.order(voucher, &token).await, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    assert_eq!(refused["data"], order_id.as_str(), "the refusal names the order held: {refused}");
    app.settled(path, voucher).await;
    assert_eq!(app.stock_of(voucher).await, 9, "the refused order took no stock");

    // The order as its owner sees it.
    let shown = expect_ok(app.get(&format!("/voucher-order/{order_id}"), Some(&token)).await).await;
    assert_eq!(shown["data"]["id"], order_id.as_str(), "ids are strings");
    assert_eq!(shown["data"]["userId"], user_id);
    assert_eq!(shown["data"]["voucherId"], voucher);
    let created = shown["data"]["createTime"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(created).is_ok() && created.ends_with("+00:00"), "{created}");
}

async fn an_order_is_visible_to_its_owner_only(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(10).await;
    let users = app.seed_users(2).await;
    let placed = expect_ok(app.order(voucher, &users[0].1).await).await;
    let path_of_order = format!("/voucher-order/{}", placed["data"].as_str().unwrap());

    // Pending or persisted alike (asynchronous mode: at once, then after
    // the drain).
    for _ in 0..2 {
        expect_ok(app.get(&path_of_order, Some(&users[0].1)).await).await;
        expect_error(app.get(&path_of_order, Some(&users[1].1)).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
        app.settled(path, voucher).await;
    }
    expect_error(app.get("/voucher-order/123456789", Some(&users[0].1)).await, StatusCode::NOT_FOUND, "NOT_FOUND")
        .await;
    expect_error(
        app.get("/voucher-order/not-a-number", Some(&users[0].1)).await,
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;
    expect_error(app.get(&path_of_order, None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}

async fn orders_outside_the_window_or_for_unknown_vouchers_are_refused(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let now = Utc::now();
    let future = app.create_seckill(10, now + ChronoDuration::hours(1), now + ChronoDuration::hours(2)).await;
    let past = app.create_seckill(10, now - ChronoDuration::hours(2), now - ChronoDuration::hours(1)).await;
    let (_, token) = app.seed_users(1).await.remove(0);

    expect_error(app.order(future, &token).await, StatusCode::CONFLICT, "NOT_STARTED").await;
    expect_error(app.order(past, &token).await, StatusCode::CONFLICT, "ENDED").await;
    expect_error(app.order(999_999, &token).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    expect_error(app.post("/voucher-order/seckill/abc", Some(&token)).await, StatusCode::BAD_REQUEST, "VALIDATION")
        .await;
    expect_error(app.order(future, "no-such-token").await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    expect_error(
        app.post(&format!("/voucher-order/seckill/{future}"), None).await,
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
    )
    .await;
    assert_eq!(app.stock_of(future).await, 10);
    assert_eq!(app.stock_of(past).await, 10);
    if path.is_async() {
        // The window is enforced in the order script against loaded keys;
        // an ended sale with nothing to persist is not loaded at all.
        assert_eq!(app.reconcile(future).await.redis_stock, Some(10));
        assert_eq!(app.reconcile(past).await.redis_stock, None);
    }
}

async fn a_sold_out_voucher_answers_sold_out(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(1).await;
    let users = app.seed_users(3).await;
    expect_ok(app.order(voucher, &users[0].1).await).await;
    expect_error(app.order(voucher, &users[1].1).await, StatusCode::CONFLICT, "SOLD_OUT").await;
    expect_error(app.order(voucher, &users[2].1).await, StatusCode::CONFLICT, "SOLD_OUT").await;
    let zero = app.open_seckill(0).await;
    expect_error(app.order(zero, &users[1].1).await, StatusCode::CONFLICT, "SOLD_OUT").await;
    app.settled(path, voucher).await;
    assert_eq!(app.orders_of(voucher).await, (1, 1));
}

async fn a_duplicate_answer_names_the_order_held_and_mine_lists_the_orders_newest_first(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let vouchers = [app.open_seckill(5).await, app.open_seckill(5).await, app.open_seckill(5).await];
    let (_, token) = app.seed_users(1).await.remove(0);
    let mut placed = Vec::new();
    for voucher in vouchers {
        placed.push(expect_ok(app.order(voucher, &token).await).await["data"].as_str().unwrap().to_owned());
    }
    let again = expect_error(app.order(vouchers[1], &token).await, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    assert_eq!(again["data"], placed[1].as_str(), "the order held: {again}");

    let page = expect_ok(app.get("/voucher-order/mine?page=1&pageSize=2", Some(&token)).await).await;
    assert_eq!(page["total"], 3);
    let ids: Vec<&str> = page["data"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [placed[2].as_str(), placed[1].as_str()], "newest first");
    let rest = expect_ok(app.get("/voucher-order/mine?page=2&pageSize=2", Some(&token)).await).await;
    assert_eq!(rest["data"][0]["id"], placed[0].as_str());
    assert_eq!(rest["data"].as_array().unwrap().len(), 1);
    for bad in ["?page=0", "?pageSize=101", "?page=x", "?size=3"] {
        expect_error(
            app.get(&format!("/voucher-order/mine{bad}"), Some(&token)).await,
            StatusCode::BAD_REQUEST,
            "VALIDATION",
        )
        .await;
    }
    expect_error(app.get("/voucher-order/mine", None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}

async fn an_unknown_voucher_is_remembered_so_a_flood_of_it_does_not_reach_mariadb(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let (_, token) = app.seed_users(1).await.remove(0);
    expect_error(app.order(424_242, &token).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    // With MariaDB gone, only the memory can answer.
    app.state.db.close().await;
    expect_error(app.order(424_242, &token).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}

/// A Redis that outlived its database: keys under the id a new voucher
/// gets belong to another voucher, in either mode.
async fn a_new_voucher_ignores_keys_another_database_left_under_its_id(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let last: Option<u64> = sqlx::query_scalar("SELECT MAX(id) FROM tb_voucher").fetch_one(&app.db).await.unwrap();
    let next = last.unwrap_or(0) + 1;
    // What a sold-out sale of another database left under that id: no
    // stock, a buyer, and an order still pending in its stream.
    let sk = app.keys.seckill(next);
    let mut redis = app.redis.clone();
    let far = chrono::Utc::now().timestamp_millis() + 3_600_000;
    redis::pipe()
        .set(&sk.stock, 0)
        .hset_multiple(&sk.window, &[("begin", 0), ("end", far)])
        .sadd(&sk.buyers, &[0u64, 999_999])
        .hset(&sk.pending, 424_242, "999999:1")
        .xadd(&sk.orders, "*", &[("id", "424242"), ("userId", "999999"), ("voucherId", "1"), ("ts", "1")])
        .exec_async(&mut redis)
        .await
        .unwrap();

    let voucher = app.open_seckill(3).await;
    assert_eq!(voucher, next, "the voucher got the id the stale keys were left under");
    let users = app.seed_users(3).await;
    for (_, token) in &users {
        expect_ok(app.order(voucher, token).await).await;
    }
    if app.settled(path, voucher).await.is_none() {
        // The synchronous mode keeps nothing of a voucher in Redis: the
        // stale keys are gone, so nothing there disagrees with MariaDB.
        assert_eq!(app.reconcile(voucher).await.redis_stock, None, "the stale keys are gone");
    }
    assert_eq!(app.orders_of(voucher).await, (3, 3), "its own three buyers, and no stale order");
    assert_eq!(app.stock_of(voucher).await, 0);
}
