//! An order id's existence cannot be told from outside. The probe found that
//! an after-sale route on another user's order was refused after one
//! lookup and on a missing order after two, and that the difference could
//! be timed. Both now take one query by id and owner and the same path
//! after it: the same answer, word for word, after the same work.
//!
//! A test of timing on a shared machine: it runs alone in this binary (the
//! order paths one after another, no other test beside it), and each pair
//! of requests is sent in alternating order, so that the machine's noise
//! falls on both kinds alike.

use hmdp_test_support as common;
use hmdp_test_support::on_every_path;

use std::time::{Duration, Instant};

use common::{OrderPath, TestApp, expect_ok};
use reqwest::StatusCode;

on_every_path!(another_users_order_and_a_missing_one_are_refused_alike_and_as_fast);

/// The order paths run one at a time: each measures alone.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Refusals of each kind measured, after a warm-up.
const SAMPLES: usize = 1_000;

/// 1,000 refusals of each (`POST /voucher-order/{id}/cancel` by a stranger),
/// in pairs: the median of the pairs' differences within 10 % of the
/// median time.
async fn another_users_order_and_a_missing_one_are_refused_alike_and_as_fast(path: OrderPath) {
    let _alone = ALONE.lock().await;
    let app = TestApp::spawn_on(path).await;
    let voucher = app.open_seckill(5).await;
    let users = app.seed_users(2).await;
    let (owner, stranger) = (users[0].1.as_str(), users[1].1.as_str());
    let order = expect_ok(app.order(voucher, owner).await).await["data"].as_str().unwrap().to_owned();
    let missing = (order.parse::<i64>().unwrap() + 1_000_003).to_string();
    // The order has its row (the asynchronous mode persists after answering).
    let started = Instant::now();
    while app.orders_of(voucher).await.0 < 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "the order never landed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancel = |id: &str| {
        let req = app.client.post(app.url(&format!("/voucher-order/{id}/cancel"))).header("authorization", stranger);
        async move {
            let started = Instant::now();
            let resp = req.send().await.unwrap();
            let took = started.elapsed();
            (resp.status(), resp.text().await.unwrap(), took)
        }
    };
    for _ in 0..30 {
        cancel(&order).await;
        cancel(&missing).await;
    }
    // (another user's order, a missing one), sent one right after the other,
    // in alternating order.
    let mut pairs = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES {
        let first_theirs = i % 2 == 0;
        let mut pair = [Duration::ZERO; 2];
        for theirs in [first_theirs, !first_theirs] {
            let (status, body, took) = cancel(if theirs { &order } else { &missing }).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
            pair[usize::from(!theirs)] = took;
        }
        pairs.push(pair);
    }
    assert_eq!(cancel(&order).await.1, cancel(&missing).await.1, "the same answer, word for word");
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let theirs = median(pairs.iter().map(|p| p[0].as_secs_f64()).collect());
    let nobodys = median(pairs.iter().map(|p| p[1].as_secs_f64()).collect());
    // Compared pair by pair: a stretch of the machine's noise falls on both
    // requests of a pair, and cancels out of their difference, where the
    // two medians taken apart can drift 10 % on a busy machine with nothing
    // between them.
    let difference = median(pairs.iter().map(|p| p[1].as_secs_f64() - p[0].as_secs_f64()).collect());
    let apart = difference.abs() / theirs.min(nobodys);
    assert!(
        apart <= 0.10,
        "a missing order took {:.3} ms more than another user's, pair by pair (medians {:.3} ms and {:.3} ms): {:.0} %",
        difference * 1e3,
        nobodys * 1e3,
        theirs * 1e3,
        apart * 100.0
    );
    // The owner still cancels it.
    let cancelled = app.client.post(app.url(&format!("/voucher-order/{order}/cancel"))).header("authorization", owner);
    expect_ok(cancelled.send().await.unwrap()).await;
}
