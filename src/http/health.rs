//! Liveness says the process answers; readiness says it can do its job,
//! which needs both MariaDB and Redis.

use std::time::Duration;

use axum::{
    Router,
    extract::{FromRef, State},
    routing::get,
};
use hmdp_redis::Redis;
use redis::AsyncCommands;
use sqlx::MySqlPool;

use super::{
    envelope::Reply,
    error::{ApiError, ApiResult},
};

const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Generic over the app's state, so this plumbing needs nothing of the app
/// but its two connections.
pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    MySqlPool: FromRef<S>,
    Redis: FromRef<S>,
{
    Router::new().route("/health", get(health)).route("/ready", get(ready))
}

#[utoipa::path(get, path = "/health", tag = "operations", responses(
        (status = 200, description = "the process is up", body = super::envelope::Success<String>),
    ))]
pub(crate) async fn health() -> Reply<&'static str> {
    Reply::data("ok")
}

#[utoipa::path(get, path = "/ready", tag = "operations", responses(
        (status = 200, description = "MariaDB and Redis answer", body = super::envelope::Success<String>),
        super::failures::Unavailable,
    ))]
pub(crate) async fn ready(
    State(db): State<MySqlPool>,
    State(mut redis): State<Redis>,
) -> ApiResult<Reply<&'static str>> {
    let (db, ping) = tokio::join!(
        tokio::time::timeout(READY_TIMEOUT, sqlx::query("SELECT 1").execute(&db)),
        tokio::time::timeout(READY_TIMEOUT, async move { redis.ping::<String>().await }),
    );
    db.map_err(|_| unavailable("MariaDB ping timed out"))?
        .map_err(|e| ApiError::unavailable(anyhow::Error::new(e).context("MariaDB ping")))?;
    ping.map_err(|_| unavailable("Redis ping timed out"))?
        .map_err(|e| ApiError::unavailable(anyhow::Error::new(e).context("Redis ping")))?;
    Ok(Reply::data("ready"))
}

fn unavailable(what: &'static str) -> ApiError {
    ApiError::unavailable(anyhow::anyhow!(what))
}
