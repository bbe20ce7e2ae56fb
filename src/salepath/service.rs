//! The sale path service: the order route's check and the path route's
//! answer.

use std::{sync::Arc, time::Duration};

use hmdp_redis::Redis;
use sqlx::MySqlPool;

use super::{
    challenge,
    error::PathError,
    guard::Guard,
    line::{self, Asking, Place, Rules},
    terms::{Terms, TermsCache},
    token::{Claims, Kind, Refused, Signer},
};

use crate::{
    config::SalePathSettings,
    http::ratelimit::{Limit, LocalUserLimiter},
    keys::Keys,
    recent::RecentIds,
    seckill::{PathUse, Seckill, SeckillError},
};

/// How long a voucher's units left are believed before they are read
/// again: the line hears SOLD_OUT within this of the last unit's sale.
const UNITS_LEFT_KEPT: Duration = Duration::from_millis(200);
/// Vouchers whose units left an instance remembers, at most.
const UNITS_LEFT_MAX: usize = 10_000;

/// The sale path service: a sub-state (`State<SalePath>`), cheap to clone.
#[derive(Clone)]
pub(crate) struct SalePath(Arc<Shared>);

struct Shared {
    terms: TermsCache,
    signer: Signer,
    settings: SalePathSettings,
    seckill: Seckill,
    redis: Redis,
    keys: Keys,
    units_left: RecentIds<Option<i64>>,
    /// Path requests per user, in this instance's memory.
    asks: LocalUserLimiter,
}

/// A solved challenge, as the buyer sends it back.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Solution {
    /// The challenge's token, as it was given.
    #[schema(min_length = 1, max_length = 256)]
    pub(crate) challenge: String,
    /// Decimal digits (a string, or a JSON number): SHA-256 of the token
    /// followed by them has the challenge's leading zero bits.
    #[schema(value_type = String, max_length = 20, pattern = "^[0-9]{1,20}$")]
    #[serde(deserialize_with = "decimal")]
    pub(crate) nonce: String,
}

/// A nonce as a string of digits or as a whole JSON number.
fn decimal<'de, D: serde::Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Nonce {
        Text(String),
        Number(u64),
    }
    // serde's own refusal names the enum; this one is in the API's words.
    let nonce = serde::Deserialize::deserialize(de)
        .map_err(|_| serde::de::Error::custom("must be decimal digits, as a string or a whole number"))?;
    Ok(match nonce {
        Nonce::Text(text) => text,
        Nonce::Number(n) => n.to_string(),
    })
}

/// What a buyer asking for a path is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Order with it, before it expires.
    Path { token: String, expires_ms: i64 },
    /// Solve it and ask again with the solution.
    Challenge { token: String, bits: u8, expires_ms: i64 },
    /// Wait, and ask again after `retry_after_ms`.
    InLine { position: u64, retry_after_ms: u64 },
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl SalePath {
    pub(crate) fn new(
        db: MySqlPool,
        redis: Redis,
        keys: Keys,
        settings: SalePathSettings,
        secret: &[u8],
        seckill: Seckill,
    ) -> Self {
        Self(Arc::new(Shared {
            terms: TermsCache::new(db),
            signer: Signer::new(secret),
            seckill,
            redis,
            keys,
            units_left: RecentIds::new(UNITS_LEFT_MAX, Some(UNITS_LEFT_KEPT)),
            asks: LocalUserLimiter::new(Limit::per(settings.sale_path_asks_per_user_s, Duration::from_secs(1))),
            settings,
        }))
    }

    /// The order route's check, before the order: the path the order
    /// spends, or `None` for a voucher without a guard (or no voucher at
    /// all: the order answers for it). No round trip once the voucher's
    /// terms are known: the path is checked by its signature.
    pub(crate) async fn check_order(
        &self,
        user_id: u64,
        voucher_id: u64,
        path: Option<&str>,
    ) -> Result<Option<PathUse>, PathError> {
        let Some(terms) = self.0.terms.of(voucher_id).await? else { return Ok(None) };
        if terms.guard == Guard::None {
            return Ok(None);
        }
        let path = path.ok_or(PathError::Required)?;
        let claims =
            self.0.signer.verify(Kind::Path, path, user_id, voucher_id, now_ms()).map_err(|refused| match refused {
                Refused::Invalid => PathError::Invalid,
                Refused::Expired => PathError::Expired,
            })?;
        Ok(Some(PathUse { id: claims.id, expires_ms: claims.expires_ms }))
    }

    /// A buyer asks for a path: a path, a challenge to solve first, or a
    /// place in line.
    pub(crate) async fn ask(
        &self,
        user_id: u64,
        voucher_id: u64,
        solution: Option<Solution>,
    ) -> Result<Answer, PathError> {
        if self.0.asks.hit(user_id, "too many path requests; ask again when told").is_err() {
            return Err(PathError::TooFast);
        }
        let terms = self.0.terms.of(voucher_id).await?.ok_or(PathError::Seckill(SeckillError::NoSuchVoucher))?;
        let now = now_ms();
        if terms.guard == Guard::None {
            return Ok(self.path(user_id, voucher_id, now));
        }
        let lead_ms = i64::try_from(self.0.settings.sale_path_lead_s * 1_000).unwrap_or(i64::MAX);
        if now < terms.begin_ms.saturating_sub(lead_ms) {
            return Err(SeckillError::NotStarted.into());
        }
        if now >= terms.end_ms {
            return Err(SeckillError::Ended.into());
        }
        if self.units_left(voucher_id).await? == Some(0) {
            return Err(SeckillError::SoldOut.into());
        }
        // A solved challenge is checked before the line hears of it: a
        // wrong one never takes a place.
        let solved = match (terms.guard, solution) {
            (Guard::Challenge, Some(solution)) => Some(self.checked_solution(user_id, voucher_id, &solution, now)?),
            _ => None,
        };
        let rules = self.rules(&terms);
        let keys = self.0.keys.sale_line(voucher_id);
        let asking = Asking {
            user_id,
            // Without a challenge to solve, asking is joining.
            join: terms.guard == Guard::Path || solved.is_some(),
            challenge: solved.map(|claims| {
                let kept = (claims.expires_ms - now).max(0) as u64 + 1_000;
                (self.0.keys.challenge_use(voucher_id, claims.id), kept)
            }),
            sale_end_ms: terms.end_ms,
            now_ms: now,
            keys: &keys,
        };
        let asked = line::ask(&self.0.redis, &rules, asking).await?;
        metrics::counter!("hmdp_sale_path_asks_total", "place" => place_label(asked.place)).increment(1);
        match asked.place {
            Place::Admitted => Ok(self.path(user_id, voucher_id, now)),
            Place::InLine(position) => Ok(Answer::InLine {
                position,
                retry_after_ms: line::retry_after_ms(position, rules.admit_per_second, rules.leave_ms),
            }),
            Place::Outside => Ok(self.challenge(user_id, voucher_id, &rules, asked.asks_last_second, now)),
            Place::Full => Err(PathError::LineFull),
            Place::ChallengeUsed => Err(PathError::ChallengeInvalid("this challenge was solved and used before")),
        }
    }

    fn rules(&self, terms: &Terms) -> Rules {
        let settings = &self.0.settings;
        Rules {
            admit_per_second: terms.admit_per_second.unwrap_or(settings.sale_admit_per_second),
            line_max: settings.sale_line_max,
            leave_ms: settings.sale_line_leave_ms,
            admitted_ms: settings.sale_path_ttl_ms,
        }
    }

    fn path(&self, user_id: u64, voucher_id: u64, now: i64) -> Answer {
        let expires_ms = now + self.0.settings.sale_path_ttl_ms as i64;
        let claims = Claims { bits: 0, user_id, voucher_id, expires_ms, id: rand::random() };
        Answer::Path { token: self.0.signer.sign(Kind::Path, claims), expires_ms }
    }

    fn challenge(&self, user_id: u64, voucher_id: u64, rules: &Rules, asks: u64, now: i64) -> Answer {
        let settings = &self.0.settings;
        let bits = challenge::difficulty(
            asks,
            rules.admit_per_second,
            settings.sale_challenge_bits,
            settings.sale_challenge_max_bits,
        );
        let expires_ms = now + settings.sale_challenge_ttl_ms as i64;
        let claims = Claims { bits, user_id, voucher_id, expires_ms, id: rand::random() };
        Answer::Challenge { token: self.0.signer.sign(Kind::Challenge, claims), bits, expires_ms }
    }

    /// The claims of a challenge this buyer was given for this voucher,
    /// unexpired and solved; single use is the line's to check.
    fn checked_solution(
        &self,
        user_id: u64,
        voucher_id: u64,
        solution: &Solution,
        now: i64,
    ) -> Result<Claims, PathError> {
        let claims = self.0.signer.verify(Kind::Challenge, &solution.challenge, user_id, voucher_id, now).map_err(
            |refused| match refused {
                Refused::Invalid => PathError::ChallengeInvalid("not a challenge given to you for this voucher"),
                Refused::Expired => PathError::ChallengeInvalid("the challenge expired; ask for another"),
            },
        )?;
        if !challenge::solves(&solution.challenge, &solution.nonce, claims.bits) {
            return Err(PathError::ChallengeInvalid("the nonce does not solve the challenge"));
        }
        Ok(claims)
    }

    /// The voucher's units left, read again at most every `UNITS_LEFT_KEPT`.
    async fn units_left(&self, voucher_id: u64) -> Result<Option<i64>, PathError> {
        if let Some(known) = self.0.units_left.get(voucher_id) {
            return Ok(known);
        }
        let units = self.0.seckill.units_left(voucher_id).await?;
        self.0.units_left.insert(voucher_id, units);
        Ok(units)
    }
}

fn place_label(place: Place) -> &'static str {
    match place {
        Place::Admitted => "admitted",
        Place::InLine(_) => "in_line",
        Place::Outside => "challenged",
        Place::Full => "line_full",
        Place::ChallengeUsed => "challenge_used",
    }
}
