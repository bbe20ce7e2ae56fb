//! Settings come from the environment (the contract's names) or flags of the
//! same name, so the same binary runs under systemd, compose and the tests.
//!
//! One file per group, each group a clap `Args` with its defaults (written
//! once, as constants, for clap and for `Default` alike) and its validation
//! beside its fields. A binary flattens only the groups it uses: `hmdp
//! serve` takes them all, `reconcile` and the load tool only where the data
//! lives, the lab the order paths'. Secrets never reach a log: the groups
//! that hold one write their `Debug` by hand.

mod asynchronous;
mod auth;
mod events;
mod hotkeys;
mod limits;
mod redact;
mod salepath;
mod seckill;
mod server;
mod store;
mod table;

use clap::Args;

pub use asynchronous::AsyncSettings;
pub use auth::{AuthSettings, MIN_JWT_SECRET_LEN};
pub(crate) use events::nats_servers_in;
pub use events::{EventSettings, OrderEvents};
pub use hotkeys::HotKeySettings;
pub use limits::LimitSettings;
pub use redact::without_password;
pub use salepath::SalePathSettings;
pub use seckill::{IDS_PER_DAY, MAX_INSTANCES, OrderSettings, SeckillMode, SeckillSettings, SyncSettings};
pub use server::{MIN_ADMIN_KEY_LEN, ServerSettings, TrustedProxies};
pub use store::{DatabaseSettings, DatabaseUrl, RedisSettings, ReplicaSettings};
pub use table::DEFAULT_LOG_FILTER;

/// Everything `hmdp serve` runs on.
#[derive(Clone, Debug, Args)]
pub struct Config {
    #[command(flatten)]
    pub db: DatabaseSettings,
    #[command(flatten)]
    pub replica: ReplicaSettings,
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
    #[command(flatten)]
    pub orders: OrderSettings,
    #[command(flatten)]
    pub sale_path: SalePathSettings,
    #[command(flatten)]
    pub events: EventSettings,
    #[command(flatten)]
    pub hot_keys: HotKeySettings,
}

/// Everything `hmdp serve` reads, as clap sees it.
#[derive(clap::Parser)]
struct Serve {
    #[command(flatten)]
    config: Config,
}

/// Every setting `hmdp serve` reads, as the Markdown table of docs/api.md
/// (`table.rs`): its variable, its default and its doc comment.
pub fn settings_table() -> String {
    table::render(&<Serve as clap::CommandFactory>::command())
}

impl Config {
    /// Checks what clap cannot, group by group.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        self.server.validate()?;
        self.auth.validate()?;
        self.limits.validate()?;
        self.seckill.validate()?;
        self.orders.validate()?;
        self.sale_path.validate()?;
        self.events.validate()
    }

    pub(crate) fn instance_id(&self) -> &str {
        self.server.instance_id.as_deref().unwrap_or("unknown")
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

    /// What clap answers for a flag nobody gave, with the environment
    /// ignored: the defaults as `hmdp serve` sees them.
    fn parsed_without_environment() -> Config {
        use clap::{CommandFactory, FromArgMatches};
        let command = Cli::command().mut_args(|arg| arg.env(None::<&str>));
        let matches = command.try_get_matches_from(["hmdp", "--jwt-secret=jwt-secret-0123456789"]).unwrap();
        Cli::from_arg_matches(&matches).unwrap().config
    }

    #[test]
    fn each_groups_default_is_what_clap_gives_when_nothing_is_set() {
        let parsed = parsed_without_environment();
        assert_eq!(format!("{:?}", parsed.seckill), format!("{:?}", SeckillSettings::default()));
        assert_eq!(format!("{:?}", parsed.orders), format!("{:?}", OrderSettings::default()));
        assert_eq!(format!("{:?}", parsed.sale_path), format!("{:?}", SalePathSettings::default()));
        assert_eq!(format!("{:?}", parsed.limits), format!("{:?}", LimitSettings::default()));
        assert_eq!(format!("{:?}", parsed.server), format!("{:?}", ServerSettings::default()));
        assert_eq!(format!("{:?}", parsed.db), format!("{:?}", DatabaseSettings::default()));
        assert_eq!(format!("{:?}", parsed.replica), format!("{:?}", ReplicaSettings::default()));
        assert_eq!(format!("{:?}", parsed.redis), format!("{:?}", RedisSettings::default()));
        assert_eq!(format!("{:?}", parsed.events), format!("{:?}", EventSettings::default()));
    }

    #[test]
    fn an_empty_redis_ca_file_means_none() {
        assert_eq!(parsed(&["--redis-ca-file="]).redis.ca_file(), None);
        assert_eq!(parsed(&["--redis-ca-file=/etc/hmdp/ca.pem"]).redis.ca_file(), Some("/etc/hmdp/ca.pem"));
    }

    #[test]
    fn a_limit_of_zero_is_refused_by_clap() {
        let refused = Cli::try_parse_from(["hmdp", "--jwt-secret=jwt-secret-0123456789", "--orders-per-user-10s=0"]);
        assert!(refused.is_err());
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
            "--redis-cluster-nodes=rediss://hmdp:node-pass-654@10.0.0.31:6379,10.0.0.32:6379",
            "--nats-url=nats://hmdp:nats-pass-987@10.0.0.41:4222",
        ])
        .expect("the flags parse");
        let shown = format!("{config:?}");
        for secret in [
            "db-pass-123",
            "redis-pass-456",
            "jwt-secret-0123456789",
            "admin-key-789",
            "replica-pass-321",
            "node-pass-654",
            "nats-pass-987",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("mysql://hmdp:<redacted>@127.0.0.1:3306/hmdp"), "{shown}");
    }

    /// `nats://TOKEN@host` authenticates with the token: what looks like a
    /// user is the secret.
    #[test]
    fn a_nats_urls_token_is_not_shown() {
        let shown = format!("{:?}", parsed(&["--nats-url=nats://nats-token-246@10.0.0.41:4222"]).events);
        assert!(!shown.contains("nats-token-246"), "{shown}");
        assert!(shown.contains("nats://<redacted>@10.0.0.41:4222"), "{shown}");
        let shown = format!("{:?}", parsed(&["--nats-url=tls://relay:p%40ss@10.0.0.41:4222"]).events);
        assert!(shown.contains("tls://relay:<redacted>@10.0.0.41:4222"), "{shown}");
    }

    fn parsed(flags: &[&str]) -> Config {
        let mut argv = vec!["hmdp", "--jwt-secret=jwt-secret-0123456789"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("the flags parse").config
    }

    #[test]
    fn the_placeholders_of_env_example_and_a_short_admin_key_are_refused() {
        // `cp .env.example .env; docker compose up` served with both.
        let example = include_str!("../../.env.example");
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
    fn order_events_without_a_nats_url_that_parses_are_refused() {
        assert!(parsed(&["--order-events=nats", "--nats-url=127.0.0.1:4222"]).validate().is_err());
        assert!(parsed(&["--order-events=nats", "--nats-url= "]).validate().is_err());
        assert!(parsed(&["--order-events=nats", "--nats-url=tls://relay:p%40ss@10.0.0.41:4222"]).validate().is_ok());
        assert!(parsed(&["--order-events=off", "--nats-url=not a url"]).validate().is_ok(), "unused while off");
    }

    #[test]
    fn a_cluster_of_nats_servers_is_each_parsed_and_each_shown_without_its_password() {
        let cluster = "--nats-url=nats://relay:pw-135@10.0.0.41:4222,nats://relay:pw-135@10.0.0.42:4222";
        let config = parsed(&["--order-events=nats", cluster, "--nats-stream-replicas=3"]);
        assert!(config.validate().is_ok());
        let shown = format!("{:?}", config.events);
        assert!(!shown.contains("pw-135"), "{shown}");
        assert!(shown.contains("nats://relay:<redacted>@10.0.0.42:4222"), "{shown}");
        let one_bad = "--nats-url=nats://10.0.0.41:4222,10.0.0.42:4222";
        assert!(parsed(&["--order-events=nats", one_bad]).validate().is_err(), "each server a URL");
        for replicas in ["0", "6"] {
            let flag = format!("--nats-stream-replicas={replicas}");
            assert!(parsed(&["--order-events=nats", &flag]).validate().is_err(), "{replicas} replicas");
        }
    }

    #[test]
    fn an_id_block_a_day_cannot_hold_is_refused() {
        // 86,400 blocks of 100,000 a day from one instance alone is more
        // than the 2^32 ids a day holds: orders answered 500 from mid-day.
        assert!(parsed(&["--order-id-block=100000"]).validate().is_err());
        let largest = IDS_PER_DAY / 2 / (86_400 * MAX_INSTANCES);
        assert!(parsed(&[&format!("--order-id-block={largest}")]).validate().is_ok());
        assert!(parsed(&[&format!("--order-id-block={}", largest + 1)]).validate().is_err());
        assert!(largest * 86_400 * MAX_INSTANCES <= IDS_PER_DAY / 2);
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
            config.replica.url().map(str::to_owned)
        };
        assert_eq!(parse(""), None);
        assert_eq!(parse("  "), None);
        assert_eq!(parse("mysql://r@127.0.0.1:3307/hmdp").as_deref(), Some("mysql://r@127.0.0.1:3307/hmdp"));
    }
}

/// The settings table against docs/api.md.
#[cfg(test)]
mod table_tests {
    use clap::CommandFactory;

    use super::{Serve, settings_table, table::meaning};

    const PAGE: &str = "docs/api.md";
    const OPENS: &str =
        "<!-- settings: generated from src/config by `hmdp settings`; edit the doc comments there -->\n";
    const CLOSES: &str = "<!-- end of settings -->";

    /// A setting's meaning is its doc comment: one without is a blank cell.
    #[test]
    fn every_setting_says_what_it_means() {
        for arg in Serve::command().get_arguments() {
            if let Some(variable) = arg.get_env() {
                assert!(meaning(arg).len() > 10, "{variable:?} has no doc comment to show");
            }
        }
        let table = settings_table();
        assert!(table.contains("| `RUST_LOG` | `info` |"), "{table}");
        assert!(table.contains("| `JWT_SECRET` | (required) |"), "{table}");
        assert!(table.contains("| `MAX_CONNECTIONS` | `16000` |"), "{table}");
        assert!(table.lines().count() > 50, "{table}");
    }

    /// docs/api.md shows the settings as the code defines them. Run with
    /// `UPDATE_DOCS=1` to write the table into the page.
    #[test]
    fn the_settings_table_of_the_docs_is_the_one_the_code_renders() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        let page = std::fs::read_to_string(&path).unwrap();
        let start = page.find(OPENS).expect("the settings block's opening marker") + OPENS.len();
        let end = start + page[start..].find(CLOSES).expect("the settings block's closing marker");
        let rendered = settings_table();
        if page[start..end] == rendered {
            return;
        }
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, format!("{}{rendered}{}", &page[..start], &page[end..])).unwrap();
            return;
        }
        panic!(
            "{PAGE}'s settings differ from the code's; run `UPDATE_DOCS=1 cargo test --lib settings_table` \
             (or put `hmdp settings` there). The code renders:\n{rendered}"
        );
    }
}
