//! SMS codes. There is no SMS provider: the code is stored in Redis and
//! logged, which is what the course project does too.

use std::sync::LazyLock;

use rand::Rng;
use redis::{AsyncCommands, Script, aio::ConnectionManager};

use crate::{
    config::limits::{SMS_CODE_MAX_ATTEMPTS, SMS_CODE_TTL, SMS_RESEND_COOLDOWN},
    http::{ApiError, ApiResult},
    keys::Keys,
};

pub const CODE_LEN: usize = 6;

static CONSUME_CODE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/consume_code.lua")));

/// Codes, their resend cooldown and their try counters, in Redis so that
/// every instance sees the same ones. Built once at start-up.
#[derive(Clone)]
pub struct CodeStore {
    redis: ConnectionManager,
    keys: Keys,
}

impl CodeStore {
    pub fn new(redis: ConnectionManager, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// Stores a fresh code and forgets the tries made against the previous
    /// one. The cooldown key is claimed first with SET NX, so two concurrent
    /// requests for one phone cannot both send.
    pub async fn issue(&self, phone: &str) -> ApiResult<()> {
        let mut redis = self.redis.clone();
        let claimed: bool = redis::cmd("SET")
            .arg(self.keys.login_code_cooldown(phone))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(SMS_RESEND_COOLDOWN.as_secs())
            .query_async::<Option<String>>(&mut redis)
            .await?
            .is_some();
        if !claimed {
            return Err(ApiError::TooManyRequests("a code was sent less than 60 s ago"));
        }
        // ThreadRng is a CSPRNG (ChaCha, seeded from the OS).
        let code = format!("{:06}", rand::rng().random_range(0..1_000_000u32));
        redis::pipe()
            .atomic()
            .set_ex(self.keys.login_code(phone), &code, SMS_CODE_TTL.as_secs())
            .ignore()
            .del(self.keys.login_code_attempts(phone))
            .ignore()
            .exec_async(&mut redis)
            .await?;
        tracing::info!(phone, code, "sms code issued (no SMS provider: read it here or from Redis)");
        Ok(())
    }

    /// Accepts the code once. Every try is counted before the comparison, so
    /// at most `SMS_CODE_MAX_ATTEMPTS` comparisons are ever made against one
    /// code, even when the tries arrive concurrently; past that the code is
    /// dropped.
    pub async fn consume(&self, phone: &str, code: &str) -> ApiResult<()> {
        let mut redis = self.redis.clone();
        let attempts_key = self.keys.login_code_attempts(phone);
        let code_key = self.keys.login_code(phone);
        let (attempts,): (i64,) = redis::pipe()
            .incr(&attempts_key, 1)
            .expire(&attempts_key, SMS_CODE_TTL.as_secs() as i64)
            .ignore()
            .query_async(&mut redis)
            .await?;
        if attempts > SMS_CODE_MAX_ATTEMPTS {
            redis.del::<_, ()>(&code_key).await?;
            return Err(ApiError::Unauthorized("too many wrong codes; request a new one"));
        }
        let accepted: i64 = CONSUME_CODE.key(&code_key).arg(code).invoke_async(&mut redis).await?;
        if accepted == 1 {
            redis.del::<_, ()>(&attempts_key).await?;
            Ok(())
        } else {
            if attempts == SMS_CODE_MAX_ATTEMPTS {
                redis.del::<_, ()>(&code_key).await?;
            }
            Err(ApiError::Unauthorized("wrong or expired code"))
        }
    }
}
