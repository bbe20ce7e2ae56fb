//! Every statement on `tb_order_outbox` (the events not yet published),
//! `tb_order_outbox_published` (those kept after) and `tb_outbox_lease`.

use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder, Transaction, pool::PoolConnection};

use super::change::{Change, OrderCreated};

pub(super) async fn insert_created(conn: &mut MySqlConnection, orders: &[OrderCreated]) -> sqlx::Result<()> {
    let change = Change::Created;
    let mut insert: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) ");
    insert.push_values(orders, |mut row, order| {
        row.push_bind(order.order_id)
            .push_bind(order.user_id)
            .push_bind(order.voucher_id)
            .push_bind(change.name())
            .push_bind(change.state());
    });
    insert.build().execute(conn).await?;
    Ok(())
}

pub(super) async fn insert_changed(conn: &mut MySqlConnection, change: Change, order_ids: &[i64]) -> sqlx::Result<()> {
    let mut insert: QueryBuilder<MySql> = QueryBuilder::new(
        "INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) SELECT id, user_id, voucher_id, ",
    );
    insert.push_bind(change.name()).push(", ").push_bind(change.state());
    insert.push(" FROM tb_voucher_order WHERE status = ").push_bind(change.status());
    insert.push(" AND id IN ");
    insert.push_tuples(order_ids, |mut row, id| {
        row.push_bind(*id);
    });
    insert.build().execute(conn).await?;
    Ok(())
}

/// How far back, in `seq`, a `failed` event written again looks for the
/// copy the outbox may still hold. It is written under the voucher's row
/// lock, which every order of the sale waits for, and the outbox has no
/// index to find it by (one would be paid on every order): the lookback is
/// a range of the primary key, at most this many rows, however long the
/// backlog grew while NATS was away. A caller unsure whether its commit
/// landed writes it again within a second or so, far fewer events later
/// than this at the fastest sale; one written past it goes out twice
/// under the same id, and the broker or the consumer's inbox drops it.
const FAILED_LOOKBACK: u64 = 5_000;

/// Each only if the newest `FAILED_LOOKBACK` rows of the outbox do not
/// hold it already: written again by a caller unsure whether its commit
/// landed. (One published since is published again, and dropped
/// downstream by its id.)
pub(super) async fn insert_failed(
    conn: &mut MySqlConnection,
    voucher_id: u64,
    orders: &[(i64, u64)],
) -> sqlx::Result<()> {
    let change = Change::Failed;
    // The primary key's last entry: no scan.
    let newest: Option<u64> = sqlx::query_scalar("SELECT MAX(seq) FROM tb_order_outbox").fetch_one(&mut *conn).await?;
    let from = newest.unwrap_or(0).saturating_sub(FAILED_LOOKBACK);
    for (order_id, user_id) in orders {
        // A plain read, not a locking one: as the subquery of an INSERT it
        // would lock every row of the outbox it passes and the gap past
        // the last, and every order's insert of its event would wait for
        // this transaction. Two writers racing here write it twice; the
        // broker and the consumer drop the copy by its id.
        let held: Option<u64> =
            sqlx::query_scalar("SELECT seq FROM tb_order_outbox WHERE seq > ? AND order_id = ? AND type = ? LIMIT 1")
                .bind(from)
                .bind(order_id)
                .bind(change.name())
                .fetch_optional(&mut *conn)
                .await?;
        if held.is_some() {
            continue;
        }
        sqlx::query("INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) VALUES (?, ?, ?, ?, ?)")
            .bind(order_id)
            .bind(user_id)
            .bind(voucher_id)
            .bind(change.name())
            .bind(change.state())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// An event as the relay reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct StoredEvent {
    pub(super) seq: u64,
    pub(super) order_id: i64,
    pub(super) user_id: u64,
    pub(super) voucher_id: u64,
    #[sqlx(rename = "type")]
    pub(super) kind: String,
    pub(super) state: String,
    pub(super) occurred_at: NaiveDateTime,
}

/// The oldest events not yet published from `floor` on, in the order they
/// were written (the relay's cursor says where its last read left off).
pub(super) async fn unpublished(db: &MySqlPool, floor: u64, limit: u32) -> sqlx::Result<Vec<StoredEvent>> {
    sqlx::query_as(
        "SELECT seq, order_id, user_id, voucher_id, type, state, occurred_at FROM tb_order_outbox
         WHERE seq >= ? ORDER BY seq LIMIT ?",
    )
    .bind(floor)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The rows of `from..=to`, once no transaction holds any `seq` there; an
/// error (a lock wait, 1205) while one does. A locking read that does not
/// wait: a row written by a transaction not yet committed is locked by it.
pub(super) async fn settled_range(db: &MySqlPool, from: u64, to: u64) -> sqlx::Result<Vec<u64>> {
    let mut conn = db.acquire().await?;
    // Closed after, not pooled: a level set and never begun (an error, a
    // shutdown in between) must not reach an order's transaction.
    conn.close_on_drop();
    let mut tx = read_committed(&mut conn).await?;
    let rows = sqlx::query_scalar(
        "SELECT seq FROM tb_order_outbox WHERE seq BETWEEN ? AND ? ORDER BY seq LOCK IN SHARE MODE NOWAIT",
    )
    .bind(from)
    .bind(to)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(rows)
}

/// Events the broker acknowledged leave the outbox; with `keep`, into
/// `tb_order_outbox_published`, in the same transaction.
///
/// The rows are named by a JSON array joined to the primary key, not by
/// `seq IN (...)`: on the small outbox MariaDB plans an `IN` list as a
/// scan of the whole table, whose locks wait on every row an order's
/// transaction has written and not committed (and, in REPEATABLE READ,
/// hold up the inserts of the next ones). One statement text, too,
/// whatever the number of rows, so it is prepared once.
pub(super) async fn take_published(db: &MySqlPool, seqs: &[u64], keep: bool) -> sqlx::Result<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let listed = format!("[{}]", seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
    let mut tx = db.begin().await?;
    if keep {
        sqlx::query(
            "INSERT IGNORE INTO tb_order_outbox_published
                 (seq, order_id, user_id, voucher_id, type, state, occurred_at, published_at)
             SELECT o.seq, o.order_id, o.user_id, o.voucher_id, o.type, o.state, o.occurred_at, NOW(6)
             FROM JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT UNSIGNED PATH '$')) AS listed
             STRAIGHT_JOIN tb_order_outbox o ON o.seq = listed.seq",
        )
        .bind(&listed)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (seq BIGINT UNSIGNED PATH '$')) AS listed
         STRAIGHT_JOIN tb_order_outbox o ON o.seq = listed.seq",
    )
    .bind(&listed)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// A transaction in READ COMMITTED, for a locking read of a range: in
/// REPEATABLE READ it would also lock the gaps, which an order's insert
/// could wait on. `SET TRANSACTION` holds for the connection's next
/// transaction only, the one begun right after it.
async fn read_committed(conn: &mut PoolConnection<MySql>) -> sqlx::Result<Transaction<'_, MySql>> {
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut **conn).await?;
    sqlx::Acquire::begin(&mut **conn).await
}

/// Kept events published longer ago than `retention_s`, `limit` at most:
/// how many went.
pub(super) async fn purge_published(db: &MySqlPool, retention_s: u64, limit: u32) -> sqlx::Result<u64> {
    let purged = sqlx::query(
        "DELETE FROM tb_order_outbox_published WHERE published_at < NOW(6) - INTERVAL ? SECOND
         ORDER BY published_at LIMIT ?",
    )
    .bind(retention_s)
    .bind(limit)
    .execute(db)
    .await?;
    Ok(purged.rows_affected())
}

/// The events not yet published.
pub(super) struct Backlog {
    pub(super) count: i64,
    /// The oldest's `seq`, and how long it has waited (MariaDB's clock).
    pub(super) oldest: Option<(u64, f64)>,
}

pub(super) async fn backlog(db: &MySqlPool) -> sqlx::Result<Backlog> {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox").fetch_one(db).await?;
    let oldest: Option<(u64, f64)> = sqlx::query_as(
        "SELECT seq, CAST(TIMESTAMPDIFF(MICROSECOND, occurred_at, NOW(6)) / 1e6 AS DOUBLE) FROM tb_order_outbox
         ORDER BY seq LIMIT 1",
    )
    .fetch_optional(db)
    .await?;
    Ok(Backlog { count, oldest })
}

/// The relay's lease row.
const LEASE: &str = "order-events";

/// Takes the lease for `holder` if it is free or expired, or renews it if
/// `holder` has it, for `ttl_ms` of MariaDB's clock; whether `holder` has
/// it now. (In `ON DUPLICATE KEY UPDATE` the assignments run in order, so
/// `until` sees the holder just decided.)
pub(super) async fn hold_lease(db: &MySqlPool, holder: &str, ttl_ms: u64) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    sqlx::query(
        "INSERT INTO tb_outbox_lease (name, holder, until) VALUES (?, ?, NOW(3) + INTERVAL ? * 1000 MICROSECOND)
         ON DUPLICATE KEY UPDATE
             holder = IF(holder = VALUES(holder) OR until < NOW(3), VALUES(holder), holder),
             until = IF(holder = VALUES(holder), VALUES(until), until)",
    )
    .bind(LEASE)
    .bind(holder)
    .bind(ttl_ms)
    .execute(&mut *tx)
    .await?;
    let now: Option<String> = sqlx::query_scalar("SELECT holder FROM tb_outbox_lease WHERE name = ?")
        .bind(LEASE)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(now.as_deref() == Some(holder))
}

/// Gives the lease up at shutdown, so another instance takes it at once.
pub(super) async fn release_lease(db: &MySqlPool, holder: &str) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM tb_outbox_lease WHERE name = ? AND holder = ?")
        .bind(LEASE)
        .bind(holder)
        .execute(db)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::MySqlConnection;

    use crate::plan_check::{drop_scratch, scratch_database};

    /// Rows and index entries this session's statements have read so far,
    /// as MariaDB counts them (`Handler_read_*`).
    async fn reads(conn: &mut MySqlConnection) -> i64 {
        let counters: Vec<(String, String)> =
            sqlx::query_as("SHOW SESSION STATUS LIKE 'Handler_read%'").fetch_all(conn).await.unwrap();
        counters.iter().map(|(_, value)| value.parse::<i64>().unwrap()).sum()
    }

    async fn failed_events_of(conn: &mut MySqlConnection, order: i64) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM tb_order_outbox WHERE order_id = ? AND type = 'failed'")
            .bind(order)
            .fetch_one(conn)
            .await
            .unwrap()
    }

    /// A `failed` event is written under the voucher's row lock, which
    /// every order of the sale waits for: with 50,000 events waiting for a
    /// broker that is away, writing it (again) reads a bounded stretch of
    /// the outbox, not all of it; written again soon after, it is not
    /// written twice.
    #[tokio::test]
    async fn writing_a_failed_event_again_reads_a_bounded_stretch_of_a_long_outbox() {
        let mut conn = scratch_database("failed_event").await;
        sqlx::query(
            "INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state)
             SELECT seq, 1, 7, 'created', 'UNPAID' FROM seq_1_to_50000",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let (order, user) = (900_001_i64, 5_u64);
        super::insert_failed(&mut conn, 7, &[(order, user)]).await.unwrap();
        // What reading the counters itself reads, taken off below.
        let before = reads(&mut conn).await;
        let itself = reads(&mut conn).await - before;
        let before = reads(&mut conn).await;
        super::insert_failed(&mut conn, 7, &[(order, user)]).await.unwrap();
        let read = reads(&mut conn).await - before - itself;
        let written = failed_events_of(&mut conn, order).await;
        drop_scratch(conn, "failed_event").await;
        assert_eq!(written, 1, "written again though the outbox held it");
        let bound = super::FAILED_LOOKBACK as i64 + 10;
        assert!(read <= bound, "writing it again read {read} rows and index entries of a 50,000-event outbox");
    }
}
