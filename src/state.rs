//! Everything a handler needs, built once at start-up and cloned cheaply
//! into each request. No globals: tests build as many as they like.

use std::sync::Arc;

use axum::extract::FromRef;
use redis::aio::ConnectionManager;
use sqlx::MySqlPool;

use crate::{
    auth::{CodeStore, SessionStore, TokenKeys},
    config::Config,
    ids::OrderIdGenerator,
    keys::Keys,
    lock::LockService,
    ratelimit::{LocalUserLimiter, RateLimiter},
    seckill::{GroupCommitter, VoucherGates},
};

/// `FromRef` lets plumbing (health, readiness) take just the part it needs.
#[derive(Clone, FromRef)]
pub struct AppState {
    pub db: MySqlPool,
    pub redis: ConnectionManager,
    pub config: Arc<Config>,
    pub keys: Keys,
    pub tokens: TokenKeys,
    pub sessions: SessionStore,
    pub codes: CodeStore,
    pub order_ids: OrderIdGenerator,
    pub locks: LockService,
    pub gates: VoucherGates,
    pub group_commit: GroupCommitter,
    pub limits: RateLimiter,
    pub order_limit: LocalUserLimiter,
    /// Renders what the process-wide `metrics` recorder has counted.
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
}

impl AppState {
    pub fn instance_id(&self) -> &str {
        self.config.instance_id.as_deref().unwrap_or("unknown")
    }
}
