//! A reentrant distributed lock on Redis, modelled on Redisson's RLock: a
//! hash per lock (owner -> hold count), a watchdog that renews the lease
//! while the lock is held, owner-checked unlock and renewal, and pub/sub
//! wake-ups for waiters. It adds what Redisson users keep asking for: a
//! fencing token per acquisition, an explicit holder id (tokio tasks have no
//! thread id), and a `lost` signal so a holder can stop before it acts
//! without the lock.
//!
//! Every script touches only keys sharing the lock's hash tag, so it runs
//! unchanged on Redis Cluster. A name without a tag (`{...}`) is wrapped in
//! one.
//!
//! Dropping a guard without `unlock` releases it in the background (like a
//! `MutexGuard`) when a tokio runtime is there to do it; either way the
//! watchdog stops, so the lease frees the lock within its TTL even when the
//! release cannot run (process crash, Redis unreachable, no runtime). A
//! guard leaked with `mem::forget` keeps its watchdog running like a
//! leaked `MutexGuard` keeps its mutex: until the process exits.

mod metrics;
mod wakeups;
mod watchdog;

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use hmdp_redis::Redis;
use redis::Script;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use uuid::Uuid;

pub use metrics::{LockMetrics, LockMetricsSnapshot};
pub use wakeups::RELEASE_CHANNEL_PREFIX;
use watchdog::{Hold, Holds, Lease, Renewer};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock_acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock_release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/lock_renew.lua")));

/// Redisson's default watchdog lease.
pub const DEFAULT_WATCHDOG_TTL: Duration = Duration::from_secs(30);
/// When Redis reports a key without TTL (should not happen), retry this soon.
const FALLBACK_RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct LockConfig {
    /// Lease of watchdog-mode locks, renewed every third of it.
    pub watchdog_ttl: Duration,
}

impl Default for LockConfig {
    fn default() -> Self {
        Self { watchdog_ttl: DEFAULT_WATCHDOG_TTL }
    }
}

/// Who holds a lock inside this process. Re-entry means the same holder
/// acquiring again; two requests of one user are two holders.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder(String);

impl Holder {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn random() -> Self {
        Self(Uuid::new_v4().simple().to_string())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Unlock by a holder that does not hold the lock: never held it, has
    /// already released every hold, or its lease ran out.
    #[error("lock {0} is not held by this holder")]
    NotHeld(String),
    #[error("unexpected reply from a lock script: {0:?}")]
    Protocol(Vec<i64>),
}

impl LockError {
    /// Redis could not be reached, did not answer in time, or cannot serve
    /// yet (LOADING after a restart, a cluster mid-failover).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Redis(e) if hmdp_redis::unavailable(e))
    }
}

/// The result of an unlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlocked {
    /// The last hold went; the lock is free and waiters were told.
    Released,
    /// The holder still holds it this many times (re-entry).
    StillHeld(usize),
}

/// The process-wide lock client: one per instance, cloned freely.
#[derive(Clone)]
pub struct LockService {
    inner: Arc<Inner>,
}

struct Inner {
    redis: Redis,
    instance: Uuid,
    config: LockConfig,
    waiters: Arc<wakeups::Waiters>,
    holds: Holds,
    metrics: LockMetrics,
    /// Stops the pub/sub listener and the watchdog ticker.
    stop_listener: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_listener.cancel();
    }
}

/// The keys one lock touches, on one cluster slot.
#[derive(Clone)]
struct LockKeys {
    lock: String,
    fence: String,
    channel: String,
}

impl LockKeys {
    fn for_name(name: &str) -> Self {
        let tagged = match name.find('{') {
            Some(open) if name[open + 1..].find('}').is_some_and(|close| close > 0) => name.to_owned(),
            _ => format!("{{{name}}}"),
        };
        Self { fence: format!("{tagged}:fence"), channel: format!("{RELEASE_CHANNEL_PREFIX}{tagged}"), lock: tagged }
    }
}

enum Attempt {
    Acquired { fence: u64, first: bool },
    HeldByOther { pttl: Option<Duration> },
}

impl LockService {
    /// `redis` carries the scripts; the one pub/sub connection of this
    /// process goes to a node of the same endpoint (any node of a cluster).
    pub fn new(redis: Redis, config: LockConfig) -> Self {
        let waiters = Arc::new(wakeups::Waiters::default());
        let stop_listener = CancellationToken::new();
        let nodes = redis.endpoint().subscribe_clients();
        tokio::spawn(wakeups::listen(nodes, waiters.clone(), stop_listener.clone()));
        let watchdog_ttl = config.watchdog_ttl;
        let inner = Arc::new(Inner {
            redis,
            instance: Uuid::new_v4(),
            config,
            waiters,
            holds: Holds::default(),
            metrics: LockMetrics::default(),
            stop_listener: stop_listener.clone(),
        });
        tokio::spawn(watchdog::run_ticker(Arc::downgrade(&inner), watchdog_ttl, stop_listener));
        Self { inner }
    }

    /// The instance half of every owner field this service writes.
    pub fn instance(&self) -> Uuid {
        self.inner.instance
    }

    /// The field this holder has in a lock hash.
    pub fn owner_field(&self, holder: &Holder) -> String {
        format!("{}:{}", self.inner.instance, holder.0)
    }

    /// The Redis key of the lock called `name`.
    pub fn key_of(name: &str) -> String {
        LockKeys::for_name(name).lock
    }

    pub fn metrics(&self) -> LockMetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Tries to take `name` for `holder`, waiting up to `wait` (zero: one
    /// try). `lease: None` holds it until unlock, renewed by the watchdog;
    /// `Some(d)` holds it at most `d`, without renewal. `Ok(None)` when
    /// another owner kept it for the whole wait.
    pub async fn try_lock(
        &self,
        name: &str,
        holder: &Holder,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>, LockError> {
        let keys = LockKeys::for_name(name);
        let owner = self.owner_field(holder);
        let lease = match lease {
            Some(d) => Lease::Fixed(d),
            None => Lease::Watchdog(self.inner.config.watchdog_ttl),
        };
        let deadline = Instant::now() + wait;

        let mut ticket = None;
        loop {
            // Register interest before trying, so a release between the try
            // and the wait still wakes us.
            let notified = ticket.as_ref().map(|t: &wakeups::WaitTicket| t.notify.clone().notified_owned());
            let mut notified = notified.map(Box::pin);
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let sent_at = Instant::now();
            match self.attempt(&keys, &owner, lease).await? {
                Attempt::Acquired { fence, first } => {
                    return Ok(Some(self.guard(&keys, owner, lease, sent_at, fence, first)));
                }
                Attempt::HeldByOther { pttl } => {
                    LockMetrics::bump(&self.inner.metrics.contended);
                    let now = Instant::now();
                    if now >= deadline {
                        if !wait.is_zero() {
                            LockMetrics::bump(&self.inner.metrics.wait_timeouts);
                        }
                        return Ok(None);
                    }
                    if ticket.is_none() {
                        // First miss: register, then try once more right away.
                        ticket = Some(self.inner.waiters.register(&keys.lock));
                        continue;
                    }
                    let pause = pttl.unwrap_or(FALLBACK_RETRY).min(deadline - now);
                    match notified {
                        Some(n) => tokio::select! {
                            () = n => {}
                            () = tokio::time::sleep(pause) => {}
                        },
                        None => tokio::time::sleep(pause).await,
                    }
                }
            }
        }
    }

    /// Owner-checked unlock by name, for a holder that no longer has its
    /// guard (Redisson's `unlock()` by thread). Releasing more times than
    /// acquired is an error, never a silent success.
    pub async fn unlock(&self, name: &str, holder: &Holder) -> Result<Unlocked, LockError> {
        let keys = LockKeys::for_name(name);
        let owner = self.owner_field(holder);
        self.inner.release(&keys, &owner, self.inner.config.watchdog_ttl).await
    }

    async fn attempt(&self, keys: &LockKeys, owner: &str, lease: Lease) -> Result<Attempt, LockError> {
        let ttl = lease.ttl();
        let reply: Vec<i64> = ACQUIRE
            .key(&keys.lock)
            .key(&keys.fence)
            .arg(millis(ttl))
            .arg(owner)
            .invoke_async(&mut self.inner.redis.clone())
            .await?;
        match reply.as_slice() {
            [1, fence] => {
                LockMetrics::bump(&self.inner.metrics.acquired);
                Ok(Attempt::Acquired { fence: *fence as u64, first: true })
            }
            [2, fence, _holds] => {
                LockMetrics::bump(&self.inner.metrics.reentered);
                Ok(Attempt::Acquired { fence: *fence as u64, first: false })
            }
            [0, pttl] => Ok(Attempt::HeldByOther { pttl: (*pttl > 0).then(|| Duration::from_millis(*pttl as u64)) }),
            _ => Err(LockError::Protocol(reply)),
        }
    }

    fn guard(
        &self,
        keys: &LockKeys,
        owner: String,
        lease: Lease,
        sent_at: Instant,
        fence: u64,
        first: bool,
    ) -> LockGuard {
        let hold = self.inner.holds.acquired(&self.inner, (keys.lock.clone(), owner.clone()), lease, sent_at, first);
        LockGuard { service: self.clone(), keys: keys.clone(), owner, lease: lease.ttl(), fence, hold, released: false }
    }
}

impl Inner {
    async fn release(&self, keys: &LockKeys, owner: &str, lease: Duration) -> Result<Unlocked, LockError> {
        let remaining: i64 = RELEASE
            .key(&keys.lock)
            .arg(owner)
            .arg(millis(lease))
            .arg(&keys.channel)
            .invoke_async(&mut self.redis.clone())
            .await?;
        match remaining {
            -1 => Err(LockError::NotHeld(keys.lock.clone())),
            0 => {
                self.holds.released_last(&(keys.lock.clone(), owner.to_owned()));
                Ok(Unlocked::Released)
            }
            n if n > 0 => Ok(Unlocked::StillHeld(n as usize)),
            n => Err(LockError::Protocol(vec![n])),
        }
    }
}

impl Renewer for Inner {
    fn holds(&self) -> &Holds {
        &self.holds
    }

    fn metrics(&self) -> &LockMetrics {
        &self.metrics
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> redis::RedisResult<bool> {
        let renewed: i64 = RENEW.key(key).arg(millis(ttl)).arg(owner).invoke_async(&mut self.redis.clone()).await?;
        Ok(renewed == 1)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// One hold of a lock. Unlock it with [`LockGuard::unlock`]; watch
/// [`LockGuard::lost`] to stop before acting without the lock.
pub struct LockGuard {
    service: LockService,
    keys: LockKeys,
    owner: String,
    lease: Duration,
    fence: u64,
    hold: Arc<Hold>,
    released: bool,
}

impl LockGuard {
    /// Increases with every first acquisition of this lock name; hand it to
    /// the resource you protect so it can refuse a stale holder.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    pub fn key(&self) -> &str {
        &self.keys.lock
    }

    /// True once the hold ended without an unlock.
    pub fn is_lost(&self) -> bool {
        self.hold.lost.is_cancelled()
    }

    /// Resolves when the hold ends without an unlock; select on it.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.hold.lost.clone().cancelled_owned()
    }

    /// A token cancelled when the hold ends without an unlock, for code that
    /// acts on the holder's behalf elsewhere (another task); cancelling it
    /// there does not touch the hold.
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.lost.child_token()
    }

    /// Releases this hold (one level of re-entry). When the release fails
    /// (Redis unreachable, the lease already gone), renewal stops all the
    /// same, as Redisson's does: the lease then frees the lock within its
    /// TTL instead of the watchdog keeping it for as long as the process
    /// lives.
    pub async fn unlock(mut self) -> Result<Unlocked, LockError> {
        self.released = true;
        let inner = &self.service.inner;
        let released = inner.release(&self.keys, &self.owner, self.lease).await;
        if released.is_err() {
            inner.holds.lost(&**inner, &(self.keys.lock.clone(), self.owner.clone()), &self.hold);
        }
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        LockMetrics::bump(&self.service.inner.metrics.abandoned);
        let inner = self.service.inner.clone();
        let keys = self.keys.clone();
        let owner = std::mem::take(&mut self.owner);
        let hold = self.hold.clone();
        let lease = self.lease;
        // Whatever happens to the release, renewal stops: the lease frees
        // the lock within its TTL.
        let give_up = move |inner: &Inner, keys: LockKeys, owner: String| {
            inner.holds.lost(inner, &(keys.lock, owner), &hold);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(err) = inner.release(&keys, &owner, lease).await {
                        tracing::warn!(lock = %keys.lock, error = %err, "releasing a dropped lock guard failed; its lease will free it");
                        give_up(&inner, keys, owner);
                    }
                });
            }
            Err(_) => give_up(&inner, keys, owner),
        }
    }
}
