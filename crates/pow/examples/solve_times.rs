//! What the challenge costs natively, on one core: the median and the 90th
//! percentile of the time to solve random tokens at each difficulty.
//!
//!     cargo run --release -p hmdp-pow --example solve_times [TRIES]

use std::time::Instant;

fn main() {
    let tries: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(21);
    println!("| difficulty (bits) | hashes expected | median ms | p90 ms |");
    println!("|---:|---:|---:|---:|");
    for bits in [10u8, 12, 14, 16, 18, 20, 22] {
        let mut ms: Vec<f64> = (0..tries)
            .map(|i| {
                let token = format!("solve-times-{bits}-{i}-{}", std::process::id());
                let started = Instant::now();
                let nonce = hmdp_pow::solve(&token, bits);
                assert!(hmdp_pow::solves(&token, &nonce.to_string(), bits));
                started.elapsed().as_secs_f64() * 1_000.0
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        println!("| {bits} | {} | {:.2} | {:.2} |", 1u64 << bits, at(0.5), at(0.9));
    }
}
