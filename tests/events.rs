//! Order events in the outbox, black-box on every order path: each change
//! of an order (created, paid, used, cancelled, refunded, expired, failed)
//! leaves exactly one event row, written in the change's own transaction,
//! in the order the changes committed; a crowd's orders leave one
//! `created` each and nothing for an order that does not exist; with
//! `ORDER_EVENTS=off` nothing is written.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use common::{ADMIN_KEY, OrderPath, TestApp, expect_ok, tally};
use hmdp::config::OrderEvents;
use reqwest::Response;
use serde_json::json;

async fn app_with_events(path: OrderPath, pay_timeout_s: u64) -> TestApp {
    TestApp::spawn_on_with(path, |c| {
        c.events.order_events = OrderEvents::Nats;
        // No broker: every event stays in the outbox to be read.
        c.events.nats_url = "nats://127.0.0.1:1".into();
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

/// The events once `done` holds of them, read again every 50 ms for 10 s
/// at most; the last reading otherwise, for the caller's assertions to
/// say what is missing.
async fn events_once(
    app: &TestApp,
    done: impl Fn(&BTreeMap<i64, Vec<(String, String)>>) -> bool,
) -> BTreeMap<i64, Vec<(String, String)>> {
    let started = Instant::now();
    loop {
        let written = events(app).await;
        if done(&written) || started.elapsed() > Duration::from_secs(10) {
            return written;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    // The dead letter's `failed` event commits with its transaction, just
    // after Redis already shows the stream drained.
    let refused_order = refused.order_id.as_ref().filter(|_| path.is_async()).map(|id| id.parse::<i64>().unwrap());
    let written = events_once(&app, |written| refused_order.is_none_or(|order| written.contains_key(&order))).await;
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
    let written = events_once(&app, |written| written.get(&order).is_some_and(|e| e.len() == 2)).await;
    assert!(written.get(&order).is_some_and(|e| e.len() == 2), "{path:?}: never expired: {written:?}");
    assert_eq!(written[&order], pairs(&[("created", "UNPAID"), ("expired", "CANCELLED")]), "{path:?}");
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

// The relay, against a NATS server of the test's own.

use async_nats::jetstream::{self, consumer::pull};
use common::nats::NatsServer;
use futures::StreamExt;
use serde_json::Value;

async fn app_with_broker(path: OrderPath, nats: &NatsServer) -> TestApp {
    app_keeping_events(path, nats, 0).await
}

/// Published events kept `retention_s` in the outbox.
async fn app_keeping_events(path: OrderPath, nats: &NatsServer, retention_s: u64) -> TestApp {
    TestApp::spawn_on_with(path, |c| {
        c.events.order_events = OrderEvents::Nats;
        c.events.nats_url = nats.url();
        c.events.outbox_retention_s = retention_s;
    })
    .await
}

/// Waits until the outbox is empty: every event published (an order not
/// yet persisted has none yet: the asynchronous mode drains first).
async fn all_published(app: &TestApp, within: Duration) {
    let started = Instant::now();
    loop {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap();
        if left == 0 {
            return;
        }
        assert!(started.elapsed() < within, "{left} events still unpublished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client of the test's own: with the credentials and the CA a secured
/// server asks for.
async fn client_of(nats: &NatsServer) -> async_nats::Client {
    let Some(secured) = nats.secured() else {
        return async_nats::connect(nats.url()).await.unwrap();
    };
    async_nats::ConnectOptions::with_user_and_password(secured.user.clone(), secured.password.clone())
        .add_root_certificates(secured.ca_file.clone())
        .require_tls(true)
        .connect(format!("127.0.0.1:{}", nats.port))
        .await
        .unwrap()
}

/// Every message of the stream, in stream order: (Nats-Msg-Id, subject,
/// body). A cluster that has just lost a server may refuse a read (a 503
/// while the stream's or the reader's leader moves): the whole stream is
/// read again, for 30 s at most.
async fn stream_messages(nats: &NatsServer) -> Vec<StreamMessage> {
    let js = jetstream::new(client_of(nats).await);
    let started = Instant::now();
    loop {
        match read_stream(&js).await {
            Ok(messages) => return messages,
            Err(err) => assert!(started.elapsed() < Duration::from_secs(30), "the stream could not be read: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

type StreamMessage = (String, String, Value);

async fn read_stream(js: &jetstream::Context) -> Result<Vec<StreamMessage>, Box<dyn std::error::Error + Send + Sync>> {
    let stream = js.get_stream("ORDERS").await?;
    // One replica: a reader of a cluster that lost a server is made by
    // the servers left, without a quorum of its own to wait for.
    let config = pull::Config {
        ack_policy: jetstream::consumer::AckPolicy::None,
        num_replicas: 1,
        memory_storage: true,
        ..Default::default()
    };
    let reader = stream.create_consumer(config).await?;
    let mut messages = Vec::new();
    loop {
        let mut batch = reader.fetch().max_messages(500).expires(Duration::from_millis(300)).messages().await?;
        let before = messages.len();
        while let Some(message) = batch.next().await {
            let message = message?;
            // A message without its id or its JSON is no passing refusal: it fails at once.
            let id = message.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).unwrap().as_str().to_owned();
            let body: Value = serde_json::from_slice(&message.payload).unwrap();
            messages.push((id, message.subject.to_string(), body));
        }
        if messages.len() == before {
            return Ok(messages);
        }
    }
}

on_every_path!(events_reach_the_stream_once_each_in_the_order_their_changes_committed);

async fn events_reach_the_stream_once_each_in_the_order_their_changes_committed(path: OrderPath) {
    let nats = NatsServer::start();
    let app = app_with_broker(path, &nats).await;
    let voucher = app.open_seckill(30).await;
    let users = app.seed_users(40).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let outcomes = app.order_all(voucher, &tokens).await;
    if path.is_async() {
        app.drained(voucher, Duration::from_secs(20)).await;
    }
    let placed: Vec<(String, &str)> =
        outcomes.iter().zip(&tokens).filter_map(|(o, t)| o.order_id.clone().map(|id| (id, *t))).collect();
    assert_eq!(placed.len(), 30, "{path:?}: {:?}", tally(&outcomes));
    // A third paid then used, a third cancelled, a third paid then refunded.
    for (i, (order, token)) in placed.iter().enumerate() {
        let steps: &[&str] = [&["pay", "use"][..], &["cancel"][..], &["pay", "refund"][..]][i % 3];
        for step in steps {
            expect_ok(act(&app, order, step, token).await).await;
        }
    }
    all_published(&app, Duration::from_secs(10)).await;
    let kept: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox_published").fetch_one(&app.db).await.unwrap();
    assert_eq!(kept, 0, "{path:?}: by default an event is kept nowhere once the broker has it");
    let messages = stream_messages(&nats).await;
    let mut by_order: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, subject, body) in &messages {
        let order = body["orderId"].as_str().unwrap().to_owned();
        let kind = body["type"].as_str().unwrap();
        assert_eq!(id, &format!("{order}-{kind}"), "{body}");
        assert_eq!(subject, &format!("orders.{kind}"));
        assert_eq!((body["schemaVersion"].as_u64(), body["voucherId"].as_u64()), (Some(1), Some(voucher)), "{body}");
        by_order.entry(order).or_default().push(kind.to_owned());
    }
    assert_eq!(by_order.len(), 30, "{path:?}: one stream of events per order placed, none other");
    for (i, (order, _)) in placed.iter().enumerate() {
        let expected: &[&str] =
            [&["created", "paid", "used"][..], &["created", "cancelled"][..], &["created", "paid", "refunded"][..]]
                [i % 3];
        assert_eq!(by_order[order], expected, "{path:?}: order {order}, once each and in order");
    }
}

/// A relay that died between publishing and taking its rows out leaves
/// them in the outbox: the next round publishes them again under the same
/// `Nats-Msg-Id`, and the broker keeps one of each.
#[tokio::test]
async fn events_published_again_after_a_lost_mark_are_dropped_by_the_broker() {
    let nats = NatsServer::start();
    let app = app_keeping_events(OrderPath::Grouped, &nats, 3_600).await;
    let voucher = app.open_seckill(20).await;
    let users = app.seed_users(20).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens).await;
    all_published(&app, Duration::from_secs(10)).await;
    assert_eq!(stream_messages(&nats).await.len(), 20);

    let kept: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox_published").fetch_one(&app.db).await.unwrap();
    assert_eq!(kept, 20, "published events are kept for OUTBOX_RETENTION_S");
    // Back in the outbox, as a relay that died before taking them out
    // would have left them.
    sqlx::query(
        "INSERT INTO tb_order_outbox (seq, order_id, user_id, voucher_id, type, state, occurred_at)
         SELECT seq, order_id, user_id, voucher_id, type, state, occurred_at FROM tb_order_outbox_published",
    )
    .execute(&app.db)
    .await
    .unwrap();
    sqlx::query("DELETE FROM tb_order_outbox_published").execute(&app.db).await.unwrap();
    all_published(&app, Duration::from_secs(10)).await;
    let messages = stream_messages(&nats).await;
    assert_eq!(messages.len(), 20, "duplicates reached the stream");
}

/// A broker that asks for a password and speaks TLS only, as one across a
/// network would: the relay, given `tls://user:password@...` and the CA
/// in `NATS_CA_FILE`, publishes there.
#[tokio::test]
async fn events_reach_a_broker_that_asks_for_a_password_over_tls() {
    let nats = NatsServer::start_secured();
    let app = TestApp::spawn_on_with(OrderPath::Grouped, |c| {
        c.events.order_events = OrderEvents::Nats;
        c.events.nats_url = nats.url();
        c.events.nats_ca_file = nats.secured().unwrap().ca_file.display().to_string();
    })
    .await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(5).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens).await;
    all_published(&app, Duration::from_secs(10)).await;
    let messages = stream_messages(&nats).await;
    assert_eq!(messages.len(), 5, "{messages:?}");
    assert!(messages.iter().all(|(_, subject, _)| subject == "orders.created"), "{messages:?}");
}

/// The same broker, reached with a wrong password, or with a CA that did
/// not sign its certificate: the relay publishes nothing (the events wait
/// in the outbox), while the orders go on.
#[tokio::test]
async fn a_relay_with_a_wrong_password_or_another_ca_publishes_nothing() {
    let nats = NatsServer::start_secured();
    let secured = nats.secured().unwrap();
    let wrong_password = nats.url().replace(&format!(":{}@", secured.password), ":not-the-password@");
    let cases = [
        ("a wrong password", wrong_password, secured.ca_file.clone()),
        ("another CA", nats.url(), secured.other_ca_file.clone()),
    ];
    for (case, url, ca_file) in cases {
        let app = TestApp::spawn_on_with(OrderPath::Grouped, |c| {
            c.events.order_events = OrderEvents::Nats;
            c.events.nats_url = url;
            c.events.nats_ca_file = ca_file.display().to_string();
        })
        .await;
        let voucher = app.open_seckill(3).await;
        let users = app.seed_users(3).await;
        let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
        let outcomes = app.order_all(voucher, &tokens).await;
        assert_eq!(tally(&outcomes).get("OK"), Some(&3), "{case}: the sale goes on");
        // Longer than a relay that got in takes to publish (the test above).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap();
        assert_eq!(waiting, 3, "{case}: the events wait in the outbox");
    }
    let js = jetstream::new(client_of(&nats).await);
    assert!(js.get_stream("ORDERS").await.is_err(), "no relay reached the broker to make its stream");
}

/// The relay reads on from where it left off, past the rows it took out:
/// an event whose transaction took its `seq` before later ones and
/// commits after they were published is published all the same, and one
/// rolled back does not hold the relay up.
#[tokio::test]
async fn an_event_committed_after_later_ones_were_published_is_published_too() {
    let nats = NatsServer::start();
    let app = app_with_broker(OrderPath::Grouped, &nats).await;
    let voucher = app.open_seckill(20).await;
    let users = app.seed_users(20).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens[..10]).await;
    all_published(&app, Duration::from_secs(10)).await;

    let write = "INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state)
                 VALUES (?, 1, ?, 'created', 'UNPAID')";
    let mut late = app.db.begin().await.unwrap();
    sqlx::query(write).bind(900_001_i64).bind(voucher).execute(&mut *late).await.unwrap();
    let mut rolled_back = app.db.begin().await.unwrap();
    sqlx::query(write).bind(900_002_i64).bind(voucher).execute(&mut *rolled_back).await.unwrap();
    app.order_all(voucher, &tokens[10..]).await;
    all_published(&app, Duration::from_secs(10)).await;
    rolled_back.rollback().await.unwrap();
    // Past the time the relay waits before it asks about a gap: it asks,
    // and finds the first still held.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    late.commit().await.unwrap();
    all_published(&app, Duration::from_secs(10)).await;

    let ids: Vec<String> = stream_messages(&nats).await.into_iter().map(|(id, _, _)| id).collect();
    assert_eq!(ids.len(), 21, "{ids:?}");
    assert_eq!(ids.last().map(String::as_str), Some("900001-created"), "published once it committed");
    assert!(!ids.iter().any(|id| id.starts_with("900002")), "a rolled-back event is no event");
}

/// The broker is killed mid-sale: orders go on, their events wait in the
/// outbox, and once it is back they all reach the stream, each once.
#[tokio::test]
async fn events_written_while_the_broker_is_down_reach_it_once_it_is_back() {
    let mut nats = NatsServer::start();
    let app = app_with_broker(OrderPath::Async, &nats).await;
    let voucher = app.open_seckill(40).await;
    let users = app.seed_users(40).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens[..10]).await;
    app.drained(voucher, Duration::from_secs(20)).await;
    all_published(&app, Duration::from_secs(10)).await;
    assert_eq!(stream_messages(&nats).await.len(), 10);

    nats.kill();
    let during = app.order_all(voucher, &tokens[10..]).await;
    assert_eq!(tally(&during).get("OK"), Some(&30), "the sale goes on without the broker");
    app.drained(voucher, Duration::from_secs(20)).await;
    let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap();
    assert_eq!(waiting, 30, "the events wait in the outbox");

    nats.restart();
    all_published(&app, Duration::from_secs(10)).await;
    let messages = stream_messages(&nats).await;
    let ids: std::collections::BTreeSet<&String> = messages.iter().map(|(id, _, _)| id).collect();
    assert_eq!((messages.len(), ids.len()), (40, 40));
}

/// Another instance holds the lease (as a holder that just renewed it and
/// died would): nothing is relayed until it expires, then this instance
/// takes it over and relays what waited.
#[tokio::test]
async fn the_lease_of_a_holder_that_stopped_renewing_is_taken_over_once_it_expires() {
    let nats = NatsServer::start();
    let app = app_with_broker(OrderPath::Grouped, &nats).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(2).await;
    app.order_all(voucher, &[users[0].1.as_str()]).await;
    all_published(&app, Duration::from_secs(10)).await;

    // Timed from before the statement: its NOW(3) is read when it starts,
    // and a renewal holding the row can make it wait (a loaded CI box made
    // it wait a quarter of a second), so the lease ends 3 s after this at
    // the earliest.
    let stolen = Instant::now();
    sqlx::query("UPDATE tb_outbox_lease SET holder = 'a-dead-instance', until = NOW(3) + INTERVAL 3 SECOND")
        .execute(&app.db)
        .await
        .unwrap();
    // This instance's next renewal (within 250 ms) finds the lease taken.
    tokio::time::sleep(Duration::from_millis(500)).await;
    app.order_all(voucher, &[users[1].1.as_str()]).await;
    let unpublished = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap()
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(unpublished().await, 1, "relayed while another instance held the lease");
    all_published(&app, Duration::from_secs(10)).await;
    let taken_after = stolen.elapsed();
    assert!(taken_after >= Duration::from_millis(2_900), "taken over before the lease expired: {taken_after:?}");
    let holder: String = sqlx::query_scalar("SELECT holder FROM tb_outbox_lease").fetch_one(&app.db).await.unwrap();
    assert_ne!(holder, "a-dead-instance");
}

#[tokio::test]
async fn published_events_are_kept_for_their_retention_then_deleted() {
    let nats = NatsServer::start();
    let app = app_keeping_events(OrderPath::Grouped, &nats, 2).await;
    let voucher = app.open_seckill(10).await;
    let users = app.seed_users(10).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens).await;
    all_published(&app, Duration::from_secs(10)).await;
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tb_order_outbox_published").fetch_one(&app.db).await.unwrap()
    };
    assert_eq!(count().await, 10, "kept while their retention lasts");
    let started = Instant::now();
    while count().await > 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "published events outlived their retention");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// NATS started again on an empty store (its stream gone): the relay makes
/// the stream again and what waited reaches it.
#[tokio::test]
async fn events_reach_a_broker_started_again_without_its_stream() {
    let mut nats = NatsServer::start();
    let app = app_with_broker(OrderPath::Grouped, &nats).await;
    let voucher = app.open_seckill(20).await;
    let users = app.seed_users(20).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens[..10]).await;
    all_published(&app, Duration::from_secs(10)).await;

    nats.kill_and_wipe();
    app.order_all(voucher, &tokens[10..]).await;
    nats.restart();
    all_published(&app, Duration::from_secs(15)).await;
    assert_eq!(stream_messages(&nats).await.len(), 10, "the ten written while it was away, in a stream made again");
}

// --- a silent cut: the broker's link drops packets and resets nothing ---

use common::proxy::Proxy;

/// The broker behind a proxy the test can silence.
async fn broker_behind_proxy() -> (NatsServer, Proxy) {
    let nats = NatsServer::start();
    let proxy = Proxy::to_url(&nats.url(), 4222).await;
    (nats, proxy)
}

async fn app_relaying_to(path: OrderPath, nats_url: String) -> TestApp {
    TestApp::spawn_on_with(path, |c| {
        c.events.order_events = OrderEvents::Nats;
        c.events.nats_url = nats_url;
    })
    .await
}

async fn unpublished(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(&app.db).await.unwrap()
}

/// The broker goes silent while the relay has a round of 35 events in
/// flight: the instance, stopped, stops at once (the round is given up,
/// its events left in the outbox for the next holder), not after the
/// round's acknowledgements have each timed out.
#[tokio::test]
async fn an_instance_whose_relay_waits_on_a_silent_broker_stops_at_once() {
    let (_nats, proxy) = broker_behind_proxy().await;
    let mut app = app_relaying_to(OrderPath::Grouped, proxy.url()).await;
    let voucher = app.open_seckill(40).await;
    let users = app.seed_users(40).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens[..5]).await;
    all_published(&app, Duration::from_secs(10)).await;

    proxy.silence();
    app.order_all(voucher, &tokens[5..]).await;
    // The round reads them within 300 ms, publishes, and waits.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let stopping = Instant::now();
    app.stop().await;
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(3), "the instance took {took:?} to stop");
    assert_eq!(unpublished(&app).await, 35, "unacknowledged events stay in the outbox");
}

/// A silent cut of 6 s mid-sale; the connection it caught stays silent
/// after it heals (as one whose retransmissions backed off does for a
/// while): the events written meanwhile reach the broker within 5 s of
/// the heal, each once.
#[tokio::test]
async fn events_reach_the_broker_within_5_s_of_a_silent_cut_healing() {
    let (nats, proxy) = broker_behind_proxy().await;
    let app = app_relaying_to(OrderPath::Async, proxy.url()).await;
    let voucher = app.open_seckill(40).await;
    let users = app.seed_users(40).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    app.order_all(voucher, &tokens[..10]).await;
    app.drained(voucher, Duration::from_secs(20)).await;
    all_published(&app, Duration::from_secs(10)).await;

    let cut = Instant::now();
    proxy.silence();
    let during = app.order_all(voucher, &tokens[10..]).await;
    assert_eq!(tally(&during).get("OK"), Some(&30), "the sale goes on through the cut");
    app.drained(voucher, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(cut.elapsed())).await;
    assert_eq!(unpublished(&app).await, 30, "nothing passed the cut");
    proxy.unsilence();
    let healed = Instant::now();
    while unpublished(&app).await > 0 {
        assert!(
            healed.elapsed() < Duration::from_secs(5),
            "{} events unpublished 5 s after the heal",
            unpublished(&app).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let messages = stream_messages(&nats).await;
    let ids: std::collections::BTreeSet<&String> = messages.iter().map(|(id, _, _)| id).collect();
    assert_eq!((messages.len(), ids.len()), (40, 40), "each event once");
}

/// An instance on a thread of its own, with a metrics recorder of its
/// own: the process's recorder is one for every test's instances, so
/// that `hmdp_outbox_relay_active` is read here as a scrape of that
/// instance alone would show it.
struct Observed {
    active: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Records `hmdp_outbox_relay_active` alone.
struct RelayActive(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl metrics::Recorder for RelayActive {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        match key.name() {
            "hmdp_outbox_relay_active" => metrics::Gauge::from_arc(self.0.clone()),
            _ => metrics::Gauge::noop(),
        }
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

impl Observed {
    fn start(mut config: hmdp::Config) -> Self {
        config.server.proxy_socket = Some(common::scratch::socket_path());
        let active = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0f64.to_bits()));
        let (ready, built) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let recorder = RelayActive(active.clone());
        let thread = std::thread::spawn(move || {
            let _local = metrics::set_default_local_recorder(&recorder);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let app = hmdp::startup::Application::build(config).await.expect("app builds");
                ready.send(()).unwrap();
                let _ = app
                    .run_until(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        built.recv().expect("the instance was built");
        Self { active, stop: Some(stop), thread: Some(thread) }
    }

    fn active(&self) -> bool {
        f64::from_bits(self.active.load(std::sync::atomic::Ordering::SeqCst)) == 1.0
    }

    fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Two instances; the broker goes silent while the lease holder has a
/// round in flight: at no time do both say they relay (the gauge summed
/// over the instances is at most 1).
#[tokio::test]
async fn two_instances_never_both_report_relaying_while_the_broker_is_silent() {
    let (_nats, proxy) = broker_behind_proxy().await;
    let (mut config, database, prefix) = common::test_config();
    config.events.order_events = OrderEvents::Nats;
    config.events.nats_url = proxy.url();
    let db = hmdp::startup::connect_database(config.db.url.as_str(), 2).await.unwrap();
    let mut first = Observed::start(config.clone());
    let started = Instant::now();
    while !first.active() {
        assert!(started.elapsed() < Duration::from_secs(10), "the first instance never took the lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut second = Observed::start(config);

    proxy.silence();
    let write = "INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state)
                 SELECT 900000 + seq, 1, 7, 'created', 'UNPAID' FROM seq_1_to_20";
    sqlx::query(write).execute(&db).await.unwrap();
    let watching = Instant::now();
    let (mut both, mut one) = (0, 0);
    while watching.elapsed() < Duration::from_secs(5) {
        match (first.active(), second.active()) {
            (true, true) => both += 1,
            (true, false) | (false, true) => one += 1,
            (false, false) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Off the runtime: the proxy they reach the broker through runs on it.
    let stopped = tokio::task::spawn_blocking(move || {
        first.stop();
        second.stop();
    });
    let _ = tokio::time::timeout(Duration::from_secs(15), stopped).await;
    db.close().await;
    common::cleanup(database, prefix).await;
    assert_eq!(both, 0, "both instances reported relaying at {both} of {} looks", both + one);
    assert!(one > 0, "no instance reported relaying");
}

/// Three brokers, the order stream on all three (`NATS_STREAM_REPLICAS=3`,
/// `NATS_URL` naming each): between two waves of orders the server that
/// leads the stream is SIGKILLed and its store deleted, a machine lost with
/// its disk. The relay goes on with the two left, and every event of both
/// waves is on them, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_three_server_cluster_acknowledged_outlive_the_loss_of_its_leader_with_its_disk() {
    let mut cluster = NatsServer::cluster_of_three().await;
    let urls = cluster.iter().map(NatsServer::url).collect::<Vec<_>>().join(",");
    let app = TestApp::spawn_on_with(OrderPath::Grouped, |c| {
        c.events.order_events = OrderEvents::Nats;
        c.events.nats_url = urls;
        c.events.nats_stream_replicas = 3;
    })
    .await;
    let voucher = app.open_seckill(40).await;
    let users = app.seed_users(40).await;
    let tokens: Vec<&str> = users.iter().map(|(_, t)| t.as_str()).collect();
    let first = app.order_all(voucher, &tokens[..20]).await;
    all_published(&app, Duration::from_secs(20)).await;

    let js = jetstream::new(client_of(&cluster[0]).await);
    let mut stream = js.get_stream("ORDERS").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3, "the stream is on every server");
    let leader = info.cluster.as_ref().and_then(|c| c.leader.clone()).expect("the stream has a leader");
    let lost = cluster.iter().position(|s| s.name() == Some(leader.as_str())).unwrap();
    cluster[lost].kill_and_wipe();

    let second = app.order_all(voucher, &tokens[20..]).await;
    all_published(&app, Duration::from_secs(30)).await;
    let ordered: BTreeSet<String> = first.iter().chain(&second).filter_map(|o| o.order_id.clone()).collect();
    assert_eq!(ordered.len(), 40, "{:?}", tally(&first));
    let survivor = &cluster[(lost + 1) % 3];
    let messages = stream_messages(survivor).await;
    let ids: Vec<&str> = messages.iter().map(|(id, _, _)| id.as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an event twice in the stream");
    let created: BTreeSet<String> =
        unique.iter().filter_map(|id| id.strip_suffix("-created")).map(str::to_owned).collect();
    assert_eq!(created, ordered, "every order's created event is on the servers left");
}

/// A stream made by a relay set to one replica (a single server grown
/// into a cluster) is raised to the replicas asked for by the next relay
/// that starts: no acknowledged event keeps resting on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_made_with_one_replica_is_raised_to_the_replicas_asked_for() {
    let cluster = NatsServer::cluster_of_three().await;
    let urls = cluster.iter().map(NatsServer::url).collect::<Vec<_>>().join(",");
    let replicas_now = || async {
        let js = jetstream::new(client_of(&cluster[0]).await);
        js.get_stream("ORDERS").await.unwrap().info().await.unwrap().config.num_replicas
    };
    for replicas in [1, 3] {
        let urls = urls.clone();
        let app = TestApp::spawn_on_with(OrderPath::Grouped, |c| {
            c.events.order_events = OrderEvents::Nats;
            c.events.nats_url = urls;
            c.events.nats_stream_replicas = replicas;
        })
        .await;
        let voucher = app.open_seckill(1).await;
        let (_, token) = app.seed_users(1).await.remove(0);
        bought(&app, voucher, &token).await;
        all_published(&app, Duration::from_secs(20)).await;
        assert_eq!(replicas_now().await, replicas);
    }
}
