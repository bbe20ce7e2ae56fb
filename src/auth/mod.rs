//! Phone + SMS-code login, JWT-named sessions kept in Redis, and the two
//! layers that turn a token into a user (refresh) and demand one (login).

mod code;
mod layers;
mod phone;
mod seed;
mod session;
mod state;
mod token;
mod users;

use axum::{
    Router,
    extract::{FromRef, State},
    routing::post,
};
use serde::{Deserialize, Serialize};
use sqlx::MySqlPool;

pub(crate) use code::CodeStore;
pub(crate) use layers::{CurrentUser, RequireLoginLayer, refresh_session};
pub use seed::{SeededUser, seed_users};
pub use session::{SessionStore, UserProfile};
pub(crate) use state::{Auth, LoginLimits};
pub use token::{Claims, TokenKeys};

use phone::validate_phone;

use crate::{
    config::TrustedProxies,
    http::ratelimit::{RateLimiter, Window},
    http::{
        ApiError, ApiResult, Reply,
        envelope::{Done, Failure, Success},
        extract::{ClientAddr, Json, Query},
        failures::{BodyTimedOut, BodyTooLarge, RateLimited, Unauthorized, Unavailable},
    },
};

/// Routes anyone may call.
pub(crate) fn public_routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Auth: FromRef<S>,
    RateLimiter: FromRef<S>,
    MySqlPool: FromRef<S>,
    TrustedProxies: FromRef<S>,
{
    Router::new().route("/user/code", post(send_code)).route("/user/login", post(login))
}

/// Routes that need a logged-in user; the caller adds `require_login`.
pub(crate) fn user_routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    Auth: FromRef<S>,
{
    Router::new().route("/user/me", axum::routing::get(me)).route("/user/logout", post(logout))
}

/// The login layer for a router of protected routes.
pub(crate) fn protect<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.route_layer(RequireLoginLayer)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct PhoneQuery {
    /// A mainland mobile number: 11 digits, e.g. 13800000000
    #[param(pattern = r"^1[3-9][0-9]{9}$")]
    phone: String,
}

/// Limited per client address (every request) and per phone (codes sent),
/// in Redis, so the limits hold across instances.
#[utoipa::path(post, path = "/user/code", tag = "user", params(PhoneQuery), responses(
        (status = 200, description = "a code was stored for the phone (no SMS is sent)", body = Done),
        (status = 400, description = "VALIDATION: not a phone number", body = Failure),
        RateLimited, Unavailable,
    ))]
pub(crate) async fn send_code(
    State(auth): State<Auth>,
    State(limiter): State<RateLimiter>,
    ClientAddr(addr): ClientAddr,
    Query(PhoneQuery { phone }): Query<PhoneQuery>,
) -> ApiResult<Reply<()>> {
    let limits = &auth.limits;
    limiter
        .hit("code:addr", &addr, limits.codes_per_addr, "too many codes requested from this address; try later")
        .await?;
    let phone = validate_phone(&phone)?;
    let phone_from_addr = format!("{phone}:{addr}");
    let sent = [
        Window { what: "code:phone-addr", subject: &phone_from_addr, limit: limits.codes_per_phone },
        Window { what: "code:phone", subject: phone, limit: limits.codes_per_phone_ceiling },
    ];
    limiter.take(&sent, "too many codes sent to this phone today").await?;
    if let Err(err) = auth.codes.issue(phone).await {
        limiter.give_back(&sent).await;
        return Err(err.into());
    }
    Ok(Reply::done())
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoginForm {
    /// A mainland mobile number: 11 digits, e.g. 13800000000
    #[schema(pattern = r"^1[3-9][0-9]{9}$")]
    phone: String,
    /// The 6 digits stored by `/user/code`.
    #[schema(pattern = r"^[0-9]{6}$")]
    code: String,
    /// The course's login form sends it from its password tab; there is no
    /// password login here, so it is accepted and never read.
    #[serde(default, rename = "password")]
    _password: Option<String>,
}

/// Limited per client address (every attempt) and per phone (wrong codes
/// per day): a new code no longer buys an attacker five more guesses.
#[utoipa::path(post, path = "/user/login", tag = "user", request_body = LoginForm, responses(
        BodyTimedOut, BodyTooLarge,
        (status = 200, description = "the token (a JWT naming the session)", body = Success<String>),
        (status = 400, description = "VALIDATION: not a phone number, or the code is not 6 digits", body = Failure),
        (status = 401, description = "UNAUTHORIZED: wrong or expired code", body = Failure),
        RateLimited, Unavailable,
    ))]
pub(crate) async fn login(
    State(auth): State<Auth>,
    State(limiter): State<RateLimiter>,
    State(db): State<MySqlPool>,
    ClientAddr(addr): ClientAddr,
    Json(form): Json<LoginForm>,
) -> ApiResult<Reply<String>> {
    let limits = &auth.limits;
    limiter.hit("login:addr", &addr, limits.logins_per_addr, "too many logins from this address; try later").await?;
    let phone = validate_phone(&form.phone)?;
    if form.code.len() != code::CODE_LEN || !form.code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::validation("code must be 6 digits"));
    }
    let phone_from_addr = format!("{phone}:{addr}");
    // Each try takes its place as a failure before the code is compared, so
    // a burst of wrong codes never makes more tries than the limits allow;
    // the right code gives its places back.
    let failures = [
        Window { what: "login:fail-addr", subject: &phone_from_addr, limit: limits.failures_per_phone },
        Window { what: "login:fail", subject: phone, limit: limits.failures_per_phone_ceiling },
    ];
    limiter.take(&failures, "too many wrong codes for this phone today").await?;
    if let Err(err) = auth.codes.consume(phone, &form.code).await {
        if !err.is_wrong_code() {
            limiter.give_back(&failures).await;
        }
        return Err(err.into());
    }
    limiter.give_back(&failures).await;
    let user = users::find_or_create_by_phone(&db, phone).await?;
    let session_id = auth.sessions.create(&user).await?;
    let token = auth.tokens.issue(user.id, &session_id).map_err(ApiError::internal)?;
    tracing::info!(user_id = user.id, "user logged in");
    Ok(Reply::data(token))
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Me {
    id: u64,
    nick_name: String,
    icon: String,
}

#[utoipa::path(get, path = "/user/me", tag = "user", security(("token" = [])), responses(
        (status = 200, description = "the logged-in user", body = Success<Me>),
        Unauthorized,
    ))]
pub(crate) async fn me(user: CurrentUser) -> Reply<Me> {
    Reply::data(Me { id: user.id, nick_name: user.profile.nick_name, icon: user.profile.icon })
}

#[utoipa::path(post, path = "/user/logout", tag = "user", security(("token" = [])), responses(
        (status = 200, description = "the session is gone", body = Done),
        Unauthorized, Unavailable,
    ))]
pub(crate) async fn logout(State(auth): State<Auth>, user: CurrentUser) -> ApiResult<Reply<()>> {
    auth.sessions.delete(&user.session_id).await?;
    Ok(Reply::done())
}
