//! What the tables say after a run: the numbers every concurrency test
//! checks.

use sqlx::MySqlPool;

/// Holds the voucher's stock row from outside (`FOR UPDATE`), so an order or
/// a batch blocks at it until the returned transaction ends.
pub async fn hold_stock_row(db: &MySqlPool, voucher_id: u64) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut tx = db.begin().await.unwrap();
    sqlx::query("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE")
        .bind(voucher_id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

pub async fn stock_of(db: &MySqlPool, voucher_id: u64) -> i64 {
    sqlx::query_scalar::<_, i32>("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
        .bind(voucher_id)
        .fetch_one(db)
        .await
        .unwrap()
        .into()
}

/// (orders for the voucher, distinct users among them)
pub async fn orders_of(db: &MySqlPool, voucher_id: u64) -> (i64, i64) {
    sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?")
        .bind(voucher_id)
        .fetch_one(db)
        .await
        .unwrap()
}
