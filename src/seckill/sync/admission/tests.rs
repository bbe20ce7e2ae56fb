//! The gates' own tests: the window, the queue, the sold-out flag, the
//! bound, and the round's reads against a real MariaDB.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use chrono::{NaiveDateTime, TimeDelta, Utc};

use super::{SaleWindow, VoucherGates};
use crate::seckill::error::SeckillError;

fn now() -> NaiveDateTime {
    Utc::now().naive_utc()
}

fn open_sale(gates: &VoucherGates, voucher: u64, stock: i32) -> Arc<super::Gate> {
    let window = SaleWindow { begin: now() - TimeDelta::hours(1), end: now() + TimeDelta::hours(1) };
    gates.insert(voucher, window, stock)
}

#[test]
fn the_window_is_checked_before_the_sold_out_flag() {
    let gates = VoucherGates::new(8, 16);
    let gate = open_sale(&gates, 1, 0);
    let (begin, end) = (gate.window.begin, gate.window.end);
    assert!(matches!(gate.admit(begin - TimeDelta::seconds(1)), Err(SeckillError::NotStarted)));
    assert!(matches!(gate.admit(end), Err(SeckillError::Ended)), "the end itself is outside");
    assert!(matches!(gate.admit(now()), Err(SeckillError::SoldOut)), "a stock of 0 is sold out at once");
    let on_sale = open_sale(&gates, 2, 5);
    assert!(on_sale.admit(on_sale.window.begin).is_ok(), "the beginning itself is inside");
}

#[test]
fn the_queue_refuses_past_its_bound_and_frees_a_place_when_one_leaves() {
    let gates = VoucherGates::new(1, 2);
    let gate = open_sale(&gates, 1, 10);
    let first = gate.queue_slot().expect("a place");
    let _second = gate.queue_slot().expect("a place");
    assert!(matches!(gate.queue_slot(), Err(SeckillError::Busy(_))));
    drop(first);
    assert!(gate.queue_slot().is_ok(), "a place came free");
}

#[test]
fn the_stock_route_and_returned_units_flip_the_sold_out_flag_at_once() {
    let gates = VoucherGates::new(8, 16);
    let gate = open_sale(&gates, 1, 3);
    gates.stock_set(1, 0);
    assert!(gate.is_sold_out());
    gates.units_returned(1);
    assert!(!gate.is_sold_out());
    gate.mark_sold_out();
    gates.stock_set(1, 4);
    assert!(!gate.is_sold_out());
    gates.units_returned(99);
    gates.stock_set(99, 1);
}

#[test]
fn a_sold_out_voucher_is_read_again_by_one_caller_once_a_second_has_passed() {
    let gates = VoucherGates::new(8, 16);
    let gate = open_sale(&gates, 1, 0);
    assert!(!gate.recheck_due(), "MariaDB said 0 a moment ago");
    // As if MariaDB said 0 longer ago than the recheck interval.
    std::thread::sleep(super::gate::SOLD_OUT_RECHECK + Duration::from_millis(5));
    gate.sold_out_seen_ms.store(0, Ordering::Release);
    assert!(gate.recheck_due(), "the first caller reads the stock again");
    assert!(!gate.recheck_due(), "only one caller at a time");
    gate.recheck_done(None);
    assert!(gate.is_sold_out() && !gate.recheck_due(), "no answer: again in a second, not now");
    gate.sold_out_seen_ms.store(0, Ordering::Release);
    assert!(gate.recheck_due());
    gate.recheck_done(Some(2));
    assert!(!gate.is_sold_out(), "stock came back: sells again");
    assert!(!gate.recheck_due());
}

/// A sale of `stock` units opening `opens_in` from now (negative: on
/// already) for an hour.
async fn sale(pool: &sqlx::MySqlPool, voucher: u64, stock: i32, opens_in: TimeDelta) {
    let begin = now() + opens_in;
    crate::seckill::store::insert_sale(pool, voucher, stock.into(), (begin, begin + TimeDelta::hours(1)), &[], false)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "./migrations")]
async fn the_sales_opening_soon_are_known_before_their_first_order(pool: sqlx::MySqlPool) {
    sale(&pool, 1, 5, TimeDelta::minutes(-10)).await;
    sale(&pool, 2, 5, TimeDelta::seconds(3)).await;
    sale(&pool, 3, 0, TimeDelta::seconds(-30)).await;
    sale(&pool, 4, 5, TimeDelta::days(2)).await;
    sale(&pool, 5, 5, TimeDelta::hours(-2)).await;
    let gates = VoucherGates::new(8, 16);
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 2);
    assert!(gates.known(2).is_some_and(|gate| !gate.is_sold_out()), "opening in seconds");
    assert!(gates.known(3).is_some_and(|gate| gate.is_sold_out()), "opened just now, and sold out");
    assert!(gates.known(1).is_none(), "on for minutes: read on its first order, as an instance always did");
    assert!(gates.known(4).is_none(), "days away: read in a later round");
    assert!(gates.known(5).is_none(), "ended");
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 0, "known ones are not read again");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_sold_out_voucher_whose_stock_came_back_sells_again_at_the_next_round(pool: sqlx::MySqlPool) {
    sale(&pool, 1, 0, TimeDelta::minutes(-10)).await;
    sale(&pool, 2, 0, TimeDelta::minutes(-10)).await;
    let gates = VoucherGates::new(8, 16);
    open_sale(&gates, 1, 0);
    open_sale(&gates, 2, 0);
    // Another instance returned a unit of voucher 1.
    sqlx::query("UPDATE tb_seckill_voucher SET stock = 1 WHERE voucher_id = 1").execute(&pool).await.unwrap();
    std::thread::sleep(Duration::from_millis(2));
    let refreshed = gates.refresh(&pool).await.unwrap();
    assert_eq!(refreshed.selling_again, vec![1]);
    assert!(!gates.known(1).unwrap().is_sold_out(), "sells again");
    assert!(gates.known(2).unwrap().is_sold_out(), "still none left");
}

/// 1,100 sales (ids 10 to 1109) that opened `ago` and end in two hours.
async fn eleven_hundred_sales_on(pool: &sqlx::MySqlPool, ago: TimeDelta) {
    sqlx::query(
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
         SELECT 10 + seq, 5, NOW() - INTERVAL ? SECOND, NOW() + INTERVAL 2 HOUR FROM seq_0_to_1099",
    )
    .bind(ago.num_seconds())
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = "./migrations")]
async fn the_next_sale_is_read_ahead_when_every_gate_is_of_an_ended_sale(pool: sqlx::MySqlPool) {
    // As many gates as an instance keeps, every one of a sale that ended
    // long ago.
    sale(&pool, 1, 5, TimeDelta::seconds(3)).await;
    let gates = VoucherGates::new(1, 1);
    let ended = SaleWindow { begin: now() - TimeDelta::days(2), end: now() - TimeDelta::days(1) };
    for voucher in 100_000..100_000 + super::GATES_MAX as u64 {
        gates.insert(voucher, ended, 1);
    }
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 1);
    assert!(gates.known(1).is_some(), "the sale opening next is known");
    assert!(gates.known(100_000).is_none(), "the ended sales made room");
}

#[sqlx::test(migrations = "./migrations")]
async fn the_sales_opened_in_the_last_minute_do_not_crowd_out_the_next_one(pool: sqlx::MySqlPool) {
    // Two rounds of bench-many: more sales opened half a minute ago than
    // a round reads, and the next one opening in seconds.
    eleven_hundred_sales_on(&pool, TimeDelta::seconds(30)).await;
    let gates = VoucherGates::new(1, 1);
    let first = gates.refresh(&pool).await.unwrap().read_ahead;
    assert_eq!(first, super::READ_AHEAD_MAX as usize, "an instance's first round reads the sales of the last minute");
    sale(&pool, 1, 5, TimeDelta::seconds(3)).await;
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 1);
    assert!(gates.known(1).is_some(), "the sale opening next is read ahead of its first order");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_full_read_ahead_goes_on_next_round_from_where_it_stopped(pool: sqlx::MySqlPool) {
    // 1,100 sales opening over the next minutes, one a second apart: more
    // than a round reads.
    sqlx::query(
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
         SELECT 10 + seq, 5, NOW() + INTERVAL 10 + seq DIV 2 SECOND, NOW() + INTERVAL 2 HOUR FROM seq_0_to_1099",
    )
    .execute(&pool)
    .await
    .unwrap();
    let gates = VoucherGates::new(1, 1);
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, super::READ_AHEAD_MAX as usize);
    assert!(gates.known(1109).is_none(), "the last to open was cut");
    gates.refresh(&pool).await.unwrap();
    assert!(gates.known(1109).is_some(), "the next round read on from where the first stopped");
}

#[sqlx::test(migrations = "./migrations")]
async fn reading_ahead_never_pushes_a_live_gate_out(pool: sqlx::MySqlPool) {
    let gates = VoucherGates::new(1, 1);
    for voucher in 1..=super::GATES_MAX as u64 {
        open_sale(&gates, voucher, 1);
    }
    sale(&pool, 1_000_000, 5, TimeDelta::seconds(3)).await;
    assert_eq!(gates.refresh(&pool).await.unwrap().read_ahead, 0);
    assert!(gates.known(1_000_000).is_none() && gates.known(1).is_some());
}

#[test]
fn the_gates_stay_bounded_and_the_ended_sales_leave_first() {
    let gates = VoucherGates::new(1, 1);
    let ended = SaleWindow { begin: now() - TimeDelta::days(2), end: now() - TimeDelta::days(1) };
    gates.insert(0, ended, 1);
    for voucher in 1..=super::GATES_MAX as u64 + 10 {
        open_sale(&gates, voucher, 1);
    }
    let held = gates.gates.lock().unwrap();
    assert!(held.len() <= super::GATES_MAX);
    assert!(!held.contains_key(&0), "the ended sale left first");
}
