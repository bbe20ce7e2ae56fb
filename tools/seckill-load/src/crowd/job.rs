//! What passes between the crowd and its parts: a part's job on its
//! stdin, its answers on its stdout.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::{Deserialize, Serialize};

/// One child's share of the crowd.
#[derive(Serialize, Deserialize)]
pub(super) struct Job {
    pub(super) addr: SocketAddr,
    pub(super) host: String,
    /// The sale's vouchers: buyer i orders `vouchers[i % len]`.
    pub(super) vouchers: Vec<u64>,
    pub(super) guarded: bool,
    /// The opening instant, in ms since the Unix epoch.
    pub(super) open_at_ms: u64,
    pub(super) retries: u32,
    /// Per connection, its buyers' (index, token) in order.
    pub(super) connections: Vec<Vec<(usize, String)>>,
}

/// A buyer's final answer.
#[derive(Serialize, Deserialize, Clone)]
pub(super) struct Answer {
    pub(super) user: usize,
    /// `OK`, `OK202`, an errorCode, `HTTP 502 not an envelope`, or `dropped`.
    pub(super) what: String,
    pub(super) order_id: Option<i64>,
    /// From the opening instant: the first send and the final answer.
    pub(super) sent_us: i64,
    pub(super) done_us: i64,
    pub(super) retries: u32,
}

#[derive(Serialize, Deserialize, Default)]
pub(super) struct PartResult {
    pub(super) answers: Vec<Answer>,
    /// Connections open (and warmed) before the opening instant.
    pub(super) held_at_open: usize,
    /// Connections that could not be opened at all.
    pub(super) failed_to_open: usize,
    /// Connections closed or reset with a request in flight.
    pub(super) dropped_in_flight: usize,
    /// Connections the server closed between requests (reopened; no answer
    /// lost, but a sale must not do it: `verdict::connection_problems`).
    pub(super) reopened: usize,
    /// Answers that were not the envelope, by status.
    pub(super) outside_envelope: BTreeMap<String, u64>,
    /// `Retry-After` followed.
    pub(super) retries_followed: u64,
}

impl PartResult {
    pub(super) fn merge(&mut self, part: PartResult) {
        self.answers.extend(part.answers);
        self.held_at_open += part.held_at_open;
        self.failed_to_open += part.failed_to_open;
        self.dropped_in_flight += part.dropped_in_flight;
        self.reopened += part.reopened;
        self.retries_followed += part.retries_followed;
        for (what, n) in part.outside_envelope {
            *self.outside_envelope.entry(what).or_default() += n;
        }
    }
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}
