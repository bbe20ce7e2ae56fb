//! Uncontended acquire+release pairs per second on a Redis, to set beside
//! `redis-benchmark` running a comparable EVALSHA (see README, Performance).
//!
//!     cargo run --release --example lock_bench -- [TASKS] [SECONDS] [REDIS_URL]
//!     LOCK_BENCH_RAW=1 cargo run --release --example lock_bench -- ...
//!
//! With LOCK_BENCH_RAW=1 it measures one EVALSHA of the acquire script per
//! iteration through the same Rust client instead (re-entry, like the
//! redis-benchmark line), which separates the client's own cost per round
//! trip from the lock's.
//!
//! Each task takes and releases its own lock (watchdog mode, the order
//! path's mode) in a loop, so nothing contends; a pair is two round trips.

use std::time::{Duration, Instant};

use hmdp::{
    config::RedisSettings,
    lock::{Holder, LockConfig, LockService},
    startup::connect_redis,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let tasks: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1);
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let url = args.next().unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    // REDIS_CLUSTER_NODES, when set, measures the cluster instead.
    let settings =
        RedisSettings { url, cluster_nodes: std::env::var("REDIS_CLUSTER_NODES").ok(), ..Default::default() };

    let locks = LockService::new(connect_redis(&settings).await?, LockConfig::default());
    let raw = std::env::var_os("LOCK_BENCH_RAW").is_some();
    let conn = connect_redis(&settings).await?;
    let run = format!("bench:{}", uuid::Uuid::new_v4().simple());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let locks = locks.clone();
            let name = format!("{run}:{{{t}}}");
            let locks_conn = conn.clone();
            tokio::spawn(async move {
                let holder = Holder::random();
                let mut pairs = 0u64;
                if raw {
                    let script = redis::Script::new(include_str!("../crates/lock/lua/lock_acquire.lua"));
                    let mut conn = locks_conn;
                    while Instant::now() < deadline {
                        let _: Vec<i64> = script
                            .key(&name)
                            .key(format!("{name}:fence"))
                            .arg(30_000)
                            .arg("owner")
                            .invoke_async(&mut conn)
                            .await?;
                        pairs += 1;
                    }
                    return anyhow::Ok(pairs);
                }
                while Instant::now() < deadline {
                    let guard = locks.try_lock(&name, &holder, Duration::ZERO, None).await?.expect("uncontended");
                    guard.unlock().await?;
                    pairs += 1;
                }
                anyhow::Ok(pairs)
            })
        })
        .collect();
    let mut pairs = 0;
    for w in workers {
        pairs += w.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let what = if raw { "raw_evalsha" } else { "lock_pairs" };
    println!("{what} tasks={tasks} ops={pairs} seconds={elapsed:.2} per_sec={:.0}", pairs as f64 / elapsed);

    let mut redis = connect_redis(&settings).await?;
    for fence in redis.scan_match(&format!("{run}:*")).await? {
        redis::cmd("DEL").arg(&fence).exec_async(&mut redis).await?;
    }
    Ok(())
}
