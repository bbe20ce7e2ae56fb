//! Liveness says the process answers; readiness says it can do its job,
//! which needs both MariaDB and Redis.

use std::time::Duration;

use axum::{Router, extract::State, routing::get};
use redis::AsyncCommands;

use super::{ApiError, ApiResult, Reply};
use crate::state::AppState;

const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub fn routes() -> Router<AppState> {
    Router::new().route("/health", get(health)).route("/ready", get(ready))
}

async fn health() -> Reply<&'static str> {
    Reply::data("ok")
}

async fn ready(State(state): State<AppState>) -> ApiResult<Reply<&'static str>> {
    let mut redis = state.redis.clone();
    let (db, ping) = tokio::join!(
        tokio::time::timeout(READY_TIMEOUT, sqlx::query("SELECT 1").execute(&state.db)),
        tokio::time::timeout(READY_TIMEOUT, async move { redis.ping::<String>().await }),
    );
    db.map_err(|_| unavailable("MariaDB ping timed out"))?
        .map_err(|e| ApiError::Unavailable(anyhow::Error::new(e).context("MariaDB ping")))?;
    ping.map_err(|_| unavailable("Redis ping timed out"))?
        .map_err(|e| ApiError::Unavailable(anyhow::Error::new(e).context("Redis ping")))?;
    Ok(Reply::data("ready"))
}

fn unavailable(what: &'static str) -> ApiError {
    ApiError::Unavailable(anyhow::anyhow!(what))
}
