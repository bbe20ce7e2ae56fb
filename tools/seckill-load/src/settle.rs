//! Waiting for a sale to come to rest before it is audited: its rows in
//! MariaDB, its Redis stream drained. Polls only; a poll that fails is
//! tried again until its deadline (a fault run kills every connection to
//! the database, this tool's idle ones included, and a poll is safe to
//! repeat).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use hmdp::keys::Keys;

/// The rows a voucher's sale is waited for: `must`, with every 200's
/// row, and `may`, with every 202's too ("unreplicated": a master lost
/// before its replica had the order may take it along; the checker lets
/// such an order end FAILED).
pub struct Expected {
    pub voucher: u64,
    pub must: i64,
    pub may: i64,
}

/// How long a sale whose 200s' rows are all in waits for its 202s' once
/// no row lands: a lost master's 202s never land, and waiting for them
/// held every such run for the drain's whole timeout (two minutes of each
/// CI run). Longer than the stall of a MariaDB primary's promotion (8 to
/// 10 s), during which no row lands either.
const QUIET_FOR_202S: Duration = Duration::from_secs(20);

#[derive(Debug, PartialEq)]
enum Landed {
    Every,
    Every200s,
    NotYet,
}

fn landed(expected: &[Expected], counts: &HashMap<u64, i64>) -> Landed {
    let at_least =
        |want: fn(&Expected) -> i64| expected.iter().all(|e| counts.get(&e.voucher).copied().unwrap_or(0) >= want(e));
    if at_least(|e| e.may) {
        Landed::Every
    } else if at_least(|e| e.must) {
        Landed::Every200s
    } else {
        Landed::NotYet
    }
}

/// When every voucher's expected rows landed (polled, all vouchers in one
/// query, so a sale of 500 vouchers is timed as finely as a sale of one):
/// every 202's too, or, once every 200's is in, the last row that landed
/// before [`QUIET_FOR_202S`] without one; `None` after the timeout.
pub async fn rows(db: &sqlx::MySqlPool, expected: &[Expected], timeout: Duration) -> anyhow::Result<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    let (mut last_counts, mut last_landed) = (HashMap::new(), Instant::now());
    loop {
        let mut query =
            sqlx::QueryBuilder::new("SELECT voucher_id, COUNT(*) FROM tb_voucher_order WHERE voucher_id IN (");
        let mut ids = query.separated(", ");
        for e in expected {
            ids.push_bind(e.voucher);
        }
        query.push(") GROUP BY voucher_id");
        match query.build_query_as::<(u64, i64)>().fetch_all(db).await {
            Ok(counts) => {
                let counts: HashMap<u64, i64> = counts.into_iter().collect();
                let now = Instant::now();
                if counts != last_counts {
                    (last_counts, last_landed) = (counts, now);
                }
                match landed(expected, &last_counts) {
                    Landed::Every => return Ok(Some(now)),
                    Landed::Every200s if now.duration_since(last_landed) >= QUIET_FOR_202S => {
                        return Ok(Some(last_landed));
                    }
                    _ => {}
                }
            }
            Err(err) => retry_until(deadline, "polling the orders", err)?,
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// For a voucher sold in the asynchronous mode (its keys are in Redis):
/// waits until its stream is drained and compares Redis with MariaDB.
pub async fn drain(
    db: &sqlx::MySqlPool,
    redis: &mut hmdp_redis::Redis,
    keys: &Keys,
    voucher: u64,
    timeout: Duration,
) -> anyhow::Result<Option<hmdp::seckill::Reconciliation>> {
    let deadline = Instant::now() + timeout;
    loop {
        match hmdp::seckill::reconcile(db, redis, keys, voucher).await {
            Ok(report) if report.redis_stock.is_none() => return Ok(None),
            Ok(report) if report.drained() || Instant::now() >= deadline => return Ok(Some(report)),
            Ok(_) => {}
            Err(err) => retry_until(deadline, "reading the drain", err)?,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn retry_until(deadline: Instant, what: &str, err: impl Into<anyhow::Error>) -> anyhow::Result<()> {
    let err = err.into();
    if Instant::now() >= deadline {
        return Err(err);
    }
    eprintln!("{what} failed, retrying: {err:#}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(must: i64, may: i64) -> Vec<Expected> {
        vec![Expected { voucher: 1, must, may }, Expected { voucher: 2, must: 5, may: 5 }]
    }

    fn counts(first: i64, second: i64) -> HashMap<u64, i64> {
        HashMap::from([(1, first), (2, second)])
    }

    #[test]
    fn a_sale_has_landed_when_every_voucher_has_its_202s_rows_too() {
        assert_eq!(landed(&expected(10, 12), &counts(12, 5)), Landed::Every);
    }

    #[test]
    fn a_sale_whose_202s_are_missing_has_landed_only_its_200s() {
        assert_eq!(landed(&expected(10, 12), &counts(10, 5)), Landed::Every200s);
        assert_eq!(landed(&expected(10, 12), &counts(11, 5)), Landed::Every200s);
    }

    #[test]
    fn a_sale_missing_a_200s_row_on_any_voucher_has_not_landed() {
        assert_eq!(landed(&expected(10, 12), &counts(9, 5)), Landed::NotYet);
        assert_eq!(landed(&expected(10, 12), &counts(12, 4)), Landed::NotYet);
        assert_eq!(landed(&expected(10, 12), &HashMap::from([(1, 12)])), Landed::NotYet);
    }
}
