//! The order after the sale, as a load scenario (`--pay-percent P
//! --pay-timeout-s T`): P % of the winners pay, the rest let the service's
//! unpaid timeout (which must be `ORDER_PAY_TIMEOUT_S` = T) cancel their
//! orders; the time from each deadline to its cancel is measured, and a
//! second wave of the first wave's losers buys the returned units.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use chrono::NaiveDateTime;
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use sqlx::MySqlPool;

/// Requests in flight at once in the scenario's waves.
const IN_FLIGHT: usize = 64;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AfterSaleReport {
    pub winners: u64,
    pub paid: u64,
    /// Orders the unpaid timeout cancelled (units returned).
    pub returned: u64,
    pub expected_returned: u64,
    /// From a deadline to its cancel being seen, seconds (the order's
    /// create time has one-second precision, so ±1 s).
    pub lag_median_secs: Option<f64>,
    pub lag_max_secs: Option<f64>,
    pub second_wave_users: u64,
    pub second_wave_successes: u64,
    /// (user index, order id) of each second-wave success.
    #[serde(skip)]
    pub second_wave_orders: Vec<(usize, i64)>,
}

impl AfterSaleReport {
    pub fn passed(&self) -> bool {
        self.returned == self.expected_returned
            && self.second_wave_successes == self.returned.min(self.second_wave_users)
    }

    pub fn render(&self) -> String {
        let secs = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |s| format!("{s:.2} s"));
        format!(
            "After the sale: {} winners, {} paid, {} cancelled by the timeout ({} expected): units returned {}; deadline to cancel: median {}, max {}; second wave: {} of {} users bought{}\n",
            self.winners,
            self.paid,
            self.returned,
            self.expected_returned,
            self.returned,
            secs(self.lag_median_secs),
            secs(self.lag_max_secs),
            self.second_wave_successes,
            self.second_wave_users,
            if self.passed() { "" } else { ": MISMATCH" }
        )
    }
}

/// Each of `ids` cancelled by the unpaid timeout, as it is seen, with how
/// long after its deadline (s); until `expected` are, or the timeout and
/// half a minute more have passed.
async fn watch_cancels(
    db: &MySqlPool,
    voucher: u64,
    ids: &[i64],
    expected: u64,
    pay_timeout: Duration,
) -> anyhow::Result<HashMap<i64, f64>> {
    let mut seen: HashMap<i64, f64> = HashMap::new();
    let until = Instant::now() + pay_timeout + Duration::from_secs(30);
    while (seen.len() as u64) < expected && Instant::now() < until {
        let cancelled: Vec<(i64, NaiveDateTime)> =
            sqlx::query_as("SELECT id, create_time FROM tb_voucher_order WHERE voucher_id = ? AND status = 4")
                .bind(voucher)
                .fetch_all(db)
                .await?;
        let now = chrono::Utc::now().naive_utc();
        for (id, created) in cancelled {
            if ids.contains(&id) {
                seen.entry(id).or_insert_with(|| {
                    let deadline = created + chrono::TimeDelta::from_std(pay_timeout).unwrap_or_default();
                    (now - deadline).num_milliseconds() as f64 / 1000.0
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(seen)
}

/// What the scenario is asked for.
pub struct Scenario {
    pub pay_percent: f64,
    /// The service's `ORDER_PAY_TIMEOUT_S`.
    pub pay_timeout: Duration,
}

/// Runs the scenario. `winners`: (user index, token, order id) of the
/// first wave's successes; `losers`: the user indexes of its refusals,
/// each of whom `buy` sends to order again (its order id on a success).
#[allow(clippy::too_many_arguments)]
pub async fn run<B, F>(
    client: &reqwest::Client,
    base: &str,
    db: &MySqlPool,
    voucher: u64,
    winners: &[(usize, String, i64)],
    losers: &[usize],
    scenario: Scenario,
    buy: B,
) -> anyhow::Result<AfterSaleReport>
where
    B: Fn(usize) -> F,
    F: std::future::Future<Output = Option<i64>>,
{
    let Scenario { pay_percent, pay_timeout } = scenario;
    let paying = ((winners.len() as f64) * pay_percent / 100.0).round() as usize;
    let paid = futures::stream::iter(winners.iter().take(paying))
        .map(|(_, token, order)| {
            let url = format!("{base}/voucher-order/{order}/pay");
            async move {
                let resp = client.post(url).header("authorization", token).json(&json!({ "payType": 1 })).send().await;
                matches!(resp, Ok(r) if r.status().is_success())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await as u64;
    let expected_returned = winners.len() as u64 - paid;
    eprintln!("{paid} of {} winners paid; waiting for the timeout to cancel {expected_returned}", winners.len());

    let ids: Vec<i64> = winners.iter().map(|(_, _, id)| *id).collect();
    let seen = watch_cancels(db, voucher, &ids, expected_returned, pay_timeout).await?;
    let mut lags: Vec<f64> = seen.values().copied().collect();
    lags.sort_by(f64::total_cmp);

    // The first wave's losers buy again: exactly the returned units sell.
    // (An instance that did not return them learns within a second.)
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let bought: Vec<(usize, i64)> = futures::stream::iter(losers)
        .map(|&user| {
            let bought = buy(user);
            async move { Some((user, bought.await?)) }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(std::future::ready)
        .collect()
        .await;
    Ok(AfterSaleReport {
        winners: winners.len() as u64,
        paid,
        returned: seen.len() as u64,
        expected_returned,
        lag_median_secs: lags.get(lags.len() / 2).copied(),
        lag_max_secs: lags.last().copied(),
        second_wave_users: losers.len() as u64,
        second_wave_successes: bought.len() as u64,
        second_wave_orders: bought,
    })
}
