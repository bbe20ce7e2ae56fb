//! Statements held to their plans, for the stores' tests: MariaDB's
//! `ANALYZE FORMAT=JSON` runs a statement, the service's own text, and
//! reports the rows each table access really read, on a database of the
//! test's own that it seeds with a long history. Used by the seckill's
//! store (the history's queries) and the sale path's (the terms read at
//! an opening).

use serde_json::Value;
use sqlx::{Connection, MySqlConnection, mysql::MySqlConnectOptions};

/// One table access of a plan as MariaDB ran it.
#[derive(Debug)]
pub(crate) struct Access {
    pub(crate) table: String,
    pub(crate) access_type: String,
    pub(crate) key: Option<String>,
    pub(crate) examined: f64,
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
pub(crate) async fn analyze(conn: &mut MySqlConnection, sql: &str, args: &[Value]) -> Vec<Access> {
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

/// Holds `sql`'s access to `table` (its alias, if it has one) to `key`,
/// examining at most `bound` rows; any other table it reads is read by
/// its primary key, at most `bound` times.
pub(crate) async fn holds_on(
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

/// A database of the test's own (`name`: each test its own): several
/// runs may share one server.
fn scratch(name: &str) -> String {
    format!("hmdp_plans_{name}_{}", std::process::id())
}

pub(crate) async fn scratch_database(name: &str) -> MySqlConnection {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names the MariaDB the tests may use");
    let options: MySqlConnectOptions = url.parse().unwrap();
    let mut server = MySqlConnection::connect_with(&options.clone().database("information_schema")).await.unwrap();
    let scratch = scratch(name);
    sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {scratch}; CREATE DATABASE {scratch}"))
        .execute(&mut server)
        .await
        .unwrap();
    let pool = sqlx::MySqlPool::connect_with(options.clone().database(&scratch)).await.unwrap();
    crate::schema::migrate(&pool).await.unwrap();
    pool.close().await;
    MySqlConnection::connect_with(&options.database(&scratch)).await.unwrap()
}

/// Drops the test's database.
pub(crate) async fn drop_scratch(conn: MySqlConnection, name: &str) {
    conn.close().await.ok();
    let url = std::env::var("DATABASE_URL").unwrap();
    let options: MySqlConnectOptions = url.parse().unwrap();
    let mut server = MySqlConnection::connect_with(&options.database("information_schema")).await.unwrap();
    sqlx::raw_sql(&format!("DROP DATABASE {}", scratch(name))).execute(&mut server).await.unwrap();
}
