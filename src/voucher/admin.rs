//! The admin guard. Unlike the course project, admin routes are never open:
//! without a configured ADMIN_KEY they answer 403 to everyone. Wrong keys
//! are counted per client address (`hmdp_admin_key_failures_total`, and a
//! limit in Redis across instances): a script guessing keys is slowed to
//! ten guesses per 15 minutes (`MAX_FAILURES`).

use std::sync::Arc;

use axum::{
    extract::{FromRef, FromRequestParts},
    http::request::Parts,
};
use subtle::ConstantTimeEq;

use crate::{
    config::{Config, TrustedProxies},
    http::{
        ApiError,
        extract::ClientAddr,
        ratelimit::{Limit, RateLimiter, Window},
    },
};

pub(super) const ADMIN_KEY_HEADER: &str = "x-admin-key";

/// Wrong admin keys one client address may send per window; past it, that
/// address's admin requests answer 429 until the window ends, the right key
/// included.
const MAX_FAILURES: u64 = 10;
const FAILURE_WINDOW: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Present in a handler's arguments: the request carried the admin key.
pub(crate) struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    Arc<Config>: FromRef<S>,
    RateLimiter: FromRef<S>,
    TrustedProxies: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let config = Arc::<Config>::from_ref(state);
        let Some(expected) = config.server.admin_key.as_deref() else {
            return Err(ApiError::Forbidden);
        };
        // No key is no guess: refused at once, neither counted nor held up.
        let Some(given) = parts.headers.get(ADMIN_KEY_HEADER).map(|v| v.as_bytes().to_vec()) else {
            return Err(ApiError::Forbidden);
        };
        let Ok(ClientAddr(addr)) = ClientAddr::from_request_parts(parts, state).await;
        let limiter = RateLimiter::from_ref(state);
        let failures = [Window { what: FAILURES, subject: &addr, limit: Limit::per(MAX_FAILURES, FAILURE_WINDOW) }];
        // Constant time in the key's content; only its length can leak.
        if bool::from(given.ct_eq(expected.as_bytes())) {
            // Past the limit even the right key waits, so a guesser learns
            // nothing from the answers meanwhile.
            limiter.check(FAILURES, &addr, failures[0].limit, REFUSAL).await?;
            return Ok(Admin);
        }
        metrics::counter!("hmdp_admin_key_failures_total").increment(1);
        // The wrong key takes its place in the window, or finds it full: one
        // step in Redis, so of a burst of wrong keys exactly the limit's
        // worth are answered 403 and the rest 429. Checked after the
        // comparison, so that an operator's requests in parallel are never
        // refused for each other; in Redis's order, the right key passes
        // only while fewer than the limit's wrong ones were counted, as it
        // would one guess at a time.
        limiter.take(&failures, REFUSAL).await?;
        Err(ApiError::Forbidden)
    }
}

const FAILURES: &str = "admin-key-failures:addr";
const REFUSAL: &str = "too many wrong admin keys from this address; try later";
