//! `tb_voucher_order` after the sale: an order paid, ended (cancelled or
//! refunded), redeemed, and the unpaid ones past their deadline found and
//! cancelled. Each transition is one conditional update on the status, so
//! of two that race exactly one wins.

use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlExecutor, QueryBuilder};

/// The payment, decided in one conditional update: the order is unpaid and
/// its deadline has not passed. The unpaid timeout's cancel is conditional
/// on the opposite, so of a late payment and the timeout exactly one wins.
pub(in crate::seckill) async fn confirm_payment<'e>(
    db: impl MySqlExecutor<'e>,
    order_id: i64,
    pay_type: u8,
    pay_timeout_s: u64,
) -> sqlx::Result<bool> {
    let paid = sqlx::query(
        "UPDATE tb_voucher_order SET status = 2, pay_type = ?, pay_time = NOW()
         WHERE id = ? AND status = 1 AND create_time > NOW() - INTERVAL ? SECOND",
    )
    .bind(pay_type)
    .bind(order_id)
    .bind(pay_timeout_s)
    .execute(db)
    .await?;
    Ok(paid.rows_affected() == 1)
}

/// Ends a live order (`from` -> `to`: unpaid -> cancelled, paid ->
/// refunded), under the voucher's row lock held by the caller; `false`
/// when it is no longer in `from`.
pub(in crate::seckill) async fn end_order<'e>(
    db: impl MySqlExecutor<'e>,
    order_id: i64,
    from: u8,
    to: u8,
) -> sqlx::Result<bool> {
    let ended = sqlx::query(
        "UPDATE tb_voucher_order SET status = ?, refund_time = IF(? = 6, NOW(), refund_time) WHERE id = ? AND status = ?",
    )
    .bind(to)
    .bind(to)
    .bind(order_id)
    .bind(from)
    .execute(db)
    .await?;
    Ok(ended.rows_affected() == 1)
}

/// The shop redeems a paid order.
pub(in crate::seckill) async fn redeem<'e>(db: impl MySqlExecutor<'e>, order_id: i64) -> sqlx::Result<bool> {
    let used = sqlx::query("UPDATE tb_voucher_order SET status = 3, use_time = NOW() WHERE id = ? AND status = 2")
        .bind(order_id)
        .execute(db)
        .await?;
    Ok(used.rows_affected() == 1)
}

/// Vouchers with unpaid orders past their deadline, oldest first (on
/// `idx_unpaid`: the unpaid orders past due are read, not the paid,
/// used, cancelled and refunded ones of the history).
pub(super) const VOUCHERS_WITH_EXPIRED_ORDERS: &str = "SELECT DISTINCT voucher_id FROM tb_voucher_order
     WHERE status = 1 AND create_time <= NOW() - INTERVAL ? SECOND LIMIT ?";

pub(in crate::seckill) async fn vouchers_with_expired_orders<'e>(
    db: impl MySqlExecutor<'e>,
    pay_timeout_s: u64,
    limit: u32,
) -> sqlx::Result<Vec<u64>> {
    sqlx::query_scalar(VOUCHERS_WITH_EXPIRED_ORDERS).bind(pay_timeout_s).bind(limit).fetch_all(db).await
}

/// One voucher's unpaid orders past their deadline, locked (the voucher's
/// row lock is held by the caller, so two sweeps take turns): (order id,
/// user id, create time). On `idx_voucher_unpaid`, so the lock covers
/// these rows, not the voucher's other orders.
pub(super) const LOCK_EXPIRED_ORDERS: &str = "SELECT id, user_id, create_time FROM tb_voucher_order
     WHERE voucher_id = ? AND status = 1 AND create_time <= NOW() - INTERVAL ? SECOND
     ORDER BY create_time LIMIT ? FOR UPDATE";

pub(in crate::seckill) async fn lock_expired_orders<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    pay_timeout_s: u64,
    limit: u32,
) -> sqlx::Result<Vec<(i64, u64, NaiveDateTime)>> {
    sqlx::query_as(LOCK_EXPIRED_ORDERS).bind(voucher_id).bind(pay_timeout_s).bind(limit).fetch_all(db).await
}

/// Cancels these unpaid orders; returns how many were still unpaid.
pub(in crate::seckill) async fn cancel_unpaid<'e>(db: impl MySqlExecutor<'e>, order_ids: &[i64]) -> sqlx::Result<u64> {
    if order_ids.is_empty() {
        return Ok(0);
    }
    let mut cancel: QueryBuilder<MySql> =
        QueryBuilder::new("UPDATE tb_voucher_order SET status = 4 WHERE status = 1 AND id IN ");
    cancel.push_tuples(order_ids, |mut row, id| {
        row.push_bind(*id);
    });
    Ok(cancel.build().execute(db).await?.rows_affected())
}
