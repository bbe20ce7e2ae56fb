//! The database's schema at start-up: the embedded migrations, run under a
//! lock, and the constraints the service refuses to serve without.

use anyhow::Context;
use sqlx::MySqlPool;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Runs the embedded migrations under a named lock, so instances starting
/// together do not race. sqlx takes `GET_LOCK(name, -1)` for this, but on
/// MariaDB a negative timeout returns NULL at once instead of waiting (MySQL
/// reads it as "forever"), so sqlx's own lock does nothing there.
pub async fn migrate(db: &MySqlPool) -> anyhow::Result<()> {
    let mut conn = db.acquire().await.context("connecting for migrations")?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(CONCAT('hmdp:migrate:', DATABASE()), 120)")
        .fetch_one(&mut *conn)
        .await
        .context("taking the migration lock")?;
    anyhow::ensure!(locked == Some(1), "another instance held the migration lock for 120 s");
    let result = MIGRATOR.run(&mut *conn).await.context("running migrations");
    sqlx::query("SELECT RELEASE_LOCK(CONCAT('hmdp:migrate:', DATABASE()))")
        .execute(&mut *conn)
        .await
        .context("releasing the migration lock")?;
    result
}

/// The migrations create the tables with `IF NOT EXISTS`, so against an
/// existing course database they leave its tables as they are, possibly
/// without the constraints that make the database the last word on
/// overselling and on one order per user. Without them the service must
/// not serve.
pub(crate) async fn verify_safety_constraints(db: &MySqlPool) -> anyhow::Result<()> {
    let unique: Option<String> = sqlx::query_scalar(
        "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tb_voucher_order'
           AND INDEX_NAME = 'uk_user_voucher' AND NON_UNIQUE = 0",
    )
    .fetch_one(db)
    .await
    .context("reading tb_voucher_order's indexes")?;
    let checks: Vec<String> = sqlx::query_scalar(
        "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
         WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = 'tb_seckill_voucher'",
    )
    .fetch_all(db)
    .await
    .context("reading tb_seckill_voucher's checks")?;
    let mut missing = Vec::new();
    if unique.as_deref() != Some("user_id,live_voucher") {
        missing.push("UNIQUE KEY uk_user_voucher (user_id, live_voucher) on tb_voucher_order");
    }
    let stock_check = |clause: &String| {
        let normalized: String = clause.chars().filter(|c| !c.is_whitespace() && *c != '`').collect();
        normalized == "stock>=0"
    };
    if !checks.iter().any(stock_check) {
        missing.push("CHECK (stock >= 0) on tb_seckill_voucher");
    }
    anyhow::ensure!(
        missing.is_empty(),
        "refusing to serve: the database lacks {} (an existing course database? add them, or start on an empty database)",
        missing.join(" and ")
    );
    Ok(())
}
