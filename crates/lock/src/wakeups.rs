//! Release notifications. One pattern subscription per process serves every
//! waiter (not a connection per waiter); a waiter registers interest in one
//! lock and is woken when its release message arrives. Messages are only a
//! shortcut: a waiter also retries on its own after the lock's pttl, so a
//! lost message or a broken subscription only delays it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Every release is published on `<RELEASE_CHANNEL_PREFIX><lock key>`.
pub const RELEASE_CHANNEL_PREFIX: &str = "lock-released:";

#[derive(Default)]
pub(super) struct Waiters {
    by_key: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
}

/// Interest in one lock's release; dropping it withdraws the interest.
pub(super) struct WaitTicket {
    waiters: Arc<Waiters>,
    key: String,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub(super) fn register(self: &Arc<Self>, key: &str) -> WaitTicket {
        let mut map = self.by_key.lock().expect("waiters poisoned");
        let entry = map.entry(key.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        WaitTicket { waiters: self.clone(), key: key.to_owned(), notify: entry.0.clone() }
    }

    fn wake(&self, key: &str) {
        if let Some((notify, _)) = self.by_key.lock().expect("waiters poisoned").get(key) {
            notify.notify_waiters();
        }
    }

    /// After a reconnect, messages may have been missed: everyone retries.
    fn wake_all(&self) {
        for (notify, _) in self.by_key.lock().expect("waiters poisoned").values() {
            notify.notify_waiters();
        }
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let mut map = self.waiters.by_key.lock().expect("waiters poisoned");
        if let Some(entry) = map.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Keeps one PSUBSCRIBE alive until `stop` (`hmdp_redis::subscription`);
/// after a reconnect messages may have been missed, so everyone retries.
pub(super) async fn listen(nodes: Vec<redis::Client>, waiters: Arc<Waiters>, stop: CancellationToken) {
    let pattern = format!("{RELEASE_CHANNEL_PREFIX}*");
    hmdp_redis::subscription::listen(
        nodes,
        &pattern,
        "lock releases",
        || waiters.wake_all(),
        |msg| {
            if let Some(key) = msg.get_channel_name().strip_prefix(RELEASE_CHANNEL_PREFIX) {
                waiters.wake(key);
            }
        },
        stop.cancelled(),
    )
    .await;
}
