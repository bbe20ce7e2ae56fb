//! The order routes: an order passes its user's limit and its voucher's
//! guard (the sale path) before the seckill places it. Here, above both,
//! so that neither the seckill nor the sale path knows the other's routes.

use axum::{
    extract::State,
    response::{IntoResponse, Response},
};

use super::service::SalePath;
use crate::{
    auth::CurrentUser,
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Failure, Success},
        extract::{Id, Path},
        failures::{BadPath, Unauthorized, Unavailable},
        idempotency::{Attempt, IdempotencyKey},
        ratelimit::LocalUserLimiter,
    },
    seckill::{PlacedOrder, Seckill, SeckillError},
};

#[utoipa::path(post, path = "/voucher-order/seckill/{voucher_id}", tag = "order", security(("token" = [])),
    params(
        ("voucher_id" = i64, Path, minimum = 0, description = "the seckill voucher"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$", description = "up to 255 printable ASCII characters: a retry with the same key gets the first answer again (24 h), marked `Idempotent-Replayed: true`; answers 429, 5xx are not kept, so their retry runs again"),
    ),
    responses(
        (status = 200, description = "the order id, a string (it does not fit a JavaScript number)", body = Success<String>),
        (status = 202, description = "asynchronous mode: the order is accepted (data: its id) but no Redis replica acknowledged it within ORDER_REPLICA_WAIT_MS; a master failover now could lose it, and GET /voucher-order/{orderId} tells whether it lasted", body = Success<String>),
        BadPath, Unauthorized,
        (status = 403, description = "PATH_REQUIRED: the voucher is guarded (`guard: path` or `challenge`); order with a path", body = Failure),
        (status = 404, description = "NOT_FOUND: no such seckill voucher", body = Failure),
        (status = 409, description = "SOLD_OUT; DUPLICATE_ORDER (data: the order the user holds); NOT_STARTED; ENDED; IDEMPOTENCY_IN_FLIGHT (the same Idempotency-Key is still running)", body = Failure),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the Idempotency-Key was used for another voucher", body = Failure),
        (status = 429, description = "TOO_MANY_REQUESTS: too many orders from this user, or another of the user's orders is in progress", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn place_order(
    State(seckill): State<Seckill>,
    State(order_limit): State<LocalUserLimiter>,
    State(paths): State<SalePath>,
    user: CurrentUser,
    Path(Id(voucher_id)): Path<Id>,
    idempotency: IdempotencyKey,
) -> Response {
    let ordering = Ordering { seckill, order_limit, paths };
    once_per_key(idempotency, ordering, user.id, voucher_id, None).await
}

/// An order under its `Idempotency-Key`, with or without a path: a retry
/// with the key gets the first answer.
async fn once_per_key(
    idempotency: IdempotencyKey,
    ordering: Ordering,
    user_id: u64,
    voucher_id: u64,
    path: Option<String>,
) -> Response {
    let caller = format!("user:{user_id}");
    idempotency
        .run(&caller, format!("order voucher {voucher_id}"), |attempt| async move {
            order(ordering, user_id, voucher_id, path, attempt).await.into_response()
        })
        .await
}

/// The order of a guarded voucher, with the sale path the buyer was given
/// (`POST /voucher-order/seckill/{voucherId}/path`). For a voucher without
/// a guard the path is ignored.
#[utoipa::path(post, path = "/voucher-order/seckill/{voucher_id}/{path}", tag = "order", security(("token" = [])),
    params(
        ("voucher_id" = i64, Path, minimum = 0, description = "the seckill voucher"),
        ("path" = String, Path, min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9_-]+$", description = "the sale path, as given (base64url)"),
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$", description = "as on the order route without a path"),
    ),
    responses(
        (status = 200, description = "the order id, a string", body = Success<String>),
        (status = 202, description = "asynchronous mode: accepted but not yet on a Redis replica (see the order route without a path)", body = Success<String>),
        (status = 400, description = "VALIDATION: the voucher id is not a number, or the path is not 1 to 128 base64url characters", body = Failure),
        Unauthorized,
        (status = 403, description = "PATH_INVALID: another user's or voucher's path, or one that placed an order already; PATH_EXPIRED", body = Failure),
        (status = 404, description = "NOT_FOUND: no such seckill voucher", body = Failure),
        (status = 409, description = "SOLD_OUT; DUPLICATE_ORDER; NOT_STARTED; ENDED; IDEMPOTENCY_IN_FLIGHT", body = Failure),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED", body = Failure),
        (status = 429, description = "TOO_MANY_REQUESTS", body = Failure),
        Unavailable,
    ))]
pub(crate) async fn place_order_on_path(
    State(seckill): State<Seckill>,
    State(order_limit): State<LocalUserLimiter>,
    State(paths): State<SalePath>,
    user: CurrentUser,
    Path(on_path): Path<(Id, String)>,
    idempotency: IdempotencyKey,
) -> Response {
    let (Id(voucher_id), path) = on_path;
    if !is_path_shaped(&path) {
        return ApiError::validation("a sale path is 1 to 128 base64url characters, as given").into_response();
    }
    let ordering = Ordering { seckill, order_limit, paths };
    once_per_key(idempotency, ordering, user.id, voucher_id, Some(path)).await
}

/// What the path segment of a sale path can be at all: anything else is a
/// 400, whatever the voucher (one without a guard ignores the path).
fn is_path_shaped(path: &str) -> bool {
    (1..=128).contains(&path.len()) && path.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The order's limit, its voucher's guard, the sale. A retry whose
/// earlier attempt's answer was lost is told of the order that attempt
/// placed, before a sold-out voucher would say it has none left.
async fn place(
    ordering: &Ordering,
    user_id: u64,
    voucher_id: u64,
    path: Option<String>,
    attempt: Attempt,
) -> ApiResult<PlacedOrder> {
    let Ordering { seckill, order_limit, paths } = ordering;
    order_limit.hit(user_id, "too many orders; slow down")?;
    if attempt == Attempt::AfterUnsettled
        && let Some(held) = seckill.held_order(user_id, voucher_id).await?
    {
        return Err(SeckillError::DuplicateOrder(Some(held)).into());
    }
    let spend = paths.check_order(user_id, voucher_id, path.as_deref()).await?;
    Ok(seckill.place(user_id, voucher_id, spend).await?)
}

/// What an order goes through: its limit, its voucher's guard, the sale.
struct Ordering {
    seckill: Seckill,
    order_limit: LocalUserLimiter,
    paths: SalePath,
}

async fn order(
    ordering: Ordering,
    user_id: u64,
    voucher_id: u64,
    path: Option<String>,
    attempt: Attempt,
) -> ApiResult<Reply<String>> {
    let placed = place(&ordering, user_id, voucher_id, path, attempt).await;
    let seckill = &ordering.seckill;
    let outcome =
        placed.as_ref().map_or_else(|e| e.code().as_str(), |p| if p.replicated { "SUCCESS" } else { "UNREPLICATED" });
    metrics::counter!("hmdp_seckill_orders_total", "mode" => seckill.mode(), "outcome" => outcome).increment(1);
    let placed = placed?;
    if placed.replicated {
        Ok(Reply::data(placed.id.to_string()))
    } else {
        Ok(Reply::accepted(
            placed.id.to_string(),
            format!(
                "accepted, but no Redis replica has it yet: GET /voucher-order/{} tells whether it lasted",
                placed.id
            ),
        ))
    }
}
