//! A long past: what ended sales leave behind once they are done with.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::time::{Duration, Instant};

use chrono::{Duration as ChronoDuration, Utc};
use common::{OrderPath, TestApp, expect_error, outcome, tally};
use reqwest::StatusCode;

on_every_path!(a_thousand_ended_sales_leave_no_key_of_theirs_in_redis);

const SALES: usize = 1_000;
const IN_FLIGHT: usize = 16;
/// A sale's window from its creation: its two orders, on a busy machine.
const WINDOW: ChronoDuration = ChronoDuration::seconds(10);

/// Every key of the app's sales: all of them, as the app's prefix is the
/// test's own. `seckill:active` is the one key not of one sale.
async fn sale_keys(app: &TestApp) -> Vec<String> {
    let mut redis = app.redis.clone();
    let mut keys = redis.scan_match(&format!("{}seckill:*", app.keys.prefix())).await.unwrap();
    keys.retain(|key| *key != app.keys.seckill_active());
    keys.sort();
    keys
}

/// Issue 52: after a year of sales Redis must hold what the live sales
/// need, not what every sale ever sold left. A thousand sales each sell a
/// unit and refuse a second order of the same buyer, end, and are retired
/// (at once after their end and drain, their working keys deleted rather
/// than kept an hour): not one key of theirs is left, every order is in
/// MariaDB, and a late order is answered `ENDED` without bringing a key
/// back.
async fn a_thousand_ended_sales_leave_no_key_of_theirs_in_redis(path: OrderPath) {
    let app = TestApp::spawn_on_with(path, |c| {
        c.seckill.asynchronous.async_retire_after_ms = 300;
        c.seckill.asynchronous.async_retired_keys_kept_ms = 0;
    })
    .await;
    // Sixteen sales at a time, each with a buyer of its own: in the
    // synchronous mode a buyer's orders of two sales at once meet at the
    // buyer's lock.
    let users = app.seed_users(IN_FLIGHT as u32 + 1).await;
    let (buyers, latecomer) = (&users[..IN_FLIGHT], users[IN_FLIGHT].1.as_str());
    let app = &app;
    let mut vouchers = Vec::with_capacity(SALES);
    let mut answers = Vec::with_capacity(2 * SALES);
    let mut last_end = Utc::now();
    for first_of_wave in (0..SALES).step_by(IN_FLIGHT) {
        // Each wave's sales end a window after they open, while later ones
        // still sell: the run is as long as its work, not a window made
        // long enough for a thousand sales on a busy machine.
        let now = Utc::now();
        last_end = now + WINDOW;
        let wave_size = IN_FLIGHT.min(SALES - first_of_wave);
        let wave: Vec<u64> = futures::future::join_all(
            (0..wave_size).map(|_| app.create_seckill(2, now - ChronoDuration::minutes(1), last_end)),
        )
        .await;
        let rounds = wave.iter().zip(buyers).map(|(&voucher, (_, buyer))| async move {
            let first = outcome(app.order(voucher, buyer).await).await;
            let again = outcome(app.order(voucher, buyer).await).await;
            [first, again]
        });
        answers.extend(futures::future::join_all(rounds).await.into_iter().flatten());
        vouchers.extend(wave);
    }
    let counts = tally(&answers);
    assert_eq!(counts.get("OK"), Some(&SALES), "{counts:?}");
    assert_eq!(counts.get("DUPLICATE_ORDER"), Some(&SALES), "{counts:?}");
    assert!(!sale_keys(app).await.is_empty() || !path.is_async(), "the asynchronous sales ran in Redis");

    let ended = (last_end - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(ended).await;
    let started = Instant::now();
    loop {
        let left = sale_keys(app).await;
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} keys of ended sales are still in Redis a minute after their end, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let active: Vec<u64> =
        redis::AsyncCommands::smembers(&mut app.redis.clone(), app.keys.seckill_active()).await.unwrap();
    assert!(active.is_empty(), "no ended sale is read by the consumers: {} are", active.len());

    let (rows, sales): (i64, i64) = sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT voucher_id) FROM tb_voucher_order")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!((rows, sales), (SALES as i64, SALES as i64), "(orders, sales): one order each, all persisted");

    expect_error(app.order(vouchers[0], latecomer).await, StatusCode::CONFLICT, "ENDED").await;
    assert_eq!(sale_keys(app).await, Vec::<String>::new(), "a late order brings no key back");
}
