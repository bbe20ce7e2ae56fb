//! The downstream side's tables: the inbox, where an event's id is unique,
//! so an event delivered twice is applied once; and the view the events
//! build (each order's state), the effect a real consumer would have. An
//! event and its effect commit together, and the broker hears the ack
//! only after: a consumer that dies in between gets the event again, finds
//! it in the inbox, and only acks it.

use serde::{Deserialize, Serialize};
use sqlx::{MySqlConnection, MySqlPool};

/// An order event as the service publishes it (docs/events.md, schema 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: String,
    pub order_id: String,
    pub voucher_id: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub state: String,
}

pub async fn create_tables(db: &MySqlPool) -> sqlx::Result<()> {
    for statement in [
        "CREATE TABLE IF NOT EXISTS inbox_event (
            event_id   VARCHAR(64)     NOT NULL,
            order_id   BIGINT          NOT NULL,
            voucher_id BIGINT UNSIGNED NOT NULL,
            type       VARCHAR(16)     NOT NULL,
            stream_seq BIGINT UNSIGNED NOT NULL,
            applied_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
            applied    BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
            PRIMARY KEY (event_id),
            UNIQUE KEY uk_inbox_applied (applied),
            KEY idx_inbox_voucher (voucher_id, order_id, stream_seq)
        ) ENGINE = InnoDB",
        // The order the events were applied in, on an inbox made before it
        // was kept (its rows numbered in the order they are stored).
        "ALTER TABLE inbox_event ADD COLUMN IF NOT EXISTS applied BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE KEY",
        "CREATE TABLE IF NOT EXISTS order_view (
            order_id     BIGINT      NOT NULL,
            state        VARCHAR(16) NOT NULL,
            events       INT         NOT NULL,
            out_of_order INT         NOT NULL DEFAULT 0,
            PRIMARY KEY (order_id)
        ) ENGINE = InnoDB",
        "CREATE TABLE IF NOT EXISTS inbox_counter (
            name  VARCHAR(32) NOT NULL,
            value BIGINT      NOT NULL,
            PRIMARY KEY (name)
        ) ENGINE = InnoDB",
    ] {
        sqlx::query(statement).execute(db).await?;
    }
    Ok(())
}

/// Forgets what the inbox holds of `vouchers`: a voucher's id names
/// another sale once its database was made again (a fresh bench, a CI box
/// kept between runs), and that sale's events name orders that are gone.
/// An audit starts from here, so it holds only its own sale's events.
pub async fn forget_vouchers(db: &MySqlPool, vouchers: &[u64]) -> sqlx::Result<()> {
    create_tables(db).await?;
    for voucher in vouchers {
        let mut tx = db.begin().await?;
        sqlx::query(
            "DELETE order_view FROM order_view JOIN inbox_event ON inbox_event.order_id = order_view.order_id
             WHERE inbox_event.voucher_id = ?",
        )
        .bind(voucher)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM inbox_event WHERE voucher_id = ?").bind(voucher).execute(&mut *tx).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Whether `kind` may follow an order's state in the view (`None`: the
/// order is new to it).
pub fn follows(state: Option<&str>, kind: &str) -> bool {
    matches!(
        (state, kind),
        (None, "created" | "failed")
            | (Some("UNPAID"), "paid" | "cancelled" | "expired")
            | (Some("PAID"), "used" | "refunded")
    )
}

/// What applying one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    New { in_order: bool },
    Duplicate,
}

/// Applies one event on `conn` (a transaction): once, however often it is
/// delivered.
pub async fn apply(conn: &mut MySqlConnection, event: &Event, stream_seq: u64) -> sqlx::Result<Applied> {
    let order_id: i64 = event.order_id.parse().map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let inserted = sqlx::query(
        "INSERT INTO inbox_event (event_id, order_id, voucher_id, type, stream_seq) VALUES (?, ?, ?, ?, ?)
         ON DUPLICATE KEY UPDATE event_id = event_id",
    )
    .bind(&event.id)
    .bind(order_id)
    .bind(event.voucher_id)
    .bind(&event.kind)
    .bind(stream_seq)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if inserted != 1 {
        count(conn, "duplicates", 1).await?;
        return Ok(Applied::Duplicate);
    }
    let state: Option<String> = sqlx::query_scalar("SELECT state FROM order_view WHERE order_id = ? FOR UPDATE")
        .bind(order_id)
        .fetch_optional(&mut *conn)
        .await?;
    let in_order = follows(state.as_deref(), &event.kind);
    sqlx::query(
        "INSERT INTO order_view (order_id, state, events, out_of_order) VALUES (?, ?, 1, ?)
         ON DUPLICATE KEY UPDATE state = VALUES(state), events = events + 1, out_of_order = out_of_order + VALUES(out_of_order)",
    )
    .bind(order_id)
    .bind(&event.state)
    .bind(i32::from(!in_order))
    .execute(&mut *conn)
    .await?;
    Ok(Applied::New { in_order })
}

pub async fn count(conn: &mut MySqlConnection, name: &str, by: u64) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO inbox_counter (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = value + ?")
        .bind(name)
        .bind(by)
        .bind(by)
        .execute(conn)
        .await?;
    Ok(())
}

/// What the consumer has seen so far.
#[derive(Debug, Default, Serialize)]
pub struct Seen {
    pub events: i64,
    pub orders: i64,
    pub duplicates_dropped: i64,
    pub out_of_order: i64,
    pub malformed: i64,
    pub by_type: std::collections::BTreeMap<String, i64>,
}

pub async fn seen(db: &MySqlPool) -> sqlx::Result<Seen> {
    let by_type: Vec<(String, i64)> =
        sqlx::query_as("SELECT type, COUNT(*) FROM inbox_event GROUP BY type").fetch_all(db).await?;
    let (orders, out_of_order): (i64, Option<i64>) =
        sqlx::query_as("SELECT COUNT(*), CAST(SUM(out_of_order) AS SIGNED) FROM order_view").fetch_one(db).await?;
    let counter = |name: &'static str| async move {
        sqlx::query_scalar::<_, i64>("SELECT value FROM inbox_counter WHERE name = ?")
            .bind(name)
            .fetch_optional(db)
            .await
            .map(Option::unwrap_or_default)
    };
    Ok(Seen {
        events: by_type.iter().map(|(_, n)| n).sum(),
        orders,
        duplicates_dropped: counter("duplicates").await?,
        out_of_order: out_of_order.unwrap_or_default(),
        malformed: counter("malformed").await?,
        by_type: by_type.into_iter().collect(),
    })
}

/// Each order's events of these vouchers, in the order the consumer
/// applied them (which made its view), not the stream's: (order id,
/// [type]).
pub async fn events_of(db: &MySqlPool, vouchers: &[u64]) -> sqlx::Result<std::collections::BTreeMap<i64, Vec<String>>> {
    let mut by_order: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for voucher in vouchers {
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT order_id, type FROM inbox_event WHERE voucher_id = ? ORDER BY order_id, applied")
                .bind(voucher)
                .fetch_all(db)
                .await?;
        for (order, kind) in rows {
            by_order.entry(order).or_default().push(kind);
        }
    }
    Ok(by_order)
}

/// The view's state of each order of these vouchers that has events.
pub async fn views_of(db: &MySqlPool, vouchers: &[u64]) -> sqlx::Result<std::collections::BTreeMap<i64, String>> {
    let mut views = std::collections::BTreeMap::new();
    for voucher in vouchers {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT DISTINCT v.order_id, v.state FROM inbox_event e JOIN order_view v ON v.order_id = e.order_id
             WHERE e.voucher_id = ?",
        )
        .bind(voucher)
        .fetch_all(db)
        .await?;
        views.extend(rows);
    }
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::follows;

    #[test]
    fn an_orders_life_is_followed_and_nothing_else() {
        assert!(follows(None, "created") && follows(None, "failed"));
        assert!(follows(Some("UNPAID"), "paid") && follows(Some("PAID"), "used"));
        assert!(follows(Some("UNPAID"), "expired") && follows(Some("PAID"), "refunded"));
        assert!(!follows(None, "paid"), "paid before created");
        assert!(!follows(Some("UNPAID"), "created"), "created twice");
        assert!(!follows(Some("CANCELLED"), "paid"));
        assert!(!follows(Some("FAILED"), "created"));
    }
}
