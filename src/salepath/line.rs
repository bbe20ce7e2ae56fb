//! The waiting room of a guarded voucher, Queue-it style: buyers asking
//! for a path are admitted at the voucher's rate, first come first served
//! by arrival, with their place in line and a time to ask again. It lives
//! in Redis (one script under the voucher's hash tag), so it is one line
//! across instances, outlives an instance's restart, and is bounded
//! (`SALE_LINE_MAX`); a buyer who stops asking leaves it
//! (`SALE_LINE_LEAVE_MS`).

use std::sync::LazyLock;

use hmdp_redis::Redis;
use redis::Script;

use crate::keys::LineKeys;

static LINE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/sale_line.lua")));

/// How long the line's keys outlive the sale's end.
const KEPT_PAST_THE_SALE_MS: i64 = 3_600_000;

/// Where a buyer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// May have a path now.
    Admitted,
    /// Waiting, at this place (1 first).
    InLine(u64),
    /// Not in line (only looked): may join with a solved challenge.
    Outside,
    /// The line holds as many as it may.
    Full,
    /// The challenge that came with the ask was used before.
    ChallengeUsed,
}

/// What one ask found: the buyer's place and the path requests of the last
/// second (the load the challenge's difficulty follows).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask {
    pub(crate) place: Place,
    pub(crate) asks_last_second: u64,
}

/// One voucher's rate and bounds, as the line's script takes them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    pub(crate) admit_per_second: u32,
    pub(crate) line_max: u64,
    pub(crate) leave_ms: u64,
    /// How long an admission lets a buyer have paths.
    pub(crate) admitted_ms: u64,
}

impl Rules {
    /// Admissions saved up at most: a twentieth of a second's, so that no
    /// second admits more than the rate and 5 %, which leaves the other
    /// 5 % of the target for buyers who learn of their admission at
    /// their next ask rather than at once.
    fn burst(&self) -> f64 {
        (f64::from(self.admit_per_second) / 20.0).max(1.0)
    }
}

/// A buyer asking: `join` to take a place (else only look), with the use
/// key of the challenge they solved and how long to keep it.
pub(super) struct Asking<'a> {
    pub(crate) user_id: u64,
    pub(crate) join: bool,
    pub(crate) challenge: Option<(String, u64)>,
    pub(crate) sale_end_ms: i64,
    pub(crate) now_ms: i64,
    pub(crate) keys: &'a LineKeys,
}

pub(super) async fn ask(redis: &Redis, rules: &Rules, asking: Asking<'_>) -> redis::RedisResult<Ask> {
    let keys = asking.keys;
    let mut call = LINE.key(&keys.line);
    call.key(&keys.seen).key(&keys.admitted).key(&keys.state);
    let (challenge_key, challenge_ms) = match &asking.challenge {
        Some((key, ms)) => (Some(key), *ms),
        None => (None, 0),
    };
    if let Some(key) = challenge_key {
        call.key(key);
    }
    let kept_ms = (asking.sale_end_ms - asking.now_ms).max(0) + KEPT_PAST_THE_SALE_MS;
    call.arg(asking.user_id)
        .arg(rules.admit_per_second)
        .arg(rules.burst())
        .arg(rules.line_max)
        .arg(rules.leave_ms)
        .arg(rules.admitted_ms)
        .arg(if asking.join { 1 } else { 0 })
        .arg(challenge_ms)
        .arg(kept_ms);
    let (verdict, position, asks): (i64, u64, u64) = call.invoke_async(&mut redis.clone()).await?;
    let place = match verdict {
        0 => Place::Admitted,
        1 => Place::InLine(position),
        2 => Place::Outside,
        3 => Place::Full,
        4 => Place::ChallengeUsed,
        other => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the line's script answered an unknown verdict",
                other.to_string(),
            )));
        }
    };
    Ok(Ask { place, asks_last_second: asks })
}

/// When a buyer at `position` should ask again: about when the rate
/// reaches them, at least every quarter second and at most every five
/// seconds (well within `SALE_LINE_LEAVE_MS`, so asking as told keeps the
/// place).
pub(super) fn retry_after_ms(position: u64, admit_per_second: u32, leave_ms: u64) -> u64 {
    let reach = position.saturating_mul(1_000) / u64::from(admit_per_second.max(1));
    reach.clamp(250, 5_000.min(leave_ms / 3).max(250))
}

#[cfg(test)]
mod tests {
    use super::retry_after_ms;

    #[test]
    fn a_buyer_is_told_to_ask_again_about_when_the_rate_reaches_them() {
        assert_eq!(retry_after_ms(1, 1000, 15_000), 250, "at least a quarter second");
        assert_eq!(retry_after_ms(2_000, 1000, 15_000), 2_000);
        assert_eq!(retry_after_ms(1_000_000, 1000, 15_000), 5_000, "at most five seconds");
        assert_eq!(retry_after_ms(1_000_000, 1000, 3_000), 1_000, "well before they would count as gone");
    }
}
