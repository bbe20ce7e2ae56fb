//! One part of the crowd, a child process of its own: it holds its share of
//! the connections, orders at the opening instant, and writes its answers
//! on stdout for the parent to merge.

use std::{
    collections::BTreeMap,
    io::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode, client::conn::http1::SendRequest, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::Semaphore};

use super::job::{Answer, Job, PartResult, unix_ms};

/// A child: reads its job on stdin, holds its connections, orders at the
/// opening instant, writes its answers on stdout.
pub fn part_main() -> anyhow::Result<()> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let job: Job = serde_json::from_reader(std::io::stdin().lock()).context("reading the job")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(part(job))?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &result)?;
    out.flush()?;
    Ok(())
}

/// What one connection's run adds to its part's result.
#[derive(Default)]
struct Tally {
    answers: Vec<Answer>,
    held: bool,
    failed_to_open: bool,
    dropped_in_flight: usize,
    reopened: usize,
    outside_envelope: BTreeMap<String, u64>,
    retries_followed: u64,
}

/// Connections opened at once while the crowd gathers: more only queue in
/// the kernel's accept queue and nginx's.
const OPENING_AT_ONCE: usize = 256;

async fn part(mut job: Job) -> anyhow::Result<PartResult> {
    let connections = std::mem::take(&mut job.connections);
    let job = Arc::new(job);
    let opening = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    // The opening instant on this process's monotonic clock.
    let now_ms = unix_ms();
    let open_at = if job.open_at_ms > now_ms {
        Instant::now() + Duration::from_millis(job.open_at_ms - now_ms)
    } else {
        Instant::now() - Duration::from_millis(now_ms - job.open_at_ms)
    };
    let tasks: Vec<_> = connections
        .into_iter()
        .map(|buyers| {
            let (job, opening) = (job.clone(), opening.clone());
            tokio::spawn(async move { connection(&job, buyers, &opening, open_at).await })
        })
        .collect();
    let mut result = PartResult::default();
    for task in tasks {
        let tally = task.await?;
        result.answers.extend(tally.answers);
        result.held_at_open += usize::from(tally.held);
        result.failed_to_open += usize::from(tally.failed_to_open);
        result.dropped_in_flight += tally.dropped_in_flight;
        result.reopened += tally.reopened;
        result.retries_followed += tally.retries_followed;
        for (what, n) in tally.outside_envelope {
            *result.outside_envelope.entry(what).or_default() += n;
        }
    }
    Ok(result)
}

type Sender = SendRequest<Full<Bytes>>;

/// A buyer's final answer as the report counts it, and the order id.
type Final = (String, Option<i64>);

/// One held connection: opened and warmed, then its buyers in turn from
/// the opening instant.
async fn connection(job: &Job, buyers: Vec<(usize, String)>, opening: &Semaphore, open_at: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut sender = {
        let _turn = opening.acquire().await.expect("never closed");
        warm(job).await
    };
    tally.held = sender.is_some() && Instant::now() < open_at;
    tokio::time::sleep_until(open_at.into()).await;
    let micros = |t: Instant| -> i64 {
        if t >= open_at { (t - open_at).as_micros() as i64 } else { -((open_at - t).as_micros() as i64) }
    };
    for (user, token) in buyers {
        let first_sent = Instant::now();
        let mut retries = 0;
        let answer = loop {
            if sender.as_mut().is_none_or(|s| s.is_closed()) {
                if sender.is_some() {
                    tally.reopened += 1;
                }
                sender = open(job).await.ok();
            }
            let Some(s) = sender.as_mut() else {
                tally.failed_to_open = true;
                break ("no connection".to_owned(), None);
            };
            let voucher = job.vouchers[user % job.vouchers.len()];
            let path = if job.guarded {
                match guarded_path(job, voucher, s, &token, &mut tally).await {
                    Ok(path) => format!("/voucher-order/seckill/{voucher}/{path}"),
                    Err(refused) => break refused,
                }
            } else {
                format!("/voucher-order/seckill/{voucher}")
            };
            match send(job, s, "POST", &path, Some(&token), None).await {
                Err(()) => {
                    tally.dropped_in_flight += 1;
                    sender = None;
                    break ("dropped".to_owned(), None);
                }
                Ok(Reply::Outside(what)) => {
                    *tally.outside_envelope.entry(what.clone()).or_default() += 1;
                    break (what, None);
                }
                Ok(Reply::Envelope { status, body, retry_after }) => {
                    let what = read(status, &body);
                    if let Some(wait) = retry_after.filter(|_| retries < job.retries) {
                        retries += 1;
                        tally.retries_followed += 1;
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                    let order_id = body["data"].as_str().and_then(|id| id.parse().ok());
                    break (what, order_id);
                }
            }
        };
        let (what, order_id): Final = answer;
        tally.answers.push(Answer {
            user,
            what,
            order_id,
            sent_us: micros(first_sent),
            done_us: micros(Instant::now()),
            retries,
        });
    }
    tally
}

/// A connection nginx holds: opened (a few tries: the accept queue may be
/// full for a moment) and asked `GET /health` once.
async fn warm(job: &Job) -> Option<Sender> {
    for attempt in 0..5u64 {
        if let Ok(mut sender) = open(job).await
            && matches!(send(job, &mut sender, "GET", "/health", None, None).await, Ok(Reply::Envelope { .. }))
        {
            return Some(sender);
        }
        tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
    }
    None
}

async fn open(job: &Job) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(job.addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

enum Reply {
    Envelope {
        status: StatusCode,
        body: Value,
        retry_after: Option<Duration>,
    },
    /// Not the envelope: `HTTP 502 not an envelope`.
    Outside(String),
}

/// One request on the connection; `Err` when the connection failed with
/// the request in flight (sent, or maybe sent, and no answer).
async fn send(
    job: &Job,
    sender: &mut Sender,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<Reply, ()> {
    let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, &job.host)
        .header(header::CONTENT_LENGTH, payload.len());
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, token);
    }
    let request = request.body(Full::new(payload)).map_err(|_| ())?;
    sender.ready().await.map_err(|_| ())?;
    let response = sender.send_request(request).await.map_err(|_| ())?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
        .filter(|_| {
            status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::TOO_MANY_REQUESTS
                || status == StatusCode::BAD_GATEWAY
        })
        .map(Duration::from_secs);
    let bytes = response.into_body().collect().await.map_err(|_| ())?.to_bytes();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(body) if body.get("success").is_some_and(Value::is_boolean) => {
            Ok(Reply::Envelope { status, body, retry_after })
        }
        _ => Ok(Reply::Outside(format!("HTTP {} not an envelope", status.as_u16()))),
    }
}

/// `OK`, `OK202` or the errorCode.
fn read(status: StatusCode, body: &Value) -> String {
    if body["success"] == true {
        return if status == StatusCode::ACCEPTED { "OK202" } else { "OK" }.to_owned();
    }
    body["errorCode"].as_str().unwrap_or("no errorCode").to_owned()
}

/// The guarded flow on the buyer's connection: ask for a path, solve the
/// challenge (on the blocking pool), wait in line as told. `Err` is the
/// buyer's final answer.
async fn guarded_path(
    job: &Job,
    voucher: u64,
    sender: &mut Sender,
    token: &str,
    tally: &mut Tally,
) -> Result<String, Final> {
    let route = format!("/voucher-order/seckill/{voucher}/path");
    let mut body: Option<Value> = None;
    let mut retries = 0;
    loop {
        let reply = send(job, sender, "POST", &route, Some(token), body.take().as_ref()).await;
        let (status, answer, retry_after) = match reply {
            Err(()) => {
                tally.dropped_in_flight += 1;
                return Err(("dropped".to_owned(), None));
            }
            Ok(Reply::Outside(what)) => {
                *tally.outside_envelope.entry(what.clone()).or_default() += 1;
                return Err((what, None));
            }
            Ok(Reply::Envelope { status, body, retry_after }) => (status, body, retry_after),
        };
        if answer["success"] != true {
            if let Some(wait) = retry_after.filter(|_| retries < job.retries) {
                retries += 1;
                tally.retries_followed += 1;
                tokio::time::sleep(wait).await;
                continue;
            }
            return Err((read(status, &answer), None));
        }
        let data = &answer["data"];
        if let Some(path) = data["path"].as_str() {
            return Ok(path.to_owned());
        }
        if let Some(challenge) = data.get("challenge") {
            let token = challenge["token"].as_str().unwrap_or_default().to_owned();
            let bits = challenge["difficulty"].as_u64().unwrap_or(0) as u8;
            let solving = token.clone();
            let nonce = tokio::task::spawn_blocking(move || hmdp_pow::solve(&solving, bits))
                .await
                .expect("the solver does not panic");
            body = Some(json!({"challenge": token, "nonce": nonce.to_string()}));
            continue;
        }
        tokio::time::sleep(Duration::from_millis(data["retryAfterMs"].as_u64().unwrap_or(1_000))).await;
    }
}
