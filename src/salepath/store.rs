//! The statements on a voucher's guard columns of `tb_seckill_voucher`.

use chrono::NaiveDateTime;
use sqlx::MySqlExecutor;

use super::guard::Guard;

#[derive(sqlx::FromRow)]
pub(super) struct TermsRow {
    pub(crate) sale_guard: String,
    pub(crate) admit_per_second: Option<u32>,
    pub(crate) begin_time: NaiveDateTime,
    pub(crate) end_time: NaiveDateTime,
}

/// The terms of the sales opening in (`after`, `by`], the latest to open
/// first, at most `limit`: what a burst of first orders at an opening
/// needs, in one statement. A range on `idx_sale_begin`, read backwards
/// from `by`, so the ended and the scheduled sales are not read, however
/// many there are. Past `limit`, the sales that opened earliest in the
/// range are left out (read alone at their next miss).
const TERMS_OPENED: &str =
    "SELECT voucher_id, sale_guard, admit_per_second, begin_time, end_time FROM tb_seckill_voucher
     WHERE begin_time > ? AND begin_time <= ? ORDER BY begin_time DESC LIMIT ?";

#[derive(sqlx::FromRow)]
pub(super) struct OpenedTerms {
    pub(super) voucher_id: u64,
    #[sqlx(flatten)]
    pub(super) terms: TermsRow,
}

pub(super) async fn terms_opened<'e>(
    db: impl MySqlExecutor<'e>,
    after: NaiveDateTime,
    by: NaiveDateTime,
    limit: u32,
) -> sqlx::Result<Vec<OpenedTerms>> {
    sqlx::query_as(TERMS_OPENED).bind(after).bind(by).bind(limit).fetch_all(db).await
}

pub(super) async fn terms<'e>(db: impl MySqlExecutor<'e>, voucher_id: u64) -> sqlx::Result<Option<TermsRow>> {
    sqlx::query_as(
        "SELECT sale_guard, admit_per_second, begin_time, end_time FROM tb_seckill_voucher WHERE voucher_id = ?",
    )
    .bind(voucher_id)
    .fetch_optional(db)
    .await
}

/// Records a new voucher's guard and rate, in the transaction that
/// creates its rows.
pub(crate) async fn record_terms<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    guard: Guard,
    admit_per_second: Option<u32>,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE tb_seckill_voucher SET sale_guard = ?, admit_per_second = ? WHERE voucher_id = ?")
        .bind(guard.as_str())
        .bind(admit_per_second)
        .bind(voucher_id)
        .execute(db)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::plan_check::{drop_scratch, holds_on, scratch_database};

    #[tokio::test]
    async fn the_terms_read_at_an_opening_are_the_opening_sales_not_the_history() {
        let mut conn = scratch_database("terms").await;
        // A year of ended sales, a thousand scheduled over the days ahead,
        // three opened seconds ago and one on for an hour.
        sqlx::query(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
             SELECT 1 + seq, 0, NOW() - INTERVAL seq + 2 HOUR - INTERVAL 1 YEAR, NOW() - INTERVAL seq HOUR - INTERVAL 1 YEAR
             FROM seq_0_to_999
             UNION ALL SELECT 2001 + seq, 5, NOW() + INTERVAL seq + 3 DAY, NOW() + INTERVAL seq + 4 DAY FROM seq_0_to_999
             UNION ALL SELECT 1001 + seq, 5, NOW() - INTERVAL 2 SECOND, NOW() + INTERVAL 1 HOUR FROM seq_0_to_2
             UNION ALL SELECT 1004, 5, NOW() - INTERVAL 1 HOUR, NOW() + INTERVAL 1 HOUR",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::raw_sql("ANALYZE TABLE tb_seckill_voucher").execute(&mut conn).await.unwrap();
        let now = chrono::Utc::now().naive_utc();
        let text = |at: chrono::NaiveDateTime| json!(at.format("%Y-%m-%d %H:%M:%S").to_string());
        let (after, by) = (now - chrono::TimeDelta::minutes(1), now + chrono::TimeDelta::minutes(1));
        let opened = super::terms_opened(&mut conn, after, by, 1024).await.unwrap();
        let mut ids: Vec<u64> = opened.iter().map(|o| o.voucher_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1001, 1002, 1003], "the three sales opened seconds ago, and no other");
        let args = [text(after), text(by), json!(1024)];
        let (table, key) = ("tb_seckill_voucher", "idx_sale_begin");
        holds_on(&mut conn, table, "terms_opened", super::TERMS_OPENED, &args, key, 3).await;
        drop_scratch(conn, "terms").await;
    }
}
