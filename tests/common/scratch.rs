//! A scratch place for one test: its own MariaDB database and Redis key
//! prefix, the configuration that uses them, and their removal. Shared by
//! this harness and the lab crate's tests (included there by path).
#![allow(dead_code)]

use hmdp::{
    Config,
    config::{
        AuthSettings, DatabaseSettings, LimitSettings, RedisSettings, SeckillMode, SeckillSettings, ServerSettings,
    },
};
use redis::AsyncCommands;

pub const JWT_SECRET: &str = "test-secret-0123456789abcdef";
pub const ADMIN_KEY: &str = "test-admin-key";

/// The server part of DATABASE_URL (a scheme, credentials, host and port,
/// then `/<database>`); each test appends its own database.
pub fn database_server_url() -> String {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/hmdp".into());
    let (scheme, rest) = url.split_once("://").expect("DATABASE_URL has a scheme");
    let server = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{server}")
}

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn test_config() -> (Config, String, String) {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
    let database = format!("hmdp_test_{tag}");
    let prefix = format!("test:{tag}:");
    let config = Config {
        db: DatabaseSettings { url: format!("{}/{database}", database_server_url()), max_connections: 32 },
        redis: RedisSettings { url: redis_url(), key_prefix: prefix.clone() },
        server: ServerSettings {
            bind_addr: "127.0.0.1:0".into(),
            instance_id: None,
            admin_key: Some(ADMIN_KEY.into()),
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
        seckill: SeckillSettings {
            mode: SeckillMode::Sync,
            request_deadline_ms: 10_000,
            order_id_block: 100,
            lock_watchdog_ttl_ms: 30_000,
            // scripts/test runs the seckill tests once more with ORDER_BATCH_MAX=1.
            order_batch_max: std::env::var("ORDER_BATCH_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
            order_batch_wait_ms: 0,
            order_batch_worker_idle_ms: 60_000,
            hot_row_permits: 8,
            hot_row_queue_max: 4_096,
            async_batch_max: 500,
            async_claim_idle_ms: 5_000,
            async_max_deliveries: 3,
        },
    };
    (config, database, prefix)
}

pub async fn cleanup(database: String, prefix: String) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::MySqlConnection::connect(&format!("{}/information_schema", database_server_url())).await
    {
        let _ = sqlx::raw_sql("SET SESSION lock_wait_timeout = 5").execute(&mut conn).await;
        let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{database}`")).execute(&mut conn).await;
    }
    if let Ok(client) = redis::Client::open(redis_url())
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await
    {
        let keys: Vec<String> = conn.keys(format!("{prefix}*")).await.unwrap_or_default();
        for chunk in keys.chunks(500) {
            let _: Result<(), _> = conn.del(chunk).await;
        }
    }
}
