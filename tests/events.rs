//! Order events in the outbox, black-box on every order path: each change
//! of an order (created, paid, used, cancelled, refunded, expired, failed)
//! leaves exactly one event row, written in the change's own transaction,
//! in the order the changes committed; a crowd's orders leave one
//! `created` each and nothing for an order that does not exist; with
//! `ORDER_EVENTS=off` nothing is written.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use common::{ADMIN_KEY, OrderPath, TestApp, expect_ok, tally};
use hmdp::config::OrderEvents;
use reqwest::Response;
use serde_json::json;

async fn app_with_events(path: OrderPath, pay_timeout_s: u64) -> TestApp {
    TestApp::spawn_on_with(path, |c| {
        c.events.order_events = OrderEvents::Nats;
        c.orders.order_pay_timeout_s = pay_timeout_s;
    })
    .await
}

async fn act(app: &TestApp, order: &str, what: &str, token: &str) -> Response {
    let mut req = app.client.post(app.url(&format!("/voucher-order/{order}/{what}")));
    req = if what == "use" { req.header("x-admin-key", ADMIN_KEY) } else { req.header("authorization", token) };
    if what == "pay" {
        req = req.json(&json!({ "payType": 1 }));
    }
    req.send().await.unwrap()
}

/// Orders one unit and waits for its row (the asynchronous mode persists
/// after answering).
async fn bought(app: &TestApp, voucher: u64, token: &str) -> i64 {
    let id: i64 = expect_ok(app.order(voucher, token).await).await["data"].as_str().unwrap().parse().unwrap();
    let started = Instant::now();
    while rows_of(app, &[id]).await == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "order {id} never landed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    id
}

async fn rows_of(app: &TestApp, ids: &[i64]) -> i64 {
    let mut total = 0;
    for id in ids {
        let found: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_voucher_order WHERE id = ?")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .unwrap();
        total += found;
    }
    total
}

/// Each order's events as written: order id -> [(type, state)] in `seq`
/// order, with the buyer and voucher each names checked against `owner`.
async fn events(app: &TestApp) -> BTreeMap<i64, Vec<(String, String)>> {
    let rows: Vec<(i64, u64, u64, String, String)> =
        sqlx::query_as("SELECT order_id, user_id, voucher_id, type, state FROM tb_order_outbox ORDER BY seq")
            .fetch_all(&app.db)
            .await
            .unwrap();
    let mut by_order: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    for (order, user, voucher, kind, state) in rows {
        let owner: Option<(u64, u64)> = sqlx::query_as("SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = ?")
            .bind(order)
            .fetch_optional(&app.db)
            .await
            .unwrap();
        if kind != "failed" {
            assert_eq!(owner, Some((user, voucher)), "event {kind} of order {order} names another owner, or no row");
        }
        by_order.entry(order).or_default().push((kind, state));
    }
    by_order
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

on_every_path!(
    each_change_of_an_order_writes_one_event_in_the_order_the_changes_committed,
    a_crowds_orders_leave_one_created_event_each_and_none_for_a_refused_buyer,
    an_unpaid_order_past_its_deadline_writes_expired,
);

async fn each_change_of_an_order_writes_one_event_in_the_order_the_changes_committed(path: OrderPath) {
    let app = app_with_events(path, 900).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(3).await;
    let (used, cancelled, refunded) = (users[0].1.as_str(), users[1].1.as_str(), users[2].1.as_str());
    let a = bought(&app, voucher, used).await;
    let b = bought(&app, voucher, cancelled).await;
    let c = bought(&app, voucher, refunded).await;
    for (order, token, steps) in
        [(a, used, &["pay", "use"][..]), (b, cancelled, &["cancel"][..]), (c, refunded, &["pay", "refund"][..])]
    {
        for step in steps {
            expect_ok(act(&app, &order.to_string(), step, token).await).await;
            // Again: answered as done, and no second event.
            expect_ok(act(&app, &order.to_string(), step, token).await).await;
        }
    }
    let written = events(&app).await;
    assert_eq!(written[&a], pairs(&[("created", "UNPAID"), ("paid", "PAID"), ("used", "USED")]), "{path:?}");
    assert_eq!(written[&b], pairs(&[("created", "UNPAID"), ("cancelled", "CANCELLED")]), "{path:?}");
    assert_eq!(written[&c], pairs(&[("created", "UNPAID"), ("paid", "PAID"), ("refunded", "REFUNDED")]), "{path:?}");
    assert_eq!(written.len(), 3, "{path:?}: no event for an order that does not exist: {written:?}");
}

/// A buyer the database refuses (a poison order) orders first, then
/// fifty-nine race for the forty units. Every row has its one `created` event, the
/// refused order none in the synchronous mode, and in the asynchronous
/// mode (where it was answered 202 and then dead-lettered) one `failed`.
async fn a_crowds_orders_leave_one_created_event_each_and_none_for_a_refused_buyer(path: OrderPath) {
    let app = app_with_events(path, 900).await;
    let voucher = app.open_seckill(40).await;
    let users = app.seed_users(60).await;
    let (refused_user, refused_token) = users[0].clone();
    app.refuse_orders_of(refused_user).await;
    // First, so that the asynchronous mode surely accepts it.
    let refused = app.order_all(voucher, &[refused_token.as_str()]).await.remove(0);
    let tokens: Vec<&str> = users[1..].iter().map(|(_, t)| t.as_str()).collect();
    let counts = tally(&app.order_all(voucher, &tokens).await);
    if path.is_async() {
        let report = app.drained(voucher, Duration::from_secs(20)).await;
        assert!(report.agrees(), "{}", report.render());
    }
    let rows: Vec<(i64, u64)> = sqlx::query_as("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ?")
        .bind(voucher)
        .fetch_all(&app.db)
        .await
        .unwrap();
    // The asynchronous mode took a unit for the refused order, given back
    // once it was dead-lettered, after the crowd had sold out.
    let sold = if path.is_async() { 39 } else { 40 };
    assert_eq!(rows.len(), sold, "{path:?}: {counts:?}");
    let written = events(&app).await;
    for (id, _) in &rows {
        assert_eq!(written.get(id), Some(&pairs(&[("created", "UNPAID")])), "{path:?}: order {id}");
    }
    let without_row: Vec<(i64, &Vec<(String, String)>)> =
        written.iter().filter(|(id, _)| !rows.iter().any(|(row, _)| row == *id)).map(|(id, e)| (*id, e)).collect();
    if path.is_async() {
        // Answered 202, then dead-lettered: its one event says so.
        let order: i64 = refused.order_id.as_ref().expect("accepted").parse().unwrap();
        assert_eq!(without_row, vec![(order, &pairs(&[("failed", "FAILED")]))], "{path:?}");
    } else {
        assert!(refused.order_id.is_none(), "{path:?}: {refused:?}");
        assert!(without_row.is_empty(), "{path:?}: events without a row: {without_row:?}");
    }
}

async fn an_unpaid_order_past_its_deadline_writes_expired(path: OrderPath) {
    let app = app_with_events(path, 1).await;
    let voucher = app.open_seckill(2).await;
    let users = app.seed_users(1).await;
    let order = bought(&app, voucher, &users[0].1).await;
    let started = Instant::now();
    loop {
        let written = events(&app).await;
        if written.get(&order).is_some_and(|e| e.len() == 2) {
            assert_eq!(written[&order], pairs(&[("created", "UNPAID"), ("expired", "CANCELLED")]), "{path:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{path:?}: never expired: {written:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn with_order_events_off_no_event_is_written() {
    let app = TestApp::spawn_on(OrderPath::Grouped).await;
    let voucher = app.open_seckill(3).await;
    let users = app.seed_users(2).await;
    let order = bought(&app, voucher, &users[0].1).await;
    expect_ok(act(&app, &order.to_string(), "pay", &users[0].1).await).await;
    let written: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap();
    assert_eq!(written, 0);
}
