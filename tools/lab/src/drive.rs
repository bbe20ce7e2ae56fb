//! The same requests for every strategy, sent with a fixed number in
//! flight, and the audit that reads the tables afterwards.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde::Serialize;

/// Lab buyers are not rows of `tb_user`: their ids start here, far from
/// real users'.
pub const FIRST_USER: u64 = 9_000_000_000;

/// A refusal's reason, an errorCode where the service gave one.
pub type Refusal = Cow<'static, str>;

/// Every buyer once, in order; a double-clicking buyer's two requests sit
/// next to each other, so they are in flight together.
pub fn requests(users: u64, double_click_percent: u8) -> Vec<u64> {
    let mut out = Vec::with_capacity(users as usize * 2);
    for i in 0..users {
        let user = FIRST_USER + i;
        out.push(user);
        if i % 100 < u64::from(double_click_percent) {
            out.push(user);
        }
    }
    out
}

pub struct Driven {
    pub wall: Duration,
    /// Distinct buyers among the requests.
    pub buyers: u64,
    /// Buyers answered success, once per success answer.
    pub successes: Vec<u64>,
    pub refusals: BTreeMap<String, u64>,
    pub latencies_us: Vec<u64>,
}

/// Sends `requests` through `order` with `concurrency` in flight.
pub async fn drive<F, Fut>(requests: Arc<Vec<u64>>, concurrency: usize, order: F) -> Driven
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Refusal>> + Send,
{
    // Counted before the clock starts: the wall time is the orders' alone.
    let buyers = requests.iter().collect::<std::collections::HashSet<_>>().len() as u64;
    let order = Arc::new(order);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (order, next, requests) = (order.clone(), next.clone(), requests.clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&user) = requests.get(i) else { break };
                    let sent = Instant::now();
                    let outcome = order(user).await;
                    mine.push((user, outcome, sent.elapsed()));
                }
                mine
            })
        })
        .collect();
    let mut driven = Driven {
        wall: Duration::ZERO,
        buyers,
        successes: Vec::new(),
        refusals: BTreeMap::new(),
        latencies_us: Vec::new(),
    };
    for worker in workers {
        for (user, outcome, latency) in worker.await.expect("a lab worker panicked") {
            driven.latencies_us.push(latency.as_micros() as u64);
            match outcome {
                Ok(()) => driven.successes.push(user),
                Err(reason) => *driven.refusals.entry(reason.into_owned()).or_default() += 1,
            }
        }
    }
    driven.wall = started.elapsed();
    driven.latencies_us.sort_unstable();
    driven
}

pub fn percentile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    sorted_us[rank - 1] as f64 / 1_000.0
}

/// What the tables say after a strategy ran.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    pub initial_stock: i64,
    pub stock_left: i64,
    pub orders: i64,
    /// Orders beyond the initial stock.
    pub oversold: i64,
    /// Orders beyond one per buyer.
    pub duplicates: i64,
    /// Success answers whose order has no row.
    pub lost: i64,
    /// Rows whose buyer was never answered success.
    pub unannounced: i64,
}

impl Audit {
    /// `rows`: one buyer id per order row.
    pub fn of(initial_stock: i64, stock_left: i64, rows: &[u64], successes: &[u64]) -> Self {
        let mut per_buyer: HashMap<u64, i64> = HashMap::new();
        for user in rows {
            *per_buyer.entry(*user).or_default() += 1;
        }
        let orders = rows.len() as i64;
        let mut told: HashMap<u64, i64> = HashMap::new();
        for user in successes {
            *told.entry(*user).or_default() += 1;
        }
        let lost = told.iter().map(|(user, n)| (n - per_buyer.get(user).copied().unwrap_or(0)).max(0)).sum();
        let unannounced = per_buyer.iter().map(|(user, n)| (n - told.get(user).copied().unwrap_or(0)).max(0)).sum();
        Self {
            initial_stock,
            stock_left,
            orders,
            oversold: (orders - initial_stock).max(0),
            duplicates: orders - per_buyer.len() as i64,
            lost,
            unannounced,
        }
    }

    /// Stock and orders add up to what was put on sale.
    pub fn balanced(&self) -> bool {
        self.stock_left + self.orders == self.initial_stock
    }

    pub fn clean(&self) -> bool {
        self.oversold == 0
            && self.duplicates == 0
            && self.lost == 0
            && self.unannounced == 0
            && self.balanced()
            && self.stock_left >= 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_clickers_send_two_adjacent_requests() {
        let r = requests(200, 10);
        assert_eq!(r.len(), 220);
        assert_eq!(&r[..3], &[FIRST_USER, FIRST_USER, FIRST_USER + 1]);
        assert_eq!(requests(50, 0).len(), 50);
    }

    #[test]
    fn the_audit_counts_oversold_duplicates_and_answers_without_rows() {
        let clean = Audit::of(3, 1, &[1, 2], &[1, 2]);
        assert!(clean.clean());
        let broken = Audit::of(2, -1, &[1, 1, 2], &[1, 1, 2]);
        assert_eq!((broken.oversold, broken.duplicates), (1, 1));
        assert!(broken.balanced() && !broken.clean());
        let lost = Audit::of(3, 1, &[1], &[1, 2]);
        assert_eq!((lost.lost, lost.unannounced), (1, 0));
        assert!(!lost.clean() && !lost.balanced());
        let unannounced = Audit::of(3, 1, &[1, 2], &[1]);
        assert_eq!(unannounced.unannounced, 1);
        assert!(!unannounced.clean());
    }
}
