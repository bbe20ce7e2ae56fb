//! The sale path of guarded vouchers (`guard: path | challenge`): how long
//! a path lasts, how hard the challenge starts, and the waiting room's
//! rate and bounds. A voucher's own `admitPerSecond` wins over the default.

use clap::Args;

/// What `scripts/bench-cpu` measured the two-instance stack to sell, in
/// orders per second (8,542-8,566 through nginx, one Redis, 2026-11-24),
/// rounded down: the default rate the waiting room admits buyers at.
const DEFAULT_SALE_ADMIT_PER_SECOND: u32 = 8_000;
const DEFAULT_SALE_PATH_TTL_MS: u64 = 60_000;
const DEFAULT_SALE_PATH_LEAD_S: u64 = 60;
const DEFAULT_SALE_CHALLENGE_BITS: u8 = 14;
const DEFAULT_SALE_CHALLENGE_MAX_BITS: u8 = 24;
const DEFAULT_SALE_CHALLENGE_TTL_MS: u64 = 120_000;
const DEFAULT_SALE_LINE_MAX: u64 = 1_000_000;
const DEFAULT_SALE_LINE_LEAVE_MS: u64 = 15_000;
const DEFAULT_SALE_PATH_ASKS_PER_USER_S: u64 = 10;

#[derive(Clone, Debug, Args)]
pub struct SalePathSettings {
    /// Buyers a guarded voucher admits per second, unless the voucher sets
    /// its own `admitPerSecond`: past it, buyers wait in line. The default
    /// is about what the two-instance stack sold a second on a 2-core box
    /// (`scripts/bench-cpu`, 2026-11-24, 8,542-8,566), rounded down; set it
    /// to what your own stack sells.
    #[arg(long, env = "SALE_ADMIT_PER_SECOND", default_value_t = DEFAULT_SALE_ADMIT_PER_SECOND)]
    pub(crate) sale_admit_per_second: u32,

    /// How long a sale path may be used, from when it was issued; 1,000 to
    /// 3,600,000.
    #[arg(long, env = "SALE_PATH_TTL_MS", default_value_t = DEFAULT_SALE_PATH_TTL_MS)]
    pub sale_path_ttl_ms: u64,

    /// How long before the window opens a path (or a challenge, or a place
    /// in line) may be asked for; at most 86,400.
    #[arg(long, env = "SALE_PATH_LEAD_S", default_value_t = DEFAULT_SALE_PATH_LEAD_S)]
    pub sale_path_lead_s: u64,

    /// The challenge's difficulty, in leading zero bits, while the sale is
    /// calm (2^14, about 16,000 hashes on average; `cargo run --release -p
    /// hmdp-pow --example solve_times` prints the native time per
    /// difficulty).
    #[arg(long, env = "SALE_CHALLENGE_BITS", default_value_t = DEFAULT_SALE_CHALLENGE_BITS)]
    pub sale_challenge_bits: u8,

    /// The most the difficulty rises to under load (one bit for each
    /// doubling of the path requests past the admission rate); at most 32.
    #[arg(long, env = "SALE_CHALLENGE_MAX_BITS", default_value_t = DEFAULT_SALE_CHALLENGE_MAX_BITS)]
    pub sale_challenge_max_bits: u8,

    /// How long a challenge may be answered, from when it was issued; 1,000
    /// to 3,600,000.
    #[arg(long, env = "SALE_CHALLENGE_TTL_MS", default_value_t = DEFAULT_SALE_CHALLENGE_TTL_MS)]
    pub(crate) sale_challenge_ttl_ms: u64,

    /// Buyers one voucher's line holds at most; past it, 429.
    #[arg(long, env = "SALE_LINE_MAX", default_value_t = DEFAULT_SALE_LINE_MAX)]
    pub sale_line_max: u64,

    /// A buyer in line who has not asked again for this long has left and
    /// loses their place; 1,000 to 600,000.
    #[arg(long, env = "SALE_LINE_LEAVE_MS", default_value_t = DEFAULT_SALE_LINE_LEAVE_MS)]
    pub sale_line_leave_ms: u64,

    /// Path requests of one user per second, per instance: a buyer told to
    /// ask again in 250 ms or more needs four; one asking faster is
    /// answered 429 with `Retry-After` and keeps the place.
    #[arg(long, env = "SALE_PATH_ASKS_PER_USER_S", default_value_t = DEFAULT_SALE_PATH_ASKS_PER_USER_S)]
    pub sale_path_asks_per_user_s: u64,
}

impl Default for SalePathSettings {
    fn default() -> Self {
        Self {
            sale_admit_per_second: DEFAULT_SALE_ADMIT_PER_SECOND,
            sale_path_ttl_ms: DEFAULT_SALE_PATH_TTL_MS,
            sale_path_lead_s: DEFAULT_SALE_PATH_LEAD_S,
            sale_challenge_bits: DEFAULT_SALE_CHALLENGE_BITS,
            sale_challenge_max_bits: DEFAULT_SALE_CHALLENGE_MAX_BITS,
            sale_challenge_ttl_ms: DEFAULT_SALE_CHALLENGE_TTL_MS,
            sale_line_max: DEFAULT_SALE_LINE_MAX,
            sale_line_leave_ms: DEFAULT_SALE_LINE_LEAVE_MS,
            sale_path_asks_per_user_s: DEFAULT_SALE_PATH_ASKS_PER_USER_S,
        }
    }
}

impl SalePathSettings {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.sale_admit_per_second == 0 {
            anyhow::bail!("SALE_ADMIT_PER_SECOND must be at least 1");
        }
        if !(1_000..=3_600_000).contains(&self.sale_path_ttl_ms) {
            anyhow::bail!("SALE_PATH_TTL_MS must be between 1000 and 3600000");
        }
        if self.sale_path_lead_s > 86_400 {
            anyhow::bail!("SALE_PATH_LEAD_S must be at most 86400");
        }
        if self.sale_challenge_bits == 0 || self.sale_challenge_bits > self.sale_challenge_max_bits {
            anyhow::bail!("SALE_CHALLENGE_BITS must be between 1 and SALE_CHALLENGE_MAX_BITS");
        }
        if self.sale_challenge_max_bits > 32 {
            anyhow::bail!("SALE_CHALLENGE_MAX_BITS must be at most 32");
        }
        if !(1_000..=3_600_000).contains(&self.sale_challenge_ttl_ms) {
            anyhow::bail!("SALE_CHALLENGE_TTL_MS must be between 1000 and 3600000");
        }
        if self.sale_line_max == 0 {
            anyhow::bail!("SALE_LINE_MAX must be at least 1");
        }
        if self.sale_path_asks_per_user_s == 0 {
            anyhow::bail!("SALE_PATH_ASKS_PER_USER_S must be at least 1");
        }
        if !(1_000..=600_000).contains(&self.sale_line_leave_ms) {
            anyhow::bail!("SALE_LINE_LEAVE_MS must be between 1000 and 600000");
        }
        Ok(())
    }
}
