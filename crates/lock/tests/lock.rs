//! The reentrant distributed lock against a real Redis. Two `LockService`s
//! with their own connections stand in for two instances.

use std::time::{Duration, Instant};

use hmdp_fault_proxy::{Proxy, redis_url};
use hmdp_lock::{Holder, LockConfig, LockError, LockService, Unlocked};
use hmdp_redis::{Endpoint, Redis};
use redis::AsyncCommands;

/// One Redis at `url`, or the cluster of `nodes`.
async fn connect(url: &str, nodes: Option<&str>) -> Redis {
    Endpoint::new(url, nodes).unwrap().connect(Duration::from_secs(10)).await.expect("connecting to the test Redis")
}

/// A service on one Redis at `url` (a fault proxy), whatever the suite runs on.
async fn service_at(url: &str, watchdog_ttl: Duration) -> LockService {
    LockService::new(connect(url, None).await, LockConfig { watchdog_ttl })
}

/// A service on the Redis (or cluster) the suite runs on.
async fn service(watchdog_ttl: Duration) -> LockService {
    LockService::new(redis().await, LockConfig { watchdog_ttl })
}

/// REDIS_URL, or the cluster of REDIS_CLUSTER_NODES when that is set
/// (scripts/check-stack runs this suite a second time on the local cluster).
async fn redis() -> Redis {
    let nodes = std::env::var("REDIS_CLUSTER_NODES").ok().filter(|n| !n.trim().is_empty());
    connect(&redis_url(), nodes.as_deref()).await
}

/// The one Redis behind the fault proxy: a test that cuts a proxy keeps
/// every party on that Redis, even when the suite runs on the cluster.
async fn proxied_redis() -> Redis {
    connect(&redis_url(), None).await
}

/// A lock name no other test uses, with a hash tag like the order lock.
fn unique_name() -> String {
    format!("test:lock:{{{}}}", uuid::Uuid::new_v4().simple())
}

const NO_WAIT: Duration = Duration::ZERO;

#[tokio::test]
async fn sixty_four_tasks_on_two_clients_never_overlap() {
    let name = unique_name();
    let counter_key = format!("{name}:counter");
    let services = [service(Duration::from_secs(30)).await, service(Duration::from_secs(30)).await];
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let service = services[t % 2].clone();
            let name = name.clone();
            let counter_key = counter_key.clone();
            tokio::spawn(async move {
                let mut redis = redis().await;
                let holder = Holder::random();
                for _ in 0..50 {
                    let guard = service
                        .try_lock(&name, &holder, Duration::from_secs(60), None)
                        .await
                        .unwrap()
                        .expect("acquired within the wait");
                    // Read, yield, write: loses updates unless exclusive.
                    let value: i64 = redis.get(&counter_key).await.unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = redis.set(&counter_key, value + 1).await.unwrap();
                    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut redis = redis().await;
    let total: i64 = redis.get(&counter_key).await.unwrap();
    assert_eq!(total, 64 * 50);
    let exists: bool = redis.exists(LockService::key_of(&name)).await.unwrap();
    assert!(!exists, "the lock is free at the end");
    let m0 = services[0].metrics();
    let m1 = services[1].metrics();
    assert_eq!(m0.acquired + m1.acquired, 64 * 50);
    assert!(m0.contended + m1.contended > 0, "the test really contended");
    let _: () = redis.del(&[counter_key, format!("{name}:fence")]).await.unwrap();
}

#[tokio::test]
async fn reentry_three_deep_holds_until_the_third_unlock() {
    let locks = service(Duration::from_secs(30)).await;
    let other = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let key = LockService::key_of(&name);
    let holder = Holder::random();
    let field = locks.owner_field(&holder);
    let mut redis = redis().await;

    let g1 = locks.try_lock(&name, &holder, NO_WAIT, None).await.unwrap().unwrap();
    let g2 = locks.try_lock(&name, &holder, NO_WAIT, None).await.unwrap().unwrap();
    let g3 = locks.try_lock(&name, &holder, NO_WAIT, None).await.unwrap().unwrap();
    let holds: i64 = redis.hget(&key, &field).await.unwrap();
    assert_eq!(holds, 3);
    assert_eq!(g1.fencing_token(), g3.fencing_token(), "re-entry keeps the fence");
    assert_eq!(locks.metrics().reentered, 2);

    assert_eq!(g3.unlock().await.unwrap(), Unlocked::StillHeld(2));
    assert!(other.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().is_none());
    assert_eq!(g2.unlock().await.unwrap(), Unlocked::StillHeld(1));
    let holds: i64 = redis.hget(&key, &field).await.unwrap();
    assert_eq!(holds, 1);
    assert!(other.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().is_none());
    assert_eq!(g1.unlock().await.unwrap(), Unlocked::Released);
    let exists: bool = redis.exists(&key).await.unwrap();
    assert!(!exists);
    let taken = other.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap();
    taken.expect("free after the third unlock").unlock().await.unwrap();
    // The fencing counter outlives the lock, but not for ever.
    let fence_ttl: i64 = redis.pttl(format!("{key}:fence")).await.unwrap();
    assert!(fence_ttl > 6 * 24 * 3_600_000, "the fence counter expires a week after its last use: {fence_ttl}");
}

#[tokio::test]
async fn a_non_owner_cannot_unlock_and_a_double_unlock_is_an_error() {
    let locks = service(Duration::from_secs(30)).await;
    let other_instance = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let owner = Holder::random();
    let guard = locks.try_lock(&name, &owner, NO_WAIT, None).await.unwrap().unwrap();

    let stranger = Holder::random();
    assert!(matches!(locks.unlock(&name, &stranger).await, Err(LockError::NotHeld(_))));
    // The same holder id on another instance is another owner.
    assert!(matches!(other_instance.unlock(&name, &owner).await, Err(LockError::NotHeld(_))));
    let holds: i64 = redis().await.hget(LockService::key_of(&name), locks.owner_field(&owner)).await.unwrap();
    assert_eq!(holds, 1, "refused unlocks changed nothing");

    assert_eq!(guard.unlock().await.unwrap(), Unlocked::Released);
    assert!(matches!(locks.unlock(&name, &owner).await, Err(LockError::NotHeld(_))));
}

#[tokio::test]
async fn a_fixed_lease_expires_and_another_holder_gets_the_lock() {
    let locks = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let first =
        locks.try_lock(&name, &Holder::random(), NO_WAIT, Some(Duration::from_millis(200))).await.unwrap().unwrap();
    let pttl: i64 = redis().await.pttl(LockService::key_of(&name)).await.unwrap();
    assert!((1..=200).contains(&pttl), "pttl {pttl}");

    let started = Instant::now();
    let second = locks
        .try_lock(&name, &Holder::random(), Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("acquired after the lease ran out");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(first.is_lost(), "the first holder is told its lease ran out");
    assert!(second.fencing_token() > first.fencing_token());
    assert!(matches!(first.unlock().await, Err(LockError::NotHeld(_))));
    second.unlock().await.unwrap();
}

#[tokio::test]
async fn an_unlock_that_fails_stops_the_renewal_so_the_lease_frees_the_lock() {
    let ttl = Duration::from_millis(600);
    let proxy = Proxy::to_redis().await;
    let flaky = service_at(&proxy.redis_url(), ttl).await;
    let name = unique_name();
    let key = LockService::key_of(&name);
    let guard = flaky.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();

    // Redis blips exactly during the unlock, then comes back.
    proxy.cut();
    assert!(guard.unlock().await.is_err(), "the release could not reach Redis");
    proxy.restore();

    // Without renewal the key is gone within its lease; a watchdog that
    // kept renewing would hold it for as long as the process lives.
    let started = Instant::now();
    let mut redis = proxied_redis().await;
    while redis.exists::<_, bool>(&key).await.unwrap() {
        assert!(started.elapsed() < ttl * 4, "the lock is still held {:?} after the failed unlock", started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And it can be taken again.
    let other = service_at(&redis_url(), ttl).await;
    let again = other.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().expect("free again");
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn a_fixed_lease_holder_is_told_it_lost_the_lock_while_the_key_still_guards_it() {
    let locks = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let guard =
        locks.try_lock(&name, &Holder::random(), NO_WAIT, Some(Duration::from_millis(200))).await.unwrap().unwrap();
    guard.lost().await;
    // Nobody else can have the lock yet: the holder heard first.
    let pttl: i64 = redis().await.pttl(LockService::key_of(&name)).await.unwrap();
    assert!(pttl > 0, "the key expired before its holder was told (pttl {pttl})");
}

#[tokio::test]
async fn the_watchdog_keeps_a_lock_across_five_ttls_and_stops_after_unlock() {
    let ttl = Duration::from_millis(300);
    let locks = service(ttl).await;
    let other = service(ttl).await;
    let name = unique_name();
    let key = LockService::key_of(&name);
    let guard = locks.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();

    tokio::time::sleep(ttl * 5).await;
    assert!(!guard.is_lost());
    let pttl: i64 = redis().await.pttl(&key).await.unwrap();
    assert!(pttl > 0, "still held after 5 x ttl (pttl {pttl})");
    assert!(other.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().is_none());
    let renewals = locks.metrics().renewals;
    assert!(renewals >= 5, "renewed {renewals} times");

    guard.unlock().await.unwrap();
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(locks.metrics().renewals, renewals, "no renewal after the unlock");
    let exists: bool = redis().await.exists(&key).await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_holder_cut_off_from_redis_is_told_it_lost_the_lock_before_another_gets_it() {
    let ttl = Duration::from_secs(1);
    let proxy = Proxy::to_redis().await;
    let doomed = service_at(&proxy.redis_url(), ttl).await;
    let healthy = service_at(&redis_url(), ttl).await;
    let name = unique_name();
    let guard = doomed.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();
    let acquired_at = Instant::now();

    // The holder's instance "crashes" for Redis: its renewals cannot arrive.
    proxy.cut();
    let lost = tokio::spawn({
        let lost = guard.lost();
        async move {
            lost.await;
            Instant::now()
        }
    });
    let second = healthy
        .try_lock(&name, &Holder::random(), Duration::from_secs(10), None)
        .await
        .unwrap()
        .expect("the TTL frees the lock");
    let second_at = Instant::now();
    let lost_at = tokio::time::timeout(Duration::from_secs(5), lost).await.expect("lost fired").unwrap();

    assert!(guard.is_lost());
    assert!(lost_at <= second_at, "lost must be reported before another owner holds the lock");
    assert!(
        second_at - acquired_at >= ttl - Duration::from_millis(50),
        "not before the TTL: {:?}",
        second_at - acquired_at
    );
    assert!(doomed.metrics().lost >= 1);
    second.unlock().await.unwrap();
}

#[tokio::test]
async fn a_deleted_lock_is_reported_lost_by_the_watchdog() {
    let ttl = Duration::from_millis(300);
    let locks = service(ttl).await;
    let name = unique_name();
    let guard = locks.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();
    let _: () = redis().await.del(LockService::key_of(&name)).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), guard.lost()).await.expect("lost within a renewal period");
    assert_eq!(locks.metrics().lost, 1);
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_long_before_the_ttl() {
    let holder_side = service(Duration::from_secs(30)).await;
    let waiter_side = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let guard = holder_side.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();

    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let got = waiter_side.try_lock(&name, &Holder::random(), Duration::from_secs(20), None).await.unwrap();
            (got.map(|g| g.fencing_token()), Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    guard.unlock().await.unwrap();
    let (token, acquired_at) = tokio::time::timeout(Duration::from_secs(25), waiter).await.unwrap().unwrap();
    assert!(token.is_some());
    // Without the wake-up the waiter would sleep min(pttl ~30 s, wait 20 s).
    let delay = acquired_at - released_at;
    assert!(delay < Duration::from_secs(3), "woken after {delay:?}");
}

#[tokio::test]
async fn a_waiter_gives_up_after_its_wait() {
    let locks = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let guard = locks.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();
    let started = Instant::now();
    let got = locks.try_lock(&name, &Holder::random(), Duration::from_millis(300), None).await.unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(locks.metrics().wait_timeouts, 1);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let services = [service(Duration::from_secs(30)).await, service(Duration::from_secs(30)).await];
    let name = unique_name();
    let mut last = 0;
    for i in 0..10 {
        let guard =
            services[i % 2].try_lock(&name, &Holder::random(), Duration::from_secs(5), None).await.unwrap().unwrap();
        assert!(guard.fencing_token() > last, "{} after {last}", guard.fencing_token());
        last = guard.fencing_token();
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_dropped_guard_is_released_in_the_background() {
    let locks = service(Duration::from_secs(30)).await;
    let name = unique_name();
    let guard = locks.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();
    drop(guard);
    let next = locks.try_lock(&name, &Holder::random(), Duration::from_secs(5), None).await.unwrap();
    assert!(next.is_some(), "freed without waiting for the 30 s lease");
    assert_eq!(locks.metrics().abandoned, 1);
}

#[tokio::test]
async fn a_dropped_guard_that_cannot_reach_redis_is_freed_by_its_ttl() {
    let ttl = Duration::from_millis(500);
    let proxy = Proxy::to_redis().await;
    let cut_off = service_at(&proxy.redis_url(), ttl).await;
    let healthy = service_at(&redis_url(), ttl).await;
    let name = unique_name();
    let key = LockService::key_of(&name);
    let guard = cut_off.try_lock(&name, &Holder::random(), NO_WAIT, None).await.unwrap().unwrap();
    proxy.cut();
    drop(guard);
    // The background release fails (it counts the hold lost); only then
    // does Redis come back, so a watchdog still renewing would now reach it.
    let started = Instant::now();
    while cut_off.metrics().lost == 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "the background release never gave up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.restore();
    let restored = Instant::now();
    let mut redis = proxied_redis().await;
    while redis.exists::<_, bool>(&key).await.unwrap() {
        assert!(restored.elapsed() < ttl * 4, "the lock is still held {:?} after Redis came back", restored.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = healthy.try_lock(&name, &Holder::random(), Duration::from_secs(10), None).await.unwrap();
    assert!(next.is_some(), "the lease freed it");
}

#[test]
fn a_name_without_a_hash_tag_gets_one() {
    assert_eq!(LockService::key_of("lock:order:{42}"), "lock:order:{42}");
    assert_eq!(LockService::key_of("plain"), "{plain}");
    assert_eq!(LockService::key_of("empty:{}"), "{empty:{}}");
}
