//! What every instance must know of a voucher at once, told over Redis
//! pub/sub (`seckill:news:<what>:<voucher>`): a voucher split into more
//! segments (each instance reads its segments again, so its orders and
//! its consumer go where the split put them), a voucher sold out over
//! every segment (each instance holds it sold out a moment instead of
//! reading every segment at its next dry one), and units come back (that
//! sold-out no longer stands). A message lost while the subscription moves
//! to another node costs only time: the order script turns round an order
//! routed by an old layout, and a sold-out is found by reading and lasts
//! a moment only.

use std::{sync::Arc, time::Duration};

use hmdp_redis::Redis;
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use super::segments::SegmentMaps;
use crate::{keys::Keys, recent::RecentIds};

/// How often one instance tells a voucher sold out, at most: as long as
/// the others hold what they are told.
const SOLD_OUT_TOLD_EVERY: Duration = Duration::from_millis(200);
/// Vouchers told sold out lately, at most.
const TOLD_MAX: usize = 10_000;

/// What is told of a voucher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    Split,
    SoldOut,
    Reopened,
}

impl Told {
    fn word(self) -> &'static str {
        match self {
            Self::Split => "split",
            Self::SoldOut => "soldout",
            Self::Reopened => "reopened",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Self::Split, Self::SoldOut, Self::Reopened].into_iter().find(|told| told.word() == word)
    }
}

pub(super) struct News {
    redis: Redis,
    /// `<key prefix>seckill:news:`
    channel: String,
    told_sold_out: RecentIds,
}

impl News {
    pub(super) fn new(redis: Redis, keys: &Keys) -> Self {
        Self {
            redis,
            channel: format!("{}seckill:news:", keys.prefix()),
            told_sold_out: RecentIds::new(TOLD_MAX, Some(SOLD_OUT_TOLD_EVERY)),
        }
    }

    /// Tells every instance (this one too); a failure is only logged, as
    /// each learns it another way.
    pub(super) async fn tell(&self, told: Told, voucher_id: u64) {
        let channel = format!("{}{}:{voucher_id}", self.channel, told.word());
        if let Err(err) = self.redis.clone().publish::<_, _, ()>(&channel, "").await {
            tracing::debug!(voucher_id, ?told, error = %err, "telling the other instances failed");
        }
    }

    /// Tells a sell-out, once in a while per voucher from this instance.
    pub(super) async fn tell_sold_out(&self, voucher_id: u64) {
        if !self.told_sold_out.contains(voucher_id) {
            self.told_sold_out.insert(voucher_id, ());
            self.tell(Told::SoldOut, voucher_id).await;
        }
    }

    /// Applies what is told to this instance's segments until `stop`.
    pub(super) async fn listen(self: Arc<Self>, maps: Arc<SegmentMaps>, stop: CancellationToken) {
        let nodes = self.redis.endpoint().subscribe_clients();
        let pattern = format!("{}*", self.channel);
        let heard = |msg: &redis::Msg| {
            let Some((told, voucher_id)) = parse(msg.get_channel_name().strip_prefix(&self.channel)) else { return };
            match told {
                Told::Split => maps.forget(voucher_id),
                Told::SoldOut => {
                    if let Some(stock) = maps.known(voucher_id).as_deref().and_then(|s| s.borrowing()) {
                        stock.hold_sold_out();
                    }
                }
                Told::Reopened => {
                    if let Some(segments) = maps.known(voucher_id) {
                        segments.reopen();
                    }
                }
            }
        };
        hmdp_redis::subscription::listen(nodes, &pattern, "voucher news", || {}, heard, stop.cancelled()).await;
    }
}

/// `<what>:<voucher>`, from a channel less its prefix.
fn parse(rest: Option<&str>) -> Option<(Told, u64)> {
    let (word, voucher) = rest?.split_once(':')?;
    Some((Told::parse(word)?, voucher.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::{Told, parse};

    #[test]
    fn a_channel_names_what_is_told_and_of_which_voucher() {
        assert_eq!(parse(Some("split:42")), Some((Told::Split, 42)));
        assert_eq!(parse(Some("soldout:7")), Some((Told::SoldOut, 7)));
        assert_eq!(parse(Some("reopened:7")), Some((Told::Reopened, 7)));
        assert_eq!(parse(Some("gossip:7")), None);
        assert_eq!(parse(Some("split:seven")), None);
        assert_eq!(parse(None), None);
    }
}
