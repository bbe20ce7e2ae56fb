//! What stands in front of the handlers, kept in Redis or in this
//! instance's memory: the limits counted across instances, each user's
//! orders per instance, and `Idempotency-Key`. One field of the app's state;
//! each is still taken on its own (`State<RateLimiter>`, ...).

use super::{
    idempotency::Idempotency,
    ratelimit::{LocalUserLimiter, RateLimiter},
};

#[derive(Clone)]
pub(crate) struct Guards {
    /// Limits kept in Redis, across instances.
    pub(crate) limits: RateLimiter,
    /// Orders per user, kept in this instance's memory.
    pub(crate) order_limit: LocalUserLimiter,
    /// `Idempotency-Key` claims and answers, in Redis.
    pub(crate) idempotency: Idempotency,
}
