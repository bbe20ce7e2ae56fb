//! The Redis key names of the contract, in one place. A leaf module: the
//! stores and `ids` take a `Keys` without depending on the rest of the app.

use std::sync::Arc;

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
