//! The group `WAIT` against a real Redis (`REDIS_URL`, default the local
//! one), which has no replica: every `WAIT` runs out its timeout, the case
//! that used to queue every accepted order behind the one before it. (With
//! a replica: tests/replica_wait.rs.)

use std::time::Duration;

use hmdp_redis::{Endpoint, Redis, barrier::ReplicaBarrier};
use redis::AsyncCommands;

async fn wait_calls(redis: &mut Redis) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(redis).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

fn incr(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("INCR");
    cmd.arg(key);
    cmd
}

#[tokio::test]
async fn forty_writes_racing_for_an_absent_replica_share_a_few_waits_instead_of_one_each() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let redis = Endpoint::new(&url, None).unwrap().connect(Duration::from_secs(5)).await.unwrap();
    let barrier = ReplicaBarrier::new(redis.clone());
    let key = format!("test:barrier:{{{}}}", unique());
    let before = wait_calls(&mut redis.clone()).await;

    let writers = (0..40).map(|_| {
        let (barrier, key) = (barrier.clone(), key.clone());
        tokio::spawn(async move { barrier.write(&key, incr(&key), 1, Duration::from_millis(200)).await.unwrap() })
    });
    let written: Vec<_> = futures::future::join_all(writers).await.into_iter().map(Result::unwrap).collect();

    let waits = wait_calls(&mut redis.clone()).await - before;
    let total: i64 = redis.clone().get(&key).await.unwrap();
    let _: () = redis.clone().del(&key).await.unwrap();
    assert_eq!(total, 40, "every write ran once");
    assert!(written.iter().all(|w| w.reply.is_ok() && w.replicas == Some(0)), "no replica exists: {written:?}");
    // One WAIT each would be 40, and 8 s of a blocked connection.
    assert!((1..=4).contains(&waits), "{waits} WAITs for 40 writes");
}

fn unique() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    )
}
