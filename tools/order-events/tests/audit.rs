//! The audit against a real MariaDB: it holds only its own sale's events,
//! whatever an earlier life of the voucher's id left in the inbox.

use hmdp_test_support::scratch;
use order_events::{
    audit::EventsAudit,
    inbox::{self, Event},
};
use sqlx::MySqlPool;

fn created(order: i64, voucher: u64) -> Event {
    Event {
        id: format!("{order}-created"),
        order_id: order.to_string(),
        voucher_id: voucher,
        kind: "created".into(),
        state: "UNPAID".into(),
    }
}

async fn consumed(db: &MySqlPool, event: &Event, seq: u64) {
    let mut tx = db.begin().await.unwrap();
    inbox::apply(&mut tx, event, seq).await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn an_audit_holds_no_event_an_earlier_life_of_its_voucher_left() {
    let (db, database, prefix) = orders_and_inbox().await;
    let voucher = 7;
    // Voucher 7 of a database since made again sold order 1; its row is gone.
    consumed(&db, &created(1, voucher), 1).await;
    // Voucher 7 of today sells order 2.
    sqlx::query("INSERT INTO tb_voucher_order VALUES (2, ?, 1)").bind(voucher).execute(&db).await.unwrap();
    consumed(&db, &created(2, voucher), 2).await;
    let before = EventsAudit::run(&db, &db, &[voucher]).await.unwrap();
    assert_eq!((before.without_row, before.passed), (1, false), "{}", before.render());

    inbox::forget_vouchers(&db, &[voucher]).await.unwrap();
    consumed(&db, &created(2, voucher), 3).await;
    let audit = EventsAudit::run(&db, &db, &[voucher]).await.unwrap();
    assert!(audit.passed, "{}", audit.render());
    assert_eq!((audit.order_rows, audit.events, audit.without_row), (1, 1, 0));
    let views: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM order_view").fetch_one(&db).await.unwrap();
    assert_eq!(views, 1, "order 1's view outlived its events");

    db.close().await;
    scratch::cleanup(database, prefix).await;
}

fn event(order: i64, voucher: u64, kind: &str, state: &str) -> Event {
    Event {
        id: format!("{order}-{kind}"),
        order_id: order.to_string(),
        voucher_id: voucher,
        kind: kind.into(),
        state: state.into(),
    }
}

/// A scratch database holding the orders' table (the audit reads their
/// id, voucher and status) and the consumer's.
async fn orders_and_inbox() -> (MySqlPool, String, String) {
    let (_, database, prefix) = scratch::test_config();
    let db =
        hmdp::startup::connect_database(&format!("{}/{database}", scratch::database_server_url()), 2).await.unwrap();
    sqlx::query(
        "CREATE TABLE tb_voucher_order (id BIGINT PRIMARY KEY, voucher_id BIGINT UNSIGNED, status TINYINT UNSIGNED)",
    )
    .execute(&db)
    .await
    .unwrap();
    inbox::create_tables(&db).await.unwrap();
    (db, database, prefix)
}

/// Orders 1 and 2, both paid, of the voucher returned.
async fn two_paid_orders(db: &MySqlPool) -> u64 {
    let voucher = 7;
    sqlx::query("INSERT INTO tb_voucher_order VALUES (1, ?, 2), (2, ?, 2)")
        .bind(voucher)
        .bind(voucher)
        .execute(db)
        .await
        .unwrap();
    voucher
}

/// The stream holds an order's `created` then its `paid`, but the
/// consumer applied the `paid` first (a redelivery, a second consumer):
/// its view went PAID, then back to UNPAID. The audit holds the order the
/// events were applied in, not the stream's.
#[tokio::test]
async fn an_audit_fails_events_applied_out_of_their_orders_life() {
    let (db, database, prefix) = orders_and_inbox().await;
    let voucher = two_paid_orders(&db).await;
    consumed(&db, &event(1, voucher, "created", "UNPAID"), 1).await;
    consumed(&db, &event(1, voucher, "paid", "PAID"), 2).await;
    consumed(&db, &event(2, voucher, "paid", "PAID"), 4).await;
    consumed(&db, &event(2, voucher, "created", "UNPAID"), 3).await;
    let audit = EventsAudit::run(&db, &db, &[voucher]).await.unwrap();
    db.close().await;
    scratch::cleanup(database, prefix).await;
    assert!(!audit.passed, "order 2's events were applied out of order: {}", audit.render());
    assert_eq!(audit.wrong, 1, "{}", audit.render());
}

/// Every event there, once, in order; but an order's view is not the
/// state of its row (the row changed with no event, or the view was
/// written by something else): the audit fails.
#[tokio::test]
async fn an_audit_fails_an_orders_view_that_is_not_its_rows_state() {
    let (db, database, prefix) = orders_and_inbox().await;
    let voucher = two_paid_orders(&db).await;
    for order in [1, 2] {
        consumed(&db, &event(order, voucher, "created", "UNPAID"), 2 * order as u64).await;
        consumed(&db, &event(order, voucher, "paid", "PAID"), 2 * order as u64 + 1).await;
    }
    consumed(&db, &event(9, voucher, "failed", "FAILED"), 10).await;
    let good = EventsAudit::run(&db, &db, &[voucher]).await.unwrap();
    sqlx::query("UPDATE order_view SET state = 'CANCELLED' WHERE order_id = 2").execute(&db).await.unwrap();
    let bad = EventsAudit::run(&db, &db, &[voucher]).await.unwrap();
    db.close().await;
    scratch::cleanup(database, prefix).await;
    assert!(good.passed, "{}", good.render());
    assert!(!bad.passed, "order 2's view says CANCELLED, its row PAID: {}", bad.render());
}

/// An audit that cannot reach NATS says where it looked, but not with the
/// password `NATS_URL` carries (nothing listens on port 1).
#[tokio::test]
async fn an_audit_that_finds_no_broker_names_it_without_its_password() {
    let (_, database, prefix) = scratch::test_config();
    let db =
        hmdp::startup::connect_database(&format!("{}/{database}", scratch::database_server_url()), 2).await.unwrap();
    inbox::create_tables(&db).await.unwrap();
    let url = "nats://relay:nats-pass-135@127.0.0.1:1";
    let err =
        order_events::audit_sale(&db, &db, &order_events::consume::Broker::at(url), &[7], 0, std::time::Duration::ZERO)
            .await
            .unwrap_err();
    let said = format!("{err:#}");
    assert!(said.contains("127.0.0.1:1"), "{said}");
    assert!(!said.contains("nats-pass-135"), "{said}");

    db.close().await;
    scratch::cleanup(database, prefix).await;
}
