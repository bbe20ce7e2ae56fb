//! The order id generator against a real Redis.

mod common;

use std::collections::HashSet;

use hmdp::{ids::OrderIdGenerator, keys::Keys, startup::connect_redis};

#[tokio::test]
async fn concurrent_tasks_on_two_generators_get_unique_increasing_ids() {
    let prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
    let keys = Keys::new(&prefix);
    // Two generators with their own connections stand in for two instances.
    let generators = [
        OrderIdGenerator::new(connect_redis(&common::redis_url()).await.unwrap(), keys.clone()),
        OrderIdGenerator::new(connect_redis(&common::redis_url()).await.unwrap(), keys.clone()),
    ];
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let generator = generators[t % 2].clone();
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(2_000);
                for _ in 0..2_000 {
                    ids.push(generator.next().await.unwrap());
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::new();
    for task in tasks {
        let ids = task.await.unwrap();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids of one task increase strictly");
        assert!(ids.iter().all(|&id| id > 0));
        all.extend(ids);
    }
    assert_eq!(all.len(), 16_000, "all ids unique");

    // Each id decodes to a second close to now.
    let now = chrono::Utc::now().timestamp();
    let some = *all.iter().next().unwrap();
    let issued = hmdp::ids::issued_at(some).unwrap().timestamp();
    assert!((now - 120..=now).contains(&issued), "issued {issued}, now {now}");

    let mut redis = connect_redis(&common::redis_url()).await.unwrap();
    let keys_made: Vec<String> =
        redis::cmd("KEYS").arg(format!("{prefix}icr:order:*")).query_async(&mut redis).await.unwrap();
    assert!(!keys_made.is_empty() && keys_made.iter().all(|k| k.len() == prefix.len() + "icr:order:yyyy:MM:dd".len()));
    let _: () = redis::cmd("DEL").arg(&keys_made).query_async(&mut redis).await.unwrap();
}
