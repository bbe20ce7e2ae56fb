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
