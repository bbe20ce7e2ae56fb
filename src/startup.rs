//! Start-up: connect to MariaDB (creating the database when missing), run
//! the embedded migrations and check the schema (`schema.rs`), connect to
//! Redis, bind, serve, and stop gracefully. Tests use the same path with a port of 0.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use hmdp_redis::hot::HotKeys;
use tokio_util::task::AbortOnDropHandle;

pub use crate::connect::{connect_database, connect_redis};
pub use crate::schema::migrate;
use crate::schema::verify_safety_constraints;
use hmdp_lock::{LockConfig, LockService};

use crate::{
    app,
    auth::{Auth, CodeStore, LoginLimits, SessionStore, TokenKeys},
    config::Config,
    connect::{ReadReplica, connect_read_replica},
    events::Events,
    http::{
        guards::Guards,
        idempotency::Idempotency,
        ratelimit::{Limit, LocalUserLimiter, RateLimiter},
        server::Server,
    },
    ids::OrderIdGenerator,
    keys::Keys,
    salepath::SalePath,
    seckill::{self, Seckill},
    state::{AppState, Shared},
};

/// A bound, not yet serving, instance.
pub struct Application {
    server: Server,
    state: AppState,
    events: Events,
    /// Closes the hot keys' windows while the instance serves.
    hot_key_watch: Option<AbortOnDropHandle<()>>,
}

impl Application {
    pub async fn build(mut config: Config) -> anyhow::Result<Self> {
        config.validate()?;
        let server = Server::bind(&config.server).await?;
        if config.server.instance_id.is_none() {
            config.server.instance_id = Some(server.tcp_addr()?.to_string());
        }
        let (state, events, hot_key_watch) = build_state(config).await?;
        Ok(Self { server, state, events, hot_key_watch })
    }

    pub fn port(&self) -> u16 {
        self.server.tcp_addr().map(|a| a.port()).unwrap_or(0)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then stops accepting and lets the
    /// requests in flight finish; then the seckill's background work stops
    /// (the consumer finishes its batch).
    pub async fn run_until(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let addr = self.server.tcp_addr()?;
        let proxy_socket = self.server.proxy_socket().map(|path| path.display().to_string());
        let seckill = self.state.seckill.clone();
        tracing::info!(%addr, proxy_socket, instance = self.state.instance_id(), mode = seckill.mode(), "serving");
        seckill.start();
        let mut events = self.events;
        events.start();
        let hot_key_watch = self.hot_key_watch;
        let served = self.server.serve(app(self.state), shutdown).await;
        drop(hot_key_watch);
        seckill.shutdown().await;
        events.shutdown().await;
        served
    }
}

/// Raises this process's descriptor limit to its hard limit: every held
/// connection is a descriptor, and a crowd brings tens of thousands (the
/// soft limit is often 1,024). Returns the limit in force.
pub fn raise_descriptor_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(err) => {
            tracing::warn!(error = %err, "could not raise the descriptor limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(0, |(soft, _)| soft)
        }
    }
}

pub(crate) async fn build_state(config: Config) -> anyhow::Result<(AppState, Events, Option<AbortOnDropHandle<()>>)> {
    let db = crate::connect::connect_service_database(&config.db).await?;
    migrate(&db).await?;
    verify_safety_constraints(&db).await?;
    let replica = match config.replica.url() {
        Some(url) => Some(connect_read_replica(url, config.db.max_connections).await?),
        None => None,
    };
    let mut redis = connect_redis(&config.redis).await?;
    require_redis_7(&mut redis.clone()).await?;
    let counting = config.hot_keys.counting();
    let hot_keys = HotKeys::new(counting.unwrap_or_default());
    let hot_key_watch = counting.map(|_| {
        redis.count_hot_keys(hot_keys.clone());
        AbortOnDropHandle::new(tokio::spawn(hot_keys.clone().watch(redis.clone())))
    });
    let keys = Keys::new(&config.redis.key_prefix);
    let locks = LockService::new(
        redis.clone(),
        LockConfig { watchdog_ttl: Duration::from_millis(config.seckill.sync.lock_watchdog_ttl_ms) },
    );
    let order_ids = OrderIdGenerator::new(redis.clone(), keys.clone(), config.orders.order_id_block);
    let instance = config.instance_id().to_owned();
    let events = Events::new(&config, &db);
    let deps = seckill::Dependencies {
        db: db.clone(),
        replica: replica.clone(),
        redis: redis.clone(),
        keys: keys.clone(),
        order_ids,
        locks,
        outbox: events.outbox(),
        hot_keys: hot_keys.clone(),
    };
    let seckill = Seckill::build(&config, &instance, deps).await?;
    let sale_path = SalePath::new(
        db.clone(),
        redis.clone(),
        keys.clone(),
        config.sale_path.clone(),
        config.auth.jwt_secret.as_bytes(),
        seckill.clone(),
    );
    let state = AppState::new(Shared {
        auth: Auth {
            tokens: TokenKeys::new(config.auth.jwt_secret.as_bytes()),
            sessions: SessionStore::new(redis.clone(), keys.clone()),
            codes: CodeStore::new(redis.clone(), keys.clone(), config.auth.log_sms_codes),
            limits: LoginLimits::from_config(&config),
        },
        seckill,
        sale_path,
        guards: Guards {
            limits: RateLimiter::new(redis.clone(), keys.clone()),
            idempotency: Idempotency::new(redis.clone(), keys),
            order_limit: LocalUserLimiter::new(Limit::per(config.limits.orders_per_user_10s, Duration::from_secs(10))),
        },
        metrics: crate::monitoring::recorder(),
        hot_keys,
        read_replica: ReadReplica(replica.unwrap_or_else(|| db.clone())),
        db,
        redis,
        config: Arc::new(config),
    });
    Ok((state, events, hot_key_watch))
}

/// The rate limits set their window with `EXPIRE ... NX` and the lock and
/// the streams use Redis 7 commands: an older Redis would fail them at the
/// first request, not here.
async fn require_redis_7(redis: &mut hmdp_redis::Redis) -> anyhow::Result<()> {
    let (major, minor) = redis.oldest_version().await.context("asking Redis for its version")?;
    anyhow::ensure!(major >= 7, "Redis {major}.{minor} is too old: hmdp needs Redis 7 or later");
    Ok(())
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
