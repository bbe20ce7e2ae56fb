//! The asynchronous order: one Redis script decides it (window against
//! Redis's clock, one order per user, stock) and queues it on the voucher's
//! stream, and the answer goes out at once; the consumers persist it later
//! in batches. Besides the session lookup, an order costs one round trip:
//! its id comes from a block reserved earlier.
//!
//! When a voucher's keys are missing (never loaded, evicted, Redis restarted
//! without persistence) they are rebuilt from MariaDB, atomically and once
//! even when both instances try at the same moment.

use std::{
    collections::{HashMap, HashSet},
    sync::LazyLock,
};

use chrono::NaiveDateTime;
use redis::{AsyncCommands, Script, aio::ConnectionManager};
use sqlx::MySqlPool;

use crate::{
    http::{ApiError, ApiResult, error::redis_unreachable},
    keys::Keys,
    state::AppState,
};

static ORDER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/seckill_order.lua")));
static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../lua/seckill_load.lua")));

/// Members per SADD when staging a rebuilt buyers set.
const STAGE_CHUNK: usize = 5_000;

/// Decides one order in Redis; returns its id once it is queued.
pub(super) async fn place(state: &AppState, user_id: u64, voucher_id: u64) -> ApiResult<i64> {
    if state.gates.recently_missing(voucher_id) {
        return Err(ApiError::NotFound("no such seckill voucher"));
    }
    let order_id = state.order_ids.next().await.map_err(|e| ApiError::dependency(e.is_unavailable(), e))?;
    let keys = state.keys.seckill(voucher_id);
    let mut redis = state.redis.clone();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(state.config.request_deadline_ms);
    let mut loaded_once = false;
    // Set once a call's answer was lost: that call may still run in Redis.
    let mut uncertain = false;
    loop {
        let called: redis::RedisResult<i64> = ORDER
            .key(&keys.stock)
            .key(&keys.window)
            .key(&keys.buyers)
            .key(&keys.orders)
            .key(&keys.pending)
            .arg(user_id)
            .arg(order_id)
            .arg(voucher_id)
            .invoke_async(&mut redis)
            .await;
        // A call whose answer was lost (Redis paused, a timeout) may be
        // executed later. The same call, same order id, is tried again until
        // the deadline: whichever runs first accepts the order, once (the
        // buyers set sees to it), and the answer comes from what Redis holds.
        let verdict = match called {
            Ok(verdict) => verdict,
            Err(err) if redis_unreachable(&err) && tokio::time::Instant::now() < deadline => {
                tracing::warn!(order_id, error = %err, "the order script's answer was lost; asking again");
                uncertain = true;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        match verdict {
            0 => {
                tracing::debug!(order_id, user_id, voucher_id, "order accepted");
                return Ok(order_id);
            }
            1 if !loaded_once => {
                loaded_once = true;
                let loaded = load(&state.db, &mut redis, &state.keys, voucher_id).await;
                if let Err(ApiError::NotFound(_)) = loaded {
                    state.gates.remember_missing(voucher_id);
                }
                loaded?
            }
            1 => {
                return Err(ApiError::internal(anyhow::anyhow!(
                    "voucher {voucher_id}'s keys vanished right after loading"
                )));
            }
            2 => return Err(ApiError::NotStarted),
            3 => return Err(ApiError::Ended),
            4 => {
                // After a lost answer the order held may be this very one.
                if uncertain && accepted_before(state, &keys, order_id).await? {
                    tracing::info!(order_id, "a lost call had accepted the order; answered as accepted");
                    return Ok(order_id);
                }
                // The id when the order already has its row; a pending one's
                // is not looked for (it is in no index by user).
                let held = super::order::held_by(&state.db, user_id, voucher_id).await.ok().flatten();
                return Err(ApiError::DuplicateOrder(held));
            }
            5 => return Err(ApiError::SoldOut),
            other => {
                return Err(ApiError::internal(anyhow::anyhow!(
                    "the order script answered {other} for voucher {voucher_id}"
                )));
            }
        }
    }
}

/// Between two tries of the order script after a lost answer.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `order_id` itself was accepted: pending, persisted, or already
/// dead-lettered.
async fn accepted_before(state: &AppState, keys: &crate::keys::SeckillKeys, order_id: i64) -> ApiResult<bool> {
    let (pending, failed): (bool, bool) = redis::pipe()
        .hexists(&keys.pending, order_id)
        .hexists(&keys.failed, order_id)
        .query_async(&mut state.redis.clone())
        .await?;
    if pending || failed {
        return Ok(true);
    }
    let row: Option<i64> = sqlx::query_scalar("SELECT id FROM tb_voucher_order WHERE id = ?")
        .bind(order_id)
        .fetch_optional(&state.db)
        .await?;
    Ok(row.is_some())
}

/// Loads a voucher's keys from MariaDB unless they are all there, and makes
/// the consumers read its stream. 404 when it is not a seckill voucher.
///
/// Orders accepted but not yet persisted are in the pending hash: they are
/// read first, then MariaDB in one snapshot, so an order persisted in
/// between is found in MariaDB and counted once. While any key is missing
/// the order script accepts nothing, so nothing else moves meanwhile.
pub async fn load(db: &MySqlPool, redis: &mut ConnectionManager, keys: &Keys, voucher_id: u64) -> ApiResult<()> {
    let sk = keys.seckill(voucher_id);
    let pending: HashMap<i64, String> = redis.hgetall(&sk.pending).await?;

    let mut tx = db.begin().await?;
    let voucher: Option<(i32, NaiveDateTime, NaiveDateTime)> =
        sqlx::query_as("SELECT stock, begin_time, end_time FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher_id)
            .fetch_optional(&mut *tx)
            .await?;
    let (db_stock, begin, end) = voucher.ok_or(ApiError::NotFound("no such seckill voucher"))?;
    let rows: Vec<(i64, u64)> = sqlx::query_as("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ?")
        .bind(voucher_id)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;

    let persisted: HashSet<i64> = rows.iter().map(|(id, _)| *id).collect();
    let mut buyers: HashSet<u64> = rows.iter().map(|(_, user)| *user).collect();
    let mut unpersisted = 0i64;
    for (order_id, accepted) in &pending {
        if !persisted.contains(order_id) {
            unpersisted += 1;
            if let Some(user) = accepted.split(':').next().and_then(|u| u.parse().ok()) {
                buyers.insert(user);
            }
        }
    }
    let stock = (i64::from(db_stock) - unpersisted).max(0);

    // The buyers are staged under the same hash tag and renamed into place
    // by the script, so the set appears whole or not at all.
    let staging = format!("{}:staging:{}", sk.buyers, uuid::Uuid::new_v4().simple());
    let members: Vec<u64> = buyers.into_iter().collect();
    for chunk in members.chunks(STAGE_CHUNK) {
        redis::pipe().sadd(&staging, chunk).ignore().expire(&staging, 60).ignore().exec_async(redis).await?;
    }
    let loaded: i64 = LOAD
        .key(&sk.stock)
        .key(&sk.window)
        .key(&sk.buyers)
        .key(&sk.orders)
        .key(&staging)
        .arg(stock)
        .arg(begin.and_utc().timestamp_millis())
        .arg(end.and_utc().timestamp_millis())
        .invoke_async(redis)
        .await?;
    redis.sadd::<_, _, ()>(keys.seckill_active(), voucher_id).await?;
    if loaded == 1 {
        tracing::info!(voucher_id, stock, unpersisted, "seckill keys loaded from MariaDB");
    }
    Ok(())
}
