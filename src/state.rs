//! Everything a handler needs, built once at start-up and cloned cheaply
//! into each request. No globals: tests build as many as they like.
//!
//! Features never take the whole state: each takes the parts it needs as
//! sub-states (`State<Seckill>`, `State<MySqlPool>`), which `FromRef`
//! derives from the fields below. So this module imports the features and
//! no feature imports it back.

use std::sync::Arc;

use axum::extract::FromRef;
use hmdp_redis::Redis;
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::MySqlPool;

use crate::{
    auth::Auth,
    config::{Config, TrustedProxies},
    connect::ReadReplica,
    http::{
        guards::Guards,
        idempotency::Idempotency,
        ratelimit::{LocalUserLimiter, RateLimiter},
    },
    seckill::Seckill,
};

#[derive(Clone, FromRef)]
pub struct AppState {
    pub db: MySqlPool,
    /// Reads that may lag: the replica, or the primary again.
    pub(crate) read_replica: ReadReplica,
    pub redis: Redis,
    pub config: Arc<Config>,
    pub auth: Auth,
    pub seckill: Seckill,
    /// The limits and `Idempotency-Key`, each its own sub-state.
    #[from_ref(skip)]
    pub guards: Guards,
    /// Renders what the process-wide `metrics` recorder has counted.
    pub metrics: PrometheusHandle,
}

impl FromRef<AppState> for RateLimiter {
    fn from_ref(state: &AppState) -> Self {
        state.guards.limits.clone()
    }
}

impl FromRef<AppState> for LocalUserLimiter {
    fn from_ref(state: &AppState) -> Self {
        state.guards.order_limit.clone()
    }
}

impl FromRef<AppState> for Idempotency {
    fn from_ref(state: &AppState) -> Self {
        state.guards.idempotency.clone()
    }
}

/// Per-address limits ask who may speak for the client; it is a setting.
impl FromRef<AppState> for TrustedProxies {
    fn from_ref(state: &AppState) -> Self {
        state.config.server.trusted_proxies.clone()
    }
}

impl AppState {
    pub fn instance_id(&self) -> &str {
        self.config.instance_id()
    }
}
