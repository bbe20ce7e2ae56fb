//! The lock's history, replayed: each scenario runs many tasks that take
//! one lock, do their work inside, and leave, and counts what a lock exists
//! to prevent. The timings make each pitfall certain rather than likely:
//! the work or the pause is longer than the expiry, and the other tasks
//! retry every millisecond, so someone is always ready to walk in.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use hmdp_redis::Redis;
use redis::AsyncCommands;
use serde::Serialize;

use super::experiment::{Experiment, LOCK_WAIT};
use hmdp::{
    Config,
    lock::{Holder, LockConfig, LockService},
};

/// The expiry the scenarios give their lock.
const TTL: Duration = Duration::from_millis(100);
/// How long a waiter of the never-expiring lock keeps trying.
const GIVE_UP: Duration = Duration::from_millis(1_000);
const SPIN: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockScenario {
    /// `SETNX` without expiry; the first holder crashes inside.
    SetnxNoExpiry,
    /// `SET NX PX`, work longer than the expiry, release by plain `DEL`.
    ExpiryNoOwnerCheck,
    /// `GET` = me, a pause (a GC, a page fault) longer than what is left of
    /// the expiry, then `DEL`.
    CheckThenDelete,
    /// The service's lock with a fixed lease shorter than the work.
    LeaseShorterThanWork,
    /// The service's lock with its watchdog, work longer than the lease.
    Watchdog,
}

impl LockScenario {
    pub fn of(experiment: Experiment) -> Option<Self> {
        Some(match experiment {
            Experiment::SetnxNoExpiry => Self::SetnxNoExpiry,
            Experiment::ExpiryNoOwnerCheck => Self::ExpiryNoOwnerCheck,
            Experiment::CheckThenDelete => Self::CheckThenDelete,
            Experiment::LeaseShorterThanWork => Self::LeaseShorterThanWork,
            Experiment::Watchdog => Self::Watchdog,
            _ => return None,
        })
    }

    pub fn experiment(self) -> Experiment {
        match self {
            Self::SetnxNoExpiry => Experiment::SetnxNoExpiry,
            Self::ExpiryNoOwnerCheck => Experiment::ExpiryNoOwnerCheck,
            Self::CheckThenDelete => Experiment::CheckThenDelete,
            Self::LeaseShorterThanWork => Experiment::LeaseShorterThanWork,
            Self::Watchdog => Experiment::Watchdog,
        }
    }

    /// What the scenario must show, or `None` when it must show nothing.
    pub fn expected_failure(self) -> Option<&'static str> {
        match self {
            Self::SetnxNoExpiry => Some("every waiter deadlocked"),
            Self::ExpiryNoOwnerCheck => Some("two holders inside, and a lock deleted by a non-owner"),
            Self::CheckThenDelete => Some("two holders inside, and a lock deleted by a non-owner"),
            Self::LeaseShorterThanWork => Some("two holders inside"),
            Self::Watchdog => None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockRun {
    pub scenario: LockScenario,
    pub name: &'static str,
    pub tasks: usize,
    pub acquisitions: u64,
    /// Entries made while another holder was inside.
    pub overlaps: u64,
    /// Releases that deleted a lock another holder had taken.
    pub foreign_deletes: u64,
    /// Holders that found, at release, that their lease had run out.
    pub lost_leases: u64,
    /// Waiters that never got the lock.
    pub deadlocked: u64,
    pub wall_ms: u64,
}

impl LockRun {
    /// Whether the run showed what its scenario must show (the failure, or
    /// for the watchdog, nothing at all).
    pub fn as_expected(&self) -> bool {
        match self.scenario {
            LockScenario::SetnxNoExpiry => self.deadlocked > 0 && self.deadlocked as usize == self.tasks - 1,
            LockScenario::ExpiryNoOwnerCheck | LockScenario::CheckThenDelete => {
                self.overlaps > 0 && self.foreign_deletes > 0
            }
            LockScenario::LeaseShorterThanWork => self.overlaps > 0,
            LockScenario::Watchdog => {
                self.overlaps == 0 && self.foreign_deletes == 0 && self.lost_leases == 0 && self.deadlocked == 0
            }
        }
    }

    pub fn one_line(&self) -> String {
        format!(
            "{:<36} acquisitions {:>4}  overlaps {:>3}  foreign deletes {:>3}  lost leases {:>3}  deadlocked {:>3}  {}",
            self.name,
            self.acquisitions,
            self.overlaps,
            self.foreign_deletes,
            self.lost_leases,
            self.deadlocked,
            if self.as_expected() { "as expected" } else { "UNEXPECTED" }
        )
    }
}

/// Who is inside the critical section right now, and how often two were.
#[derive(Default)]
struct Room {
    inside: AtomicUsize,
    overlaps: AtomicU64,
    acquisitions: AtomicU64,
    foreign_deletes: AtomicU64,
    lost_leases: AtomicU64,
    deadlocked: AtomicU64,
}

impl Room {
    async fn work(&self, how_long: Duration) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        if self.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(how_long).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

pub async fn run(
    _config: &Config,
    prefix: &str,
    redis: Redis,
    scenario: LockScenario,
    tasks: usize,
    rounds: usize,
) -> anyhow::Result<LockRun> {
    let key = format!("{prefix}lockpit:{}:{}", scenario.experiment().name().replace(' ', "-"), uuid::Uuid::new_v4());
    let room = Arc::new(Room::default());
    let service = matches!(scenario, LockScenario::LeaseShorterThanWork | LockScenario::Watchdog)
        .then(|| LockService::new(redis.clone(), LockConfig { watchdog_ttl: TTL }));
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (room, key, mut redis, service) = (room.clone(), key.clone(), redis.clone(), service.clone());
        handles.push(tokio::spawn(async move {
            let rounds = if scenario == LockScenario::SetnxNoExpiry { 1 } else { rounds };
            for _ in 0..rounds {
                let done = match scenario {
                    LockScenario::SetnxNoExpiry => setnx_no_expiry(&mut redis, &key, &room, task == 0).await,
                    LockScenario::ExpiryNoOwnerCheck => expiry_no_owner_check(&mut redis, &key, &room).await,
                    LockScenario::CheckThenDelete => check_then_delete(&mut redis, &key, &room).await,
                    LockScenario::LeaseShorterThanWork | LockScenario::Watchdog => {
                        let lease = (scenario == LockScenario::LeaseShorterThanWork).then_some(TTL);
                        service_lock(service.as_ref().expect("built above"), &key, &room, lease).await
                    }
                };
                done?;
            }
            anyhow::Ok(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let mut redis = redis;
    let _: () = redis.del(&key).await?;
    Ok(LockRun {
        scenario,
        name: scenario.experiment().name(),
        tasks,
        acquisitions: room.acquisitions.load(Ordering::Relaxed),
        overlaps: room.overlaps.load(Ordering::Relaxed),
        foreign_deletes: room.foreign_deletes.load(Ordering::Relaxed),
        lost_leases: room.lost_leases.load(Ordering::Relaxed),
        deadlocked: room.deadlocked.load(Ordering::Relaxed),
        wall_ms: started.elapsed().as_millis() as u64,
    })
}

/// Task 0 takes the lock and crashes inside; the others wait in vain,
/// because nothing ever removes a key without an expiry.
async fn setnx_no_expiry(redis: &mut Redis, key: &str, room: &Room, crashes: bool) -> anyhow::Result<()> {
    if crashes {
        let taken: bool = redis.set_nx(key, "holder-0").await?;
        anyhow::ensure!(taken, "the crashing holder must be first");
        room.acquisitions.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    // Let the crashing holder be first, as in the story.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        let taken: bool = redis.set_nx(key, "waiter").await?;
        if taken {
            room.work(Duration::ZERO).await;
            let _: () = redis.del(key).await?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    room.deadlocked.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// `SET key me NX PX ttl`, retried every millisecond.
async fn take(redis: &mut Redis, key: &str, me: &str) -> anyhow::Result<()> {
    let options = redis::SetOptions::default()
        .conditional_set(redis::ExistenceCheck::NX)
        .with_expiration(redis::SetExpiry::PX(TTL.as_millis() as u64));
    loop {
        let reply: Option<String> = redis.set_options(key, me, options.clone()).await?;
        if reply.is_some() {
            return Ok(());
        }
        tokio::time::sleep(SPIN).await;
    }
}

/// Whose lock a `DEL` is about to remove, read only to count it.
async fn count_foreign_delete(redis: &mut Redis, key: &str, me: &str, room: &Room) -> anyhow::Result<()> {
    let owner: Option<String> = redis.get(key).await?;
    if owner.is_some_and(|owner| owner != me) {
        room.foreign_deletes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

async fn expiry_no_owner_check(redis: &mut Redis, key: &str, room: &Room) -> anyhow::Result<()> {
    let me = uuid::Uuid::new_v4().to_string();
    take(redis, key, &me).await?;
    room.work(TTL * 2).await;
    count_foreign_delete(redis, key, &me, room).await?;
    let _: () = redis.del(key).await?;
    Ok(())
}

/// Work 0.6 × ttl, then the check, then a 0.7 × ttl pause: the lock expires
/// during the pause, the next holder walks in at 1.0 and works until 1.6,
/// and this holder's `DEL` at 1.3 removes that holder's lock, letting a
/// third in beside it.
async fn check_then_delete(redis: &mut Redis, key: &str, room: &Room) -> anyhow::Result<()> {
    let me = uuid::Uuid::new_v4().to_string();
    take(redis, key, &me).await?;
    room.work(TTL * 6 / 10).await;
    let owner: Option<String> = redis.get(key).await?;
    if owner.as_deref() == Some(me.as_str()) {
        tokio::time::sleep(TTL * 7 / 10).await;
        count_foreign_delete(redis, key, &me, room).await?;
        let _: () = redis.del(key).await?;
    }
    Ok(())
}

/// The service's lock, by its own API: `lease` fixed, or `None` for the
/// watchdog. Work lasts 1.5 × ttl either way.
async fn service_lock(locks: &LockService, key: &str, room: &Room, lease: Option<Duration>) -> anyhow::Result<()> {
    let holder = Holder::random();
    let guard = locks.try_lock(key, &holder, LOCK_WAIT, lease).await?.ok_or_else(|| anyhow::anyhow!("lock wait"))?;
    room.work(TTL * 3 / 2).await;
    // A lease that ran out is refused at release: the owner check holds.
    if guard.unlock().await.is_err() {
        room.lost_leases.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
