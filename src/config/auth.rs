//! Login's settings: the token secret and whether codes reach the log.

use clap::Args;

use super::redact::redacted;

/// Shorter is no secret.
pub const MIN_JWT_SECRET_LEN: usize = 16;
/// `.env.example`'s value: `cp .env.example .env` must not serve.
const PLACEHOLDER_JWT_SECRET: &str = "replace-with-at-least-32-random-characters";

#[derive(Clone, Args)]
pub struct AuthSettings {
    /// The HS256 secret of the tokens, at least 16 bytes, shared by every
    /// instance. No built-in default: a service that silently signs with a
    /// well-known key is worse than one that refuses to start, and
    /// `.env.example`'s placeholder is refused too.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: String,

    /// Development only: log each SMS code at INFO (there is no SMS
    /// provider). Off, a code never reaches a log, since whoever reads the
    /// logs could log in as anyone; phones are logged masked
    /// (`138****1234`).
    #[arg(long, env = "LOG_SMS_CODES", default_value_t = false)]
    pub log_sms_codes: bool,
}

impl AuthSettings {
    /// A secret too short to be one is refused.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.jwt_secret.len() < MIN_JWT_SECRET_LEN {
            anyhow::bail!("JWT_SECRET must be at least {MIN_JWT_SECRET_LEN} bytes long");
        }
        if self.jwt_secret == PLACEHOLDER_JWT_SECRET {
            anyhow::bail!("JWT_SECRET is .env.example's placeholder; put a random secret in .env");
        }
        Ok(())
    }
}

impl std::fmt::Debug for AuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthSettings")
            .field("jwt_secret", &redacted(!self.jwt_secret.is_empty()))
            .field("log_sms_codes", &self.log_sms_codes)
            .finish()
    }
}
