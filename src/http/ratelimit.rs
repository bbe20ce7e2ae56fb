//! Abuse limits, two kinds. `RateLimiter` holds across every instance:
//! fixed windows counted in Redis (`INCR`, the window's TTL set by the
//! first hit, `TTL` for `Retry-After`, in one `MULTI`; a limit on failures
//! takes its place before the attempt, in one script that checks and
//! counts). `LocalUserLimiter`
//! counts one user's orders in this instance's memory (governor), where a
//! Redis round trip per order would cost more than it guards. Both are
//! plumbing the handlers call and answer with the envelope's 429 directly;
//! they know key names and nothing of the domain.

use std::{sync::LazyLock, time::Duration};

use hmdp_redis::Redis;
use redis::Script;

use super::error::{ApiError, ApiResult};
use crate::keys::Keys;

/// One limit: at most `max` hits per `window`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    pub(crate) max: u64,
    pub(crate) window: Duration,
}

impl Limit {
    pub(crate) const fn per(max: u64, window: Duration) -> Self {
        Self { max, window }
    }
}

/// One window of one subject: `what` counted for `subject` under `limit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window<'a> {
    pub(crate) what: &'static str,
    pub(crate) subject: &'a str,
    pub(crate) limit: Limit,
}

#[derive(Clone)]
pub(crate) struct RateLimiter {
    redis: Redis,
    keys: Keys,
}

impl RateLimiter {
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// Counts a hit of `subject` against `what`; 429 with `Retry-After` once
    /// the window holds more than `limit.max`.
    pub(crate) async fn hit(
        &self,
        what: &'static str,
        subject: &str,
        limit: Limit,
        refusal: &'static str,
    ) -> ApiResult<()> {
        let (count, ttl) = self.count(what, subject, limit.window).await?;
        if count > limit.max {
            return Err(ApiError::RateLimited(refusal, ttl.max(1) as u64));
        }
        Ok(())
    }

    /// Whether `subject` has reached `limit` for `what`, without counting
    /// (the right admin key: past the limit it waits like a wrong one).
    pub(crate) async fn check(
        &self,
        what: &'static str,
        subject: &str,
        limit: Limit,
        refusal: &'static str,
    ) -> ApiResult<()> {
        let key = self.keys.rate(what, subject);
        let (count, ttl): (Option<u64>, i64) =
            redis::pipe().get(&key).ttl(&key).query_async(&mut self.redis.clone()).await?;
        if count.unwrap_or(0) >= limit.max {
            return Err(ApiError::RateLimited(refusal, ttl.max(1) as u64));
        }
        Ok(())
    }

    /// Takes a place in each of `windows`, or in none: 429 with
    /// `Retry-After` when one of them is full. Each is checked and counted
    /// in one step in Redis, so a burst of N never counts more than a
    /// window's limit, whereas a check followed by a count let every
    /// request of a burst pass the check before the first count landed.
    pub(crate) async fn take(&self, windows: &[Window<'_>], refusal: &'static str) -> ApiResult<()> {
        for (i, window) in windows.iter().enumerate() {
            let key = self.keys.rate(window.what, window.subject);
            let taken: Result<(u8, i64), _> = TAKE
                .key(&key)
                .arg(window.limit.max)
                .arg(window.limit.window.as_secs().max(1))
                .invoke_async(&mut self.redis.clone())
                .await;
            let refused = match taken {
                Ok((1, _)) => continue,
                Ok((_, ttl)) => ApiError::RateLimited(refusal, ttl.max(1) as u64),
                Err(err) => err.into(),
            };
            self.give_back(&windows[..i]).await;
            return Err(refused);
        }
        Ok(())
    }

    /// Gives back the places `take` took for what turned out not to count
    /// (the right code, a code not sent). A place that cannot be given back
    /// (Redis gone) stays taken until its window ends, the safe side.
    pub(crate) async fn give_back(&self, windows: &[Window<'_>]) {
        for window in windows {
            let key = self.keys.rate(window.what, window.subject);
            let given: Result<i64, _> = GIVE_BACK.key(&key).invoke_async(&mut self.redis.clone()).await;
            if let Err(err) = given {
                tracing::warn!(error = %err, what = window.what, "a rate limit's place was not given back");
            }
        }
    }

    /// Counts a hit and returns (hits in the window, seconds it has left).
    async fn count(&self, what: &'static str, subject: &str, window: Duration) -> ApiResult<(u64, i64)> {
        let key = self.keys.rate(what, subject);
        let (count, ttl): (u64, i64) = redis::pipe()
            .atomic()
            .incr(&key, 1)
            .cmd("EXPIRE")
            .arg(&key)
            .arg(window.as_secs().max(1))
            .arg("NX")
            .ignore()
            .ttl(&key)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok((count, ttl))
    }
}

static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/rate_take.lua")));
static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/rate_give_back.lua")));

/// A per-user limit kept in this instance's memory (a keyed GCRA from
/// `governor`): no round trip on the hot order path, at the price of
/// counting per instance, so behind two instances a user gets at most
/// twice the limit.
#[derive(Clone)]
pub(crate) struct LocalUserLimiter {
    limiter: std::sync::Arc<governor::DefaultKeyedRateLimiter<u64>>,
    hits: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// Forget idle users every this many hits, so the map stays small.
const RETAIN_EVERY: u64 = 4_096;

impl LocalUserLimiter {
    pub(crate) fn new(limit: Limit) -> Self {
        let max = std::num::NonZeroU32::new(u32::try_from(limit.max).unwrap_or(u32::MAX).max(1)).expect("at least 1");
        let period = (limit.window / max.get()).max(Duration::from_nanos(1));
        let quota = governor::Quota::with_period(period).expect("a positive period").allow_burst(max);
        Self { limiter: std::sync::Arc::new(governor::RateLimiter::dashmap(quota)), hits: Default::default() }
    }

    pub(crate) fn hit(&self, user_id: u64, refusal: &'static str) -> ApiResult<()> {
        use governor::clock::{Clock, DefaultClock};
        if self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % RETAIN_EVERY == RETAIN_EVERY - 1 {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&user_id).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            ApiError::RateLimited(refusal, wait.as_secs().max(1))
        })
    }
}
