//! The path route.

use axum::{
    Router,
    extract::{FromRef, State},
    routing::post,
};
use serde::Serialize;

use super::{
    ordering::{place_order, place_order_on_path},
    service::{Answer, SalePath, Solution},
};
use crate::{
    auth::CurrentUser,
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Failure, Success},
        extract::{Id, Path, RawBody, json_object},
        failures::{BadPath, BodyTimedOut, BodyTooLarge, Unauthorized, Unavailable},
        idempotency::Idempotency,
        ratelimit::LocalUserLimiter,
    },
    seckill::Seckill,
};

/// Routes for logged-in users; the caller adds the login layer.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    SalePath: FromRef<S>,
    Seckill: FromRef<S>,
    LocalUserLimiter: FromRef<S>,
    Idempotency: FromRef<S>,
{
    Router::new()
        .route("/voucher-order/seckill/{voucher_id}", post(place_order))
        .route("/voucher-order/seckill/{voucher_id}/path", post(ask_for_path))
        .route("/voucher-order/seckill/{voucher_id}/{path}", post(place_order_on_path))
}

/// A path to order with, a challenge, or a place in line: one of three.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum PathAnswer {
    Path(PathGiven),
    Challenge(ChallengeGiven),
    InLine(InLine),
}

/// Order at `POST /voucher-order/seckill/{voucherId}/{path}` before it
/// expires; it places one order, for this buyer and voucher only.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PathGiven {
    path: String,
    expires_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ChallengeGiven {
    challenge: Challenge,
}

/// Find a decimal nonce such that SHA-256 of the UTF-8 bytes of `token`
/// followed by the nonce has at least `difficulty` leading zero bits, and
/// ask again with `{"challenge": token, "nonce": "<n>"}` before it expires.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Challenge {
    token: String,
    difficulty: u8,
    expires_at: String,
}

/// Wait in line: ask again (without a body) after `retryAfterMs`; a buyer
/// who stops asking loses the place.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InLine {
    /// 1 is next.
    position: u64,
    retry_after_ms: u64,
}

fn rfc3339_ms(epoch_ms: i64) -> String {
    let at = chrono::DateTime::from_timestamp_millis(epoch_ms).unwrap_or_default();
    at.fixed_offset().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

impl From<Answer> for PathAnswer {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Path { token, expires_ms } => {
                Self::Path(PathGiven { path: token, expires_at: rfc3339_ms(expires_ms) })
            }
            Answer::Challenge { token, bits, expires_ms } => Self::Challenge(ChallengeGiven {
                challenge: Challenge { token, difficulty: bits, expires_at: rfc3339_ms(expires_ms) },
            }),
            Answer::InLine { position, retry_after_ms } => Self::InLine(InLine { position, retry_after_ms }),
        }
    }
}

/// Bodies longer than any solution are not read as one.
const MAX_BODY: usize = 1_024;

/// Asks for a sale path. For a voucher with `guard: none` the path is given
/// and the order route ignores it. For `path` and `challenge` it is bound
/// to the buyer and the voucher, lasts `SALE_PATH_TTL_MS` (60 s) and places
/// one order; `challenge` first answers a proof-of-work challenge, to be
/// solved and sent back as the body. Past the voucher's admission rate
/// the answer is a place in line instead. Asked from `SALE_PATH_LEAD_S`
/// (60 s) before the window opens until it closes.
#[utoipa::path(post, path = "/voucher-order/seckill/{voucher_id}/path", tag = "order", security(("token" = [])),
    params(("voucher_id" = i64, Path, minimum = 0, description = "the seckill voucher")),
    request_body(content = Option<Solution>, description = "a solved challenge (vouchers with `guard: challenge`); no body otherwise"),
    responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "a path (`path`, `expiresAt`), a challenge to solve (`challenge`: `token`, `difficulty`, `expiresAt`), or a place in line (`position`, `retryAfterMs`)", body = Success<PathAnswer>),
        (status = 400, description = "VALIDATION: a body that is not a solution; CHALLENGE_INVALID: a wrong, expired, foreign or replayed solution", body = Failure),
        BadPath, Unauthorized,
        (status = 404, description = "NOT_FOUND: no such seckill voucher", body = Failure),
        (status = 409, description = "NOT_STARTED (before the lead time), ENDED, SOLD_OUT", body = Failure),
        (status = 429, description = "TOO_MANY_REQUESTS: the waiting line is full, or more than SALE_PATH_ASKS_PER_USER_S requests of this user in a second (with Retry-After)", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn ask_for_path(
    State(paths): State<SalePath>,
    user: CurrentUser,
    Path(Id(voucher_id)): Path<Id>,
    RawBody(body): RawBody,
) -> ApiResult<Reply<PathAnswer>> {
    let solution = solution(&body)?;
    let answer = paths.ask(user.id, voucher_id, solution).await?;
    Ok(Reply::data(answer.into()))
}

/// No body (white space alone, or JSON `null`): no solution; anything else
/// must be one.
fn solution(body: &[u8]) -> ApiResult<Option<Solution>> {
    if body.trim_ascii().is_empty() || body.trim_ascii() == b"null" {
        return Ok(None);
    }
    if body.len() > MAX_BODY {
        return Err(ApiError::validation(format!("a solution is at most {MAX_BODY} bytes")));
    }
    let solution: Solution = json_object(body)
        .map_err(|err| ApiError::validation(format!("the body must be {{\"challenge\", \"nonce\"}}: {err}")))?;
    // The shape is checked whatever the voucher: a malformed solution is a
    // 400 even where no challenge is asked for.
    if solution.challenge.is_empty() || solution.challenge.len() > MAX_CHALLENGE {
        return Err(ApiError::validation(format!("challenge is 1 to {MAX_CHALLENGE} characters")));
    }
    if !hmdp_pow::is_nonce(&solution.nonce) {
        return Err(ApiError::validation("nonce is 1 to 20 decimal digits"));
    }
    Ok(Some(solution))
}

/// The longest challenge token a client may send back.
const MAX_CHALLENGE: usize = 256;

#[cfg(test)]
mod tests {
    use super::solution;

    #[test]
    fn no_body_is_no_solution_and_anything_else_must_be_one() {
        assert!(solution(b"").unwrap().is_none());
        assert!(solution(b" \n").unwrap().is_none());
        assert!(solution(b" null ").unwrap().is_none(), "null is no solution, as the nullable body says");
        assert!(solution(br#"{"challenge":"t","nonce":"12"}"#).unwrap().is_some());
        for bad in [
            &b"{}"[..],
            br#"{"challenge":"t"}"#,
            br#"{"challenge":"t","nonce":"1","x":1}"#,
            b"[",
            b"1",
            br#"["t","12"]"#,
        ] {
            assert!(solution(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(solution(&vec![b'{'; 5_000]).is_err());
        for bad in
            [r#"{"challenge":"","nonce":"1"}"#, r#"{"challenge":"t","nonce":"1a"}"#, r#"{"challenge":"t","nonce":""}"#]
        {
            assert!(solution(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(solution(br#"{"challenge":"t","nonce":12}"#).unwrap().is_some(), "a JSON number is a nonce too");
    }
}
