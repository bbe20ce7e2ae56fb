//! What the instance counts of its own Redis commands to find hot keys
//! (the Redis crate's `hot` module says how it counts).

use clap::Args;

const DEFAULT_HOT_KEY_PERCENT: u8 = 20;

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
}

impl Default for HotKeySettings {
    fn default() -> Self {
        Self { percent: DEFAULT_HOT_KEY_PERCENT }
    }
}

impl HotKeySettings {
    /// How to count, or `None` when nothing is counted.
    pub(crate) fn counting(&self) -> Option<hmdp_redis::hot::HotKeySettings> {
        (self.percent > 0)
            .then(|| hmdp_redis::hot::HotKeySettings { share: f64::from(self.percent) / 100.0, ..Default::default() })
    }
}
