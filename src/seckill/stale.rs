//! Keys a Redis that outlived its database left under a new voucher's id.
//! Nothing in Redis can belong to a voucher being created: keys under its
//! id were left by another database whose voucher had the same id, and
//! (or under the tags its segments are given) would sell its stock, refuse its buyers or persist its pending orders as
//! this voucher's (asynchronous mode), or make Redis look as if it disagreed
//! with MariaDB to whoever reconciles the two (either mode). They go, all of
//! them, before the voucher's row is committed: a
//! Redis that cannot be reached fails the creation with nothing created,
//! and no order can load keys meanwhile, as MariaDB has no row for it yet.

use hmdp_redis::Redis;

use super::error::SeckillResult;
use crate::keys::Keys;

pub(super) async fn clear(redis: &Redis, keys: &Keys, voucher_id: u64, tags: &[String]) -> SeckillResult<()> {
    let mut stale = 0u64;
    for tag in tags {
        let sk = keys.seckill_segment(tag);
        let segment: Vec<&str> = sk.all().into_iter().chain(sk.borrowing()).collect();
        stale += redis::cmd("DEL").arg(&segment[..]).query_async::<u64>(&mut redis.clone()).await?;
    }
    // A guarded voucher's waiting room, under the voucher's own tag.
    let line = keys.sale_line(voucher_id);
    stale += redis::cmd("DEL")
        .arg(&[&line.line, &line.seen, &line.admitted, &line.state])
        .query_async::<u64>(&mut redis.clone())
        .await?;
    if stale > 0 {
        tracing::warn!(voucher_id, keys = stale, "a new voucher found keys another voucher left under its id; removed");
    }
    Ok(())
}
