//! The replicas' acknowledgement of an order (`hmdp_redis::barrier::ReplicaBarrier`)
//! against a master and a replica of the test's own.

use std::time::{Duration, Instant};

use hmdp_redis::{Endpoint, barrier::ReplicaBarrier};
use hmdp_test_support::redis_server::RedisServer;

fn incr(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("INCR");
    cmd.arg(key);
    cmd
}

/// The defect this guards against: a write made on one connection and its
/// `WAIT` sent on another (the first killed and replaced meanwhile) was
/// counted as on a replica that had nothing (148 of 168 writes, before).
#[tokio::test]
async fn a_write_is_never_counted_as_on_a_replica_that_is_stalled_even_when_its_connection_is_killed() {
    let test = "a_write_is_never_counted_as_on_a_replica_that_is_stalled_even_when_its_connection_is_killed";
    let Some((master, replica)) = RedisServer::master_with_replica(test).await else { return };
    let redis = Endpoint::new(&master.url(), None).unwrap().connect(Duration::from_secs(5)).await.unwrap();
    let barrier = ReplicaBarrier::new(redis);
    let key = "test:stalled:{barrier}";
    let awake = barrier.write(key, incr(key), 1, Duration::from_secs(2)).await.unwrap();
    assert_eq!(awake.replicas, Some(1), "the replica acknowledges while it runs: {awake:?}");

    // The replica stops answering (its master still holds it online), and
    // the barrier's connections are killed again and again meanwhile.
    let frozen = replica.frozen();
    let mut ops = master.connection().await;
    let killer = tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("normal")
                .arg("SKIPME")
                .arg("yes")
                .query_async(&mut ops)
                .await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let writers = (0..200).map(|i| {
        let barrier = barrier.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(i * 12)).await;
            barrier.write(key, incr(key), 1, Duration::from_millis(100)).await
        })
    });
    let written: Vec<_> = futures::future::join_all(writers).await.into_iter().map(Result::unwrap).collect();
    killer.await.unwrap();
    drop(frozen);

    let ran = written.iter().filter(|w| matches!(w, Ok(w) if w.reply.is_ok())).count();
    let failed = written.iter().filter(|w| w.is_err()).count();
    let counted = written.iter().filter(|w| matches!(w, Ok(w) if w.replicas.unwrap_or(0) > 0)).count();
    assert!(failed > 0, "the kills must have cut some pipelines off (ran {ran}, failed {failed})");
    assert!(ran > 0, "some writes must have run between the kills");
    assert_eq!(counted, 0, "{counted} writes counted as on a replica that was stopped through them ({ran} ran)");
}
