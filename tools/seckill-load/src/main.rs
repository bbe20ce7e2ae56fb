//! `seckill-load`: a JMeter-style load test of the seckill route, followed by
//! an audit of the database that proves (or refutes) "no oversell, one order
//! per user" for the run.
//!
//!     seckill-load --base-url http://127.0.0.1:8080 --users 1000 --stock 200 --concurrency 1000
//!     seckill-load --tokens tokens.csv --stock 20000 --concurrency 1000 --json run.json
//!
//! `--users N` seeds N users itself (needs DATABASE_URL, REDIS_URL and the
//! stack's JWT_SECRET); `--tokens` reads `hmdp seed-users` output. `--stock`
//! creates a voucher through the admin API (ADMIN_KEY), window open now;
//! `--voucher` uses an existing one. Exits non-zero when the audit fails.
//!
//!     seckill-load crowd --connections 10000 --users 30000 --stock 20000
//!
//! `crowd` is the opening instant instead (`crowd/`): the connections
//! are opened and held before the window opens and all order at once.
//!
//!     seckill-load --stock 200 --users 1000 --history sale.jsonl
//!     seckill-load check-history --history sale.jsonl
//!
//! `--history` keeps every request's answer on disk; `check-history` reads
//! it against the tables afterwards (`history/`).
//!
//!     seckill-load --stock 2000 --vouchers 4 --users 3000 --history sale.jsonl
//!
//! `--vouchers N` sells N vouchers at once (buyer i buys voucher i mod N),
//! each audited alone; on a Redis Cluster it says which master serves each
//! (`masters.rs`).
//!
//!     seckill-load seed-past --orders 10000000 --vouchers 1000 --users 1000000
//!
//! `seed-past` fills the database with a year of ended sales first
//! (src/past.rs).

mod aftersale;
mod audit;
mod chaos;
mod cpu;
mod crowd;
mod events;
mod fate;
mod guarded;
mod history;
mod masters;
mod past;
mod report;
mod sale;
mod settle;
mod users;
mod voucher;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    // `crowd` is a run of its own; `crowd-part` is one of its children.
    match std::env::args().nth(1).as_deref() {
        Some(crowd::PART_ARG) => return crowd::part_main(),
        Some("crowd") => {
            let args = crowd::CrowdArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(crowd::run(args));
        }
        Some("seed-past") => {
            let args = past::PastArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(past::run(args));
        }
        Some("check-history") => {
            let args = history::CheckArgs::parse_from(std::env::args().skip(1));
            return tokio::runtime::Runtime::new()?.block_on(history::check(args));
        }
        _ => {}
    }
    tokio::runtime::Runtime::new()?.block_on(sale::run(sale::Args::parse()))
}
