//! The statements a long history could make slow, held to their plans: on
//! a table of many orders (200 vouchers, 20,000 users, 200,000 orders,
//! every state, a share unpaid and past due) and of a thousand ended
//! sales and a thousand scheduled, each reads through its index
//! and examines what its own work needs, not the history. MariaDB's
//! `ANALYZE FORMAT=JSON` runs the statement and reports the rows each
//! table access really read.

use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection, mysql::MySqlConnectOptions};

use super::{after_sale, orders, sale};

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

/// One table access of a plan as MariaDB ran it.
#[derive(Debug)]
struct Access {
    table: String,
    access_type: String,
    key: Option<String>,
    examined: f64,
}

/// Every table access in an `ANALYZE FORMAT=JSON` document.
fn accesses(plan: &Value, found: &mut Vec<Access>) {
    match plan {
        Value::Object(map) => {
            if let Some(table) = map.get("table_name").and_then(Value::as_str) {
                let access_type = map.get("access_type").and_then(Value::as_str).unwrap_or_default().to_owned();
                // A constant lookup is read while the plan is made and
                // reports no rows; any other access must say what it read.
                let number = |name: &str| match map.get(name).and_then(Value::as_f64) {
                    Some(n) => n,
                    None if access_type == "const" => 0.0,
                    None => panic!("{name} missing from an access of {table}: {plan}"),
                };
                found.push(Access {
                    table: table.to_owned(),
                    key: map.get("key").and_then(Value::as_str).map(str::to_owned),
                    examined: number("r_rows") * number("r_loops"),
                    access_type,
                });
            }
            map.values().for_each(|v| accesses(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| accesses(v, found)),
        _ => {}
    }
}

/// Runs `sql`, the service's own text, under `ANALYZE` with `args` (whole
/// numbers and texts) bound to its placeholders (a server-side `PREPARE`,
/// as `LIMIT ?` takes no session variable).
async fn analyze(conn: &mut MySqlConnection, sql: &str, args: &[Value]) -> Vec<Access> {
    sqlx::query("SET @plan = ?").bind(format!("ANALYZE FORMAT=JSON {sql}")).execute(&mut *conn).await.unwrap();
    let mut using = Vec::new();
    for (n, arg) in args.iter().enumerate() {
        let statement = format!("SET @p{n} = ?");
        let set = sqlx::query(&statement);
        let set = match arg {
            Value::Number(number) => set.bind(number.as_i64().expect("a whole number")),
            Value::String(text) => set.bind(text.as_str()),
            other => panic!("an argument of {sql} is neither a number nor a text: {other}"),
        };
        set.execute(&mut *conn).await.unwrap();
        using.push(format!("@p{n}"));
    }
    sqlx::raw_sql("PREPARE plan FROM @plan").execute(&mut *conn).await.unwrap();
    let execute = match using.is_empty() {
        true => "EXECUTE plan".to_owned(),
        false => format!("EXECUTE plan USING {}", using.join(", ")),
    };
    let row = sqlx::raw_sql(&execute).fetch_one(&mut *conn).await.unwrap();
    let plan: String = sqlx::Row::get(&row, 0);
    let mut found = Vec::new();
    accesses(&serde_json::from_str(&plan).unwrap(), &mut found);
    assert!(!found.is_empty(), "no table access in the plan of {sql}: {plan}");
    found
}

/// Holds `sql`'s one access to the orders to `key`, examining at most
/// `bound` rows.
async fn holds(conn: &mut MySqlConnection, name: &str, sql: &str, args: &[Value], key: &str, bound: i64) {
    holds_on(conn, "tb_voucher_order", name, sql, args, key, bound).await;
}

/// Holds `sql`'s access to `table` (its alias, if it has one) to `key`,
/// examining at most `bound` rows; any other table it reads is read by
/// its primary key, at most `bound` times.
async fn holds_on(
    conn: &mut MySqlConnection,
    table: &str,
    name: &str,
    sql: &str,
    args: &[Value],
    key: &str,
    bound: i64,
) {
    let found = analyze(conn, sql, args).await;
    let (mine, joined): (Vec<_>, Vec<_>) = found.iter().partition(|access| access.table == table);
    let [access] = mine.as_slice() else { panic!("{name}: one access to {table} expected, got {found:?}") };
    for other in joined {
        assert_eq!(
            other.key.as_deref(),
            Some("PRIMARY"),
            "{name} joins {} by more than its key: {other:?}",
            other.table
        );
        assert!(
            other.examined <= bound as f64,
            "{name} examined {} rows of {}: {other:?}",
            other.examined,
            other.table
        );
    }
    assert_ne!(access.access_type, "ALL", "{name} reads the whole table: {access:?}");
    assert_eq!(access.key.as_deref(), Some(key), "{name} reads through another index: {access:?}");
    assert!(access.examined <= bound as f64, "{name} examined {} rows, more than {bound}: {access:?}", access.examined);
}

/// A database of the test's own: several runs may share one server.
fn scratch() -> String {
    format!("hmdp_plans_{}", std::process::id())
}

async fn scratch_database() -> MySqlConnection {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names the MariaDB the tests may use");
    let options: MySqlConnectOptions = url.parse().unwrap();
    let mut server = MySqlConnection::connect_with(&options.clone().database("information_schema")).await.unwrap();
    let scratch = scratch();
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {scratch}; CREATE DATABASE {scratch}"))
        .execute(&mut server)
        .await
        .unwrap();
    let pool = sqlx::MySqlPool::connect_with(options.clone().database(&scratch)).await.unwrap();
    crate::schema::migrate(&pool).await.unwrap();
    pool.close().await;
    MySqlConnection::connect_with(&options.database(&scratch)).await.unwrap()
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
    let mut conn = scratch_database().await;
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

    conn.close().await.ok();
    let url = std::env::var("DATABASE_URL").unwrap();
    let options: MySqlConnectOptions = url.parse().unwrap();
    let mut server = MySqlConnection::connect_with(&options.database("information_schema")).await.unwrap();
    sqlx::raw_sql(&format!("DROP DATABASE {}", scratch())).execute(&mut server).await.unwrap();
}
