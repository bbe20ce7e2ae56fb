//! Keys a Redis that outlived its database left under a new voucher's id.
//! Nothing in Redis can belong to a voucher being created: keys under its
//! id were left by another database whose voucher had the same id, and
//! would sell its stock, refuse its buyers or persist its pending orders as
//! this voucher's (asynchronous mode), or make Redis look as if it disagreed
//! with MariaDB to whoever reconciles the two (either mode). They go, all of
//! them in one DEL (one slot), before the voucher's row is committed: a
//! Redis that cannot be reached fails the creation with nothing created,
//! and no order can load keys meanwhile, as MariaDB has no row for it yet.

use hmdp_redis::Redis;

use super::error::SeckillResult;
use crate::keys::Keys;

pub(super) async fn clear(redis: &Redis, keys: &Keys, voucher_id: u64) -> SeckillResult<()> {
    let sk = keys.seckill(voucher_id);
    let stale: u64 = redis::cmd("DEL").arg(&sk.all()[..]).query_async(&mut redis.clone()).await?;
    if stale > 0 {
        tracing::warn!(voucher_id, keys = stale, "a new voucher found keys another voucher left under its id; removed");
    }
    Ok(())
}
