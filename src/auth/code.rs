//! SMS codes. There is no SMS provider: the code is stored in Redis and
//! logged, which is what the course project does too.

use std::sync::LazyLock;

use hmdp_redis::Redis;
use rand::Rng;
use redis::{AsyncCommands, Script};

use crate::{
    errors::{Coded, ErrorCode, Failure, fails_like_a_dependency},
    keys::Keys,
};

pub(super) const CODE_LEN: usize = 6;
const SMS_CODE_TTL: std::time::Duration = std::time::Duration::from_secs(120);
/// One code per phone per minute, so one phone cannot be flooded.
const SMS_RESEND_COOLDOWN: std::time::Duration = std::time::Duration::from_secs(60);
/// Wrong tries one code survives.
const SMS_CODE_MAX_ATTEMPTS: i64 = 5;

static CONSUME_CODE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/consume_code.lua")));

/// Why a code was not sent or not accepted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodeError {
    #[error("a code was sent less than 60 s ago")]
    TooSoon,
    #[error("too many wrong codes; request a new one")]
    TooManyTries,
    #[error("wrong or expired code")]
    Wrong,
    #[error(transparent)]
    Failed(#[from] Failure),
}

fails_like_a_dependency!(CodeError);

impl Coded for CodeError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::TooSoon => ErrorCode::TooManyRequests,
            Self::TooManyTries | Self::Wrong => ErrorCode::Unauthorized,
            Self::Failed(failure) => failure.code(),
        }
    }
}

impl CodeError {
    /// A wrong guess, which counts against the phone's daily failures.
    pub(crate) fn is_wrong_code(&self) -> bool {
        matches!(self, Self::TooManyTries | Self::Wrong)
    }
}

/// Codes, their resend cooldown and their try counters, in Redis so that
/// every instance sees the same ones. Built once at start-up.
#[derive(Clone)]
pub(crate) struct CodeStore {
    redis: Redis,
    keys: Keys,
    /// Development only (`LOG_SMS_CODES`).
    log_codes: bool,
}

impl CodeStore {
    pub(crate) fn new(redis: Redis, keys: Keys, log_codes: bool) -> Self {
        Self { redis, keys, log_codes }
    }

    /// Stores a fresh code and forgets the tries made against the previous
    /// one. The cooldown key is claimed first with SET NX, so two concurrent
    /// requests for one phone cannot both send.
    pub(crate) async fn issue(&self, phone: &str) -> Result<(), CodeError> {
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
            return Err(CodeError::TooSoon);
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
        let phone_masked = mask_phone(phone);
        if self.log_codes {
            tracing::info!(phone = %phone_masked, code, "sms code issued (LOG_SMS_CODES is on)");
        } else {
            tracing::info!(phone = %phone_masked, "sms code issued (no SMS provider: the code is in Redis)");
        }
        Ok(())
    }

    /// Accepts the code once. Every try is counted before the comparison, so
    /// at most `SMS_CODE_MAX_ATTEMPTS` comparisons are ever made against one
    /// code, even when the tries arrive concurrently; past that the code is
    /// dropped.
    pub(crate) async fn consume(&self, phone: &str, code: &str) -> Result<(), CodeError> {
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
            return Err(CodeError::TooManyTries);
        }
        let accepted: i64 = CONSUME_CODE.key(&code_key).arg(code).invoke_async(&mut redis).await?;
        if accepted == 1 {
            redis.del::<_, ()>(&attempts_key).await?;
            Ok(())
        } else {
            if attempts == SMS_CODE_MAX_ATTEMPTS {
                redis.del::<_, ()>(&code_key).await?;
            }
            Err(CodeError::Wrong)
        }
    }
}

/// `138****0000`: enough to tell phones apart in a log, not to log in as one.
pub(super) fn mask_phone(phone: &str) -> String {
    match (phone.get(..3), phone.get(phone.len().saturating_sub(4)..)) {
        (Some(head), Some(tail)) if phone.len() > 7 => format!("{head}****{tail}"),
        _ => "****".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::mask_phone;

    #[test]
    fn a_masked_phone_keeps_its_ends_only() {
        assert_eq!(mask_phone("13800001234"), "138****1234");
        assert_eq!(mask_phone("123"), "****");
    }
}
