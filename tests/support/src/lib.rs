//! Black-box harness: each test spawns the real app on port 0 with its own
//! MariaDB database and its own Redis key prefix, drives it over HTTP, and
//! reads the tables and keys afterwards. Both are removed when the
//! `TestApp` is dropped, even when the test panics.

pub mod api;
pub mod audit;
pub mod nats;
pub mod paths;
pub mod redis_cluster;
pub mod redis_server;
/// The fault proxy, a package of its own (`tests/fault-proxy`).
pub use hmdp_fault_proxy as proxy;
pub mod scratch;

use std::{ops::Deref, time::Duration};

pub use api::{Api, Outcome, expect_error, expect_ok, instances, outcome, seckill_body, tally};
use hmdp::{AppState, Config, keys::Keys, startup::Application};
use hmdp_redis::Redis;
pub use paths::OrderPath;
use redis::AsyncCommands;
use reqwest::StatusCode;
pub use scratch::{ADMIN_KEY, JWT_SECRET, cleanup, database_server_url, redis, redis_settings, redis_url, test_config};
use sqlx::MySqlPool;
use tokio::sync::oneshot;

pub struct TestApp {
    pub api: Api,
    /// The test's own way into the instance's database, from outside it:
    /// not the instance's pool, whose sessions MariaDB ends when a
    /// transaction sits idle (`DB_IDLE_TRANSACTION_TIMEOUT_S`), as a row
    /// the test holds does on purpose.
    pub db: MySqlPool,
    pub redis: Redis,
    pub keys: Keys,
    pub state: AppState,
    /// The same instance through its unix socket, as nginx reaches it: the
    /// `X-Real-IP` of requests sent here is believed.
    pub behind_nginx: Api,
    proxy_socket: std::path::PathBuf,
    database: String,
    /// The first instance of a test owns its database and keys and removes
    /// them when dropped; peers share them.
    owns_data: bool,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// An instance whose orders take `path`.
    pub async fn spawn_on(path: OrderPath) -> Self {
        Self::spawn_with(|c| path.configure(c)).await
    }

    pub async fn spawn_on_with(path: OrderPath, adjust: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_with(|c| {
            path.configure(c);
            adjust(c);
        })
        .await
    }

    pub async fn spawn_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(std::env::var("TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        let (mut config, database, _prefix) = test_config();
        adjust(&mut config);
        Self::start(config, database, true).await
    }

    /// A second instance on the same database and Redis keys (another
    /// `INSTANCE_ID`), as the two instances behind nginx are.
    pub async fn spawn_peer(&self, adjust: impl FnOnce(&mut Config)) -> Self {
        let mut config = (*self.state.config).clone();
        config.server.bind_addr = "127.0.0.1:0".into();
        config.server.proxy_socket = Some(scratch::socket_path());
        config.server.instance_id = None;
        adjust(&mut config);
        Self::start(config, self.database.clone(), false).await
    }

    async fn start(config: Config, database: String, owns_data: bool) -> Self {
        let proxy_socket = config.server.proxy_socket.clone().expect("the test config names a socket");
        let db = hmdp::startup::connect_database(config.db.url.as_str(), 16).await.expect("the test's own pool");
        let app = Application::build(config).await.expect("app builds");
        let state = app.state().clone();
        let api = Api::new(format!("http://127.0.0.1:{}", app.port()), ADMIN_KEY, 64);
        let behind_nginx = Api::through_socket(&proxy_socket, ADMIN_KEY);
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async move {
            let _ = rx.await;
        }));
        Self {
            api,
            db,
            redis: state.redis.clone(),
            keys: Keys::new(&state.config.redis.key_prefix),
            state,
            behind_nginx,
            proxy_socket,
            database,
            owns_data,
            shutdown: Some(tx),
            server: Some(server),
        }
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

    pub async fn stored_code(&self, phone: &str) -> Option<String> {
        self.redis.clone().get(self.keys.login_code(phone)).await.unwrap()
    }

    /// The whole login dance through the API, reading the code from Redis.
    pub async fn login(&self, phone: &str) -> String {
        let sent = self.send_code(phone).await;
        assert_eq!(sent.status(), StatusCode::OK, "sending a code to {phone}");
        let code = self.stored_code(phone).await.expect("code stored");
        let body = expect_ok(self.post_login(phone, &code).await).await;
        body["data"].as_str().expect("token").to_owned()
    }
}

impl Deref for TestApp {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // The server removes it when it stops; the test may end first.
        let _ = std::fs::remove_file(&self.proxy_socket);
        if !self.owns_data {
            return;
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

/// An app's settings pointed at the Redis behind a fault proxy (one
/// server, so never the cluster).
pub fn redis_behind(proxy: &proxy::Proxy, config: &mut Config) {
    config.redis.url = proxy.redis_url();
    config.redis.cluster_nodes = None;
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
        hmdp::auth::seed_users(
            &self.db,
            &self.state.auth.sessions,
            &self.state.auth.tokens,
            13_950_000_000,
            count.into(),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.id, u.token))
        .collect()
    }

    /// Returns once the hot-key window the setup's commands fell in (a
    /// session for every seeded buyer) has closed: a sale that fell into
    /// that window was a small part of it and could end without ever being
    /// hot (a crowd a sixth of its window, where alone it is a quarter).
    pub async fn past_the_setups_hot_key_window(&self) {
        tokio::time::sleep(self.state.hot_keys.settings().window).await;
    }

    /// A trigger that refuses every order row of `user` (a poison order).
    pub async fn refuse_orders_of(&self, user: u64) {
        sqlx::raw_sql(&format!(
            "CREATE TRIGGER refuse_one_user BEFORE INSERT ON tb_voucher_order FOR EACH ROW
             IF NEW.user_id = {user} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF"
        ))
        .execute(&self.db)
        .await
        .unwrap();
    }

    /// Holds the voucher's stock row from outside (`FOR UPDATE`), so an
    /// order or a batch blocks at it until the returned transaction ends.
    pub async fn hold_stock_row(&self, voucher_id: u64) -> sqlx::Transaction<'static, sqlx::MySql> {
        audit::hold_stock_row(&self.db, voucher_id).await
    }

    pub async fn stock_of(&self, voucher_id: u64) -> i64 {
        audit::stock_of(&self.db, voucher_id).await
    }

    /// The ids of the voucher's order rows, as the API writes them.
    pub async fn order_ids_of(&self, voucher: u64) -> std::collections::BTreeSet<String> {
        sqlx::query_scalar::<_, i64>("SELECT id FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_all(&self.db)
            .await
            .unwrap()
            .into_iter()
            .map(|id| id.to_string())
            .collect()
    }

    /// Every segment's hash tag as the voucher's row records them, segment
    /// 0's (the voucher id) first.
    pub async fn segment_tags(&self, voucher_id: u64) -> Vec<String> {
        let tags: String = sqlx::query_scalar("SELECT segment_tags FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher_id)
            .fetch_one(&self.db)
            .await
            .unwrap();
        let recorded = tags.split(',').filter(|tag| !tag.is_empty()).map(str::to_owned);
        std::iter::once(voucher_id.to_string()).chain(recorded).collect()
    }

    /// (orders for the voucher, distinct users among them)
    pub async fn orders_of(&self, voucher_id: u64) -> (i64, i64) {
        audit::orders_of(&self.db, voucher_id).await
    }
}

impl TestApp {
    /// What Redis holds of the voucher against MariaDB (asynchronous mode).
    pub async fn reconcile(&self, voucher: u64) -> hmdp::seckill::Reconciliation {
        hmdp::seckill::reconcile(&self.db, &mut self.redis.clone(), &self.keys, voucher).await.unwrap()
    }

    /// Waits until every accepted order is persisted or dead-lettered.
    pub async fn drained(&self, voucher: u64, within: Duration) -> hmdp::seckill::Reconciliation {
        let started = std::time::Instant::now();
        loop {
            let report = self.reconcile(voucher).await;
            if report.drained() {
                return report;
            }
            assert!(started.elapsed() < within, "not drained within {within:?}: {}", report.render());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Once the orders of `path` are in their rows: on the asynchronous
    /// path, every accepted order persisted or dead-lettered, and Redis
    /// agreeing with MariaDB (the report is returned); at once otherwise.
    pub async fn settled(&self, path: OrderPath, voucher: u64) -> Option<hmdp::seckill::Reconciliation> {
        if !path.is_async() {
            return None;
        }
        let report = self.drained(voucher, Duration::from_secs(30)).await;
        assert!(report.agrees(), "{}", report.render());
        Some(report)
    }
}

/// One behaviour as a module of that name, with one test per path named.
#[macro_export]
macro_rules! behaviour_on {
    ($behaviour:ident: $($test:ident => $path:ident),+) => {
        mod $behaviour {
            use $crate::OrderPath;

            $(
                #[tokio::test]
                async fn $test() {
                    super::$behaviour(OrderPath::$path).await
                }
            )+
        }
    };
}

/// `on_every_path!(behaviour, ...)`: for each `async fn behaviour(OrderPath)`
/// a module of that name with one test per path.
#[macro_export]
macro_rules! on_every_path {
    ($($behaviour:ident),+ $(,)?) => {
        $( $crate::behaviour_on!($behaviour: grouped => Grouped, one_transaction => OneTransaction, asynchronous => Async); )+
    };
}

/// `on_both_sync_paths!(behaviour, ...)`: as `on_every_path!`, for what only
/// the synchronous mode does (the per-user lock, the order's transaction).
#[macro_export]
macro_rules! on_both_sync_paths {
    ($($behaviour:ident),+ $(,)?) => {
        $( $crate::behaviour_on!($behaviour: grouped => Grouped, one_transaction => OneTransaction); )+
    };
}
