//! Everything a handler needs, built once at start-up. No globals: tests
//! build as many as they like. axum clones the state into every request, so
//! it is one `Arc`: a clone is one atomic increment, not one per field.
//!
//! Features never take the whole state: each takes the parts it needs as
//! sub-states (`State<Seckill>`, `State<MySqlPool>`), which `FromRef`
//! derives from the fields below. So this module imports the features and
//! no feature imports it back.

use std::{ops::Deref, sync::Arc};

use axum::extract::FromRef;
use hmdp_redis::{Redis, hot::HotKeys};
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
    salepath::SalePath,
    seckill::{AfterSale, Seckill},
};

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The state's parts, shared by every request.
pub struct Shared {
    pub db: MySqlPool,
    /// Reads that may lag: the replica, or the primary again.
    pub(crate) read_replica: ReadReplica,
    pub redis: Redis,
    pub config: Arc<Config>,
    pub auth: Auth,
    pub seckill: Seckill,
    /// The sale path of guarded vouchers.
    pub(crate) sale_path: SalePath,
    /// The limits and `Idempotency-Key`, each its own sub-state.
    pub(crate) guards: Guards,
    /// Renders what the process-wide `metrics` recorder has counted.
    pub(crate) metrics: PrometheusHandle,
    /// What the instance's Redis commands found hot (nothing when
    /// `HOT_KEY_PERCENT` is 0).
    pub hot_keys: HotKeys,
}

impl AppState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What `#[derive(FromRef)]` gave when the state was a plain struct.
macro_rules! sub_states {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(impl FromRef<AppState> for $ty {
            fn from_ref(state: &AppState) -> Self {
                state.$field.clone()
            }
        })*
    };
}

sub_states! {
    db: MySqlPool,
    read_replica: ReadReplica,
    redis: Redis,
    config: Arc<Config>,
    auth: Auth,
    seckill: Seckill,
    sale_path: SalePath,
    metrics: PrometheusHandle,
    hot_keys: HotKeys,
}

impl FromRef<AppState> for Arc<AfterSale> {
    fn from_ref(state: &AppState) -> Self {
        state.seckill.after_sale()
    }
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
    pub(crate) fn instance_id(&self) -> &str {
        self.config.instance_id()
    }
}
