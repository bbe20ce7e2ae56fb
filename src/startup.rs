//! Start-up: connect to MariaDB (creating the database when missing), run
//! the embedded migrations, connect to Redis, bind, serve, and stop
//! gracefully. Tests use the same path with a port of 0.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use sqlx::{
    ConnectOptions, Connection, MySqlPool,
    mysql::{MySqlConnectOptions, MySqlConnection, MySqlPoolOptions},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    app,
    auth::{CodeStore, SessionStore, TokenKeys},
    config::{Config, SeckillMode},
    ids::OrderIdGenerator,
    keys::Keys,
    lock::{LockConfig, LockService},
    ratelimit::{Limit, LocalUserLimiter, RateLimiter},
    seckill::{CONSUMER_BLOCK, Consumer, GroupCommitter, VoucherGates},
    state::AppState,
};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// A bound, not yet serving, instance.
pub struct Application {
    listener: TcpListener,
    state: AppState,
    /// The asynchronous mode's order stream consumer, if that is the mode.
    consumer: Option<Consumer>,
}

impl Application {
    pub async fn build(mut config: Config) -> anyhow::Result<Self> {
        config.validate()?;
        let listener =
            TcpListener::bind(&config.bind_addr).await.with_context(|| format!("binding {}", config.bind_addr))?;
        if config.instance_id.is_none() {
            config.instance_id = Some(listener.local_addr()?.to_string());
        }
        let state = build_state(config).await?;
        let consumer = match state.config.seckill_mode {
            SeckillMode::Sync => None,
            SeckillMode::Async => Some(build_consumer(&state).await?),
        };
        Ok(Self { listener, state, consumer })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then stops accepting and lets the
    /// requests in flight finish; the consumer (if any) finishes its batch.
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let addr = self.listener.local_addr()?;
        let mode = self.state.config.seckill_mode;
        tracing::info!(%addr, instance = self.state.instance_id(), ?mode, "serving");
        let stop = CancellationToken::new();
        let consumer = self.consumer.map(|c| tokio::spawn(c.run(stop.clone())));
        let group_commit = self.state.group_commit.clone();
        // The peer address is the client's when no nginx stands in front.
        let service = app(self.state).into_make_service_with_connect_info::<std::net::SocketAddr>();
        let served = axum::serve(self.listener, service).with_graceful_shutdown(shutdown).await.context("serving HTTP");
        let groups = group_commit.stats();
        if groups.groups > 0 {
            tracing::info!(?groups, mean = groups.committed as f64 / groups.groups as f64, "group commit totals");
        }
        stop.cancel();
        if let Some(consumer) = consumer {
            consumer.await.ok();
        }
        served
    }
}

pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    let db = connect_database(&config.database_url, config.db_max_connections).await?;
    migrate(&db).await?;
    verify_safety_constraints(&db).await?;
    let redis = connect_redis(&config.redis_url).await?;
    let keys = Keys::new(&config.redis_key_prefix);
    let pubsub_client = redis::Client::open(config.redis_url.as_str()).context("parsing REDIS_URL")?;
    Ok(AppState {
        locks: LockService::new(
            pubsub_client,
            redis.clone(),
            LockConfig { watchdog_ttl: Duration::from_millis(config.lock_watchdog_ttl_ms) },
        ),
        gates: VoucherGates::new(config.hot_row_permits, config.hot_row_queue_max),
        group_commit: GroupCommitter::new(
            db.clone(),
            config.order_batch_max,
            Duration::from_millis(config.order_batch_wait_ms),
        ),
        limits: RateLimiter::new(redis.clone(), keys.clone()),
        order_limit: LocalUserLimiter::new(Limit::per(config.orders_per_user_10s, Duration::from_secs(10))),
        tokens: TokenKeys::new(config.jwt_secret.as_bytes()),
        sessions: SessionStore::new(redis.clone(), keys.clone()),
        codes: CodeStore::new(redis.clone(), keys.clone(), config.log_sms_codes),
        metrics: crate::monitoring::recorder(),
        order_ids: OrderIdGenerator::new(redis.clone(), keys.clone(), config.order_id_block),
        db,
        redis,
        keys,
        config: Arc::new(config),
    })
}

/// The consumer reads with blocking XREADGROUPs, so it gets a connection
/// of its own whose response timeout outlasts the block.
async fn build_consumer(state: &AppState) -> anyhow::Result<Consumer> {
    let config = &state.config;
    let blocking = connect_redis_with(&config.redis_url, CONSUMER_BLOCK + Duration::from_secs(2)).await?;
    Ok(Consumer {
        db: state.db.clone(),
        blocking,
        redis: state.redis.clone(),
        keys: state.keys.clone(),
        name: state.instance_id().to_owned(),
        batch_max: config.async_batch_max,
        claim_idle: Duration::from_millis(config.async_claim_idle_ms),
        max_deliveries: config.async_max_deliveries,
    })
}

/// Runs the embedded migrations under a named lock, so instances starting
/// together do not race. sqlx takes `GET_LOCK(name, -1)` for this, but on
/// MariaDB a negative timeout returns NULL at once instead of waiting (MySQL
/// reads it as "forever"), so sqlx's own lock does nothing there.
pub async fn migrate(db: &MySqlPool) -> anyhow::Result<()> {
    let mut conn = db.acquire().await.context("connecting for migrations")?;
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(CONCAT('hmdp:migrate:', DATABASE()), 120)")
        .fetch_one(&mut *conn)
        .await
        .context("taking the migration lock")?;
    anyhow::ensure!(locked == Some(1), "another instance held the migration lock for 120 s");
    let result = MIGRATOR.run(&mut *conn).await.context("running migrations");
    sqlx::query("SELECT RELEASE_LOCK(CONCAT('hmdp:migrate:', DATABASE()))")
        .execute(&mut *conn)
        .await
        .context("releasing the migration lock")?;
    result
}

/// The migrations create the tables with `IF NOT EXISTS`, so against an
/// existing course database they leave its tables as they are, possibly
/// without the constraints that make the database the last word on
/// overselling and on one order per user. Without them the service must
/// not serve.
pub async fn verify_safety_constraints(db: &MySqlPool) -> anyhow::Result<()> {
    let unique: Option<String> = sqlx::query_scalar(
        "SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) FROM information_schema.STATISTICS
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tb_voucher_order'
           AND INDEX_NAME = 'uk_user_voucher' AND NON_UNIQUE = 0",
    )
    .fetch_one(db)
    .await
    .context("reading tb_voucher_order's indexes")?;
    let checks: Vec<String> = sqlx::query_scalar(
        "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
         WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = 'tb_seckill_voucher'",
    )
    .fetch_all(db)
    .await
    .context("reading tb_seckill_voucher's checks")?;
    let mut missing = Vec::new();
    if unique.as_deref() != Some("user_id,voucher_id") {
        missing.push("UNIQUE KEY uk_user_voucher (user_id, voucher_id) on tb_voucher_order");
    }
    let stock_check = |clause: &String| {
        let normalized: String = clause.chars().filter(|c| !c.is_whitespace() && *c != '`').collect();
        normalized == "stock>=0"
    };
    if !checks.iter().any(stock_check) {
        missing.push("CHECK (stock >= 0) on tb_seckill_voucher");
    }
    anyhow::ensure!(
        missing.is_empty(),
        "refusing to serve: the database lacks {} (an existing course database? add them, or start on an empty database)",
        missing.join(" and ")
    );
    Ok(())
}

/// Connects, first creating the database named in the URL when it does not
/// exist (a fresh MariaDB has none).
pub async fn connect_database(url: &str, max_connections: u32) -> anyhow::Result<MySqlPool> {
    let options: MySqlConnectOptions = url.parse().context("parsing DATABASE_URL")?;
    let database = options.get_database().context("DATABASE_URL names no database")?.to_owned();
    ensure_database(&options, &database).await?;
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options.log_statements(tracing::log::LevelFilter::Trace))
        .await
        .with_context(|| format!("connecting to MariaDB database {database}"))
}

async fn ensure_database(options: &MySqlConnectOptions, database: &str) -> anyhow::Result<()> {
    // Identifiers cannot be bound; this name comes from our own settings and
    // is restricted to characters that need no escaping inside backticks.
    anyhow::ensure!(
        !database.is_empty()
            && database.len() <= 64
            && database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "database name {database:?} must be 1-64 characters of [A-Za-z0-9_]"
    );
    let mut conn = MySqlConnection::connect_with(&options.clone().database("information_schema"))
        .await
        .context("connecting to MariaDB")?;
    sqlx::raw_sql(&format!(
        "CREATE DATABASE IF NOT EXISTS `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    ))
    .execute(&mut conn)
    .await
    .with_context(|| format!("creating database {database}"))?;
    conn.close().await.ok();
    Ok(())
}

/// A reconnecting connection. Commands time out instead of hanging, so a
/// dead Redis becomes a quick 503 rather than a stuck request.
pub async fn connect_redis(url: &str) -> anyhow::Result<ConnectionManager> {
    connect_redis_with(url, Duration::from_secs(2)).await
}

async fn connect_redis_with(url: &str, response_timeout: Duration) -> anyhow::Result<ConnectionManager> {
    let client = redis::Client::open(url).context("parsing REDIS_URL")?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(2);
    ConnectionManager::new_with_config(client, config).await.context("connecting to Redis")
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        tokio::signal::ctrl_c().await.ok();
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested; finishing requests in flight");
}
