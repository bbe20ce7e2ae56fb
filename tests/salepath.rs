//! The sale path of guarded vouchers, black-box against real MariaDB and
//! Redis: a guarded voucher sells only through a path of its buyer's, once
//! per path; the challenge is solved before a path is given, and a
//! solution is used once; past the voucher's admission rate buyers wait in
//! line, first come first served, across instances, and hear SOLD_OUT
//! when the stock is gone. What both modes do is written once and run on
//! every order path; the tables are audited after every race.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::{collections::BTreeMap, time::Duration};

use common::{OrderPath, TestApp, expect_error, expect_ok, outcome, seckill_body, tally};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A voucher open now with `guard` and, when given, its own rate.
async fn guarded(app: &TestApp, stock: i64, guard: &str, admit_per_second: Option<u32>) -> u64 {
    let now = chrono::Utc::now();
    let (begin, end) = (now - chrono::Duration::minutes(1), now + chrono::Duration::hours(1));
    let mut body = seckill_body(stock, &begin.to_rfc3339(), &end.to_rfc3339());
    body["guard"] = json!(guard);
    if let Some(rate) = admit_per_second {
        body["admitPerSecond"] = json!(rate);
    }
    expect_ok(app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body).await).await["data"]
        .as_u64()
        .expect("voucher id")
}

/// `POST /voucher-order/seckill/{id}/path`, with a body when given.
async fn ask(app: &TestApp, voucher: u64, token: &str, body: Option<Value>) -> reqwest::Response {
    let mut req =
        app.client.post(app.url(&format!("/voucher-order/seckill/{voucher}/path"))).header("authorization", token);
    if let Some(body) = body {
        req = req.json(&body);
    }
    req.send().await.unwrap()
}

/// The answer's `data`, asserted a 200.
async fn asked(app: &TestApp, voucher: u64, token: &str, body: Option<Value>) -> Value {
    expect_ok(ask(app, voucher, token, body).await).await["data"].clone()
}

/// A path for a voucher whose line is open to this buyer.
async fn path_of(app: &TestApp, voucher: u64, token: &str) -> String {
    let data = asked(app, voucher, token, None).await;
    data["path"].as_str().unwrap_or_else(|| panic!("a path: {data}")).to_owned()
}

async fn order_on(app: &TestApp, voucher: u64, path: &str, token: &str) -> reqwest::Response {
    app.post(&format!("/voucher-order/seckill/{voucher}/{path}"), Some(token)).await
}

fn users(seeded: &[(u64, String)]) -> Vec<String> {
    seeded.iter().map(|(_, token)| token.clone()).collect()
}

/// At rest, MariaDB's row and live orders add up, one per user, and
/// (async) Redis agrees. Returns the live orders.
async fn audited(app: &TestApp, path: OrderPath, voucher: u64, stock: i64) -> i64 {
    if let Some(report) = app.settled(path, voucher).await {
        assert!(report.agrees(), "{}", report.render());
    }
    let (live, users): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ? AND status NOT IN (4, 6)",
    )
    .bind(voucher)
    .fetch_one(&app.db)
    .await
    .unwrap();
    assert_eq!(live, users, "one live order per user");
    assert_eq!(app.stock_of(voucher).await + live, stock, "every unit is either left or sold");
    live
}

async fn a_guarded_voucher_sells_only_through_a_path_of_its_buyer_once(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let voucher = guarded(&app, 10, "path", None).await;
    let other = guarded(&app, 10, "path", None).await;
    let seeded = app.seed_users(3).await;
    let [a, b, c] = [&seeded[0].1, &seeded[1].1, &seeded[2].1];

    expect_error(app.order(voucher, a).await, StatusCode::FORBIDDEN, "PATH_REQUIRED").await;
    let path_a = path_of(&app, voucher, a).await;
    expect_error(order_on(&app, voucher, &path_a, b).await, StatusCode::FORBIDDEN, "PATH_INVALID").await;
    expect_error(order_on(&app, other, &path_a, a).await, StatusCode::FORBIDDEN, "PATH_INVALID").await;
    expect_error(order_on(&app, voucher, "forged-path", a).await, StatusCode::FORBIDDEN, "PATH_INVALID").await;
    assert_eq!(app.orders_of(voucher).await.0 + app.orders_of(other).await.0, 0, "no refusal placed anything");

    let first = outcome(order_on(&app, voucher, &path_a, a).await).await;
    assert_eq!(first.code, "OK", "{first:?}");
    expect_error(order_on(&app, voucher, &path_a, a).await, StatusCode::FORBIDDEN, "PATH_INVALID").await;

    // Cancelled, the order frees the buyer, not the path.
    let order_id = first.order_id.unwrap();
    let cancelled = app.post(&format!("/voucher-order/{order_id}/cancel"), Some(a)).await;
    // An asynchronous order is cancelled once persisted; wait for it.
    let cancelled = if cancelled.status() == StatusCode::CONFLICT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        app.post(&format!("/voucher-order/{order_id}/cancel"), Some(a)).await
    } else {
        cancelled
    };
    expect_ok(cancelled).await;
    expect_error(order_on(&app, voucher, &path_a, a).await, StatusCode::FORBIDDEN, "PATH_INVALID").await;
    let again = path_of(&app, voucher, a).await;
    assert_eq!(outcome(order_on(&app, voucher, &again, a).await).await.code, "OK", "a new path buys again");

    let path_c = path_of(&app, voucher, c).await;
    assert_eq!(outcome(order_on(&app, voucher, &path_c, c).await).await.code, "OK");
    assert_eq!(audited(&app, path, voucher, 10).await, 2);
    assert_eq!(audited(&app, path, other, 10).await, 0);
}

async fn buyers_racing_with_their_paths_and_replays_never_oversell(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let stock = 30;
    let voucher = guarded(&app, stock, "path", Some(100_000)).await;
    let seeded = app.seed_users(60).await;
    let tokens = users(&seeded);
    let mut paths = Vec::new();
    for token in &tokens {
        paths.push(path_of(&app, voucher, token).await);
    }
    // Each buyer sends its path three times at once, and a thief replays
    // every path with another buyer's session.
    let mut racing = tokio::task::JoinSet::new();
    for (i, (token, path)) in tokens.iter().zip(&paths).enumerate() {
        for who in [token, token, token, &tokens[(i + 1) % tokens.len()]] {
            let (api, token, path) = (app.api.clone(), who.clone(), path.clone());
            racing.spawn(async move {
                let answer = api.post(&format!("/voucher-order/seckill/{voucher}/{path}"), Some(&token)).await;
                (token, outcome(answer).await)
            });
        }
    }
    let outcomes = racing.join_all().await;
    let mut wins: BTreeMap<String, usize> = BTreeMap::new();
    for (token, o) in &outcomes {
        if o.code == "OK" {
            *wins.entry(token.clone()).or_default() += 1;
        }
    }
    let all: Vec<_> = outcomes.iter().map(|(_, o)| o.clone()).collect();
    assert!(wins.values().all(|&n| n == 1), "one order per buyer: {:?}", tally(&all));
    assert_eq!(wins.len() as i64, stock, "every unit sold: {:?}", tally(&all));
    assert!(
        tally(&all)
            .keys()
            .all(|code| ["OK", "PATH_INVALID", "SOLD_OUT", "DUPLICATE_ORDER", "TOO_MANY_REQUESTS"]
                .contains(&code.as_str())),
        "{:?}",
        tally(&all)
    );
    assert_eq!(audited(&app, path, voucher, stock).await, stock);
}

on_every_path!(
    a_guarded_voucher_sells_only_through_a_path_of_its_buyer_once,
    buyers_racing_with_their_paths_and_replays_never_oversell,
);

#[tokio::test]
async fn a_voucher_without_a_guard_sells_as_before_and_ignores_a_path() {
    let app = TestApp::spawn().await;
    let voucher = guarded(&app, 5, "none", None).await;
    let seeded = app.seed_users(2).await;
    assert_eq!(outcome(app.order(voucher, &seeded[0].1).await).await.code, "OK");
    let path = path_of(&app, voucher, &seeded[1].1).await;
    assert_eq!(outcome(order_on(&app, voucher, &path, &seeded[1].1).await).await.code, "OK");
    assert_eq!(audited(&app, OrderPath::Grouped, voucher, 5).await, 2);
}

#[tokio::test]
async fn an_expired_path_is_refused_and_places_nothing() {
    let app = TestApp::spawn_with(|c| c.sale_path.sale_path_ttl_ms = 1_000).await;
    let voucher = guarded(&app, 5, "path", None).await;
    let seeded = app.seed_users(1).await;
    let path = path_of(&app, voucher, &seeded[0].1).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    expect_error(order_on(&app, voucher, &path, &seeded[0].1).await, StatusCode::FORBIDDEN, "PATH_EXPIRED").await;
    assert_eq!(app.orders_of(voucher).await.0, 0);
    assert_eq!(app.stock_of(voucher).await, 5);
}

#[tokio::test]
async fn a_voucher_in_segments_sells_through_paths_once_each() {
    let app = TestApp::spawn_on(OrderPath::Async).await;
    let now = chrono::Utc::now();
    let mut body = seckill_body(
        8,
        &(now - chrono::Duration::minutes(1)).to_rfc3339(),
        &(now + chrono::Duration::hours(1)).to_rfc3339(),
    );
    body["guard"] = json!("path");
    body["segments"] = json!(3);
    let voucher = expect_ok(app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body).await).await["data"]
        .as_u64()
        .unwrap();
    let seeded = app.seed_users(12).await;
    let mut outcomes = Vec::new();
    for (_, token) in &seeded {
        // Once every unit is sold, the path route may say so itself (it
        // reads the units left at most every 200 ms): never before.
        let asked = ask(&app, voucher, token, None).await;
        if asked.status() == StatusCode::CONFLICT {
            let refused = outcome(asked).await;
            assert_eq!(refused.code, "SOLD_OUT", "{refused:?}");
            assert_eq!(tally(&outcomes).get("OK"), Some(&8), "the path route said SOLD_OUT with units left");
            outcomes.push(refused);
            continue;
        }
        let path = expect_ok(asked).await["data"]["path"].as_str().expect("a path").to_owned();
        outcomes.push(outcome(order_on(&app, voucher, &path, token).await).await);
        // A path is spent by the order it placed; one that placed nothing
        // (sold out) hears the same again.
        let replay = outcome(order_on(&app, voucher, &path, token).await).await;
        let spent = if outcomes.last().unwrap().code == "OK" { "PATH_INVALID" } else { "SOLD_OUT" };
        assert_eq!(replay.code, spent, "{replay:?}");
    }
    assert_eq!(tally(&outcomes), BTreeMap::from([("OK".to_owned(), 8), ("SOLD_OUT".to_owned(), 4)]));
    assert_eq!(audited(&app, OrderPath::Async, voucher, 8).await, 8);
}

/// Low difficulties: the tests solve them in a moment.
fn easy(c: &mut hmdp::Config) {
    c.sale_path.sale_challenge_bits = 8;
    c.sale_path.sale_challenge_max_bits = 16;
}

fn solution(challenge: &Value) -> Value {
    let token = challenge["token"].as_str().expect("a challenge token");
    let bits = challenge["difficulty"].as_u64().expect("a difficulty") as u8;
    json!({"challenge": token, "nonce": hmdp_pow::solve(token, bits).to_string()})
}

#[tokio::test]
async fn a_challenge_is_solved_before_a_path_and_a_solution_is_used_once() {
    let app = TestApp::spawn_with(easy).await;
    let voucher = guarded(&app, 5, "challenge", None).await;
    let seeded = app.seed_users(2).await;
    let (a, b) = (&seeded[0].1, &seeded[1].1);

    let given = asked(&app, voucher, a, None).await;
    let challenge = &given["challenge"];
    assert_eq!(challenge["difficulty"], 8, "calm: the base difficulty: {given}");
    assert!(challenge["expiresAt"].as_str().is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()));
    expect_error(app.order(voucher, a).await, StatusCode::FORBIDDEN, "PATH_REQUIRED").await;

    let solved = solution(challenge);
    // A nonce that does not solve it; someone else's solution.
    let token = challenge["token"].as_str().unwrap();
    let wrong = (0u64..).find(|n| !hmdp_pow::solves(token, &n.to_string(), 8)).unwrap();
    let wrong = json!({"challenge": token, "nonce": wrong.to_string()});
    expect_error(ask(&app, voucher, a, Some(wrong)).await, StatusCode::BAD_REQUEST, "CHALLENGE_INVALID").await;
    expect_error(ask(&app, voucher, b, Some(solved.clone())).await, StatusCode::BAD_REQUEST, "CHALLENGE_INVALID").await;
    let tampered = json!({"challenge": format!("{token}x"), "nonce": solved["nonce"]});
    expect_error(ask(&app, voucher, a, Some(tampered)).await, StatusCode::BAD_REQUEST, "CHALLENGE_INVALID").await;
    expect_error(ask(&app, voucher, a, Some(json!({"nonce": "1"}))).await, StatusCode::BAD_REQUEST, "VALIDATION").await;

    let path = asked(&app, voucher, a, Some(solved.clone())).await;
    let path = path["path"].as_str().unwrap_or_else(|| panic!("a path for a solution: {path}")).to_owned();
    expect_error(ask(&app, voucher, a, Some(solved)).await, StatusCode::BAD_REQUEST, "CHALLENGE_INVALID").await;
    assert_eq!(outcome(order_on(&app, voucher, &path, a).await).await.code, "OK");
    assert_eq!(audited(&app, OrderPath::Grouped, voucher, 5).await, 1);
}

#[tokio::test]
async fn the_challenge_grows_harder_as_asks_outrun_the_admission_rate() {
    let app = TestApp::spawn_with(easy).await;
    let voucher = guarded(&app, 5, "challenge", Some(1)).await;
    let seeded = app.seed_users(9).await;
    let mut difficulties = Vec::new();
    for (_, token) in &seeded {
        difficulties.push(asked(&app, voucher, token, None).await["challenge"]["difficulty"].as_u64().unwrap());
    }
    assert_eq!(difficulties[0], 8, "{difficulties:?}");
    // Nine asks within two seconds at one admission a second: at least
    // five in one second, three doublings past the rate.
    assert!(*difficulties.last().unwrap() >= 11, "{difficulties:?}");
    assert!(difficulties.windows(2).all(|w| w[1] >= w[0] || w[1] >= 11), "{difficulties:?}");
}

/// A buyer's answer: `Ok(path)` or `Err(position)`.
async fn place(app: &TestApp, voucher: u64, token: &str) -> Result<String, u64> {
    let data = asked(app, voucher, token, None).await;
    match data["path"].as_str() {
        Some(path) => Ok(path.to_owned()),
        None => {
            assert!(data["retryAfterMs"].as_u64().is_some_and(|ms| ms >= 250), "{data}");
            Err(data["position"].as_u64().unwrap_or_else(|| panic!("a path or a place: {data}")))
        }
    }
}

#[tokio::test]
async fn past_the_rate_buyers_wait_in_line_first_come_first_served_across_instances() {
    let app = TestApp::spawn().await;
    let peer = app.spawn_peer(|_| {}).await;
    let voucher = guarded(&app, 10, "path", Some(1)).await;
    let seeded = app.seed_users(4).await;
    let tokens = users(&seeded);

    assert!(place(&app, voucher, &tokens[0]).await.is_ok(), "the first is admitted at once");
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1));
    assert_eq!(place(&peer, voucher, &tokens[2]).await, Err(2), "one line across instances");
    assert_eq!(place(&app, voucher, &tokens[3]).await, Err(3));
    assert_eq!(place(&peer, voucher, &tokens[3]).await, Err(3), "asking again keeps the place");

    // A second later the rate has admitted the head of the line, and only it.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let admitted = place(&peer, voucher, &tokens[1]).await.expect("the head of the line is admitted");
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(1));
    assert_eq!(place(&app, voucher, &tokens[3]).await, Err(2));
    assert_eq!(outcome(order_on(&app, voucher, &admitted, &tokens[1]).await).await.code, "OK");
    let (orders, _) = app.orders_of(voucher).await;
    assert_eq!(orders, 1);

    // Both instances restart: the line is where they left it.
    let mut app = app;
    let mut peer = peer;
    peer.stop().await;
    app.stop().await;
    let restarted = app.spawn_peer(|_| {}).await;
    // The later arrival asks first; the rate may have admitted the head
    // meanwhile, but never the later one before it.
    let later = place(&restarted, voucher, &tokens[3]).await;
    let earlier = place(&restarted, voucher, &tokens[2]).await;
    assert!(
        matches!((&earlier, &later), (Err(1), Err(2)) | (Ok(_), Err(1)) | (Ok(_), Ok(_))),
        "the line outlives its instances, in arrival order: {earlier:?} before {later:?}"
    );
}

#[tokio::test]
async fn a_buyer_who_stops_asking_loses_the_place() {
    let app = TestApp::spawn_with(|c| c.sale_path.sale_line_leave_ms = 1_000).await;
    let voucher = guarded(&app, 10, "path", Some(1)).await;
    let tokens = users(&app.seed_users(4).await);
    let start = std::time::Instant::now();
    assert!(place(&app, voucher, &tokens[0]).await.is_ok());
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1));
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(2));
    // tokens[1] goes quiet; tokens[2] keeps asking, still behind it while
    // the rate has admitted nobody else (under a second).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(2));
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(2));
    assert!(start.elapsed() < Duration::from_millis(950), "too slow a box for this timing: {:?}", start.elapsed());
    // Past a second, tokens[1] has not asked for over a second: gone, and
    // the next admission is tokens[2]'s.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(place(&app, voucher, &tokens[2]).await.is_ok(), "the one who left was skipped");
    assert_eq!(place(&app, voucher, &tokens[3]).await, Err(1));
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(2), "who left joins at the back");
}

#[tokio::test]
async fn everyone_in_line_hears_sold_out_once_the_stock_is_gone() {
    let app = TestApp::spawn().await;
    let voucher = guarded(&app, 1, "path", Some(1)).await;
    let tokens = users(&app.seed_users(3).await);
    let path = place(&app, voucher, &tokens[0]).await.expect("admitted");
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1));
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(2));
    assert_eq!(outcome(order_on(&app, voucher, &path, &tokens[0]).await).await.code, "OK");
    tokio::time::sleep(Duration::from_millis(250)).await;
    for token in &tokens[1..] {
        expect_error(ask(&app, voucher, token, None).await, StatusCode::CONFLICT, "SOLD_OUT").await;
    }
}

#[tokio::test]
async fn a_full_line_turns_newcomers_away() {
    let app = TestApp::spawn_with(|c| c.sale_path.sale_line_max = 2).await;
    let voucher = guarded(&app, 10, "path", Some(1)).await;
    let tokens = users(&app.seed_users(4).await);
    assert!(place(&app, voucher, &tokens[0]).await.is_ok());
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1));
    assert_eq!(place(&app, voucher, &tokens[2]).await, Err(2));
    expect_error(ask(&app, voucher, &tokens[3], None).await, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1), "those in line keep their places");
    // Every key of the line expires, an hour past the sale's end at most.
    let keys = app.keys.sale_line(voucher);
    for key in [&keys.line, &keys.seen, &keys.admitted, &keys.state] {
        let ttl: i64 = redis::cmd("PTTL").arg(key).query_async(&mut app.redis.clone()).await.unwrap();
        assert!((1..=2 * 3_600_000 + 60_000).contains(&ttl), "{key}: PTTL {ttl}");
    }
}

#[tokio::test]
async fn a_path_is_asked_for_only_around_the_window() {
    let app = TestApp::spawn_with(|c| c.sale_path.sale_path_lead_s = 60).await;
    let token = &app.seed_users(1).await[0].1;
    let now = chrono::Utc::now();
    let create = |begin: chrono::DateTime<chrono::Utc>, end: chrono::DateTime<chrono::Utc>| {
        let mut body = seckill_body(5, &begin.to_rfc3339(), &end.to_rfc3339());
        body["guard"] = json!("path");
        body
    };
    let later = create(now + chrono::Duration::minutes(5), now + chrono::Duration::hours(1));
    let soon = create(now + chrono::Duration::seconds(30), now + chrono::Duration::hours(1));
    let past = create(now - chrono::Duration::hours(2), now - chrono::Duration::hours(1));
    let mut ids = Vec::new();
    for body in [later, soon, past] {
        ids.push(
            expect_ok(app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body).await).await["data"]
                .as_u64()
                .unwrap(),
        );
    }
    expect_error(ask(&app, ids[0], token, None).await, StatusCode::CONFLICT, "NOT_STARTED").await;
    let path = path_of(&app, ids[1], token).await;
    expect_error(order_on(&app, ids[1], &path, token).await, StatusCode::CONFLICT, "NOT_STARTED").await;
    expect_error(ask(&app, ids[2], token, None).await, StatusCode::CONFLICT, "ENDED").await;
    expect_error(ask(&app, 999_999, token, None).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    let nobody = app.post(&format!("/voucher-order/seckill/{}/path", ids[1]), None).await;
    assert_eq!(nobody.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_guard_and_a_rate_are_chosen_at_creation_and_shown() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now();
    let body = |extra: Value| {
        let mut body = seckill_body(
            5,
            &(now - chrono::Duration::minutes(1)).to_rfc3339(),
            &(now + chrono::Duration::hours(1)).to_rfc3339(),
        );
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for bad in [
        json!({"guard": "captcha"}),
        json!({"guard": 1}),
        json!({"admitPerSecond": 0}),
        json!({"admitPerSecond": -5}),
        json!({"admitPerSecond": 1.5}),
        json!({"admitPerSecond": "9"}),
        json!({"admitPerSecond": 2_000_000}),
    ] {
        expect_error(
            app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body(bad.clone())).await,
            StatusCode::BAD_REQUEST,
            "VALIDATION",
        )
        .await;
    }
    let mut ordinary = body(json!({"guard": "path"}));
    for seckill_only in ["stock", "beginTime", "endTime"] {
        ordinary.as_object_mut().unwrap().remove(seckill_only);
    }
    ordinary["type"] = json!(0);
    expect_error(
        app.post_json("/voucher", Some(common::ADMIN_KEY), &ordinary).await,
        StatusCode::BAD_REQUEST,
        "VALIDATION",
    )
    .await;

    let plain =
        expect_ok(app.post_json("/voucher/seckill", Some(common::ADMIN_KEY), &body(json!({}))).await).await["data"]
            .as_u64()
            .unwrap();
    let challenged = expect_ok(
        app.post_json(
            "/voucher/seckill",
            Some(common::ADMIN_KEY),
            &body(json!({"guard": "challenge", "admitPerSecond": 500})),
        )
        .await,
    )
    .await["data"]
        .as_u64()
        .unwrap();
    let listed = expect_ok(app.get("/voucher/list/1", None).await).await;
    let shown = |id: u64| listed["data"].as_array().unwrap().iter().find(|v| v["id"] == id).cloned().unwrap();
    assert_eq!(shown(plain)["guard"], "none");
    assert!(shown(plain).get("admitPerSecond").is_none());
    assert_eq!(shown(challenged)["guard"], "challenge");
    assert_eq!(shown(challenged)["admitPerSecond"], 500);
}

#[tokio::test]
async fn a_buyer_asking_faster_than_told_is_slowed_down_and_keeps_the_place() {
    let app = TestApp::spawn_with(|c| c.sale_path.sale_path_asks_per_user_s = 5).await;
    let voucher = guarded(&app, 10, "path", Some(1)).await;
    let tokens = users(&app.seed_users(2).await);
    assert!(place(&app, voucher, &tokens[0]).await.is_ok());
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let answer = ask(&app, voucher, &tokens[1], None).await;
        if answer.status() == StatusCode::TOO_MANY_REQUESTS {
            assert!(answer.headers().get("retry-after").is_some());
        }
        statuses.push(answer.status());
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 5, "{statuses:?}");
    assert_eq!(statuses[7], StatusCode::TOO_MANY_REQUESTS);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(place(&app, voucher, &tokens[1]).await, Err(1), "the place is kept");
}
