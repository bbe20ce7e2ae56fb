//! Data-layer tests: the constraints that make the database the last word.

use hmdp::{
    dependency::{OnUnique, unique_violation},
    seckill::{SeckillError, UNIQUE_ORDER_INDEX},
};
use sqlx::MySqlPool;

async fn seckill_voucher(pool: &MySqlPool, stock: i32) -> u64 {
    let id =
        sqlx::query("INSERT INTO tb_voucher (shop_id, title, pay_value, actual_value, type) VALUES (1, 't', 1, 2, 1)")
            .execute(pool)
            .await
            .unwrap()
            .last_insert_id();
    sqlx::query("INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, ?, NOW(), NOW() + INTERVAL 1 HOUR)")
        .bind(id)
        .bind(stock)
        .execute(pool)
        .await
        .unwrap();
    id
}

#[sqlx::test(migrations = "./migrations")]
async fn a_second_order_of_one_user_for_one_voucher_is_a_duplicate_order(pool: MySqlPool) {
    let voucher = seckill_voucher(&pool, 5).await;
    let insert = |id: i64| {
        sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, 7, ?)")
            .bind(id)
            .bind(voucher)
            .execute(&pool)
    };
    insert(1).await.unwrap();
    let err = insert(2).await.expect_err("the unique index refuses it");
    assert_eq!(unique_violation(&err).as_deref(), Some("uk_user_voucher"));
    let mapped = Err::<(), _>(err).on_unique(UNIQUE_ORDER_INDEX, || SeckillError::DuplicateOrder(None));
    assert!(matches!(mapped, Err(SeckillError::DuplicateOrder(None))));

    // Another voucher for the same user is fine.
    let other = seckill_voucher(&pool, 5).await;
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (3, 7, ?)")
        .bind(other)
        .execute(&pool)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "./migrations")]
async fn a_reused_order_id_is_not_mistaken_for_a_duplicate_order(pool: MySqlPool) {
    let voucher = seckill_voucher(&pool, 5).await;
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (1, 7, ?)")
        .bind(voucher)
        .execute(&pool)
        .await
        .unwrap();
    let err = sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (1, 8, ?)")
        .bind(voucher)
        .execute(&pool)
        .await
        .expect_err("primary key");
    assert_eq!(unique_violation(&err).as_deref(), Some("PRIMARY"));
    let mapped = Err::<(), _>(err).on_unique(UNIQUE_ORDER_INDEX, || SeckillError::DuplicateOrder(None));
    assert!(matches!(mapped, Err(SeckillError::Internal(_))));
}

#[sqlx::test(migrations = "./migrations")]
async fn stock_can_never_go_below_zero(pool: MySqlPool) {
    let voucher = seckill_voucher(&pool, 1).await;
    let err = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 2 WHERE voucher_id = ?")
        .bind(voucher)
        .execute(&pool)
        .await
        .expect_err("CHECK (stock >= 0)");
    assert!(err.to_string().contains("ck_seckill_stock"), "{err}");
    let taken = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0")
        .bind(voucher)
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(taken, 1);
    let again = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0")
        .bind(voucher)
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(again, 0, "the conditional update finds nothing to take");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_sale_window_must_end_after_it_begins(pool: MySqlPool) {
    let err = sqlx::query(
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (1, 1, NOW(), NOW())",
    )
    .execute(&pool)
    .await
    .expect_err("CHECK (begin_time < end_time)");
    assert!(err.to_string().contains("ck_seckill_window"), "{err}");
}
