//! `Idempotency-Key` (the IETF httpapi working group's draft, with Stripe's
//! behaviour): a client that lost an answer (a network error, a 502 while an
//! instance died) sends the same request with the same key again and gets
//! the first answer, success or failure, instead of a second order or a
//! second voucher. The key is the caller's own (a user's keys and the
//! admin's never meet) and is kept 24 h.
//!
//! - A key seen for the first time is claimed in Redis (`SET NX`) for the
//!   time a request can take, then the answer replaces the claim.
//! - The same key while the first request runs: 409 `IDEMPOTENCY_IN_FLIGHT`.
//! - The same key with another request (another voucher, another body):
//!   422 `IDEMPOTENCY_KEY_REUSED`.
//! - Answers that say nothing final are not kept, so a retry runs again:
//!   429 (a limit or a busy lock), 503 and 500 (nothing committed, or the
//!   outcome is looked up by the retry itself), 401 and 403.
//! - A request that runs again where an earlier one under its key ended
//!   with no answer kept (it died with its instance, or answered nothing
//!   final) is told so (`Attempt::AfterUnsettled`): what the earlier one
//!   did may stand, and the work looks for it first. A marker beside the
//!   key, kept as long as an answer, remembers that the key was tried.
//!
//! Plumbing: the handler names the caller and what makes two requests the
//! same; this module knows nothing of orders or vouchers.

use std::{future::Future, sync::LazyLock, time::Duration};

use axum::{
    body::Body,
    extract::{FromRef, FromRequestParts},
    http::{HeaderName, HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use hmdp_redis::Redis;
use redis::Script;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use crate::keys::Keys;

pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// On a replayed answer, as Stripe does.
pub(crate) const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The draft leaves the length open; Stripe's bound, which the contract
/// took.
const KEY_MAX: usize = 255;
/// A claim lapses this long after its request last said it still runs, so
/// a request that died with its instance frees its key within seconds and
/// the client's retry runs (and finds what the dead one did: its order,
/// as `DUPLICATE_ORDER` with the id). A live request renews its claim
/// every `CLAIM_RENEW`.
const CLAIM_FOR: Duration = Duration::from_secs(5);
const CLAIM_RENEW: Duration = Duration::from_secs(1);
/// How long an answer is kept.
const KEPT_FOR: Duration = Duration::from_secs(24 * 60 * 60);
/// A body larger than this is not kept (the API's bodies are small).
const ANSWER_MAX: usize = 64 * 1024;

static FINISH: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/idempotency_finish.lua")));

/// Where idempotency keys are kept: a sub-state.
#[derive(Clone)]
pub(crate) struct Idempotency {
    redis: Redis,
    keys: Keys,
}

impl Idempotency {
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }
}

/// Whether an earlier request under the key may have done the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The key's first request (or a request without a key).
    First,
    /// An earlier request under this key ended with no answer kept.
    AfterUnsettled,
}

/// What a key holds: a claim (no status yet) or the first answer.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// What the request was; another request under the key is a 422.
    request: String,
    /// Makes a claim's value its own, so only its request ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
}

/// The request's `Idempotency-Key`, if it sent one: an extractor that
/// answers 400 in the envelope for a key that is empty, too long or not
/// printable ASCII.
pub(crate) struct IdempotencyKey {
    key: Option<String>,
    store: Idempotency,
}

impl<S> FromRequestParts<S> for IdempotencyKey
where
    S: Send + Sync,
    Idempotency: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let store = Idempotency::from_ref(state);
        let Some(value) = parts.headers.get(IDEMPOTENCY_KEY) else {
            return Ok(Self { key: None, store });
        };
        let key = value
            .to_str()
            .ok()
            .filter(|k| !k.is_empty() && k.len() <= KEY_MAX && k.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                ApiError::validation(format!("Idempotency-Key must be 1 to {KEY_MAX} printable ASCII characters"))
            })?;
        Ok(Self { key: Some(key.to_owned()), store })
    }
}

impl IdempotencyKey {
    /// Runs `work` once per key: `caller` is whose key it is, `request`
    /// what makes two requests the same (the voucher ordered, the body).
    /// Without a key, `work` just runs.
    pub(crate) async fn run<W, F>(self, caller: &str, request: String, work: W) -> Response
    where
        W: FnOnce(Attempt) -> F,
        F: Future<Output = Response>,
    {
        let Some(key) = self.key else { return work(Attempt::First).await };
        let redis_key = self.store.keys.idempotency(caller, &key);
        let claim =
            Record { request, claim: Some(uuid::Uuid::new_v4().simple().to_string()), status: None, body: None };
        let claimed = serde_json::to_string(&claim).expect("a record serialises");
        let mut redis = self.store.redis.clone();
        // Twice at most: a key whose claim expired between SET and GET is
        // claimed again.
        for _ in 0..2 {
            let set: Option<String> = match redis::cmd("SET")
                .arg(&redis_key)
                .arg(&claimed)
                .arg("NX")
                .arg("PX")
                .arg(CLAIM_FOR.as_millis() as u64)
                .query_async(&mut redis)
                .await
            {
                Ok(set) => set,
                Err(err) => return ApiError::from(err).into_response(),
            };
            if set.is_some() {
                let attempt = self.store.attempt(&redis_key).await;
                let work = work(attempt);
                let renew = async {
                    loop {
                        tokio::time::sleep(CLAIM_RENEW).await;
                        self.store.end(&redis_key, &claimed, Ending::Extend).await;
                    }
                };
                let answer = tokio::select! {
                    answer = work => answer,
                    never = renew => never,
                };
                return self.store.finish(&redis_key, &claimed, &claim.request, answer).await;
            }
            let held: Option<String> = match redis::cmd("GET").arg(&redis_key).query_async(&mut redis).await {
                Ok(held) => held,
                Err(err) => return ApiError::from(err).into_response(),
            };
            let Some(held) = held else { continue };
            let Ok(record) = serde_json::from_str::<Record>(&held) else {
                return ApiError::internal(anyhow::anyhow!("idempotency record {redis_key} is not a record"))
                    .into_response();
            };
            if record.request != claim.request {
                return ApiError::IdempotencyKeyReused.into_response();
            }
            return match (record.status, record.body) {
                (Some(status), Some(body)) => replay(status, body),
                _ => ApiError::IdempotencyInFlight.into_response(),
            };
        }
        ApiError::IdempotencyInFlight.into_response()
    }
}

impl Idempotency {
    /// Marks the key tried; an earlier mark means an earlier request under
    /// it ended with no answer kept (the claim was just free). Unsure (Redis
    /// failed) counts as after one: the work then only looks first.
    async fn attempt(&self, redis_key: &str) -> Attempt {
        let marked: redis::RedisResult<Option<String>> = redis::cmd("SET")
            .arg(format!("{redis_key}:tried"))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(KEPT_FOR.as_millis() as u64)
            .query_async(&mut self.redis.clone())
            .await;
        match marked {
            Ok(Some(_)) => Attempt::First,
            Ok(None) => Attempt::AfterUnsettled,
            Err(err) => {
                tracing::warn!(key = redis_key, error = %err, "marking an idempotency key tried failed");
                Attempt::AfterUnsettled
            }
        }
    }

    /// Keeps the answer under the key, or gives the key back when the
    /// answer says nothing final; either only if the claim is still ours.
    async fn finish(&self, redis_key: &str, claimed: &str, request: &str, answer: Response) -> Response {
        let status = answer.status();
        let keep = (status.is_success() || status.is_client_error())
            && !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS);
        let (parts, body) = answer.into_parts();
        let bytes = match axum::body::to_bytes(body, ANSWER_MAX).await {
            Ok(bytes) => bytes,
            Err(err) => {
                self.end(redis_key, claimed, Ending::Drop).await;
                return ApiError::internal(anyhow::anyhow!("reading an answer to keep it: {err}")).into_response();
            }
        };
        let ending = if keep {
            let body = String::from_utf8_lossy(&bytes).into_owned();
            let record =
                Record { request: request.to_owned(), claim: None, status: Some(status.as_u16()), body: Some(body) };
            Ending::Keep(serde_json::to_string(&record).expect("a record serialises"))
        } else {
            Ending::Drop
        };
        self.end(redis_key, claimed, ending).await;
        Response::from_parts(parts, Body::from(bytes))
    }

    /// A failure here leaves the claim to lapse: retries meanwhile get 409,
    /// then run again.
    async fn end(&self, redis_key: &str, claimed: &str, ending: Ending) {
        let (action, record, ttl) = match &ending {
            Ending::Extend => ("extend", "", CLAIM_FOR),
            Ending::Keep(record) => ("keep", record.as_str(), KEPT_FOR),
            Ending::Drop => ("drop", "", CLAIM_FOR),
        };
        let ended: redis::RedisResult<i64> = FINISH
            .key(redis_key)
            .arg(claimed)
            .arg(action)
            .arg(record)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.redis.clone())
            .await;
        match ended {
            Ok(1) => {}
            Ok(_) => tracing::warn!(key = redis_key, action, "an idempotency claim lapsed while its request ran"),
            Err(err) => {
                tracing::warn!(key = redis_key, action, error = %err, "renewing or ending an idempotency claim failed")
            }
        }
    }
}

/// What becomes of a claim.
enum Ending {
    /// Its request still runs.
    Extend,
    /// The answer, kept `KEPT_FOR`.
    Keep(String),
    /// The answer says nothing final: the key is free again.
    Drop,
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}
