//! What the instance counts of its own Redis commands to find hot keys
//! (the Redis crate's `hot` module says how it counts).

use clap::Args;

const DEFAULT_HOT_KEY_PERCENT: u8 = 20;
const DEFAULT_SAMPLE_EVERY: u32 = 8;

#[derive(Clone, Debug, Args)]
pub struct HotKeySettings {
    /// A hash tag (one voucher's keys share one) that takes this percentage
    /// of its Redis master's commands is a hot key: `hmdp_hot_keys`, and a
    /// line in the log when one is found. The instance samples one command
    /// in eight and decides every 0.4 s; 1 to 100, or 0 to count nothing.
    #[arg(
        id = "hot_key_percent",
        long = "hot-key-percent",
        env = "HOT_KEY_PERCENT",
        default_value_t = DEFAULT_HOT_KEY_PERCENT,
        value_parser = clap::value_parser!(u8).range(0..=100)
    )]
    pub percent: u8,

    /// One Redis command in this many is counted (1 to 1024): fewer cost
    /// less and see less. A master is judged once 64 of its commands were
    /// counted in a window, so a small or slow sale (a test's) is only
    /// seen with a low number.
    #[arg(
        id = "hot_key_sample_every",
        long = "hot-key-sample-every",
        env = "HOT_KEY_SAMPLE_EVERY",
        default_value_t = DEFAULT_SAMPLE_EVERY,
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub sample_every: u32,

    /// How many segments a voucher found hot during its sale is split into
    /// (asynchronous mode, a voucher whose admin set no segments): 0 one
    /// per Redis master (so none on a single Redis), 1 never, 2 to 16 that
    /// many.
    #[arg(
        id = "hot_key_split_segments",
        long = "hot-key-split-segments",
        env = "HOT_KEY_SPLIT_SEGMENTS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u8).range(0..=16)
    )]
    pub split_segments: u8,
}

impl Default for HotKeySettings {
    fn default() -> Self {
        Self { percent: DEFAULT_HOT_KEY_PERCENT, sample_every: DEFAULT_SAMPLE_EVERY, split_segments: 0 }
    }
}

impl HotKeySettings {
    /// How to count, or `None` when nothing is counted.
    pub(crate) fn counting(&self) -> Option<hmdp_redis::hot::HotKeySettings> {
        (self.percent > 0).then(|| hmdp_redis::hot::HotKeySettings {
            share: f64::from(self.percent) / 100.0,
            sample_every: self.sample_every,
            ..Default::default()
        })
    }
}
