//! Black-box harness: each test spawns the real app on port 0 with its own
//! MariaDB database and its own Redis key prefix, drives it over HTTP, and
//! reads the tables and keys afterwards. Both are removed when the
//! `TestApp` is dropped, even when the test panics.
#![allow(dead_code)]

pub mod proxy;

use std::time::Duration;

use hmdp::{AppState, Config, startup::Application, state::Keys};
use redis::{AsyncCommands, aio::ConnectionManager};
use reqwest::{Response, StatusCode};
use serde_json::Value;
use sqlx::MySqlPool;
use tokio::sync::oneshot;

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
        database_url: format!("{}/{database}", database_server_url()),
        redis_url: redis_url(),
        jwt_secret: JWT_SECRET.into(),
        admin_key: Some(ADMIN_KEY.into()),
        bind_addr: "127.0.0.1:0".into(),
        instance_id: None,
        redis_key_prefix: prefix.clone(),
        db_max_connections: 32,
        hot_row_permits: 8,
        lock_watchdog_ttl_ms: 30_000,
    };
    (config, database, prefix)
}

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub db: MySqlPool,
    pub redis: ConnectionManager,
    pub keys: Keys,
    pub state: AppState,
    database: String,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(std::env::var("TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let (mut config, database, _prefix) = test_config();
        adjust(&mut config);
        let app = Application::build(config).await.expect("app builds");
        let state = app.state().clone();
        let base = format!("http://127.0.0.1:{}", app.port());
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async move {
            let _ = rx.await;
        }));
        Self {
            base,
            client: reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap(),
            db: state.db.clone(),
            redis: state.redis.clone(),
            keys: state.keys.clone(),
            state,
            database,
            shutdown: Some(tx),
            server: Some(server),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
        }
    }

    pub async fn send_code(&self, phone: &str) -> Response {
        self.client.post(self.url(&format!("/user/code?phone={phone}"))).send().await.unwrap()
    }

    pub async fn stored_code(&self, phone: &str) -> Option<String> {
        self.redis.clone().get(self.keys.login_code(phone)).await.unwrap()
    }

    pub async fn post_login(&self, phone: &str, code: &str) -> Response {
        self.client
            .post(self.url("/user/login"))
            .json(&serde_json::json!({ "phone": phone, "code": code }))
            .send()
            .await
            .unwrap()
    }

    /// The whole login dance through the API, reading the code from Redis.
    pub async fn login(&self, phone: &str) -> String {
        let sent = self.send_code(phone).await;
        assert_eq!(sent.status(), StatusCode::OK, "sending a code to {phone}");
        let code = self.stored_code(phone).await.expect("code stored");
        let body = expect_ok(self.post_login(phone, &code).await).await;
        body["data"].as_str().expect("token").to_owned()
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Response {
        let mut req = self.client.get(self.url(path));
        if let Some(token) = token {
            req = req.header("authorization", token);
        }
        req.send().await.unwrap()
    }

    pub async fn post(&self, path: &str, token: Option<&str>) -> Response {
        let mut req = self.client.post(self.url(path));
        if let Some(token) = token {
            req = req.header("authorization", token);
        }
        req.send().await.unwrap()
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let database = self.database.clone();
        let prefix = self.keys.prefix().to_owned();
        // Drop cannot await; a helper thread with its own runtime can.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            // A failed test may leave a transaction holding locks; the
            // cleanup gives up rather than hang the suite (leftovers are
            // dropped by the next scripts/test).
            rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(15), cleanup(database, prefix)).await;
            });
        })
        .join();
    }
}

async fn cleanup(database: String, prefix: String) {
    use sqlx::Connection;
    if let Ok(mut conn) =
        sqlx::MySqlConnection::connect(&format!("{}/information_schema", database_server_url())).await
    {
        let _ = sqlx::raw_sql("SET SESSION lock_wait_timeout = 5").execute(&mut conn).await;
        let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS `{database}`")).execute(&mut conn).await;
    }
    if let Ok(client) = redis::Client::open(redis_url())
        && let Ok(mut conn) = client.get_multiplexed_async_connection().await {
            let keys: Vec<String> = conn.keys(format!("{prefix}*")).await.unwrap_or_default();
            for chunk in keys.chunks(500) {
                let _: Result<(), _> = conn.del(chunk).await;
            }
        }
}

/// Asserts a 200 with `success: true` and returns the body.
pub async fn expect_ok(resp: Response) -> Value {
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON body");
    assert_eq!(status, StatusCode::OK, "body: {body}");
    assert_eq!(body["success"], true, "body: {body}");
    body
}

/// Asserts the failure envelope with this status and errorCode.
pub async fn expect_error(resp: Response, status: StatusCode, code: &str) -> Value {
    let got = resp.status();
    let body: Value = resp.json().await.expect("JSON envelope body");
    assert_eq!(got, status, "body: {body}");
    assert_eq!(body["success"], false, "body: {body}");
    assert_eq!(body["errorCode"], code, "body: {body}");
    assert!(body["errorMsg"].as_str().is_some_and(|m| !m.is_empty()), "body: {body}");
    assert!(body.get("data").is_none(), "body: {body}");
    body
}

/// A distinct phone per index, valid for the service's pattern.
pub fn phone(i: u32) -> String {
    format!("139{i:08}")
}

impl TestApp {
    /// Users with live sessions, made directly through the library (the
    /// same session format as login) because hundreds of logins through
    /// the API would only test login again. Returns (user id, token).
    pub async fn seed_users(&self, count: u32) -> Vec<(u64, String)> {
        let store = hmdp::auth::SessionStore::new(&self.state);
        hmdp::auth::seed_users(&self.db, &store, &self.state.tokens, 13_950_000_000, count.into())
            .await
            .unwrap()
            .into_iter()
            .map(|u| (u.id, u.token))
            .collect()
    }

    pub async fn post_json(&self, path: &str, admin_key: Option<&str>, body: &Value) -> Response {
        let mut req = self.client.post(self.url(path)).json(body);
        if let Some(key) = admin_key {
            req = req.header("x-admin-key", key);
        }
        req.send().await.unwrap()
    }

    /// A seckill voucher whose window is open now, through the admin API.
    pub async fn open_seckill(&self, stock: i64) -> u64 {
        let now = chrono::Utc::now();
        self.create_seckill(stock, now - chrono::Duration::minutes(1), now + chrono::Duration::hours(1)).await
    }

    pub async fn create_seckill(
        &self,
        stock: i64,
        begin: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
    ) -> u64 {
        let body = seckill_body(stock, &begin.to_rfc3339(), &end.to_rfc3339());
        let created = expect_ok(self.post_json("/voucher/seckill", Some(ADMIN_KEY), &body).await).await;
        created["data"].as_u64().expect("voucher id")
    }

    pub async fn order(&self, voucher_id: u64, token: &str) -> Response {
        self.post(&format!("/voucher-order/seckill/{voucher_id}"), Some(token)).await
    }

    pub async fn stock_of(&self, voucher_id: u64) -> i64 {
        sqlx::query_scalar::<_, i32>("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher_id)
            .fetch_one(&self.db)
            .await
            .unwrap()
            .into()
    }

    /// (orders for the voucher, distinct users among them)
    pub async fn orders_of(&self, voucher_id: u64) -> (i64, i64) {
        sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher_id)
            .fetch_one(&self.db)
            .await
            .unwrap()
    }
}

pub fn seckill_body(stock: i64, begin: &str, end: &str) -> Value {
    serde_json::json!({
        "shopId": 1,
        "title": "100 off 50",
        "subTitle": "weekdays only",
        "rules": "one per person",
        "payValue": 8000,
        "actualValue": 10000,
        "type": 1,
        "stock": stock,
        "beginTime": begin,
        "endTime": end,
    })
}

/// Outcome tally of a batch of order responses, by errorCode ("OK" for success).
pub async fn tally(responses: Vec<Response>) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for resp in responses {
        let status = resp.status();
        let body: Value = resp.json().await.expect("JSON envelope");
        let key = if body["success"] == true {
            assert_eq!(status, StatusCode::OK);
            assert!(body["data"].as_str().is_some_and(|id| id.parse::<i64>().is_ok()), "order id string: {body}");
            "OK".to_owned()
        } else {
            body["errorCode"].as_str().unwrap_or("?").to_owned()
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}
