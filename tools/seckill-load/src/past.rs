//! `seckill-load seed-past`: a year of sales before the one measured. A
//! shop's database after a year holds millions of orders of sales long
//! ended, and its Redis what those sales left; a sale, a sweep, a start-up
//! that reads the history instead of its own rows only shows on such a
//! database (`scripts/bench-past`).
//!
//! It adds, beside whatever is there: `--users` users (phones from
//! `--first-phone`), `--vouchers` seckill vouchers whose sales ended over
//! the past year, one every `365 days / vouchers`, and `--orders` orders
//! spread evenly over them, each buyer at most once per voucher, with ids
//! in the service's own form for their time (`timestamp << 32 | n`), so
//! that they never meet a new order's. Of every hundred orders 60 are paid,
//! 20 used, 10 cancelled, 5 refunded and 5 still unpaid, long past their
//! deadline (the sweep's work on the first start). In Redis, each sale's
//! stock, window and a hundred of its buyers, without a TTL and outside
//! `seckill:active`, as a version that retired nothing left them, and the
//! id generator's daily counters of the last 40 days.
//!
//! Rows are made by MariaDB itself from its `seq_0_to_999999` table (the
//! Sequence engine), a million per statement.

use std::time::Instant;

use anyhow::Context;
use hmdp::{
    config::{DatabaseUrl, RedisSettings},
    keys::Keys,
    startup::{connect_database, connect_redis, migrate},
};
use sqlx::MySqlPool;

/// Rows per statement: the Sequence engine table the statements read.
const CHUNK: u64 = 1_000_000;
/// Buyers of each past sale left in its Redis buyers set.
const BUYERS_LEFT: u64 = 100;

#[derive(clap::Parser, Debug)]
#[command(name = "seckill-load seed-past", about = "A year of ended sales before the sale measured")]
pub struct PastArgs {
    #[arg(long, default_value_t = 10_000_000)]
    orders: u64,
    #[arg(long, default_value_t = 1_000)]
    vouchers: u64,
    #[arg(long, default_value_t = 1_000_000)]
    users: u64,
    /// First phone of the past's users: apart from the load tool's buyers
    /// (17_1.., 17_3..), so a sale's buyers have no past of their own.
    #[arg(long, default_value_t = 16_000_000_000)]
    first_phone: u64,
    #[command(flatten)]
    db: DatabaseUrl,
    #[command(flatten)]
    redis: RedisSettings,
}

pub async fn run(args: PastArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.vouchers > 0 && args.orders >= args.vouchers, "--orders must be at least --vouchers (>= 1)");
    let per_voucher = args.orders / args.vouchers;
    anyhow::ensure!(args.users >= per_voucher, "--users must be at least the orders of one voucher ({per_voucher})");
    let db = connect_database(args.db.as_str(), 2).await?;
    migrate(&db).await?;
    let started = Instant::now();

    let first_user = next_id(&db, "SELECT CAST(COALESCE(MAX(id), 0) + 1 AS UNSIGNED) FROM tb_user").await?;
    seed_users(&db, first_user, args.users, args.first_phone).await?;
    eprintln!("{} users from id {first_user} ({:.0} s)", args.users, started.elapsed().as_secs_f64());

    let first_voucher = next_id(&db, "SELECT CAST(COALESCE(MAX(id), 0) + 1 AS UNSIGNED) FROM tb_voucher").await?;
    // One sale every year / vouchers, the last ended a day ago.
    let spacing_s = 365 * 86_400 / args.vouchers;
    seed_vouchers(&db, first_voucher, args.vouchers, spacing_s).await?;
    eprintln!("{} ended sales from id {first_voucher}", args.vouchers);

    let past = Past { first_user, users: args.users, first_voucher, vouchers: args.vouchers, per_voucher, spacing_s };
    let orders = per_voucher * args.vouchers;
    for chunk in 0..orders.div_ceil(CHUNK) {
        past.seed_orders(&db, chunk * CHUNK, CHUNK.min(orders - chunk * CHUNK)).await?;
        eprintln!(
            "{} of {orders} orders ({:.0} s)",
            (chunk * CHUNK + CHUNK).min(orders),
            started.elapsed().as_secs_f64()
        );
    }
    sqlx::raw_sql("ANALYZE TABLE tb_user, tb_voucher, tb_seckill_voucher, tb_voucher_order").execute(&db).await?;

    past.leave_in_redis(&db, &args.redis).await?;
    println!(
        "seeded the past: {} users, {} ended sales, {orders} orders, in {:.0} s",
        args.users,
        args.vouchers,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn next_id(db: &MySqlPool, sql: &'static str) -> anyhow::Result<u64> {
    let id: u64 = sqlx::query_scalar(sql).fetch_one(db).await?;
    Ok(id)
}

async fn seed_users(db: &MySqlPool, first_id: u64, users: u64, first_phone: u64) -> anyhow::Result<()> {
    for from in (0..users).step_by(CHUNK as usize) {
        sqlx::query(
            "INSERT INTO tb_user (id, phone, nick_name)
             SELECT ? + seq, CAST(? + seq AS CHAR), CONCAT('past_', ? + seq)
             FROM seq_0_to_999999 WHERE seq < ?",
        )
        .bind(first_id + from)
        .bind(first_phone + from)
        .bind(from)
        .bind((users - from).min(CHUNK))
        .execute(db)
        .await
        .context("inserting the past's users (are their phones taken by an earlier seed-past?)")?;
    }
    Ok(())
}

async fn seed_vouchers(db: &MySqlPool, first_id: u64, vouchers: u64, spacing_s: u64) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    sqlx::query(
        "INSERT INTO tb_voucher (id, shop_id, title, pay_value, actual_value, type, status)
         SELECT ? + seq, 1, CONCAT('past sale ', seq), 100, 1000, 1, 1 FROM seq_0_to_999999 WHERE seq < ?",
    )
    .bind(first_id)
    .bind(vouchers)
    .execute(&mut *tx)
    .await?;
    // Sale v began (vouchers - v) spacings and a day before now, and lasted
    // two hours; its stock sold out.
    sqlx::query(
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time)
         SELECT ? + seq, 0, UTC_TIMESTAMP() - INTERVAL ((? - seq) * ? + 86400) SECOND,
                UTC_TIMESTAMP() - INTERVAL ((? - seq) * ? + 86400 - 7200) SECOND
         FROM seq_0_to_999999 WHERE seq < ?",
    )
    .bind(first_id)
    .bind(vouchers)
    .bind(spacing_s)
    .bind(vouchers)
    .bind(spacing_s)
    .bind(vouchers)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Where the past's rows go: order k is voucher k / per_voucher's n-th
/// (n = k mod per_voucher), bought by a user no other order of that
/// voucher has.
struct Past {
    first_user: u64,
    users: u64,
    first_voucher: u64,
    vouchers: u64,
    per_voucher: u64,
    spacing_s: u64,
}

impl Past {
    /// Orders `from..from + count`. The n-th order of a sale came n / 100
    /// seconds after its opening; its id is that second's, numbered n + 1.
    /// User: n * stride + (voucher mod stride), distinct within a sale.
    async fn seed_orders(&self, db: &MySqlPool, from: u64, count: u64) -> anyhow::Result<()> {
        let stride = self.users / self.per_voucher;
        sqlx::query(
            "INSERT INTO tb_voucher_order (id, user_id, voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time)
             SELECT ((UNIX_TIMESTAMP(t) - ?) << 32) | (n + 1), ? + n * ? + v MOD ?, ? + v, 1,
                    ELT(1 + (k MOD 100) DIV 5, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 6, 1),
                    t,
                    IF((k MOD 100) < 80 OR (k MOD 100) BETWEEN 90 AND 94, t + INTERVAL 60 SECOND, NULL),
                    IF((k MOD 100) BETWEEN 60 AND 79, t + INTERVAL 1 DAY, NULL),
                    IF((k MOD 100) BETWEEN 90 AND 94, t + INTERVAL 2 DAY, NULL)
             FROM (SELECT k, k DIV ? AS v, k MOD ? AS n,
                          UTC_TIMESTAMP() - INTERVAL ((? - k DIV ?) * ? + 86400) SECOND + INTERVAL ((k MOD ?) DIV 100) SECOND AS t
                   FROM (SELECT ? + seq AS k FROM seq_0_to_999999 WHERE seq < ?) ks) o",
        )
        .bind(hmdp::ids::EPOCH_SECS)
        .bind(self.first_user)
        .bind(stride)
        .bind(stride)
        .bind(self.first_voucher)
        .bind(self.per_voucher)
        .bind(self.per_voucher)
        .bind(self.vouchers)
        .bind(self.per_voucher)
        .bind(self.spacing_s)
        .bind(self.per_voucher)
        .bind(from)
        .bind(count)
        .execute(db)
        .await
        .context("inserting the past's orders")?;
        Ok(())
    }

    /// What an old version left in Redis of each sale (its stock, its
    /// window, some of its buyers; no TTL, not active) and the id
    /// generator's counters of the last 40 days.
    async fn leave_in_redis(&self, db: &MySqlPool, settings: &RedisSettings) -> anyhow::Result<()> {
        let mut redis = connect_redis(settings).await?;
        let keys = Keys::new(&settings.key_prefix);
        let sales: Vec<(u64, i64, i64)> = sqlx::query_as(
            "SELECT voucher_id, UNIX_TIMESTAMP(begin_time) * 1000, UNIX_TIMESTAMP(end_time) * 1000
             FROM tb_seckill_voucher WHERE voucher_id >= ? ORDER BY voucher_id",
        )
        .bind(self.first_voucher)
        .fetch_all(db)
        .await?;
        for (voucher, begin_ms, end_ms) in sales {
            let sk = keys.seckill(voucher);
            let v = voucher - self.first_voucher;
            let stride = self.users / self.per_voucher;
            let buyers: Vec<u64> =
                (0..BUYERS_LEFT.min(self.per_voucher)).map(|n| self.first_user + n * stride + v % stride).collect();
            let mut pipe = redis::pipe();
            pipe.set(&sk.stock, 0)
                .hset_multiple(&sk.window, &[("begin", begin_ms), ("end", end_ms)])
                .sadd(&sk.buyers, 0_u64)
                .sadd(&sk.buyers, buyers);
            let _: () = pipe.query_async(&mut redis).await?;
        }
        let today = chrono::Utc::now().date_naive();
        for day in 1..40 {
            let date = today - chrono::Duration::days(day);
            let key = format!("{}icr:order:{}", keys.prefix(), date.format("%Y:%m:%d"));
            let _: () = redis::cmd("SET")
                .arg(&key)
                .arg(1_000_000)
                .arg("EX")
                .arg(86_400 * (40 - day))
                .query_async(&mut redis)
                .await?;
        }
        Ok(())
    }
}
