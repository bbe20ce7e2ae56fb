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
    assert_eq!(mapped.map_err(|e| e.error_code()), Err("INTERNAL"));
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

#[sqlx::test(migrations = "./migrations")]
async fn a_cancelled_or_refunded_order_frees_its_users_slot_and_two_live_orders_never_coexist(pool: MySqlPool) {
    let voucher = seckill_voucher(&pool, 5).await;
    let insert = |id: i64| {
        sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, 7, ?)")
            .bind(id)
            .bind(voucher)
            .execute(&pool)
    };
    let set_status = |id: i64, status: u8| {
        sqlx::query("UPDATE tb_voucher_order SET status = ? WHERE id = ?").bind(status).bind(id).execute(&pool)
    };
    insert(1).await.unwrap();
    let dup = insert(2).await.expect_err("one live order");
    assert_eq!(unique_violation(&dup).as_deref(), Some("uk_user_voucher"));
    set_status(1, 4).await.unwrap(); // cancelled
    insert(2).await.unwrap();
    set_status(2, 2).await.unwrap(); // paid: still live
    insert(3).await.expect_err("a paid order is live");
    set_status(2, 6).await.unwrap(); // refunded
    insert(3).await.unwrap();
    // Bringing a dead order back to life meets the live one.
    let revived = set_status(1, 1).await.expect_err("two live orders");
    assert_eq!(unique_violation(&revived).as_deref(), Some("uk_user_voucher"));
}

#[sqlx::test(migrations = "./migrations")]
async fn sixteen_racing_rebuys_after_a_cancel_leave_exactly_one_live_order(pool: MySqlPool) {
    let voucher = seckill_voucher(&pool, 50).await;
    sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id, status) VALUES (1, 7, ?, 4)")
        .bind(voucher)
        .execute(&pool)
        .await
        .unwrap();
    let tries = (2..18).map(|id| {
        let pool = pool.clone();
        tokio::spawn(async move {
            sqlx::query("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (?, 7, ?)")
                .bind(id)
                .bind(voucher)
                .execute(&pool)
                .await
        })
    });
    let results = futures::future::join_all(tries).await;
    let won = results.iter().filter(|r| r.as_ref().unwrap().is_ok()).count();
    assert_eq!(won, 1, "exactly one re-buy wins");
    let live: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM tb_voucher_order WHERE user_id = 7 AND voucher_id = ? AND status NOT IN (4, 6)",
    )
    .bind(voucher)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(live, 1);
}
