//! What `seckill-load crowd` is told on its command line.

use std::path::PathBuf;

#[derive(clap::Parser, Debug)]
#[command(name = "seckill-load crowd", about = "The opening instant: a crowd of held connections orders at once")]
pub struct CrowdArgs {
    /// The stack's nginx: `scripts/hosts env` sets HMDP_BASE_URL to the
    /// hosts' own.
    #[arg(long, env = "HMDP_BASE_URL", default_value = "http://127.0.0.1:8080")]
    pub(super) base_url: String,
    /// Connections opened and held before the sale opens.
    #[arg(long, default_value_t = 10_000)]
    pub(super) connections: usize,
    /// Buyers (seeded), each ordering once; connection k serves buyers
    /// k, k + C, k + 2C, ... one after another.
    #[arg(long, default_value_t = 30_000)]
    pub(super) users: u64,
    #[arg(long, default_value_t = 17_300_000_000)]
    pub(super) first_phone: u64,
    /// Units created for the sale, in all vouchers together.
    #[arg(long, default_value_t = 20_000)]
    pub(super) stock: i64,
    /// Vouchers opening together; the stock and the buyers are split
    /// evenly between them.
    #[arg(long, default_value_t = 1)]
    pub(super) vouchers: usize,
    /// Create the voucher with this guard: each buyer then asks for a sale
    /// path (solving the challenge, waiting in line as told) on its
    /// connection before ordering.
    #[arg(long, value_parser = ["path", "challenge"])]
    pub(super) guard: Option<String>,
    /// The guarded voucher's admission rate.
    #[arg(long, requires = "guard")]
    pub(super) admit_per_second: Option<u32>,
    /// Seconds from the voucher's creation to its opening; by default long
    /// enough to open every connection (a second per 1,000, at least 5).
    #[arg(long)]
    pub(super) open_in: Option<u64>,
    /// Seconds from the opening to the sale's end (1 to 604,800): short
    /// sales let `scripts/bench-retire` see a thousand sales end and leave.
    #[arg(long, default_value_t = 7_200, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub(super) sale_seconds: u64,
    /// Connections per child process (each child needs one descriptor per
    /// connection under its hard limit).
    #[arg(long, default_value_t = 10_000)]
    pub(super) per_process: usize,
    /// Times a buyer follows `Retry-After` before taking the answer.
    #[arg(long, default_value_t = 3)]
    pub(super) retries: u32,
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Every buyer's answer as CSV (`user,answer,retries,sentUs,doneUs`,
    /// times from the opening instant): the line's fairness, buyer by buyer.
    #[arg(long)]
    pub(super) answers_csv: Option<PathBuf>,
    #[arg(long, default_value_t = 120.0)]
    pub(super) drain_timeout: f64,
    #[command(flatten)]
    pub(super) db: hmdp::config::DatabaseUrl,
    #[command(flatten)]
    pub(super) redis: hmdp::config::RedisSettings,
    #[arg(long, env = "JWT_SECRET", hide_env_values = true)]
    pub(super) jwt_secret: String,
    #[arg(long, env = "ADMIN_KEY", hide_env_values = true)]
    pub(super) admin_key: String,
}
