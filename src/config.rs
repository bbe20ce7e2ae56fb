//! Settings come from the environment (the contract's names) or flags of the
//! same name, so the same binary runs under systemd, compose and the tests.
//!
//! They are grouped by concern, each group a clap `Args` that a binary
//! flattens only if it uses it: `hmdp serve` takes them all, `reconcile`
//! only where the data lives, the load tool the same two groups.
//! Secrets never reach a log: the groups that hold one write their
//! `Debug` by hand.

use clap::{Args, ValueEnum};

/// Everything `hmdp serve` runs on.
#[derive(Clone, Debug, Args)]
pub struct Config {
    #[command(flatten)]
    pub db: DatabaseSettings,
    #[command(flatten)]
    pub redis: RedisSettings,
    #[command(flatten)]
    pub server: ServerSettings,
    #[command(flatten)]
    pub auth: AuthSettings,
    #[command(flatten)]
    pub limits: LimitSettings,
    #[command(flatten)]
    pub seckill: SeckillSettings,
}

/// MariaDB.
#[derive(Clone, Args)]
pub struct DatabaseSettings {
    /// The database in the path is created at start-up when missing.
    #[arg(
        id = "database_url",
        long = "database-url",
        env = "DATABASE_URL",
        default_value = "mysql://root@127.0.0.1:3306/hmdp"
    )]
    pub url: String,

    #[arg(id = "db_max_connections", long = "db-max-connections", env = "DB_MAX_CONNECTIONS", default_value_t = 32)]
    pub max_connections: u32,

    /// A read-only replica for the reads that may lag (the shop's voucher
    /// list, a user's order list). Writes, and the order a buyer polls
    /// right after ordering, keep to the primary.
    #[arg(id = "database_read_url", long = "database-read-url", env = "DATABASE_READ_URL")]
    pub read_url: Option<String>,
}

/// Redis.
#[derive(Clone, Args)]
pub struct RedisSettings {
    #[arg(id = "redis_url", long = "redis-url", env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub url: String,

    /// Comma-separated `host:port` of Redis Cluster nodes; when set, the
    /// cluster is used instead of `REDIS_URL`.
    #[arg(id = "redis_cluster_nodes", long = "redis-cluster-nodes", env = "REDIS_CLUSTER_NODES")]
    pub cluster_nodes: Option<String>,

    /// Prepended to every Redis key and channel. Empty in production (the
    /// contract's key names); tests set it so they can share one Redis.
    #[arg(id = "redis_key_prefix", long = "redis-key-prefix", env = "REDIS_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
}

pub const DEFAULT_BIND_ADDR: &str = "127.0.0.1:8081";

/// The HTTP server and its admin routes.
#[derive(Clone, Args)]
pub struct ServerSettings {
    #[arg(long, env = "BIND_ADDR", default_value = DEFAULT_BIND_ADDR)]
    pub bind_addr: String,

    /// Shown in `X-Instance`; defaults to the bound host:port.
    #[arg(long, env = "INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Admin routes answer 403 to everyone while this is unset.
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,

    /// Peers whose `X-Real-IP` is believed (comma-separated addresses or
    /// CIDR blocks): nginx in front. From anyone else the header is a
    /// client's claim, and per-address limits count the peer instead.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = "127.0.0.0/8,::1/128")]
    pub trusted_proxies: TrustedProxies,
}

/// The peers allowed to say who the client is (`TRUSTED_PROXIES`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    pub fn trusts(&self, peer: std::net::IpAddr) -> bool {
        let peer = match peer {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|net| net.contains(&peer))
    }
}

impl std::str::FromStr for TrustedProxies {
    type Err = String;

    /// `10.0.0.0/8,192.168.1.7,::1`: a bare address is a block of one.
    fn from_str(list: &str) -> Result<Self, Self::Err> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<ipnet::IpNet>()
                    .or_else(|_| item.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| format!("TRUSTED_PROXIES: {item:?} is neither an address nor a CIDR block"))
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// Login: the token secret and the codes.
#[derive(Clone, Args)]
pub struct AuthSettings {
    /// HS256 secret shared by every instance. No built-in default: a service
    /// that silently signs with a well-known key is worse than one that
    /// refuses to start.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: String,

    /// Development only: log each SMS code at INFO (there is no SMS
    /// provider). Off, a code never reaches a log: whoever reads the logs
    /// could log in as anyone.
    #[arg(long, env = "LOG_SMS_CODES", default_value_t = false)]
    pub log_sms_codes: bool,
}

pub const DEFAULT_SMS_CODES_PER_PHONE_DAY: u64 = 10;
pub const DEFAULT_LOGIN_FAILURES_PER_PHONE_DAY: u64 = 20;
pub const DEFAULT_SMS_CODES_PER_ADDR_HOUR: u64 = 30;
pub const DEFAULT_LOGINS_PER_ADDR_HOUR: u64 = 60;
pub const DEFAULT_ORDERS_PER_USER_10S: u64 = 20;

/// Abuse limits.
#[derive(Clone, Debug, Args)]
pub struct LimitSettings {
    /// SMS codes sent to one phone per day from one client address, across
    /// instances; from all addresses together, `PHONE_CEILING_FACTOR` times
    /// as many. Counted per address so that a stranger's requests do not
    /// stop the phone's owner from getting a code.
    #[arg(long, env = "SMS_CODES_PER_PHONE_DAY", default_value_t = DEFAULT_SMS_CODES_PER_PHONE_DAY)]
    pub sms_codes_per_phone_day: u64,

    /// Wrong codes tried for one phone per day from one client address;
    /// past it, that address's logins of that phone are refused until the
    /// day's window ends (from all addresses together, `PHONE_CEILING_FACTOR`
    /// times as many). The owner, elsewhere, can still log in.
    #[arg(long, env = "LOGIN_FAILURES_PER_PHONE_DAY", default_value_t = DEFAULT_LOGIN_FAILURES_PER_PHONE_DAY)]
    pub login_failures_per_phone_day: u64,

    /// Code requests from one client address per hour.
    #[arg(long, env = "SMS_CODES_PER_ADDR_HOUR", default_value_t = DEFAULT_SMS_CODES_PER_ADDR_HOUR)]
    pub sms_codes_per_addr_hour: u64,

    /// Login attempts from one client address per hour.
    #[arg(long, env = "LOGINS_PER_ADDR_HOUR", default_value_t = DEFAULT_LOGINS_PER_ADDR_HOUR)]
    pub logins_per_addr_hour: u64,

    /// Order requests of one user per 10 s, per instance.
    #[arg(long, env = "ORDERS_PER_USER_10S", default_value_t = DEFAULT_ORDERS_PER_USER_10S)]
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

pub const DEFAULT_HOT_ROW_PERMITS: usize = 8;

/// How orders are placed, in both modes.
#[derive(Clone, Debug, Args)]
pub struct SeckillSettings {
    /// `sync`: the order is decided and committed in MariaDB before the
    /// answer. `async`: decided in Redis by one script, answered at once,
    /// persisted in batches by the consumers.
    #[arg(id = "seckill_mode", long = "seckill-mode", env = "SECKILL_MODE", value_enum, default_value_t = SeckillMode::Sync)]
    pub mode: SeckillMode,

    /// How long an order may take before it gives up, answered 503 with
    /// nothing committed. Shorter than nginx's `proxy_read_timeout` (30 s),
    /// so the client hears the truth rather than nginx's 504.
    #[arg(long, env = "REQUEST_DEADLINE_MS", default_value_t = 10_000)]
    pub request_deadline_ms: u64,

    /// An unpaid order not paid within this many seconds of its creation is
    /// cancelled and its unit returned to the stock.
    #[arg(long, env = "ORDER_PAY_TIMEOUT_S", default_value_t = 900)]
    pub order_pay_timeout_s: u64,

    /// Order id sequences reserved per Redis round trip.
    #[arg(long, env = "ORDER_ID_BLOCK", default_value_t = 100)]
    pub order_id_block: u32,

    /// Lease of the per-user order lock, renewed every third of it while
    /// held (Redisson's 30 s). Shorter frees a crashed instance's locks
    /// sooner and costs more renewals.
    #[arg(long, env = "LOCK_WATCHDOG_TTL_MS", default_value_t = 30_000)]
    pub lock_watchdog_ttl_ms: u64,

    /// Synchronous mode: orders of one voucher committed in one transaction
    /// at most (1: one transaction per order, the design card's path).
    #[arg(long, env = "ORDER_BATCH_MAX", default_value_t = 64)]
    pub order_batch_max: usize,

    /// Synchronous mode: how long a group waits for more orders before it
    /// commits. 0: it takes what is ready; while one group commits, the
    /// next gathers by itself.
    #[arg(long, env = "ORDER_BATCH_WAIT_MS", default_value_t = 0)]
    pub order_batch_wait_ms: u64,

    /// Synchronous mode: a voucher's group-commit worker that saw no order
    /// for this long ends (the next order starts another), so ended sales
    /// leave no idle tasks behind.
    #[arg(long, env = "ORDER_BATCH_WORKER_IDLE_MS", default_value_t = 60_000)]
    pub order_batch_worker_idle_ms: u64,

    /// How many order transactions of one instance may wait on one voucher's
    /// stock row at once. InnoDB's throughput on a hot row collapses when
    /// hundreds of transactions queue on its lock; a few at a time keep it
    /// busy without the collapse. Only at `ORDER_BATCH_MAX` = 1: with group
    /// commit, one worker per voucher is all that reaches the row.
    #[arg(long, env = "HOT_ROW_PERMITS", default_value_t = DEFAULT_HOT_ROW_PERMITS)]
    pub hot_row_permits: usize,

    /// Orders of one instance that may wait for one voucher's row (or for
    /// their group) at once; beyond that an order is answered 503 at once.
    #[arg(long, env = "HOT_ROW_QUEUE_MAX", default_value_t = 4_096)]
    pub hot_row_queue_max: usize,

    /// Asynchronous mode: stream entries read, and orders persisted in one
    /// transaction, at most.
    #[arg(long, env = "ASYNC_BATCH_MAX", default_value_t = 500)]
    pub async_batch_max: usize,

    /// Asynchronous mode: an entry unacknowledged this long is taken over by
    /// another consumer (its own died or is stuck) and retried.
    #[arg(long, env = "ASYNC_CLAIM_IDLE_MS", default_value_t = 5_000)]
    pub async_claim_idle_ms: u64,

    /// Asynchronous mode: an order the database refused this many times is
    /// dead-lettered, and its stock and buyer slot are given back.
    #[arg(long, env = "ASYNC_MAX_DELIVERIES", default_value_t = 3)]
    pub async_max_deliveries: u64,

    /// Asynchronous mode: this long after a sale ended, once drained, it is
    /// retired: out of `seckill:active` (no consumer reads it any more) and
    /// its keys given a TTL (working keys 1 h, failed orders and dead
    /// letters 7 days), so Redis does not grow with every sale ever sold.
    #[arg(long, env = "ASYNC_RETIRE_AFTER_MS", default_value_t = 60_000)]
    pub async_retire_after_ms: u64,

    /// Asynchronous mode: replicas that must acknowledge an order (Redis
    /// `WAIT`) before it is answered 200, so that a master's death cannot
    /// take it. Unset: 1 when every Redis master has a replica at start-up,
    /// else 0 (off).
    #[arg(long, env = "ORDER_REPLICA_ACKS")]
    pub order_replica_acks: Option<u32>,

    /// How long an order waits for those acknowledgements; past it the
    /// order is answered 202, accepted but not yet replicated.
    #[arg(long, env = "ORDER_REPLICA_WAIT_MS", default_value_t = 500)]
    pub order_replica_wait_ms: u64,
}

impl DatabaseSettings {
    /// The replica's URL, when one is set: an empty `DATABASE_READ_URL`
    /// (what a script that passes it through sets) means none.
    pub fn replica_url(&self) -> Option<&str> {
        self.read_url.as_deref().map(str::trim).filter(|url| !url.is_empty())
    }
}

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &without_password(&self.url))
            .field("max_connections", &self.max_connections)
            .field("read_url", &self.read_url.as_deref().map(without_password))
            .finish()
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &without_password(&self.url))
            .field("cluster_nodes", &self.cluster_nodes)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

fn redacted(set: bool) -> &'static str {
    if set { "<redacted>" } else { "<unset>" }
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("bind_addr", &self.bind_addr)
            .field("instance_id", &self.instance_id)
            .field("admin_key", &redacted(self.admin_key.is_some()))
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
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

/// A URL with its password replaced, for logs.
fn without_password(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() + 3 => {
            let credentials = &rest[..at - scheme.len() - 3];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:<redacted>@{}", &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeckillMode {
    Sync,
    Async,
}

/// Rules that are not deployment settings but are named once here.
pub mod limits {
    use std::time::Duration;

    pub const SMS_CODE_TTL: Duration = Duration::from_secs(120);
    pub const SMS_RESEND_COOLDOWN: Duration = Duration::from_secs(60);
    pub const SMS_CODE_MAX_ATTEMPTS: i64 = 5;
    pub const SESSION_TTL: Duration = Duration::from_secs(30 * 60);
    /// The JWT outlives the session on purpose: the session in Redis is the
    /// authority, the exp only bounds how long a leaked token is worth trying.
    pub const TOKEN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
    pub const MIN_JWT_SECRET_LEN: usize = 16;
    /// The per-phone limits hold per (phone, client address); every address
    /// together gets this many times the limit before the phone itself is
    /// refused, a ceiling against attackers with many addresses.
    pub const PHONE_CEILING_FACTOR: u64 = 3;
    /// An admin key is a password that a script guesses at leisure: long.
    pub const MIN_ADMIN_KEY_LEN: usize = 24;
    /// Wrong admin keys one client address may send per window; past it,
    /// that address's admin requests answer 429 until the window ends, the
    /// right key included.
    pub const ADMIN_KEY_FAILURES_PER_ADDR: u64 = 10;
    pub const ADMIN_KEY_FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
    /// `.env.example`'s values: `cp .env.example .env` must not serve.
    pub const PLACEHOLDER_JWT_SECRET: &str = "replace-with-at-least-32-random-characters";
    pub const PLACEHOLDER_ADMIN_KEY: &str = "replace-with-a-random-admin-key";
    /// Order ids one UTC day can hold (the sequence's 32 bits).
    pub const IDS_PER_DAY: u64 = 1 << 32;
    /// Instances the id generator's bound is made for: each may drop up to
    /// a block a second (what is left of it when the second turns).
    pub const MAX_INSTANCES: u64 = 16;
}

impl Config {
    /// Checks what clap cannot, group by group.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.server.validate()?;
        self.auth.validate()?;
        self.limits.validate()?;
        self.seckill.validate()
    }

    pub fn instance_id(&self) -> &str {
        self.server.instance_id.as_deref().unwrap_or("unknown")
    }
}

impl ServerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        match self.admin_key.as_deref() {
            Some("") => anyhow::bail!("ADMIN_KEY is set but empty; unset it to close the admin routes"),
            Some(limits::PLACEHOLDER_ADMIN_KEY) => {
                anyhow::bail!("ADMIN_KEY is .env.example's placeholder; put a random key in .env")
            }
            Some(key) if key.len() < limits::MIN_ADMIN_KEY_LEN => {
                anyhow::bail!("ADMIN_KEY must be at least {} bytes long", limits::MIN_ADMIN_KEY_LEN)
            }
            _ => {}
        }
        Ok(())
    }
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind_addr: DEFAULT_BIND_ADDR.into(),
            instance_id: None,
            admin_key: None,
            trusted_proxies: "127.0.0.0/8,::1/128".parse().expect("the default parses"),
        }
    }
}

impl AuthSettings {
    /// A secret too short to be one is refused.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.jwt_secret.len() < limits::MIN_JWT_SECRET_LEN {
            anyhow::bail!("JWT_SECRET must be at least {} bytes long", limits::MIN_JWT_SECRET_LEN);
        }
        if self.jwt_secret == limits::PLACEHOLDER_JWT_SECRET {
            anyhow::bail!("JWT_SECRET is .env.example's placeholder; put a random secret in .env");
        }
        Ok(())
    }
}

impl LimitSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
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

impl SeckillSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.lock_watchdog_ttl_ms < 100 {
            anyhow::bail!("LOCK_WATCHDOG_TTL_MS must be at least 100");
        }
        if self.hot_row_permits == 0 {
            anyhow::bail!("HOT_ROW_PERMITS must be at least 1");
        }
        if self.order_batch_max > 1 && self.hot_row_permits != DEFAULT_HOT_ROW_PERMITS {
            tracing::warn!(
                hot_row_permits = self.hot_row_permits,
                order_batch_max = self.order_batch_max,
                "HOT_ROW_PERMITS has no effect with group commit (ORDER_BATCH_MAX > 1): one worker per voucher reaches the row"
            );
        }
        if self.hot_row_queue_max == 0 {
            anyhow::bail!("HOT_ROW_QUEUE_MAX must be at least 1");
        }
        if !(100..=25_000).contains(&self.request_deadline_ms) {
            anyhow::bail!("REQUEST_DEADLINE_MS must be between 100 and 25000 (nginx waits 30 s)");
        }
        if self.order_batch_max == 0 || self.order_batch_max > 5_000 {
            anyhow::bail!("ORDER_BATCH_MAX must be between 1 and 5000");
        }
        if self.order_batch_wait_ms > 1_000 {
            anyhow::bail!("ORDER_BATCH_WAIT_MS must be at most 1000");
        }
        if self.order_batch_worker_idle_ms < 100 {
            anyhow::bail!("ORDER_BATCH_WORKER_IDLE_MS must be at least 100");
        }
        // Each instance may drop what is left of a block every second of
        // the day; with the most instances, that waste must leave at least
        // half of a day's ids to real orders.
        let max_block = limits::IDS_PER_DAY / 2 / (86_400 * limits::MAX_INSTANCES);
        if self.order_id_block == 0 || u64::from(self.order_id_block) > max_block {
            anyhow::bail!(
                "ORDER_ID_BLOCK must be between 1 and {max_block}: {} instances, each dropping up to a block a second, must leave half of a day's {} ids to orders",
                limits::MAX_INSTANCES,
                limits::IDS_PER_DAY
            );
        }
        if self.async_batch_max == 0 || self.async_batch_max > 5_000 {
            anyhow::bail!("ASYNC_BATCH_MAX must be between 1 and 5000");
        }
        if self.async_claim_idle_ms < 100 {
            anyhow::bail!("ASYNC_CLAIM_IDLE_MS must be at least 100");
        }
        if self.async_max_deliveries == 0 {
            anyhow::bail!("ASYNC_MAX_DELIVERIES must be at least 1");
        }
        if self.order_replica_acks.is_some_and(|n| n > 16) {
            anyhow::bail!("ORDER_REPLICA_ACKS must be at most 16");
        }
        if !(1..=10_000).contains(&self.order_replica_wait_ms) {
            anyhow::bail!("ORDER_REPLICA_WAIT_MS must be between 1 and 10000");
        }
        if !(1..=7 * 24 * 3_600).contains(&self.order_pay_timeout_s) {
            anyhow::bail!("ORDER_PAY_TIMEOUT_S must be between 1 and 604800 (a week)");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    #[test]
    fn debug_output_names_no_secret() {
        let Cli { config } = Cli::try_parse_from([
            "hmdp",
            "--database-url=mysql://hmdp:db-pass-123@127.0.0.1:3306/hmdp",
            "--redis-url=redis://:redis-pass-456@127.0.0.1:6379",
            "--jwt-secret=jwt-secret-0123456789",
            "--admin-key=admin-key-789",
            "--database-read-url=mysql://hmdp:replica-pass-321@127.0.0.1:3307/hmdp",
        ])
        .expect("the flags parse");
        let shown = format!("{config:?}");
        for secret in ["db-pass-123", "redis-pass-456", "jwt-secret-0123456789", "admin-key-789", "replica-pass-321"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("mysql://hmdp:<redacted>@127.0.0.1:3306/hmdp"), "{shown}");
    }

    fn parsed(flags: &[&str]) -> Config {
        let mut argv = vec!["hmdp", "--jwt-secret=jwt-secret-0123456789"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("the flags parse").config
    }

    #[test]
    fn the_placeholders_of_env_example_and_a_short_admin_key_are_refused() {
        // `cp .env.example .env; docker compose up` served with both.
        let example = include_str!("../.env.example");
        let value = |name: &str| {
            example.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('=')).expect("in .env.example").to_owned()
        };
        let admin = parsed(&[&format!("--admin-key={}", value("ADMIN_KEY"))]);
        assert!(admin.validate().unwrap_err().to_string().contains("placeholder"));
        let mut jwt = parsed(&["--admin-key=an-admin-key-of-24-bytes-or-more"]);
        jwt.auth.jwt_secret = value("JWT_SECRET");
        assert!(jwt.validate().unwrap_err().to_string().contains("placeholder"));

        let short = parsed(&["--admin-key=twenty-three-bytes-long"]);
        assert!(short.validate().unwrap_err().to_string().contains("at least 24 bytes"));
        assert!(parsed(&["--admin-key=twenty-four-bytes-long!!"]).validate().is_ok());
        assert!(parsed(&[]).validate().is_ok(), "no admin key: the admin routes stay closed");
    }

    #[test]
    fn an_id_block_a_day_cannot_hold_is_refused() {
        // 86,400 blocks of 100,000 a day from one instance alone is more
        // than the 2^32 ids a day holds: orders answered 500 from mid-day.
        assert!(parsed(&["--order-id-block=100000"]).validate().is_err());
        let largest = limits::IDS_PER_DAY / 2 / (86_400 * limits::MAX_INSTANCES);
        assert!(parsed(&[&format!("--order-id-block={largest}")]).validate().is_ok());
        assert!(parsed(&[&format!("--order-id-block={}", largest + 1)]).validate().is_err());
        assert!(largest * 86_400 * limits::MAX_INSTANCES <= limits::IDS_PER_DAY / 2);
    }

    #[test]
    fn an_empty_read_url_means_no_replica() {
        // scripts/stack passes DATABASE_READ_URL through, empty without REPLICA=1.
        let parse = |read_url: &str| {
            let Cli { config } = Cli::try_parse_from([
                "hmdp",
                "--jwt-secret=jwt-secret-0123456789",
                &format!("--database-read-url={read_url}"),
            ])
            .expect("the flags parse");
            config.db.replica_url().map(str::to_owned)
        };
        assert_eq!(parse(""), None);
        assert_eq!(parse("  "), None);
        assert_eq!(parse("mysql://r@127.0.0.1:3307/hmdp").as_deref(), Some("mysql://r@127.0.0.1:3307/hmdp"));
    }
}
