//! The order id generator against a real Redis.

use hmdp_test_support as common;

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use common::redis_server::RedisServer;
use hmdp::{
    ids::{LINEAGE_GAP, OrderIdGenerator},
    keys::Keys,
};
use redis::AsyncCommands;

const TASKS: usize = 8;
const IDS_PER_TASK: usize = 2_000;

/// Eight tasks on two generators (two instances), each drawing 2,000 ids.
/// Returns every id and how far the daily counters moved beyond their
/// first gap.
async fn draw(block: u32) -> (Vec<Vec<i64>>, i64) {
    let prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
    let keys = Keys::new(&prefix);
    let generators = [
        OrderIdGenerator::new(common::redis().await, keys.clone(), block),
        OrderIdGenerator::new(common::redis().await, keys.clone(), block),
    ];
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let generator = generators[t % 2].clone();
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(IDS_PER_TASK);
                for _ in 0..IDS_PER_TASK {
                    ids.push(generator.next().await.unwrap());
                }
                ids
            })
        })
        .collect();
    let mut per_task = Vec::new();
    for task in tasks {
        per_task.push(task.await.unwrap());
    }

    let mut redis = common::redis().await;
    let keys_made = redis.scan_match(&format!("{prefix}icr:order:*")).await.unwrap();
    assert!(!keys_made.is_empty() && keys_made.iter().all(|k| k.len() == prefix.len() + "icr:order:yyyy:MM:dd".len()));
    let mut counters = Vec::new();
    for key in &keys_made {
        counters.push(redis::cmd("GETDEL").arg(key).query_async::<i64>(&mut redis).await.unwrap());
        let _: () = redis.del(format!("{prefix}{{{key}}}:lineage")).await.unwrap();
    }
    // Each day's counter began with the gap of its first reservation.
    (per_task, counters.iter().sum::<i64>() - LINEAGE_GAP * counters.len() as i64)
}

fn assert_unique_and_increasing(per_task: &[Vec<i64>]) -> HashSet<i64> {
    let mut all = HashSet::new();
    for ids in per_task {
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids of one task increase strictly");
        assert!(ids.iter().all(|&id| id > 0));
        all.extend(ids);
    }
    assert_eq!(all.len(), TASKS * IDS_PER_TASK, "all ids unique");
    // Each id decodes to a second close to now.
    let now = chrono::Utc::now().timestamp();
    let some = *all.iter().next().unwrap();
    let issued = hmdp::ids::issued_at(some).unwrap().timestamp();
    assert!((now - 120..=now).contains(&issued), "issued {issued}, now {now}");
    all
}

#[tokio::test]
async fn concurrent_tasks_on_two_generators_get_unique_increasing_ids_one_incr_each() {
    let (per_task, counted) = draw(1).await;
    let all = assert_unique_and_increasing(&per_task);
    // One sequence number per id, but for a reservation answered after its
    // second turned (it is drawn again for the new second): at most one a
    // generator each time the second turns.
    let seconds = all.iter().map(|id| id >> 32).collect::<BTreeSet<i64>>().len() as i64;
    let drawn = (TASKS * IDS_PER_TASK) as i64;
    assert!((drawn..=drawn + 2 * seconds).contains(&counted), "counters moved by {counted} for {drawn} ids");
}

#[tokio::test]
async fn ids_from_reserved_blocks_are_unique_increasing_and_waste_at_most_a_block_a_second() {
    let block = 100;
    let (per_task, counted) = draw(block).await;
    let all = assert_unique_and_increasing(&per_task);
    // Every id's second opens at most one block per generator that may be
    // left part-used, and one reserved as the second turned and drawn
    // again for the next; nothing else is drawn and not handed out.
    let seconds: BTreeSet<i64> = all.iter().map(|id| id >> 32).collect();
    let drawn = (TASKS * IDS_PER_TASK) as i64;
    let most_wasted = 2 * 2 * seconds.len() as i64 * i64::from(block);
    assert_eq!(counted % i64::from(block), 0, "sequences are reserved {block} at a time: {counted}");
    assert!(
        (drawn..=drawn + most_wasted).contains(&counted),
        "counters moved by {counted} for {drawn} ids over {} seconds",
        seconds.len()
    );
}

/// `count` ids from one generator.
async fn ids_from(generator: &OrderIdGenerator, count: usize) -> Vec<i64> {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(generator.next().await.unwrap());
    }
    ids
}

async fn connect(server: &RedisServer) -> hmdp_redis::Redis {
    hmdp_redis::Endpoint::new(&server.url(), None).unwrap().connect(Duration::from_secs(2)).await.unwrap()
}

/// The ids drawn more than once, with how many times.
fn drawn_twice(ids: &[i64]) -> HashMap<i64, usize> {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for &id in ids {
        *seen.entry(id).or_default() += 1;
    }
    seen.retain(|_, n| *n > 1);
    seen
}

/// Instance A's clock runs 10 s ahead of instance B's. A draws from the
/// master, which then loses its replica to a failover and, cut off, goes
/// on serving A for a while (increments the promoted replica never sees).
/// The failover takes 10 s; then B draws from the promoted replica, whose
/// counter is behind by A's last blocks, in the very second A's clock
/// showed for them. No id may come out twice.
#[tokio::test]
async fn ids_stay_unique_through_a_failover_between_instances_whose_clocks_differ_by_ten_seconds() {
    let test = "ids_stay_unique_through_a_failover_between_instances_whose_clocks_differ_by_ten_seconds";
    let Some((master, replica)) = RedisServer::master_with_replica(test).await else { return };
    // The world's time, moved on by the test; A reads it 10 s ahead.
    let noon = Utc::now().date_naive().and_hms_opt(12, 0, 0).unwrap().and_utc();
    let world = Arc::new(AtomicI64::new(noon.timestamp_millis()));
    let clock = |ahead_ms: i64| {
        let world = world.clone();
        move || DateTime::from_timestamp_millis(world.load(Ordering::SeqCst) + ahead_ms).unwrap()
    };
    let keys = Keys::new("");
    let a = OrderIdGenerator::new(connect(&master).await, keys.clone(), 100).with_clock(clock(10_000));

    let mut ids = ids_from(&a, 250).await;
    master.caught_up().await;
    replica.promote().await;
    // The old master, cut off from its replica, still answers A.
    let unreplicated = ids_from(&a, 250).await;
    world.fetch_add(10_000, Ordering::SeqCst);
    let b = OrderIdGenerator::new(connect(&replica).await, keys.clone(), 100).with_clock(clock(0));
    let after_failover = ids_from(&b, 500).await;
    let second = |ids: &[i64]| ids.iter().map(|id| id >> 32).collect::<BTreeSet<i64>>();
    assert_eq!(second(&unreplicated), second(&after_failover), "B's clock shows the second A's did");
    ids.extend(unreplicated);
    ids.extend(after_failover);

    let twice = drawn_twice(&ids);
    let mut examples: Vec<_> = twice.keys().map(|id| (id >> 32, id & 0xffff_ffff)).collect();
    examples.sort_unstable();
    examples.truncate(3);
    assert!(
        twice.is_empty(),
        "{} of {} ids were handed out twice, e.g. (second, sequence) {examples:?}",
        twice.len(),
        ids.len()
    );
}
