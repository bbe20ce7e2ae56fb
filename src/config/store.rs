//! Where the data lives: MariaDB (and its replica) and Redis. Every binary
//! that touches the data takes these two groups.

use clap::Args;

use super::redact::without_password;

const DEFAULT_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/hmdp";
const DEFAULT_DB_MAX_CONNECTIONS: u32 = 32;
/// An order's transaction runs its statements back to back in
/// milliseconds: one idle on the server for seconds has lost its instance.
const DEFAULT_DB_IDLE_TRANSACTION_TIMEOUT_S: u32 = 2;
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Where MariaDB is, and all a tool that opens a small pool of its own
/// needs (`reconcile`, the load tool's audit); the pool of a long-running
/// process adds its size (`DatabaseSettings`). Shown without its password.
#[derive(Clone, Args)]
pub struct DatabaseUrl {
    /// MariaDB. The database named in the path is created at start-up when
    /// missing, and the embedded migrations run there. Over a network add
    /// `?ssl-mode=VERIFY_IDENTITY&ssl-ca=/path/ca.pem`: the link is then TLS
    /// and a server whose certificate does not name the host connected to
    /// is refused at start-up (the default, `PREFERRED`, encrypts when the
    /// server offers it and verifies nothing). A URL that names a CA
    /// (`ssl-ca`) must carry `ssl-mode=VERIFY_IDENTITY` or `VERIFY_CA`, or
    /// start-up refuses it: under any other mode the CA is never read.
    #[arg(id = "database_url", long = "database-url", env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    url: String,
}

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }

    pub fn as_str(&self) -> &str {
        &self.url
    }
}

impl Default for DatabaseUrl {
    fn default() -> Self {
        Self::new(DEFAULT_DATABASE_URL)
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DatabaseUrl").field(&without_password(&self.url)).finish()
    }
}

/// MariaDB, and the pool a long-running process keeps (`hmdp serve`,
/// `seed-users`, the lab).
#[derive(Clone, Debug, Args)]
pub struct DatabaseSettings {
    #[command(flatten)]
    pub url: DatabaseUrl,

    /// Connections of the instance's MariaDB pool (and of the replica's,
    /// with `DATABASE_READ_URL`), 1 to 10,000.
    #[arg(
        id = "db_max_connections",
        long = "db-max-connections",
        env = "DB_MAX_CONNECTIONS",
        default_value_t = DEFAULT_DB_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=10_000)
    )]
    pub max_connections: u32,

    /// Seconds a transaction of the instance's may sit idle on the server
    /// before MariaDB ends it and gives back the rows it held
    /// (`idle_transaction_timeout` on each of the pool's sessions), 1 to
    /// 3,600. An instance cut off from MariaDB mid-transaction holds
    /// the voucher's stock row, which every other order of the sale waits
    /// for, until the server ends that transaction: without this, until
    /// the link heals or `wait_timeout` (8 hours by default) passes.
    #[arg(
        id = "db_idle_transaction_timeout_s",
        long = "db-idle-transaction-timeout-s",
        env = "DB_IDLE_TRANSACTION_TIMEOUT_S",
        default_value_t = DEFAULT_DB_IDLE_TRANSACTION_TIMEOUT_S,
        value_parser = clap::value_parser!(u32).range(1..=3_600)
    )]
    pub idle_transaction_timeout_s: u32,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: DatabaseUrl::default(),
            max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            idle_transaction_timeout_s: DEFAULT_DB_IDLE_TRANSACTION_TIMEOUT_S,
        }
    }
}

/// A read-only replica, which only the service reads from.
#[derive(Clone, Default, Args)]
pub struct ReplicaSettings {
    /// A read-only MariaDB replica for the reads that may lag: `GET
    /// /voucher/list/{shopId}` and `GET /voucher-order/mine`. `GET
    /// /voucher-order/{id}` reads it first and the primary when the replica
    /// has no such row yet, so a buyer never gets 404 for an order they were
    /// told about. Everything that writes reads the primary. Start-up
    /// refuses a server that is not `read_only` (a second primary, or the
    /// primary again), and one that does not answer within 10 s; a replica
    /// that has not yet got the database the instance just created on the
    /// primary (a new deployment, replication lagging) is asked again within
    /// those 10 s. Empty is unset.
    #[arg(id = "database_read_url", long = "database-read-url", env = "DATABASE_READ_URL")]
    pub read_url: Option<String>,
}

impl ReplicaSettings {
    /// The replica's URL, when one is set: an empty `DATABASE_READ_URL`
    /// (what a script that passes it through sets) means none.
    pub(crate) fn url(&self) -> Option<&str> {
        self.read_url.as_deref().map(str::trim).filter(|url| !url.is_empty())
    }
}

impl std::fmt::Debug for ReplicaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaSettings").field("read_url", &self.read_url.as_deref().map(without_password)).finish()
    }
}

/// Redis.
#[derive(Clone, Args)]
pub struct RedisSettings {
    /// Redis, unless `REDIS_CLUSTER_NODES` is set.
    #[arg(id = "redis_url", long = "redis-url", env = "REDIS_URL", default_value = DEFAULT_REDIS_URL)]
    pub url: String,

    /// Comma-separated Redis Cluster nodes, each `host:port` (plain) or a
    /// `redis://` or `rediss://` URL (TLS, with `REDIS_CA_FILE`, needs
    /// `rediss://`); when set, the cluster is used instead of `REDIS_URL`. Start-up fails (rather than
    /// hangs) when the nodes are unreachable or the cluster does not serve
    /// all 16384 slots.
    #[arg(id = "redis_cluster_nodes", long = "redis-cluster-nodes", env = "REDIS_CLUSTER_NODES")]
    pub cluster_nodes: Option<String>,

    /// A PEM file of the certificate authority that signs the Redis
    /// servers' certificates: the links are then TLS (every URL and node
    /// must be `rediss://`, or start-up refuses), and a server whose
    /// certificate does not name the address connected to is refused at
    /// start-up. Unset: `rediss://` URLs trust the system's roots, and
    /// `redis://` ones are not encrypted.
    #[arg(id = "redis_ca_file", long = "redis-ca-file", env = "REDIS_CA_FILE")]
    pub ca_file: Option<String>,

    /// Put in front of every Redis key (and inside the lock's release
    /// channel, `lock-released:<prefix>lock:order:{id}`). Empty in
    /// production (the contract's key names); each test sets its own, so
    /// that the tests share one Redis.
    #[arg(id = "redis_key_prefix", long = "redis-key-prefix", env = "REDIS_KEY_PREFIX", default_value = "")]
    pub key_prefix: String,
}

impl RedisSettings {
    /// The authority's file, when one is set: empty (what a script that
    /// passes it through sets) means none.
    pub(crate) fn ca_file(&self) -> Option<&str> {
        self.ca_file.as_deref().map(str::trim).filter(|file| !file.is_empty())
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self { url: DEFAULT_REDIS_URL.into(), cluster_nodes: None, ca_file: None, key_prefix: String::new() }
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &without_password(&self.url))
            .field(
                "cluster_nodes",
                &self.cluster_nodes.as_deref().map(|nodes| nodes.split(',').map(without_password).collect::<Vec<_>>()),
            )
            .field("ca_file", &self.ca_file)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}
