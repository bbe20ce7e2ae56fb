//! The auth sub-state: what login, logout and the refresh layer need,
//! built once at start-up and taken by handlers as `State<Auth>`.

use std::time::Duration;

use super::{code::CodeStore, session::SessionStore, token::TokenKeys};
use crate::{config::Config, http::ratelimit::Limit};

/// The per-phone limits hold per (phone, client address); every address
/// together gets this many times the limit before the phone itself is
/// refused, a ceiling against attackers with many addresses.
const PHONE_CEILING_FACTOR: u64 = 3;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// What login and sessions need.
#[derive(Clone)]
pub struct Auth {
    pub tokens: TokenKeys,
    pub sessions: SessionStore,
    pub(crate) codes: CodeStore,
    pub(crate) limits: LoginLimits,
}

/// The abuse limits of code requests and logins.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoginLimits {
    pub(crate) codes_per_addr: Limit,
    pub(crate) codes_per_phone: Limit,
    pub(crate) logins_per_addr: Limit,
    /// Per (phone, address); the phone's ceiling over every address.
    pub(crate) codes_per_phone_ceiling: Limit,
    pub(crate) failures_per_phone: Limit,
    pub(crate) failures_per_phone_ceiling: Limit,
}

impl LoginLimits {
    pub(crate) fn from_config(config: &Config) -> Self {
        Self {
            codes_per_addr: Limit::per(config.limits.sms_codes_per_addr_hour, HOUR),
            codes_per_phone: Limit::per(config.limits.sms_codes_per_phone_day, DAY),
            logins_per_addr: Limit::per(config.limits.logins_per_addr_hour, HOUR),
            failures_per_phone: Limit::per(config.limits.login_failures_per_phone_day, DAY),
            codes_per_phone_ceiling: Limit::per(
                config.limits.sms_codes_per_phone_day.saturating_mul(PHONE_CEILING_FACTOR),
                DAY,
            ),
            failures_per_phone_ceiling: Limit::per(
                config.limits.login_failures_per_phone_day.saturating_mul(PHONE_CEILING_FACTOR),
                DAY,
            ),
        }
    }
}
