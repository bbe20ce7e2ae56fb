//! The guarded flow (`--guard path|challenge`): each buyer asks for a sale
//! path, solves the challenge natively when one comes (on the blocking
//! pool, so every core of this machine solves), waits in line as told, and
//! orders with the path. The report adds what a guarded sale is judged
//! by: each buyer's time in line, admissions per second against orders per
//! second, the order route's own latency, and the bots: clients that skip
//! the path or replay another buyer's, who must get nothing.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use serde::Serialize;
use serde_json::{Value, json};

/// The guarded sale's settings on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct GuardArgs {
    /// Create the voucher with this guard; buyers then take the full flow.
    #[arg(long, value_parser = ["path", "challenge"])]
    pub guard: Option<String>,
    /// The created voucher's admission rate (buyers per second).
    #[arg(long, requires = "guard")]
    pub admit_per_second: Option<u32>,
    /// This many of the users are bots: half order without a path, half
    /// replay a path another buyer was given. Each must get nothing.
    #[arg(long, default_value_t = 0, requires = "guard")]
    pub bots: usize,
    /// This many buyers are greedy: they ask again every 20 ms instead of
    /// when told. Their share of the orders is reported against their share
    /// of the buyers.
    #[arg(long, default_value_t = 0, requires = "guard")]
    pub greedy: usize,
}

/// Which buyers are greedy: every `stride`-th, spread over the arrival
/// order, so that their share of the orders is their greed's doing and
/// not their place in the queue of buyers.
#[derive(Clone, Copy)]
pub struct Greedy {
    stride: usize,
    count: usize,
}

impl Greedy {
    pub fn among(count: usize, buyers: usize) -> Self {
        Self { stride: buyers.checked_div(count).map_or(usize::MAX, |s| s.max(1)), count }
    }

    pub fn is(&self, user: usize) -> bool {
        self.count > 0 && user.is_multiple_of(self.stride) && user / self.stride < self.count
    }
}

/// How a buyer's way to the order route ended.
pub enum Admitted {
    /// A path (the time in line is in the ledger).
    Path { path: String },
    /// Refused on the path route: the answer, as the order route's would be
    /// read (`SOLD_OUT`, ...), and when it came.
    Refused(Value, reqwest::StatusCode),
}

/// What every buyer's flow adds up to, shared by the workers.
#[derive(Default)]
pub struct Ledger {
    admitted_at: Mutex<Vec<Instant>>,
    ordered_at: Mutex<Vec<Instant>>,
    in_line_ms: Mutex<Vec<f64>>,
    order_ms: Mutex<Vec<f64>>,
    /// Paths given to buyers, for the bots to replay.
    paths: Mutex<Vec<String>>,
    challenges: Mutex<(u64, f64)>,
    greedy_wins: Mutex<u64>,
}

impl Ledger {
    pub fn order_sent(&self, at: Instant) {
        self.ordered_at.lock().unwrap().push(at);
    }

    pub fn order_answered(&self, sent: Instant, answered: Instant) {
        self.order_ms.lock().unwrap().push((answered - sent).as_secs_f64() * 1_000.0);
    }

    pub fn greedy_won(&self) {
        *self.greedy_wins.lock().unwrap() += 1;
    }

    /// A path another buyer was given, if any yet.
    pub fn someone_elses_path(&self, i: usize) -> Option<String> {
        let paths = self.paths.lock().unwrap();
        (!paths.is_empty()).then(|| paths[i % paths.len()].clone())
    }
}

/// Asks for a path until one comes or the path route refuses.
pub async fn admit(
    client: &reqwest::Client,
    base: &str,
    voucher: u64,
    token: &str,
    greedy: bool,
    ledger: &Ledger,
) -> Admitted {
    let url = format!("{base}/voucher-order/seckill/{voucher}/path");
    let first = Instant::now();
    let mut body: Option<Value> = None;
    loop {
        let mut request = client.post(&url).header("authorization", token);
        if let Some(body) = body.take() {
            request = request.json(&body);
        }
        let (status, answer) = match request.send().await {
            Ok(resp) => {
                let status = resp.status();
                (status, resp.json::<Value>().await.unwrap_or(Value::Null))
            }
            Err(_) => {
                // No answer: asked again, as the sale page does.
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if answer["success"] != true {
            if status == reqwest::StatusCode::SERVICE_UNAVAILABLE || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            return Admitted::Refused(answer, status);
        }
        let data = &answer["data"];
        if let Some(path) = data["path"].as_str() {
            let now = Instant::now();
            ledger.admitted_at.lock().unwrap().push(now);
            ledger.in_line_ms.lock().unwrap().push((now - first).as_secs_f64() * 1_000.0);
            ledger.paths.lock().unwrap().push(path.to_owned());
            return Admitted::Path { path: path.to_owned() };
        }
        if let Some(challenge) = data.get("challenge") {
            let token = challenge["token"].as_str().unwrap_or_default().to_owned();
            let bits = challenge["difficulty"].as_u64().unwrap_or(0) as u8;
            let started = Instant::now();
            let nonce = tokio::task::spawn_blocking({
                let token = token.clone();
                move || hmdp_pow::solve(&token, bits)
            })
            .await
            .expect("the solver does not panic");
            let mut solved = ledger.challenges.lock().unwrap();
            solved.0 += 1;
            solved.1 += started.elapsed().as_secs_f64() * 1_000.0;
            drop(solved);
            body = Some(json!({"challenge": token, "nonce": nonce.to_string()}));
            continue;
        }
        let wait = if greedy { 20 } else { data["retryAfterMs"].as_u64().unwrap_or(1_000) };
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// What a bot got: every answer by errorCode (`OK` for an order).
pub async fn bot(client: &reqwest::Client, base: &str, voucher: u64, token: &str, i: usize, ledger: &Ledger) -> String {
    let url = if i.is_multiple_of(2) {
        // Straight to the order route, as a script that knows the id.
        format!("{base}/voucher-order/seckill/{voucher}")
    } else {
        let mut path = ledger.someone_elses_path(i);
        for _ in 0..100 {
            if path.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            path = ledger.someone_elses_path(i);
        }
        match path {
            Some(path) => format!("{base}/voucher-order/seckill/{voucher}/{path}"),
            None => return "NO_PATH_TO_REPLAY".to_owned(),
        }
    };
    match client.post(&url).header("authorization", token).send().await {
        Ok(resp) => {
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if body["success"] == true { "OK".to_owned() } else { body["errorCode"].as_str().unwrap_or("?").to_owned() }
        }
        Err(_) => "no answer".to_owned(),
    }
}

/// The guarded sale in numbers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuardReport {
    pub guard: String,
    pub admit_per_second: Option<u32>,
    pub admitted: usize,
    pub in_line_ms: Quantiles,
    /// The order route alone (sent with a path to its answer).
    pub order_ms: Quantiles,
    pub admissions_per_second_peak: usize,
    pub orders_per_second_peak: usize,
    pub admissions_per_second_mean: f64,
    pub orders_per_second_mean: f64,
    pub challenges_solved: u64,
    pub challenge_solve_ms_mean: f64,
    pub bots: std::collections::BTreeMap<String, u64>,
    pub greedy_buyers: usize,
    pub greedy_orders: u64,
}

#[derive(Debug, Serialize, Default)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

fn quantiles(mut ms: Vec<f64>) -> Quantiles {
    if ms.is_empty() {
        return Quantiles::default();
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Quantiles { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: ms[ms.len() - 1] }
}

/// The busiest whole second (counted from the first event) and the mean
/// rate over the span of the events.
fn rates(mut at: Vec<Instant>) -> (usize, f64) {
    at.sort();
    let (Some(&first), Some(&last)) = (at.first(), at.last()) else { return (0, 0.0) };
    let mut per_second = std::collections::BTreeMap::<u64, usize>::new();
    for t in &at {
        *per_second.entry((*t - first).as_secs()).or_default() += 1;
    }
    let span = (last - first).as_secs_f64().max(1.0);
    (per_second.values().copied().max().unwrap_or(0), at.len() as f64 / span)
}

impl GuardReport {
    pub fn new(args: &GuardArgs, ledger: Ledger, bots: std::collections::BTreeMap<String, u64>) -> Self {
        let admitted_at = ledger.admitted_at.into_inner().unwrap();
        let admitted = admitted_at.len();
        let (admissions_per_second_peak, admissions_per_second_mean) = rates(admitted_at);
        let (orders_per_second_peak, orders_per_second_mean) = rates(ledger.ordered_at.into_inner().unwrap());
        let (solved, solve_ms) = ledger.challenges.into_inner().unwrap();
        Self {
            guard: args.guard.clone().unwrap_or_default(),
            admit_per_second: args.admit_per_second,
            admitted,
            in_line_ms: quantiles(ledger.in_line_ms.into_inner().unwrap()),
            order_ms: quantiles(ledger.order_ms.into_inner().unwrap()),
            admissions_per_second_peak,
            orders_per_second_peak,
            admissions_per_second_mean,
            orders_per_second_mean,
            challenges_solved: solved,
            challenge_solve_ms_mean: if solved > 0 { solve_ms / solved as f64 } else { 0.0 },
            bots,
            greedy_buyers: args.greedy,
            greedy_orders: ledger.greedy_wins.into_inner().unwrap(),
        }
    }

    /// Whether the bots got nothing.
    pub fn bots_kept_out(&self) -> bool {
        !self.bots.contains_key("OK")
    }

    pub fn render(&self, buyers: usize, orders: u64) -> String {
        let mut out = format!(
            "Guarded sale (guard {}, admitPerSecond {}):\n\
             - admitted {} buyers; time in line p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms\n\
             - admissions per second: peak {}, mean {:.0}; order requests per second: peak {}, mean {:.0}\n\
             - the order route alone: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n\
             - challenges solved: {} (mean {:.1} ms each, natively)\n",
            self.guard,
            self.admit_per_second.map_or("default".to_owned(), |r| r.to_string()),
            self.admitted,
            self.in_line_ms.p50,
            self.in_line_ms.p90,
            self.in_line_ms.p99,
            self.in_line_ms.max,
            self.admissions_per_second_peak,
            self.admissions_per_second_mean,
            self.orders_per_second_peak,
            self.orders_per_second_mean,
            self.order_ms.p50,
            self.order_ms.p90,
            self.order_ms.p99,
            self.order_ms.max,
            self.challenges_solved,
            self.challenge_solve_ms_mean,
        );
        if !self.bots.is_empty() {
            out += &format!("- bots (half skipping the path, half replaying another's): {:?}\n", self.bots);
        }
        if self.greedy_buyers > 0 {
            out += &format!(
                "- greedy buyers (asking every 20 ms): {} of {} buyers ({:.1} %) took {} of {} orders ({:.1} %)\n",
                self.greedy_buyers,
                buyers,
                100.0 * self.greedy_buyers as f64 / buyers.max(1) as f64,
                self.greedy_orders,
                orders,
                100.0 * self.greedy_orders as f64 / orders.max(1) as f64,
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_buyers_are_spread_over_the_arrival_order() {
        let greedy = Greedy::among(3, 30);
        let chosen: Vec<usize> = (0..30).filter(|u| greedy.is(*u)).collect();
        assert_eq!(chosen, vec![0, 10, 20]);
        assert!(!(0..30).any(|u| Greedy::among(0, 30).is(u)));
        assert_eq!((0..5).filter(|u| Greedy::among(9, 5).is(*u)).count(), 5, "more greedy than buyers: all");
    }

    #[test]
    fn the_busiest_second_and_the_mean_rate_are_counted_from_the_first_event() {
        let t0 = Instant::now();
        let at: Vec<Instant> =
            [0, 100, 200, 1_100, 2_000, 2_100, 2_200, 2_300].iter().map(|ms| t0 + Duration::from_millis(*ms)).collect();
        let (peak, mean) = rates(at);
        assert_eq!(peak, 4);
        assert!((mean - 8.0 / 2.3).abs() < 1e-9);
        assert_eq!(rates(Vec::new()), (0, 0.0));
    }
}
