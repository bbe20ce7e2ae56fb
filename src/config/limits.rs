//! Abuse limits an operator tunes. Each is at least 1 (clap refuses 0).

use clap::Args;

const DEFAULT_SMS_CODES_PER_PHONE_DAY: u64 = 10;
const DEFAULT_LOGIN_FAILURES_PER_PHONE_DAY: u64 = 20;
const DEFAULT_SMS_CODES_PER_ADDR_HOUR: u64 = 30;
const DEFAULT_LOGINS_PER_ADDR_HOUR: u64 = 60;
const DEFAULT_ORDERS_PER_USER_10S: u64 = 20;

fn at_least_one() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..)
}

#[derive(Clone, Debug, Args)]
pub struct LimitSettings {
    /// SMS codes sent to one phone per day from one client address, across
    /// instances (429 with `Retry-After` beyond); from every address
    /// together, 3 times as many. Counted per address, so that a stranger's
    /// requests do not stop the phone's owner from getting a code.
    #[arg(long, env = "SMS_CODES_PER_PHONE_DAY", default_value_t = DEFAULT_SMS_CODES_PER_PHONE_DAY, value_parser = at_least_one())]
    pub sms_codes_per_phone_day: u64,

    /// Wrong codes tried for one phone per day from one client address;
    /// past it, that address's logins of that phone are refused until the
    /// day's window ends; from every address together, 3 times as many. The
    /// owner, elsewhere, can still log in.
    #[arg(long, env = "LOGIN_FAILURES_PER_PHONE_DAY", default_value_t = DEFAULT_LOGIN_FAILURES_PER_PHONE_DAY, value_parser = at_least_one())]
    pub login_failures_per_phone_day: u64,

    /// Code requests from one client address per hour (the address: nginx's
    /// `X-Real-IP`, else the peer).
    #[arg(long, env = "SMS_CODES_PER_ADDR_HOUR", default_value_t = DEFAULT_SMS_CODES_PER_ADDR_HOUR, value_parser = at_least_one())]
    pub sms_codes_per_addr_hour: u64,

    /// Login attempts from one client address per hour.
    #[arg(long, env = "LOGINS_PER_ADDR_HOUR", default_value_t = DEFAULT_LOGINS_PER_ADDR_HOUR, value_parser = at_least_one())]
    pub logins_per_addr_hour: u64,

    /// Order requests of one user per 10 s, counted in each instance's
    /// memory (the order path pays no round trip for it).
    #[arg(long, env = "ORDERS_PER_USER_10S", default_value_t = DEFAULT_ORDERS_PER_USER_10S, value_parser = at_least_one())]
    pub orders_per_user_10s: u64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            sms_codes_per_phone_day: DEFAULT_SMS_CODES_PER_PHONE_DAY,
            login_failures_per_phone_day: DEFAULT_LOGIN_FAILURES_PER_PHONE_DAY,
            sms_codes_per_addr_hour: DEFAULT_SMS_CODES_PER_ADDR_HOUR,
            logins_per_addr_hour: DEFAULT_LOGINS_PER_ADDR_HOUR,
            orders_per_user_10s: DEFAULT_ORDERS_PER_USER_10S,
        }
    }
}

impl LimitSettings {
    /// What clap checks for flags and the environment, checked again for a
    /// value built in code (the tests, the lab).
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        let limits = [
            self.sms_codes_per_phone_day,
            self.login_failures_per_phone_day,
            self.sms_codes_per_addr_hour,
            self.logins_per_addr_hour,
            self.orders_per_user_10s,
        ];
        if limits.contains(&0) {
            anyhow::bail!("rate limits must be at least 1");
        }
        Ok(())
    }
}
