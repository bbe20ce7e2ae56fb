//! What the JMeter-style sale (`seckill-load` without a subcommand) is told
//! on its command line.

use std::path::PathBuf;

use clap::Parser;
use hmdp::config::{DatabaseUrl, RedisSettings};

use crate::{chaos, cpu, events, guarded};

#[derive(Parser)]
#[command(name = "seckill-load", about = "Load-test the seckill route, then audit the database")]
pub(crate) struct Args {
    /// The stack's nginx: `scripts/hosts env` sets HMDP_BASE_URL to the
    /// hosts' own.
    #[arg(long, env = "HMDP_BASE_URL", default_value = "http://127.0.0.1:8080")]
    pub(super) base_url: String,
    /// Seed this many users directly (needs JWT_SECRET, REDIS_URL).
    #[arg(long, conflicts_with = "tokens")]
    pub(super) users: Option<u64>,
    /// First phone of the seeded users.
    #[arg(long, default_value_t = 17_100_000_000)]
    pub(super) first_phone: u64,
    /// CSV from `hmdp seed-users` (a `token` column).
    #[arg(long)]
    pub(super) tokens: Option<PathBuf>,
    /// Create a seckill voucher with this stock (needs ADMIN_KEY).
    #[arg(long, conflicts_with = "voucher")]
    pub(super) stock: Option<i64>,
    /// Sell the created voucher's stock in this many segments (1 to 16;
    /// the asynchronous mode spreads them over the Redis masters), set as
    /// its admin would: without it the service may split the voucher
    /// itself once it is found hot.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16), conflicts_with = "voucher")]
    pub(super) segments: Option<u8>,
    /// Sell this many vouchers at once (1 to 1,000), all opening together:
    /// `--stock` split between them (the first ones take what does not
    /// divide), buyer i buying voucher i mod N. On a Redis Cluster
    /// (REDIS_CLUSTER_NODES) each voucher's master is said, and a warning
    /// given when they cover fewer masters than they could. The fault's
    /// command finds them all in `SALE_VOUCHER_IDS`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1_000), conflicts_with = "voucher")]
    pub(super) vouchers: u16,
    /// Use this existing voucher instead.
    #[arg(long)]
    pub(super) voucher: Option<u64>,
    #[arg(long, default_value_t = 200)]
    pub(super) concurrency: usize,
    /// Workers start evenly spread over this many seconds.
    #[arg(long, default_value_t = 0.0)]
    pub(super) ramp_up: f64,
    /// At most this many requests per second in all (JMeter's Constant
    /// Throughput Timer): the sale then lasts a known time whatever the
    /// box's speed, so a fault injected after a delay lands mid-sale.
    #[arg(long, value_parser = positive_rate)]
    pub(super) throughput: Option<f64>,
    /// Requests per user; above 1 it is a duplicate storm.
    #[arg(long, default_value_t = 1)]
    pub(super) requests_per_user: usize,
    /// Clients that retry: every order carries an `Idempotency-Key` and
    /// is sent again, with the same key, up to this many times after no
    /// answer, a 502, a 503 or a key still in flight (as the sale page
    /// does). The report counts each order once, by its last answer.
    #[arg(long, default_value_t = 0)]
    pub(super) retries: u32,
    /// A file of stock changes made mid-sale through the admin's stock
    /// route, one signed number per line (`stock - previous` of each
    /// answer): the audit counts them as stock there from the start.
    #[arg(long)]
    pub(super) stock_delta_file: Option<PathBuf>,
    /// After the sale, this percentage of the winners pays; the others let
    /// the service's unpaid timeout cancel their orders, and a second wave
    /// of the losers buys the returned units. Needs --pay-timeout-s.
    #[arg(long, requires = "pay_timeout_s")]
    pub(super) pay_percent: Option<f64>,
    /// The service's ORDER_PAY_TIMEOUT_S, for --pay-percent.
    #[arg(long)]
    pub(super) pay_timeout_s: Option<u64>,
    /// Also write the report and the audit as JSON.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Every request's answer, one JSON line each (when sent and
    /// answered, the user, the status, the `errorCode`, the order id), for
    /// `seckill-load check-history` to read against the tables.
    #[arg(long, conflicts_with = "ceiling")]
    pub(super) history: Option<PathBuf>,
    /// Fail when any request ended outside the expected outcomes.
    #[arg(long)]
    pub(super) fail_on_other: bool,
    /// For the audit: the service's database.
    #[command(flatten)]
    pub(super) db: DatabaseUrl,
    /// For the audit and seeding: the service's Redis, and its
    /// REDIS_KEY_PREFIX to find the asynchronous mode's keys.
    #[command(flatten)]
    pub(super) redis: RedisSettings,
    /// Optional here, unlike `hmdp serve`: only `--users` needs it.
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub(super) jwt_secret: Option<String>,
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    pub(super) admin_key: Option<String>,
    /// How long to wait, after the last answer, for every success to have
    /// its row (the asynchronous mode persists after answering).
    #[arg(long, default_value_t = 60.0)]
    pub(super) drain_timeout: f64,
    /// The box's ceiling for the same traffic: `GET /user/me` (an
    /// authenticated no-op: refresh layer, session lookup, envelope) once
    /// per request instead of an order; no voucher, no audit.
    #[arg(long, conflicts_with_all = ["stock", "voucher"])]
    pub(super) ceiling: bool,
    /// Server processes whose CPU the run is charged (`NAME=PID,PID...`,
    /// repeated): user + system time from before the first request until
    /// the rows landed, per request sent. `scripts/bench-cpu` passes the
    /// instances, nginx, Redis and MariaDB.
    #[arg(long = "cpu", value_parser = cpu::parse_group)]
    pub(super) cpu: Vec<cpu::Group>,
    /// A chaos run (`--fault`): the sale under one fault, then the verdict.
    #[command(flatten)]
    pub(super) chaos: chaos::ChaosArgs,
    /// A guarded sale (`--guard`): the full flow, bots, greedy buyers.
    #[command(flatten)]
    pub(super) guard: guarded::GuardArgs,
    /// The sale's order events audited at a consumer (`--events-audit`).
    #[command(flatten)]
    pub(super) events: events::EventsArgs,
}

impl Args {
    /// What a sale of several vouchers does not do (each of these is made
    /// for one voucher); `Ok` for one.
    pub(super) fn several_vouchers_allowed(&self) -> anyhow::Result<()> {
        if self.vouchers == 1 {
            return Ok(());
        }
        let refused = [
            (self.stock.is_none(), "--vouchers needs --stock (the vouchers are created)"),
            (
                self.segments.is_some_and(|n| n > 1),
                "--segments above 1 sells one voucher in segments: not with --vouchers",
            ),
            (self.guard.guard.is_some(), "a guarded sale (--guard) is of one voucher: not with --vouchers"),
            (
                self.pay_percent.is_some(),
                "the after-sale scenario (--pay-percent) is of one voucher: not with --vouchers",
            ),
            (self.ceiling, "--ceiling sells nothing: not with --vouchers"),
        ];
        match refused.iter().find(|(refuse, _)| *refuse) {
            Some((_, why)) => anyhow::bail!("{why}"),
            None => {
                let stock = self.stock.unwrap_or(0);
                anyhow::ensure!(
                    stock >= i64::from(self.vouchers),
                    "--stock {stock} cannot give each of --vouchers {} a unit",
                    self.vouchers
                );
                Ok(())
            }
        }
    }
}

fn positive_rate(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("{value} is not a positive number of requests per second")),
    }
}
