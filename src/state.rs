//! Everything a handler needs, built once at start-up and cloned cheaply
//! into each request. No globals: tests build as many as they like.

use std::sync::Arc;

use redis::aio::ConnectionManager;
use sqlx::MySqlPool;

use crate::{auth::TokenKeys, config::Config, ids::OrderIdGenerator, lock::LockService, seckill::VoucherGates};

#[derive(Clone)]
pub struct AppState {
    pub db: MySqlPool,
    pub redis: ConnectionManager,
    pub config: Arc<Config>,
    pub keys: Keys,
    pub tokens: TokenKeys,
    pub order_ids: OrderIdGenerator,
    pub locks: LockService,
    pub gates: VoucherGates,
}

/// The Redis key names of the contract, behind one optional prefix so that
/// tests can share a Redis without sharing state.
#[derive(Clone, Debug, Default)]
pub struct Keys {
    prefix: Arc<str>,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.into() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn login_code(&self, phone: &str) -> String {
        format!("{}login:code:{phone}", self.prefix)
    }

    /// Set for 60 s when a code is sent, so one phone cannot be flooded.
    pub fn login_code_cooldown(&self, phone: &str) -> String {
        format!("{}login:code:cooldown:{phone}", self.prefix)
    }

    /// Counts tries against the current code; reset when a new code is sent.
    pub fn login_code_attempts(&self, phone: &str) -> String {
        format!("{}login:code:attempts:{phone}", self.prefix)
    }

    pub fn session(&self, session_id: &str) -> String {
        format!("{}login:token:{session_id}", self.prefix)
    }

    /// `day` is `yyyy:MM:dd`.
    pub fn order_sequence(&self, day: &str) -> String {
        format!("{}icr:order:{day}", self.prefix)
    }

    /// The braces are literal: a Redis Cluster hash tag.
    pub fn order_lock(&self, user_id: u64) -> String {
        format!("{}lock:order:{{{user_id}}}", self.prefix)
    }
}
