//! The asynchronous seckill (`SECKILL_MODE=async`) through the HTTP API,
//! against real MariaDB and Redis: answers first, rows after the drain, and
//! then Redis and MariaDB must agree.

use hmdp_test_support as common;

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use chrono::{Duration as ChronoDuration, Utc};
use common::{OrderPath, TestApp, expect_error, expect_ok, tally};
use redis::AsyncCommands;
use reqwest::StatusCode;

/// Async mode with recovery bounds short enough for a test.
async fn async_app() -> TestApp {
    async_app_with(|_| {}).await
}

async fn async_app_with(adjust: impl FnOnce(&mut hmdp::config::Config)) -> TestApp {
    TestApp::spawn_on_with(OrderPath::Async, adjust).await
}

async fn state_of(app: &TestApp, order_id: &str, token: &str) -> String {
    let shown = expect_ok(app.get(&format!("/voucher-order/{order_id}"), Some(token)).await).await;
    shown["data"]["state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_order_is_pending_until_its_row_lands_then_confirmed() {
    let app = async_app().await;
    let voucher = app.open_seckill(5).await;
    let (user_id, token) = app.seed_users(1).await.remove(0);

    // Hold the voucher's row: the consumer's batch waits behind it.
    let held = app.hold_stock_row(voucher).await;

    let order_id = expect_ok(app.order(voucher, &token).await).await["data"].as_str().unwrap().to_owned();
    let shown = expect_ok(app.get(&format!("/voucher-order/{order_id}"), Some(&token)).await).await;
    assert_eq!(shown["data"]["state"], "PENDING", "{shown}");
    assert_eq!(shown["data"]["id"], order_id.as_str());
    assert_eq!(shown["data"]["userId"], user_id);
    assert_eq!(shown["data"]["voucherId"], voucher);
    // Someone else's token sees nothing.
    let (_, stranger) = app.seed_users(2).await.remove(1);
    expect_error(
        app.get(&format!("/voucher-order/{order_id}"), Some(&stranger)).await,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
    )
    .await;

    held.rollback().await.unwrap();
    app.drained(voucher, Duration::from_secs(10)).await;
    assert_eq!(state_of(&app, &order_id, &token).await, "CONFIRMED");
}

#[tokio::test]
async fn a_poison_order_is_dead_lettered_and_compensated_while_the_rest_of_its_batch_persists() {
    let app = async_app().await;
    let voucher = app.open_seckill(20).await;
    let users = app.seed_users(10).await;
    let (poisoned_user, poisoned_token) = users[3].clone();
    app.refuse_orders_of(poisoned_user).await;

    // Hold the row so all ten land in one batch.
    let held = app.hold_stock_row(voucher).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let outcomes = app.order_all(voucher, &tokens).await;
    assert_eq!(tally(&outcomes).get("OK"), Some(&10), "all accepted: {outcomes:?}");
    held.rollback().await.unwrap();

    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(report.dead_letters, 1);
    assert_eq!(report.redis_stock, Some(11), "the poisoned order's unit went back");
    assert_eq!(app.orders_of(voucher).await, (9, 9));
    assert_eq!(app.stock_of(voucher).await, 11);
    let buyers: BTreeSet<u64> = app.redis.clone().smembers(&app.keys.seckill(voucher).buyers).await.unwrap();
    assert!(!buyers.contains(&poisoned_user), "the buyer slot went back too");

    for ((user, token), outcome) in users.iter().zip(&outcomes) {
        let state = state_of(&app, outcome.order_id.as_ref().unwrap(), token).await;
        let expected = if *user == poisoned_user { "FAILED" } else { "CONFIRMED" };
        assert_eq!(state, expected, "user {user}");
    }
    // The poisoned user may try again (and is refused again by the trigger).
    expect_ok(app.order(voucher, &poisoned_token).await).await;
}

#[tokio::test]
async fn keys_deleted_mid_sale_are_rebuilt_from_mariadb_once_without_an_oversell() {
    let app = async_app().await;
    let peer = app.spawn_peer(|_| {}).await;
    let voucher = app.open_seckill(100).await;
    let users = app.seed_users(150).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();

    // The first fifty stay pending (not in MariaDB) while the keys are
    // rebuilt: the rebuild must count them from the pending hash.
    let held = app.hold_stock_row(voucher).await;
    let first = app.order_all(voucher, &tokens[..50]).await;
    assert_eq!(tally(&first).get("OK"), Some(&50));
    assert_eq!(app.orders_of(voucher).await, (0, 0), "still pending");
    let sk = app.keys.seckill(voucher);
    let _: () = app.redis.clone().del(&[&sk.stock, &sk.window, &sk.buyers]).await.unwrap();

    // Everyone at once, through both instances: both find the keys gone.
    let (a, b) = tokio::join!(app.order_all(voucher, &tokens[..75]), peer.order_all(voucher, &tokens[75..]));
    let counts = tally(&[a, b].concat());
    assert_eq!(counts.get("DUPLICATE_ORDER"), Some(&50), "the first fifty are still buyers: {counts:?}");
    assert_eq!(counts.get("OK"), Some(&50), "{counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&50), "{counts:?}");
    held.rollback().await.unwrap();

    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await, (100, 100));
    assert_eq!(app.stock_of(voucher).await, 0);
}

#[tokio::test]
async fn entries_of_an_instance_killed_mid_batch_are_taken_over_by_the_other_and_persisted_once() {
    // The first instance only makes the database; the killed one is a real
    // process, the survivor another in-process instance.
    let app = TestApp::spawn().await;
    let voucher = app.open_seckill(30).await;
    let users = app.seed_users(20).await;
    let config = &app.state.config;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut doomed = std::process::Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .arg("serve")
        .env("DATABASE_URL", config.db.url.as_str())
        .env("REDIS_URL", &config.redis.url)
        .env("REDIS_KEY_PREFIX", &config.redis.key_prefix)
        .env("JWT_SECRET", &config.auth.jwt_secret)
        .env("BIND_ADDR", format!("127.0.0.1:{port}"))
        .env("INSTANCE_ID", "doomed")
        .env("SECKILL_MODE", "async")
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let doomed_api = common::Api::new(format!("http://127.0.0.1:{port}"), common::ADMIN_KEY, 32);
    let started = Instant::now();
    while doomed_api.client.get(doomed_api.url("/ready")).send().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the doomed instance did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Its batch waits behind the held row; then it dies with the entries.
    let held = app.hold_stock_row(voucher).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let outcomes = doomed_api.order_all(voucher, &tokens).await;
    assert_eq!(tally(&outcomes).get("OK"), Some(&20), "{outcomes:?}");
    let sk = app.keys.seckill(voucher);
    let started = Instant::now();
    loop {
        let pending: redis::Value =
            redis::cmd("XPENDING").arg(&sk.orders).arg("orders").query_async(&mut app.redis.clone()).await.unwrap();
        let count: u64 = match &pending {
            redis::Value::Array(items) => redis::from_redis_value_ref(&items[0]).unwrap(),
            _ => 0,
        };
        // At least one batch was delivered to it (the rest may still be
        // unread in the stream; the survivor reads those as new).
        if count > 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the doomed instance never read its entries: {pending:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    doomed.kill().unwrap(); // SIGKILL
    doomed.wait().unwrap();

    let survivor = app.spawn_peer(|c| OrderPath::Async.configure(c)).await;
    held.rollback().await.unwrap();
    let report = survivor.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(report.dead_letters, 0);
    assert_eq!(app.orders_of(voucher).await, (20, 20), "nothing lost, nothing twice");
    assert_eq!(app.stock_of(voucher).await, 10);
    let answered: BTreeSet<String> = outcomes.iter().filter_map(|o| o.order_id.clone()).collect();
    assert_eq!(app.order_ids_of(voucher).await, answered);
}

/// What a call of the order script carries (`EVALSHA <its sha>`): a stall
/// from there on, not from the id block's script that comes before it.
fn order_script() -> Vec<u8> {
    redis::Script::new(include_str!("../lua/seckill_order.lua")).get_hash().as_bytes().to_vec()
}

#[tokio::test]
async fn an_order_whose_script_answer_is_lost_to_a_stalled_redis_is_answered_by_what_redis_holds() {
    let proxy = common::proxy::Proxy::to_redis().await;
    let app = TestApp::spawn_on_with(OrderPath::Async, |c| {
        common::redis_behind(&proxy, c);
    })
    .await;
    let voucher = app.open_seckill(5).await;
    let (user_id, token) = app.seed_users(1).await.remove(0);
    // From the order script on, longer than the 2 s response timeout: the
    // first call's answer is lost, and Redis runs that call once the stall
    // ends.
    proxy.stall_on(&order_script(), Duration::from_secs(3));
    let started = std::time::Instant::now();
    let placed = expect_ok(app.order(voucher, &token).await).await;
    assert!(proxy.stall_fired(), "Redis stalled at the order script");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "answered in {:?}: the first call's answer was not lost to the 2 s response timeout",
        started.elapsed()
    );
    let order_id = placed["data"].as_str().unwrap().to_owned();

    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await, (1, 1), "accepted once");
    let row: Option<u64> = sqlx::query_scalar("SELECT user_id FROM tb_voucher_order WHERE id = ?")
        .bind(order_id.parse::<i64>().unwrap())
        .fetch_optional(&app.db)
        .await
        .unwrap();
    assert_eq!(row, Some(user_id), "the answer names the order that exists");
}

#[tokio::test]
async fn an_order_no_replica_acknowledges_in_time_is_answered_202_with_its_id_and_is_still_persisted() {
    // No setup here has eight replicas: every WAIT runs out its 50 ms.
    let app = TestApp::spawn_on_with(OrderPath::Async, |c| {
        c.seckill.asynchronous.order_replica_acks = Some(8);
        c.seckill.asynchronous.order_replica_wait_ms = 50;
    })
    .await;
    let voucher = app.open_seckill(3).await;
    let users = app.seed_users(5).await;

    let first = app.order(voucher, &users[0].1).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let body: serde_json::Value = first.json().await.unwrap();
    let id = body["data"].as_str().expect("the order id, as a string").to_owned();
    assert_eq!(body["success"], true, "{body}");
    assert!(body["errorMsg"].as_str().unwrap().contains(&format!("GET /voucher-order/{id}")), "{body}");

    let tokens: Vec<&str> = users[1..].iter().map(|(_, t)| t.as_str()).collect();
    let outcomes = app.order_all(voucher, &tokens).await;
    let counts = tally(&outcomes);
    assert_eq!(counts.get("UNREPLICATED"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&2), "{counts:?}");

    // Accepted is accepted: every one of them becomes its row.
    let report = app.drained(voucher, Duration::from_secs(20)).await;
    assert!(report.agrees(), "{}", report.render());
    let mut answered: BTreeSet<String> = outcomes.iter().filter_map(|o| o.order_id.clone()).collect();
    answered.insert(id.clone());
    assert_eq!(app.order_ids_of(voucher).await, answered);
    assert_eq!(state_of(&app, &id, &users[0].1).await, "CONFIRMED");
}

#[tokio::test]
async fn an_order_answered_202_that_a_demoted_master_took_along_ends_failed_with_its_unit_back() {
    // No replica acknowledges: every order is answered 202, as on a master
    // cut off from its replica.
    let app = async_app_with(|c| {
        c.seckill.asynchronous.order_replica_acks = Some(8);
        c.seckill.asynchronous.order_replica_wait_ms = 50;
    })
    .await;
    let voucher = app.open_seckill(2).await;
    let users = app.seed_users(2).await;
    let (buyer, token) = (users[0].0, &users[0].1);
    // The row held: no batch persists the order before it is taken away.
    let held = app.hold_stock_row(voucher).await;
    let answer = app.order(voucher, token).await;
    assert_eq!(answer.status(), StatusCode::ACCEPTED);
    let id = answer.json::<serde_json::Value>().await.unwrap()["data"].as_str().unwrap().to_owned();

    // The cut-off master demoted: the replica promoted in its place never
    // saw the order, its entry, its buyer, nor the unit it took.
    let sk = app.keys.seckill(voucher);
    let redis = &mut app.redis.clone();
    let entries: redis::streams::StreamRangeReply = redis.xrange_all(&sk.orders).await.unwrap();
    let entry = entries.ids.iter().find(|e| e.get::<String>("id").as_deref() == Some(id.as_str())).unwrap();
    redis::pipe()
        .xdel(&sk.orders, &[&entry.id])
        .hdel(&sk.pending, &id)
        .hdel(&sk.holders, buyer)
        .srem(&sk.buyers, buyer)
        .incr(&sk.stock, 1)
        .exec_async(redis)
        .await
        .unwrap();
    held.rollback().await.unwrap();

    // Within a few rounds of the instance's watch, its buyer is told FAILED.
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of_or_missing(&app, &id, token).await != "FAILED" {
        assert!(Instant::now() < deadline, "order {id} never ended FAILED");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(app.orders_of(voucher).await.0, 0, "no row was written for it");
    // Its unit and its buyer's place are back: both users buy, and the
    // tables agree with Redis.
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let counts = tally(&app.order_all(voucher, &tokens).await);
    assert_eq!(counts.get("UNREPLICATED"), Some(&2), "{counts:?}");
    let report = app.drained(voucher, Duration::from_secs(20)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await.0, 2);
}

/// The order's state as its owner is told, or `MISSING` for a 404.
async fn state_of_or_missing(app: &TestApp, order_id: &str, token: &str) -> String {
    let answer = app.get(&format!("/voucher-order/{order_id}"), Some(token)).await;
    if answer.status() == StatusCode::NOT_FOUND {
        return "MISSING".into();
    }
    expect_ok(answer).await["data"]["state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn by_default_an_order_waits_only_for_replicas_that_exist_and_is_answered_200() {
    // One Redis: no replica, no wait. The local cluster: one replica per
    // master, which acknowledges within the bound.
    let app = async_app().await;
    let voucher = app.open_seckill(2).await;
    let users = app.seed_users(2).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let counts = tally(&app.order_all(voucher, &tokens).await);
    assert_eq!(counts.get("OK"), Some(&2), "{counts:?}");
}

#[tokio::test]
async fn an_accepted_order_whose_id_another_order_holds_is_dead_lettered_not_taken_for_persisted() {
    // A sequence that went backwards handed user B the id of user A's
    // order. The consumer used to find "a row with that id" and acknowledge
    // B's order as persisted: B lost it, and its unit with it.
    let app = async_app().await;
    let voucher = app.open_seckill(3).await;
    let users = app.seed_users(2).await;
    let (a, (b, b_token)) = (&users[0], (users[1].0, &users[1].1));
    let placed = expect_ok(app.order(voucher, &a.1).await).await;
    let taken_id = placed["data"].as_str().unwrap().to_owned();
    app.drained(voucher, Duration::from_secs(10)).await;

    // What the order script does when it accepts an order, for B under A's id.
    let sk = app.keys.seckill(voucher);
    let now = chrono::Utc::now().timestamp_millis().to_string();
    redis::pipe()
        .decr(&sk.stock, 1)
        .sadd(&sk.buyers, b)
        .hset(&sk.pending, &taken_id, format!("{b}:{now}"))
        .xadd(
            &sk.orders,
            "*",
            &[
                ("id", taken_id.as_str()),
                ("userId", &b.to_string()),
                ("voucherId", &voucher.to_string()),
                ("ts", now.as_str()),
            ],
        )
        .exec_async(&mut app.redis.clone())
        .await
        .unwrap();

    let report = app.drained(voucher, Duration::from_secs(20)).await;
    assert!(report.agrees(), "B's unit is back in Redis: {}", report.render());
    assert_eq!(state_of(&app, &taken_id, b_token).await, "FAILED", "B is told the order failed");
    assert_eq!(state_of(&app, &taken_id, &a.1).await, "CONFIRMED", "A's order is untouched");
    assert_eq!(app.orders_of(voucher).await, (1, 1));
}

#[tokio::test]
async fn orders_of_a_loaded_voucher_missing_from_the_active_set_are_persisted_once_reconcile_finds_it() {
    // A registration lost after the keys were loaded: the script accepts
    // orders that no consumer reads. Reconciliation registers it again.
    let app = async_app().await;
    let voucher = app.open_seckill(3).await;
    let _: () = app.redis.clone().srem(app.keys.seckill_active(), voucher).await.unwrap();
    let users = app.seed_users(2).await;
    for (_, token) in &users {
        expect_ok(app.order(voucher, token).await).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.orders_of(voucher).await, (0, 0), "nobody reads an unregistered voucher's stream");

    let first = app.reconcile(voucher).await;
    assert!(first.reregistered, "{}", first.render());
    let report = app.drained(voucher, Duration::from_secs(10)).await;
    assert!(report.agrees(), "{}", report.render());
    assert!(!report.reregistered, "registered once");
    assert_eq!(app.orders_of(voucher).await, (2, 2));
}

#[tokio::test]
async fn an_order_whose_lost_call_runs_after_its_deadline_is_answered_accepted_not_unavailable() {
    // The request's deadline (2.5 s) passes while Redis is stalled (3.5 s):
    // the first call's answer is lost at 2 s, the retry is held too; then,
    // past the deadline (but within the 1.5 s a call may still place its
    // order), the first call is run and accepts the order. The answer used
    // to be 503 "unavailable" for an order that exists.
    let proxy = common::proxy::Proxy::to_redis().await;
    let app = TestApp::spawn_on_with(OrderPath::Async, |c| {
        c.seckill.request_deadline_ms = 2_500;
        common::redis_behind(&proxy, c);
    })
    .await;
    let voucher = app.open_seckill(5).await;
    let (user_id, token) = app.seed_users(1).await.remove(0);
    proxy.stall_on(&order_script(), Duration::from_millis(3_500));
    let started = std::time::Instant::now();
    let placed = expect_ok(app.order(voucher, &token).await).await;
    assert!(proxy.stall_fired(), "Redis stalled at the order script");
    assert!(
        started.elapsed() >= Duration::from_millis(3_500),
        "answered in {:?}, before Redis ran the call",
        started.elapsed()
    );
    let order_id: i64 = placed["data"].as_str().unwrap().parse().unwrap();

    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    let row: Option<u64> = sqlx::query_scalar("SELECT user_id FROM tb_voucher_order WHERE id = ?")
        .bind(order_id)
        .fetch_optional(&app.db)
        .await
        .unwrap();
    assert_eq!(row, Some(user_id), "the answer names the order that exists");
}

#[tokio::test]
async fn an_order_call_that_reaches_redis_after_its_answer_went_out_places_nothing() {
    // Redis stalls the call (as a cut link holds it in its queue) past the
    // deadline (1 s) and the last look (3 s, whose lookups time out after
    // 2 s each): the buyer is told 503 at about 6 s, and
    // the call, run when the stall ends, must not place an order nobody
    // was told of. It used to: a row whose buyer heard "unavailable".
    let proxy = common::proxy::Proxy::to_redis().await;
    let app = TestApp::spawn_on_with(OrderPath::Async, |c| {
        c.seckill.request_deadline_ms = 1_000;
        common::redis_behind(&proxy, c);
    })
    .await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(2).await;
    // A first order loads the script: the stalled call is the order itself.
    expect_ok(app.order(voucher, &users[0].1).await).await;
    let token = &users[1].1;
    proxy.stall_on(&order_script(), Duration::from_secs(8));
    let answer = app.order(voucher, token).await;
    assert!(proxy.stall_fired(), "Redis stalled at the order script");
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);

    // The stalled call has run by now (8 s); it placed nothing.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await.0, 1, "a call past its last moment placed an order");
    expect_ok(app.order(voucher, token).await).await;
}

/// Seen: a voucher of 10, one order persisted, the row lowered by hand to
/// 4. Redis still held 9 and accepted 9; MariaDB could take 4; the five
/// dead letters each gave a unit back to Redis, which then told later
/// buyers "success" for orders that could only fail. Redis now learns the
/// row's stock at the first refusal and after every dead letter.
#[tokio::test]
async fn stock_lowered_by_hand_is_learned_by_redis_and_later_buyers_are_told_sold_out() {
    let app = async_app().await;
    let voucher = app.open_seckill(10).await;
    let users = app.seed_users(31).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    expect_ok(app.order(voucher, tokens[0]).await).await;
    app.drained(voucher, Duration::from_secs(10)).await;
    sqlx::query("UPDATE tb_seckill_voucher SET stock = 4 WHERE voucher_id = ?")
        .bind(voucher)
        .execute(&app.db)
        .await
        .unwrap();

    let outcomes = app.order_all(voucher, &tokens[1..30]).await;
    let accepted = tally(&outcomes).get("OK").copied().unwrap_or(0);
    assert!((4..=9).contains(&accepted), "Redis had 9 to sell, MariaDB 4: {:?}", tally(&outcomes));
    let report = app.drained(voucher, Duration::from_secs(20)).await;
    assert_eq!(app.orders_of(voucher).await, (5, 5), "the first order and the four MariaDB had");
    assert_eq!(app.stock_of(voucher).await, 0);
    assert_eq!(report.redis_stock, Some(0), "Redis follows the row: {}", report.render());
    assert_eq!(report.dead_letters as usize, accepted - 4, "{}", report.render());
    assert!(report.agrees(), "{}", report.render());

    // Later buyers are told the truth at once.
    expect_error(app.order(voucher, tokens[30]).await, StatusCode::CONFLICT, "SOLD_OUT").await;
}

/// The stock route in the asynchronous mode, while orders wait to be
/// persisted: they keep their units (none is dead-lettered), and exactly
/// the new stock sells besides them.
#[tokio::test]
async fn the_stock_route_mid_sale_keeps_the_pending_orders_and_sells_exactly_the_new_stock() {
    let app = async_app().await;
    let voucher = app.open_seckill(3).await;
    let users = app.seed_users(13).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();

    // Three accepted and held back from MariaDB; the route waits for the
    // row behind them, and either runs first or after their batch.
    let held = app.hold_stock_row(voucher).await;
    let first = app.order_all(voucher, &tokens[..3]).await;
    assert_eq!(tally(&first).get("OK"), Some(&3));
    let api = app.api.clone();
    let set = tokio::spawn(async move { expect_ok(api.set_stock(voucher, serde_json::json!(2)).await).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.rollback().await.unwrap();
    let set = set.await.unwrap();
    assert_eq!(set["data"]["stock"], 2, "{set}");

    let rest = app.order_all(voucher, &tokens[3..]).await;
    let counts = tally(&rest);
    assert_eq!(counts.get("OK"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&8), "{counts:?}");
    let report = app.drained(voucher, Duration::from_secs(15)).await;
    assert_eq!(report.dead_letters, 0, "no accepted order lost its unit: {}", report.render());
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await, (5, 5));
    assert_eq!(app.stock_of(voucher).await, 0);
}

/// A pending order (accepted, not yet in MariaDB) is named by the
/// DUPLICATE_ORDER of its user's next try and listed by `/mine`, counted
/// once before and after its row lands.
#[tokio::test]
async fn a_pending_order_is_named_by_a_duplicate_and_listed_by_mine() {
    let app = async_app().await;
    let users = app.seed_users(1).await;
    let token = users[0].1.as_str();
    // Two orders with their rows first.
    let (older, old) = (app.open_seckill(5).await, app.open_seckill(5).await);
    let mut persisted = Vec::new();
    for voucher in [older, old] {
        persisted.push(expect_ok(app.order(voucher, token).await).await["data"].as_str().unwrap().to_owned());
        app.drained(voucher, Duration::from_secs(10)).await;
    }

    let voucher = app.open_seckill(5).await;
    let held = app.hold_stock_row(voucher).await;
    let pending = expect_ok(app.order(voucher, token).await).await["data"].as_str().unwrap().to_owned();
    let dup = expect_error(app.order(voucher, token).await, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    assert_eq!(dup["data"].as_str(), Some(pending.as_str()), "the pending order is named: {dup}");

    let app = &app;
    let page = |n: u32| {
        let path = format!("/voucher-order/mine?page={n}&pageSize=2");
        async move { app.get(&path, Some(token)).await }
    };
    let first = expect_ok(page(1).await).await;
    assert_eq!(first["total"], 3, "{first}");
    let listed: Vec<(String, String)> = first["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_str().unwrap().to_owned(), o["state"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        listed,
        vec![(pending.clone(), "PENDING".to_owned()), (persisted[1].clone(), "CONFIRMED".to_owned())],
        "{first}"
    );
    let second = expect_ok(page(2).await).await;
    assert_eq!(second["data"][0]["id"].as_str(), Some(persisted[0].as_str()), "{second}");
    assert_eq!(second["data"].as_array().unwrap().len(), 1);

    held.rollback().await.unwrap();
    app.drained(voucher, Duration::from_secs(10)).await;
    let after = expect_ok(page(1).await).await;
    assert_eq!(after["total"], 3, "counted once after its row landed: {after}");
    assert_eq!(after["data"][0]["id"].as_str(), Some(pending.as_str()));
    assert_eq!(after["data"][0]["state"], "CONFIRMED");
    let holders: std::collections::HashMap<u64, i64> =
        app.redis.clone().hgetall(&app.keys.seckill(voucher).holders).await.unwrap();
    assert!(holders.is_empty(), "a persisted order leaves the holders hash: {holders:?}");
}

/// Seen in review: a retry of an order whose first answer was lost, made
/// after the window ended, was answered ENDED although the first call had
/// accepted the order. The script now finds the buyer before it looks at
/// the window, and the caller answers with the order it placed.
#[tokio::test]
async fn the_order_script_finds_a_buyer_before_the_window_so_a_late_retry_is_not_told_ended() {
    let app = async_app().await;
    let voucher = 4_000_000_007_u64;
    let sk = app.keys.seckill(voucher);
    let now = Utc::now().timestamp_millis();
    let mut redis = app.redis.clone();
    let _: () = redis::pipe()
        .set(&sk.stock, 5)
        .hset_multiple(&sk.window, &[("begin", now - 7_200_000), ("end", now - 3_600_000), ("shelf", 1)])
        .sadd(&sk.buyers, &[0_u64, 42])
        .query_async(&mut redis)
        .await
        .unwrap();
    let script = redis::Script::new(include_str!("../lua/seckill_order.lua"));
    let run = |user: u64| {
        let (script, sk, mut redis) = (&script, &sk, redis.clone());
        async move {
            script
                .key(&sk.stock)
                .key(&sk.window)
                .key(&sk.buyers)
                .key(&sk.orders)
                .key(&sk.pending)
                .key(&sk.holders)
                .arg(user)
                .arg(1)
                .arg(voucher)
                .invoke_async::<i64>(&mut redis)
                .await
                .unwrap()
        }
    };
    assert_eq!(run(42).await, 4, "the buyer is found, window or not");
    assert_eq!(run(43).await, 3, "anyone else: the sale has ended");
    let _: () = redis.del(&[&sk.stock, &sk.window, &sk.buyers]).await.unwrap();
}

/// Seen in review: every sale ever sold stayed in `seckill:active` (read
/// by every consumer, scanned by every order lookup) and its keys never
/// expired. Two hundred sales end and drain: each leaves the active set,
/// its working keys get a TTL and its failed orders a longer one, and
/// every order is still found, a failed one included.
#[tokio::test]
async fn two_hundred_ended_and_drained_sales_leave_the_active_set_and_their_keys_expire() {
    let app = async_app_with(|c| c.seckill.asynchronous.async_retire_after_ms = 300).await;
    let users = app.seed_users(2).await;
    let ((_, buyer), (poisoned_user, poisoned)) = (users[0].clone(), users[1].clone());
    app.refuse_orders_of(poisoned_user).await;
    let now = Utc::now();
    // Long enough to create and sell 200 sales on a busy machine.
    let end = now + ChronoDuration::seconds(15);
    let mut vouchers = Vec::new();
    for _ in 0..200 {
        vouchers.push(app.create_seckill(5, now - ChronoDuration::minutes(1), end).await);
    }
    let mut orders = Vec::new();
    for &voucher in &vouchers {
        orders.push(expect_ok(app.order(voucher, &buyer).await).await["data"].as_str().unwrap().to_owned());
    }
    let failed = expect_ok(app.order(vouchers[0], &poisoned).await).await["data"].as_str().unwrap().to_owned();

    let active = |app: &TestApp| {
        let mut redis = app.redis.clone();
        let key = app.keys.seckill_active();
        async move { redis.smembers::<_, BTreeSet<u64>>(key).await.unwrap() }
    };
    let started = Instant::now();
    loop {
        let still: Vec<u64> = active(&app).await.into_iter().filter(|v| vouchers.contains(v)).collect();
        if still.is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(40), "{} sales still active", still.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(app.orders_of(vouchers[0]).await, (1, 1), "persisted before retirement");

    let sk = app.keys.seckill(vouchers[7]);
    let mut redis = app.redis.clone();
    for key in [&sk.stock, &sk.window, &sk.buyers, &sk.orders] {
        let ttl: i64 = redis.pttl(key).await.unwrap();
        assert!((1..=3_600_000).contains(&ttl), "{key}: working keys expire within the hour ({ttl})");
    }
    let poisoned_keys = app.keys.seckill(vouchers[0]);
    for key in [&poisoned_keys.failed, &poisoned_keys.dead] {
        let ttl: i64 = redis.pttl(key).await.unwrap();
        assert!(ttl > 6 * 24 * 3_600_000, "{key}: failed orders stay a week ({ttl})");
    }

    // Every order is still found, the failed one by its index.
    assert_eq!(state_of(&app, &orders[199], &buyer).await, "CONFIRMED");
    assert_eq!(state_of(&app, &failed, &poisoned).await, "FAILED");
    // A retired sale answers ENDED, and is not loaded back.
    let _: () = redis.del(&[&sk.stock, &sk.window, &sk.buyers]).await.unwrap();
    expect_error(app.order(vouchers[7], &poisoned).await, StatusCode::CONFLICT, "ENDED").await;
    assert!(!active(&app).await.contains(&vouchers[7]));
    let window: bool = redis.exists(&sk.window).await.unwrap();
    assert!(!window, "an ended sale's keys are not loaded again");
}

/// Seen: on a Redis that another database's sale had used, a chaos sale
/// answered all 12,000 buyers SOLD_OUT: its voucher had the same id as the
/// old one, whose keys looked loaded. Keys now carry what they were made
/// for; an instance's first order of a voucher whose keys were made for
/// another wipes and loads them again.
#[tokio::test]
async fn keys_made_for_another_voucher_under_the_same_id_are_wiped_and_loaded_again() {
    let app = async_app().await;
    let voucher = app.open_seckill(5).await;
    let sk = app.keys.seckill(voucher);
    let mut redis = app.redis.clone();
    // What another database's sold-out voucher of the same id left.
    let _: () = redis::pipe()
        .hset(&sk.window, "made", "1:2:3")
        .set(&sk.stock, 0)
        .sadd(&sk.buyers, 777_u64)
        .hset(&sk.pending, 123_i64, "777:1")
        .query_async(&mut redis)
        .await
        .unwrap();

    let users = app.seed_users(6).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let counts = tally(&app.order_all(voucher, &tokens).await);
    assert_eq!(counts.get("OK"), Some(&5), "the voucher's own stock sells: {counts:?}");
    assert_eq!(counts.get("SOLD_OUT"), Some(&1), "{counts:?}");
    let stale_buyer: bool = redis.sismember(&sk.buyers, 777_u64).await.unwrap();
    let stale_pending: bool = redis.hexists(&sk.pending, 123_i64).await.unwrap();
    assert!(!stale_buyer && !stale_pending, "the other voucher's buyers and pending orders are gone");
    let report = app.drained(voucher, Duration::from_secs(10)).await;
    assert!(report.agrees(), "{}", report.render());
    assert_eq!(app.orders_of(voucher).await, (5, 5));
}

/// The acknowledge script (`lua/seckill_acknowledge.lua`) trims the stream
/// instead of deleting each entry: it must never take an entry still
/// pending or not yet delivered, and must leave nothing once all are done,
/// whichever consumer acknowledges last.
#[tokio::test]
async fn acknowledging_trims_only_entries_older_than_every_one_still_pending() {
    let app = TestApp::spawn().await;
    let mut redis = app.redis.clone();
    let sk = app.keys.seckill(987_654_321);
    let (stream, pending, holders) = (&sk.orders, &sk.pending, &sk.holders);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg("orders")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 1..=6u64 {
        let id: String = redis.xadd(stream, "*", &[("id", n)]).await.unwrap();
        let _: () = redis.hset(pending, n, "x").await.unwrap();
        let _: () = redis.hset(holders, 100 + n, n).await.unwrap();
        ids.push(id);
    }
    // Consumer a is given entries 1-2, consumer b 3-4; 5-6 are not delivered.
    let deliver = |consumer: &str, count: usize| {
        redis::streams::StreamReadOptions::default().group("orders", consumer).count(count)
    };
    let _: redis::Value = redis.xread_options(&[stream], &[">"], &deliver("a", 2)).await.unwrap();
    let _: redis::Value = redis.xread_options(&[stream], &[">"], &deliver("b", 2)).await.unwrap();
    let script = redis::Script::new(include_str!("../lua/seckill_acknowledge.lua"));
    let acknowledge = |entries: &[usize]| {
        let mut call = script.prepare_invoke();
        call.key(stream).key(pending).key(holders).arg("orders").arg(entries.len());
        for &e in entries {
            call.arg(&ids[e - 1]);
        }
        for &e in entries {
            call.arg(e);
        }
        for &e in entries {
            call.arg(100 + e);
        }
        call
    };
    // b acknowledges first: a's 1-2 are still pending, so nothing goes.
    let _: u64 = acknowledge(&[3, 4]).invoke_async(&mut redis).await.unwrap();
    let left: Vec<redis::streams::StreamId> =
        redis.xrange_all::<_, redis::streams::StreamRangeReply>(stream).await.unwrap().ids;
    assert_eq!(left.len(), 6, "entries 1-2 pending: nothing may go yet");
    assert_eq!(redis.hlen::<_, u64>(pending).await.unwrap(), 4);
    assert_eq!(redis.hlen::<_, u64>(holders).await.unwrap(), 4);
    // a acknowledges last: everything delivered goes, 5-6 (never delivered) stay.
    let trimmed: u64 = acknowledge(&[1, 2]).invoke_async(&mut redis).await.unwrap();
    assert_eq!(trimmed, 4);
    let left = redis.xrange_all::<_, redis::streams::StreamRangeReply>(stream).await.unwrap().ids;
    assert_eq!(left.iter().map(|e| e.id.clone()).collect::<Vec<_>>(), ids[4..].to_vec());
    // Delivered and acknowledged too: the stream is empty (a drained sale retires).
    let _: redis::Value = redis.xread_options(&[stream], &[">"], &deliver("a", 10)).await.unwrap();
    let _: u64 = acknowledge(&[5, 6]).invoke_async(&mut redis).await.unwrap();
    assert_eq!(redis.xlen::<_, u64>(stream).await.unwrap(), 0);
    assert_eq!(redis.hlen::<_, u64>(pending).await.unwrap(), 0);
    let _: () = redis.del(&[stream, pending, holders]).await.unwrap();
}

/// A row of `other` under the id of another user's order accepted in Redis
/// and not persisted: what ids that met after a failover leave.
async fn another_users_row_under(app: &TestApp, order_id: &str, voucher: u64, other: u64) {
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, ?, ?)")
        .bind(order_id.parse::<i64>().unwrap())
        .bind(other)
        .bind(voucher)
        .execute(&app.db)
        .await
        .unwrap();
}

/// An order accepted in Redis, as the order script leaves it in the
/// pending and holders hashes, without a stream entry (no consumer takes it
/// meanwhile).
async fn pending_in_redis(app: &TestApp, voucher: u64, order_id: &str, user: u64) {
    let sk = app.keys.seckill(voucher);
    let now = Utc::now().timestamp_millis();
    // The active set sits in a slot of its own on a cluster.
    let _: () = app.redis.clone().sadd(app.keys.seckill_active(), voucher).await.unwrap();
    redis::pipe()
        .hset(&sk.pending, order_id, format!("{user}:{now}"))
        .hset(&sk.holders, user, order_id)
        .exec_async(&mut app.redis.clone())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_stock_route_keeps_the_unit_of_a_pending_order_whose_id_another_users_row_holds() {
    let app = async_app().await;
    let voucher = app.open_seckill(10).await;
    let users = app.seed_users(2).await;
    let (buyer, other) = (users[0].0, users[1].0);
    let order_id = "665231112129216513";
    pending_in_redis(&app, voucher, order_id, buyer).await;
    another_users_row_under(&app, order_id, voucher, other).await;

    let set = expect_ok(app.set_stock(voucher, serde_json::json!(5)).await).await;
    assert_eq!(set["data"]["awaitingPersistence"], 1, "the pending order is not the row under its id: {set}");
    assert_eq!(app.stock_of(voucher).await, 6, "the row keeps the pending order's unit");
    let redis_stock: i64 = app.redis.clone().get(&app.keys.seckill(voucher).stock).await.unwrap();
    assert_eq!(redis_stock, 5);
}

#[tokio::test]
async fn a_pending_order_is_found_by_its_owner_though_another_voucher_holds_its_id_for_another_user() {
    let app = async_app().await;
    let (earlier, voucher) = (app.open_seckill(5).await, app.open_seckill(5).await);
    assert!(earlier < voucher, "the active set lists the other voucher first");
    let users = app.seed_users(2).await;
    let ((buyer, token), other) = (users[0].clone(), users[1].0);
    let order_id = "665231112129216513";
    pending_in_redis(&app, earlier, order_id, other).await;
    pending_in_redis(&app, voucher, order_id, buyer).await;

    let shown = expect_ok(app.get(&format!("/voucher-order/{order_id}"), Some(&token)).await).await;
    assert_eq!(shown["data"]["state"], "PENDING", "{shown}");
    assert_eq!(shown["data"]["voucherId"], voucher, "{shown}");
}

#[tokio::test]
async fn mine_lists_a_pending_order_whose_id_another_users_row_holds() {
    let app = async_app().await;
    let (voucher, elsewhere) = (app.open_seckill(5).await, app.open_seckill(5).await);
    let users = app.seed_users(2).await;
    let ((buyer, token), other) = (users[0].clone(), users[1].0);
    let order_id = "665231112129216513";
    pending_in_redis(&app, voucher, order_id, buyer).await;
    another_users_row_under(&app, order_id, elsewhere, other).await;

    let mine = expect_ok(app.get("/voucher-order/mine?page=1", Some(&token)).await).await;
    let listed: Vec<(&str, &str)> = mine["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["id"].as_str().unwrap(), o["state"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, vec![(order_id, "PENDING")], "{mine}");
}

/// Every instance restarts right after a failover: the promoted replica
/// lacks an order the old master accepted and the consumers persisted (its
/// buyer, its unit), and no instance remembers the old master's lineage.
/// The restarted instance must still learn the voucher again from MariaDB,
/// or it sells the buyer a second order (and the unit twice).
#[tokio::test]
async fn an_instance_started_after_a_failover_learns_the_orders_the_promoted_replica_never_saw() {
    let test = "an_instance_started_after_a_failover_learns_the_orders_the_promoted_replica_never_saw";
    let Some((master, replica)) = common::redis_server::RedisServer::master_with_replica(test).await else { return };
    let on = |server: &common::redis_server::RedisServer| {
        let url = server.url();
        move |c: &mut hmdp::config::Config| {
            c.redis.url = url;
            c.redis.cluster_nodes = None;
        }
    };
    let mut before = async_app_with(on(&master)).await;
    let voucher = before.open_seckill(10).await;
    let users = before.seed_users(2).await;
    let ((first, first_token), (unseen, unseen_token)) = (users[0].clone(), users[1].clone());
    expect_ok(before.order(voucher, &first_token).await).await;
    before.drained(voucher, Duration::from_secs(10)).await;
    master.caught_up().await;

    // The replica is promoted; the old master, cut off, still takes an
    // order (202: no replica has it), which its consumer persists.
    replica.promote().await;
    let taken = common::outcome(before.order(voucher, &unseen_token).await).await;
    assert_eq!(taken.code, "UNREPLICATED", "{taken:?}");
    before.drained(voucher, Duration::from_secs(10)).await;
    assert_eq!(before.stock_of(voucher).await, 8);
    before.stop().await;

    let after = before.spawn_peer(on(&replica)).await;
    let sk = after.keys.seckill(voucher);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The buyer it never saw, and the unit that order took: 8 left.
    loop {
        let (learnt, stock): (bool, i64) = redis::pipe()
            .sismember(&sk.buyers, unseen)
            .get(&sk.stock)
            .query_async(&mut after.redis.clone())
            .await
            .unwrap();
        if learnt && stock == 8 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the promoted replica never learnt the order it did not see: buyer known {learnt}, stock {stock}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    expect_error(after.order(voucher, &unseen_token).await, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    let still: bool = after.redis.clone().sismember(&sk.buyers, first).await.unwrap();
    assert!(still, "the replicated buyer is kept");
    drop(after);
}
