//! The statements a long history could make slow, held to their plans: on
//! a table of many orders (200 vouchers, 20,000 users, 200,000 orders,
//! every state, a share unpaid and past due) and of a thousand ended
//! sales and a thousand scheduled, each reads through its index
//! and examines what its own work needs, not the history. MariaDB's
//! `ANALYZE FORMAT=JSON` runs the statement and reports the rows each
//! table access really read.

use serde_json::{Value, json};
use sqlx::MySqlConnection;

use super::{after_sale, orders, sale};
use crate::plan_check::{analyze, drop_scratch, holds_on, scratch_database};

const ORDERS: i64 = 200_000;
/// Orders per user and per voucher in the seed.
const PER_USER: i64 = 10;
const PER_VOUCHER: i64 = ORDERS / VOUCHERS;
const VOUCHERS: i64 = 200;
/// One order in twenty is unpaid; all but the newest are past due.
const UNPAID: i64 = ORDERS / 20;
/// Sales in the seed opening within ten minutes, or opened within one,
/// among a thousand ended, a thousand scheduled and three others.
const OPENING: i64 = 3;

/// Holds `sql`'s one access to the orders to `key`, examining at most
/// `bound` rows.
async fn holds(conn: &mut MySqlConnection, name: &str, sql: &str, args: &[Value], key: &str, bound: i64) {
    holds_on(conn, "tb_voucher_order", name, sql, args, key, bound).await;
}

async fn seed(conn: &mut MySqlConnection) {
    // Order k: user k / 10 (ten consecutive orders, ten vouchers), voucher
    // k mod 200, one second apart up to now; states in twentieths: unpaid,
    // cancelled, refunded, used twice, paid the rest.
    sqlx::query(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time)
         SELECT seq, 1 + seq DIV ?, 1 + seq MOD ?,
                ELT(1 + seq MOD 20, 1, 4, 6, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2),
                NOW() - INTERVAL (? - 1 - seq) SECOND
         FROM seq_0_to_199999", // ORDERS
    )
    .bind(PER_USER)
    .bind(VOUCHERS)
    .bind(ORDERS)
    .execute(&mut *conn)
    .await
    .unwrap();
    // A year of ended sales, a thousand scheduled over the days ahead, and
    // six more: two on for an hour, one opened half a minute ago, two
    // opening in minutes, one in two days.
    sqlx::query(
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
         SELECT 1 + seq, 0, NOW() - INTERVAL seq + 2 HOUR - INTERVAL 1 YEAR, NOW() - INTERVAL seq HOUR - INTERVAL 1 YEAR
         FROM seq_0_to_999
         UNION ALL SELECT 2001 + seq, 5, NOW() + INTERVAL seq + 3 DAY, NOW() + INTERVAL seq + 4 DAY FROM seq_0_to_999
         UNION ALL SELECT 1001, 5, NOW() - INTERVAL 1 HOUR, NOW() + INTERVAL 1 HOUR
         UNION ALL SELECT 1002, 5, NOW() - INTERVAL 30 SECOND, NOW() + INTERVAL 1 DAY
         UNION ALL SELECT 1003, 0, NOW() - INTERVAL 1 HOUR, NOW() + INTERVAL 1 MINUTE
         UNION ALL SELECT 1004, 5, NOW() + INTERVAL 5 MINUTE, NOW() + INTERVAL 1 HOUR
         UNION ALL SELECT 1005, 5, NOW() + INTERVAL 6 MINUTE, NOW() + INTERVAL 2 HOUR
         UNION ALL SELECT 1006, 5, NOW() + INTERVAL 2 DAY, NOW() + INTERVAL 3 DAY",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::raw_sql("ANALYZE TABLE tb_voucher_order, tb_seckill_voucher").execute(&mut *conn).await.unwrap();
}

#[tokio::test]
async fn the_history_queries_read_their_own_rows_not_the_history() {
    let mut conn = scratch_database("history").await;
    seed(&mut conn).await;
    let c = &mut conn;
    let (order, user, voucher) = (123_457, 1 + 123_457 / PER_USER, 7);

    // An order lookup, by anyone and by its owner: one row.
    holds(c, "order_by_id", orders::ORDER_BY_ID, &[json!(order)], "PRIMARY", 1).await;
    holds(c, "owned_order", orders::OWNED_ORDER, &[json!(order), json!(user)], "PRIMARY", 1).await;
    // A user's order list and its count: the user's orders.
    holds(c, "owned_orders", orders::OWNED_ORDERS, &[json!(user), json!(10), json!(0)], "uk_user_voucher", PER_USER)
        .await;
    holds(c, "count_owned", orders::COUNT_OWNED, &[json!(user)], "uk_user_voucher", PER_USER).await;
    // A load or a reconciliation: the voucher's orders.
    holds(c, "orders_of_voucher", orders::ORDERS_OF_VOUCHER, &[json!(voucher)], "idx_voucher_unpaid", PER_VOUCHER)
        .await;
    // The sweep: the unpaid orders past due, at most; then one voucher's
    // of them, up to its batch.
    let sweep = after_sale::VOUCHERS_WITH_EXPIRED_ORDERS;
    let found = analyze(c, sweep, &[json!(900), json!(100)]).await;
    let [access] = found.as_slice() else { panic!("the sweep's search: one access expected, got {found:?}") };
    assert_ne!(access.access_type, "ALL", "the sweep's search reads the whole table: {access:?}");
    assert_eq!(access.key.as_deref(), Some("idx_unpaid"), "the sweep's search: {access:?}");
    assert!(access.examined <= UNPAID as f64, "the sweep's search examined {} rows: {access:?}", access.examined);
    // Voucher 1's orders are all unpaid (k mod 200 = 0 is k mod 20 = 0):
    // the batch of 500 is read, not the thousand.
    let lock = after_sale::LOCK_EXPIRED_ORDERS;
    holds(c, "lock_expired_orders", lock, &[json!(1), json!(900), json!(500)], "idx_voucher_unpaid", 500).await;
    // Group commit's lookup of the buyers already holding an order, 64
    // (user, voucher) pairs of a group over several vouchers: one row a
    // pair, never the users' other orders.
    let pairs: Vec<(u64, u64)> =
        (100_000..100_064_u64).map(|k| (1 + k / PER_USER as u64, 1 + k % VOUCHERS as u64)).collect();
    let held = orders::held_orders_of_query(&pairs);
    let args: Vec<Value> = pairs.iter().flat_map(|&(user, voucher)| [json!(user), json!(voucher)]).collect();
    holds(c, "held_orders_of", held.sql(), &args, "uk_user_voucher", pairs.len() as i64).await;
    // The sales an instance reads ahead of their opening: those opening
    // in the next minutes, not a year of ended sales nor the schedule.
    let now = chrono::Utc::now().naive_utc();
    let text = |at: chrono::NaiveDateTime| json!(at.format("%Y-%m-%d %H:%M:%S").to_string());
    let (after, by) = (now - chrono::TimeDelta::minutes(1), now + chrono::TimeDelta::minutes(10));
    let args = [text(after), text(by), json!(1024)];
    holds_on(c, "sv", "sales_opening", sale::SALES_OPENING, &args, "idx_sale_begin", OPENING).await;
    // Every sold-out voucher an instance holds, in one read: a row each.
    let sold_out: Vec<u64> = (1..=100).collect();
    let in_stock = sale::in_stock_of_query(&sold_out);
    let args: Vec<Value> = (1..=128).map(|id: u64| json!(id.min(100))).collect();
    holds_on(c, "tb_seckill_voucher", "in_stock_of", in_stock.sql(), &args, "PRIMARY", 100).await;

    drop_scratch(conn, "history").await;
}
