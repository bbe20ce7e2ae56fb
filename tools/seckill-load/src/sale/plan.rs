//! One sale, driven: `--concurrency` workers each take the next request,
//! (for a guarded voucher) ask for a path first, order, retry with the
//! same `Idempotency-Key` when told to, and tally the answer; the bots of a
//! guarded sale run beside them.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    args::Args,
    tally::{Answer, Tally},
};
use crate::{
    guarded::{self, Admitted, Greedy, Ledger},
    history,
    report::Outcome,
    users::User,
};

/// What the answer said, for the history: its status (none when nothing
/// came back) and its `errorCode`.
#[derive(Default)]
struct Said {
    status: Option<u16>,
    code: Option<String>,
}

/// What every worker of one sale shares, fixed before the first request.
pub(crate) struct Plan {
    pub(crate) client: reqwest::Client,
    /// The sale's vouchers: buyer i buys `vouchers[i % len]`.
    pub(crate) vouchers: Vec<u64>,
    pub(crate) method: reqwest::Method,
    /// Each voucher's order route (the ceiling's one route).
    pub(crate) urls: Vec<String>,
    /// The base URL, without a trailing slash.
    pub(crate) base: String,
    pub(crate) tokens: Vec<User>,
    /// The user of each request, in the order they are taken.
    pub(crate) jobs: Vec<usize>,
    /// The first `buyers` users buy; the others are the guarded sale's bots.
    pub(crate) buyers: usize,
    pub(crate) guarded: bool,
    concurrency: usize,
    ramp_up: f64,
    throughput: Option<f64>,
    retries: u32,
    greedy: usize,
    /// Keys of this run: another run's keys never meet them.
    run: u128,
}

impl Plan {
    pub(crate) fn new(args: &Args, client: reqwest::Client, vouchers: Vec<u64>, tokens: Vec<User>) -> Self {
        let buyers = tokens.len() - args.guard.bots;
        let base = args.base_url.trim_end_matches('/').to_owned();
        let (method, urls) = if args.ceiling {
            (reqwest::Method::GET, vec![format!("{base}/user/me")])
        } else {
            let urls = vouchers.iter().map(|v| format!("{base}/voucher-order/seckill/{v}")).collect();
            (reqwest::Method::POST, urls)
        };
        Self {
            client,
            vouchers,
            method,
            urls,
            base,
            jobs: (0..buyers).flat_map(|user| std::iter::repeat_n(user, args.requests_per_user)).collect(),
            tokens,
            buyers,
            guarded: args.guard.guard.is_some(),
            concurrency: args.concurrency,
            ramp_up: args.ramp_up,
            throughput: args.throughput,
            retries: args.retries,
            greedy: args.guard.greedy,
            run: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
        }
    }

    /// The place in `vouchers` of the voucher `user` buys.
    pub(crate) fn voucher_of(&self, user: usize) -> usize {
        user % self.urls.len()
    }

    /// The voucher of a sale of one (a guarded sale, the after-sale
    /// scenario, the order events' audit), or the first.
    pub(crate) fn voucher(&self) -> u64 {
        self.vouchers[0]
    }

    pub(crate) fn announce(&self) {
        let url = match self.urls.as_slice() {
            [one] => one.clone(),
            all => format!("{} ... ({} vouchers, buyer i buying voucher i mod {})", all[0], all.len(), all.len()),
        };
        eprintln!(
            "{} {}: {} requests from {} users, concurrency {}, ramp-up {}s{}",
            self.method,
            url,
            self.jobs.len(),
            self.tokens.len(),
            self.concurrency,
            self.ramp_up,
            self.throughput.map(|rate| format!(", at most {rate}/s")).unwrap_or_default()
        );
    }

    /// Request `i`'s order at `url`, sent again with its key while the
    /// answer says a retry is safe, up to `retries` times; the last answer,
    /// and how many attempts it took.
    async fn order(&self, url: &str, user: usize, i: usize, retried: &AtomicUsize) -> (Answer, Said, u32) {
        let key = (self.retries > 0).then(|| format!("load-{}-{i}", self.run));
        let mut attempt = 0;
        let mut only_unsettled_before = true;
        loop {
            let (answer, said) =
                call(&self.client, self.method.clone(), url, &self.tokens[user].token, key.as_deref()).await;
            if attempt >= self.retries || !retryable(&answer) {
                return (told_of_own_order(answer, attempt > 0 && only_unsettled_before), said, attempt + 1);
            }
            only_unsettled_before &= answer.0 != Outcome::Unavailable;
            attempt += 1;
            retried.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt)).min(Duration::from_secs(2))).await;
        }
    }

    /// One order (retried as `order` does) and its line of the history.
    /// `i` names the request (its `Idempotency-Key`): unique in the run.
    pub(crate) async fn order_on_record(
        &self,
        url: &str,
        user: usize,
        i: usize,
        retried: &AtomicUsize,
    ) -> (Answer, history::Entry) {
        let sent_ms = unix_ms();
        let (answer, said, attempts) = self.order(url, user, i, retried).await;
        let entry = history::Entry {
            sent_ms,
            answered_ms: unix_ms(),
            user,
            user_id: self.tokens[user].id,
            voucher_id: self.vouchers.get(self.voucher_of(user)).copied(),
            status: said.status,
            error_code: said.code,
            order_id: answer.1,
            outcome: answer.0,
            attempts,
        };
        (answer, entry)
    }
}

/// The workers' shared counters: the next request to take, those
/// answered, and the retries sent.
#[derive(Default)]
pub(crate) struct Counters {
    next: AtomicUsize,
    pub(crate) done: Arc<AtomicUsize>,
    pub(crate) retried: AtomicUsize,
}

/// Runs the sale: the workers (started evenly over the ramp-up) and the
/// bots; returns the workers' tally and the bots' answers by kind.
pub(crate) async fn drive(
    plan: Arc<Plan>,
    counters: Arc<Counters>,
    ledger: Arc<Ledger>,
) -> anyhow::Result<(Tally, BTreeMap<String, u64>)> {
    let paced_from = Instant::now();
    let workers: Vec<_> = (0..plan.concurrency)
        .map(|w| {
            let delay = Duration::from_secs_f64(plan.ramp_up * w as f64 / plan.concurrency as f64);
            let greedy = Greedy::among(plan.greedy, plan.buyers);
            tokio::spawn(worker(plan.clone(), counters.clone(), ledger.clone(), greedy, delay, paced_from))
        })
        .collect();
    let bots: Vec<_> = (plan.buyers..plan.tokens.len())
        .enumerate()
        .map(|(i, user)| {
            let (plan, ledger) = (plan.clone(), ledger.clone());
            tokio::spawn(async move {
                guarded::bot(&plan.client, &plan.base, plan.voucher(), &plan.tokens[user].token, i, &ledger).await
            })
        })
        .collect();
    let mut tally = Tally::new();
    for worker in workers {
        tally.merge(worker.await?);
    }
    let mut bot_answers: BTreeMap<String, u64> = BTreeMap::new();
    for bot in bots {
        *bot_answers.entry(bot.await?).or_default() += 1;
    }
    Ok((tally, bot_answers))
}

async fn worker(
    plan: Arc<Plan>,
    counters: Arc<Counters>,
    ledger: Arc<Ledger>,
    greedy: Greedy,
    delay: Duration,
    paced_from: Instant,
) -> Tally {
    tokio::time::sleep(delay).await;
    let mut tally = Tally::new();
    loop {
        let i = counters.next.fetch_add(1, Ordering::Relaxed);
        let Some(&user) = plan.jobs.get(i) else { break };
        if let Some(rate) = plan.throughput {
            tokio::time::sleep_until((paced_from + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        }
        // A guarded sale's buyer first asks for a path (and may be refused
        // there: sold out while in line).
        let voucher = plan.voucher_of(user);
        let url = if plan.guarded {
            let token = &plan.tokens[user].token;
            match guarded::admit(&plan.client, &plan.base, plan.voucher(), token, greedy.is(user), &ledger).await {
                Admitted::Path { path } => format!("{}/{path}", plan.urls[0]),
                Admitted::Refused(answer, status) => {
                    tally.refused_on_path(user, read_answer(status, answer));
                    counters.done.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
        } else {
            plan.urls[voucher].clone()
        };
        let sent = Instant::now();
        if plan.guarded {
            ledger.order_sent(sent);
        }
        let (answer, entry) = plan.order_on_record(&url, user, i, &counters.retried).await;
        let answered = Instant::now();
        tally.history.push(entry);
        if plan.guarded {
            ledger.order_answered(sent, answered);
            if greedy.is(user) && matches!(answer.0, Outcome::Success | Outcome::Unreplicated) {
                ledger.greedy_won();
            }
        }
        tally.record((user, voucher), answer, sent, answered);
        counters.done.fetch_add(1, Ordering::Relaxed);
    }
    tally
}

/// What a retrying client sends again: no answer, a 502, a 503, a 504
/// (nginx waited out an instance that never answered: one whose machine
/// was lost), or its key still in flight.
/// A retry told `DUPLICATE_ORDER` with an order, where every earlier
/// attempt under its key settled nothing (no answer, 502, 504, in
/// flight): the idempotency layer names the order such an attempt placed
/// and could not tell (docs/api.md), so the buyer is told what a 200
/// would have told. Not after a 503, which says no work was done: a row
/// behind it stays a finding.
fn told_of_own_order(answer: Answer, only_unsettled_before: bool) -> Answer {
    match answer {
        (Outcome::Duplicate, Some(id), other) if only_unsettled_before => (Outcome::Success, Some(id), other),
        answer => answer,
    }
}

fn retryable(answer: &Answer) -> bool {
    match answer {
        (Outcome::Unavailable, ..) => true,
        (Outcome::Other, _, Some(what)) => {
            what.starts_with("no answer")
                || what.starts_with("HTTP 502")
                || what.starts_with("HTTP 504")
                || what.contains("IDEMPOTENCY_IN_FLIGHT")
        }
        _ => false,
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.as_millis() as u64)
}

async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    idempotency_key: Option<&str>,
) -> (Answer, Said) {
    let mut request = client.request(method, url).header("authorization", token);
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let resp = match request.send().await {
        Ok(resp) => resp,
        Err(err) => {
            let kind = if err.is_timeout() {
                "timeout"
            } else if err.is_connect() {
                "connect"
            } else {
                "connection lost"
            };
            return (other(format!("no answer: {kind}"), format!("{err:?}")), Said::default());
        }
    };
    let status = resp.status();
    let mut said = Said { status: Some(status.as_u16()), code: None };
    let answer = match resp.json::<Value>().await {
        Ok(body) => {
            said.code = body["errorCode"].as_str().map(str::to_owned);
            read_answer(status, body)
        }
        Err(_) => other(format!("HTTP {} not an envelope", status.as_u16()), format!("HTTP {status}")),
    };
    (answer, said)
}

/// An answer of the order route (or the path route's refusal), read as
/// the report counts it.
fn read_answer(status: reqwest::StatusCode, body: Value) -> Answer {
    if !body.get("success").is_some_and(Value::is_boolean) {
        return other(format!("HTTP {} not an envelope", status.as_u16()), format!("HTTP {status}"));
    }
    let order_id = body["data"].as_str().and_then(|id| id.parse().ok());
    if status == reqwest::StatusCode::ACCEPTED && body["success"] == true {
        return (Outcome::Unreplicated, order_id, None);
    }
    if status.is_success() && body["success"] == true {
        return (Outcome::Success, order_id, None);
    }
    let code = body["errorCode"].as_str().unwrap_or("no errorCode");
    let outcome = match code {
        "SOLD_OUT" => Outcome::SoldOut,
        "DUPLICATE_ORDER" => Outcome::Duplicate,
        "TOO_MANY_REQUESTS" => Outcome::TooManyRequests,
        "UNAVAILABLE" | "OVERLOADED" if status == reqwest::StatusCode::SERVICE_UNAVAILABLE => Outcome::Unavailable,
        _ => return other(format!("HTTP {} {code}", status.as_u16()), format!("HTTP {status}: {body}")),
    };
    (outcome, order_id, None)
}

/// An unexpected outcome, by its key; the first few are shown whole, so a
/// failed run says why.
fn other(key: String, whole: String) -> Answer {
    static SHOWN: AtomicUsize = AtomicUsize::new(0);
    if SHOWN.fetch_add(1, Ordering::Relaxed) < 5 {
        eprintln!("\nunexpected outcome: {whole}");
    }
    (Outcome::Other, None, Some(key))
}

pub(crate) async fn show_progress(done: Arc<AtomicUsize>, total: usize) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = done.load(Ordering::Relaxed);
        eprint!("\r{n}/{total} answered, {:.0}/s     ", n as f64 / started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_told_duplicate_order_after_answers_that_settled_nothing_holds_its_order() {
        let told = told_of_own_order((Outcome::Duplicate, Some(7), None), true);
        assert_eq!((told.0, told.1), (Outcome::Success, Some(7)));
    }

    #[test]
    fn a_duplicate_order_after_a_503_or_on_a_first_attempt_stays_a_duplicate() {
        assert_eq!(told_of_own_order((Outcome::Duplicate, Some(7), None), false).0, Outcome::Duplicate);
        assert_eq!(told_of_own_order((Outcome::Duplicate, None, None), true).0, Outcome::Duplicate);
        assert_eq!(told_of_own_order((Outcome::SoldOut, None, None), true).0, Outcome::SoldOut);
    }
}
