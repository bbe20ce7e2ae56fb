//! A scratch place for one test: its own MariaDB database and Redis key
//! prefix, the configuration that uses them, and their removal. Shared by
//! this harness and the lab's tests.

use hmdp::{
    Config,
    config::{
        AuthSettings, DatabaseSettings, DatabaseUrl, LimitSettings, OrderSettings, RedisSettings, ReplicaSettings,
        SalePathSettings, SeckillSettings, ServerSettings,
    },
};
use redis::AsyncCommands;

pub const JWT_SECRET: &str = "test-secret-0123456789abcdef";
pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef";

/// The server part of DATABASE_URL (a scheme, credentials, host and port,
/// then `/<database>`); each test appends its own database.
pub use hmdp_fault_proxy::{database_server_url, redis_url};

/// REDIS_URL, or the cluster of REDIS_CLUSTER_NODES when that is set
/// (scripts/check-stack runs the suites a second time on the local cluster).
pub fn redis_settings(prefix: &str) -> RedisSettings {
    RedisSettings {
        url: redis_url(),
        cluster_nodes: std::env::var("REDIS_CLUSTER_NODES").ok().filter(|n| !n.trim().is_empty()),
        ca_file: std::env::var("REDIS_CA_FILE").ok(),
        key_prefix: prefix.to_owned(),
    }
}

/// A connection to the Redis (or cluster) the tests run against.
pub async fn redis() -> hmdp_redis::Redis {
    hmdp::startup::connect_redis(&redis_settings("")).await.expect("connecting to the test Redis")
}

pub fn test_config() -> (Config, String, String) {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let database = format!("hmdp_test_{tag}");
    let prefix = format!("test:{tag}:");
    let config = Config {
        db: DatabaseSettings {
            url: DatabaseUrl::new(format!("{}/{database}", database_server_url())),
            ..Default::default()
        },
        replica: ReplicaSettings::default(),
        redis: redis_settings(&prefix),
        server: ServerSettings {
            bind_addr: "127.0.0.1:0".into(),
            proxy_socket: Some(socket_path()),
            admin_key: Some(ADMIN_KEY.into()),
            ..Default::default()
        },
        auth: AuthSettings { jwt_secret: JWT_SECRET.into(), log_sms_codes: false },
        // Generous: the limit tests set their own.
        limits: LimitSettings {
            sms_codes_per_phone_day: 10_000,
            login_failures_per_phone_day: 10_000,
            sms_codes_per_addr_hour: 10_000,
            logins_per_addr_hour: 10_000,
            orders_per_user_10s: 10_000,
        },
        seckill: SeckillSettings::default(),
        orders: OrderSettings::default(),
        events: Default::default(),
        sale_path: SalePathSettings::default(),
        hot_keys: Default::default(),
    };
    (config, database, prefix)
}

/// A unix socket path of one instance's own for nginx's side of it (short:
/// a socket's path is at most 108 bytes).
pub fn socket_path() -> std::path::PathBuf {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    std::env::temp_dir().join(format!("hmdp-test-{}.sock", &tag[..12]))
}

pub async fn cleanup(database: String, prefix: String) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::MySqlConnection::connect(&format!("{}/information_schema", database_server_url())).await
    {
        let _ = sqlx::raw_sql("SET SESSION lock_wait_timeout = 5").execute(&mut conn).await;
        let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{database}`")).execute(&mut conn).await;
    }
    if let Ok(mut conn) = hmdp::startup::connect_redis(&redis_settings("")).await {
        // Every master's keys; one DEL per key, as keys of a cluster live
        // in many slots.
        let keys = conn.scan_match(&format!("{prefix}*")).await.unwrap_or_default();
        let mut deletes = tokio::task::JoinSet::new();
        for key in keys {
            let mut conn = conn.clone();
            deletes.spawn(async move { conn.del::<_, ()>(key).await });
        }
        deletes.join_all().await;
    }
}
