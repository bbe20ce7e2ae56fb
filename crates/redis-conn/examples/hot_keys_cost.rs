//! What counting hot keys costs a command, in this process's CPU time:
//! `cargo run --release -p hmdp-redis --example hot_keys_cost`. Sends no
//! command anywhere; it times `HotKeys`' own work on a sale's mix of
//! commands (the order script of one voucher, a session read and a rate
//! limit per buyer), from one thread and from two at once (one a core of the 2-core box:
//! the lock).

use std::{hint::black_box, time::Instant};

use hmdp_redis::hot::{HotKeySettings, HotKeys};

fn sale_commands(buyers: u64) -> Vec<redis::Cmd> {
    let mut commands = Vec::new();
    for buyer in 0..buyers {
        let mut script = redis::cmd("EVALSHA");
        script.arg("4f3c2a1b").arg(3).arg("seckill:stock:{7}").arg("seckill:buyers:{7}").arg("seckill:orders:{7}");
        script.arg(buyer).arg(1_764_500_000_000u64);
        let mut session = redis::cmd("HGETALL");
        session.arg(format!("login:token:{buyer:032x}"));
        let mut limit = redis::cmd("INCR");
        limit.arg(format!("limit:order:{{{buyer}}}"));
        commands.extend([script, session, limit]);
    }
    commands
}

fn per_command_ns(hot: &HotKeys, commands: &[redis::Cmd], rounds: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..rounds {
        for cmd in commands {
            hot.observe(black_box(cmd));
        }
    }
    started.elapsed().as_nanos() as f64 / (f64::from(rounds) * commands.len() as f64)
}

fn main() {
    let commands = sale_commands(10_000);
    let hot = HotKeys::new(HotKeySettings::default());
    per_command_ns(&hot, &commands, 5);
    let alone = per_command_ns(&hot, &commands, 50);
    let threads: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2).map(|_| scope.spawn(|| per_command_ns(&hot, &commands, 20))).collect();
        handles.into_iter().map(|h| h.join().expect("a counting thread")).collect()
    });
    let together = threads.iter().sum::<f64>() / threads.len() as f64;
    println!("counting hot keys: {alone:.1} ns a command from one thread, {together:.1} ns from each of two at once");
    println!("(one command in {} sampled; a window closed: {:?})", hot.settings().sample_every, hot.close_window());
    for every in [1, 1 << 30] {
        let hot = HotKeys::new(HotKeySettings { sample_every: every, ..Default::default() });
        println!("one command in {every} sampled: {:.1} ns a command", per_command_ns(&hot, &commands, 20));
    }
}
