//! `tb_seckill_voucher`: a sale's row, its stock taken, set and given
//! back under the row lock.

use std::collections::{HashMap, HashSet};

use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlExecutor, QueryBuilder};

/// A seckill voucher's row: the stock MariaDB has and the sale window
/// (UTC), and whether its voucher is on the shelf.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub(in crate::seckill) struct SaleRow {
    pub(crate) stock: i32,
    pub(crate) begin_time: NaiveDateTime,
    pub(crate) end_time: NaiveDateTime,
    /// `tb_voucher.status`: 1 on the shelf; anything else does not sell.
    pub(crate) shelf: Option<i64>,
    pub(crate) create_time: NaiveDateTime,
}

impl SaleRow {
    /// What the voucher was made as: Redis keys carry it (`made` in the
    /// window hash), so keys left under the same id by another database's
    /// voucher are told apart from this voucher's.
    pub(in crate::seckill) fn stamp(&self) -> String {
        stamp_of(self.create_time, self.begin_time, self.end_time)
    }
}

/// The stamp of a voucher made at `create_time` for the window
/// `begin..end` (`SaleRow::stamp`): what never changes of its row.
fn stamp_of(create_time: NaiveDateTime, begin: NaiveDateTime, end: NaiveDateTime) -> String {
    format!(
        "{}:{}:{}",
        create_time.and_utc().timestamp(),
        begin.and_utc().timestamp_millis(),
        end.and_utc().timestamp_millis()
    )
}

/// `tb_voucher.status` of a voucher that sells.
const ON_SHELF: i64 = 1;

pub async fn insert_sale<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    stock: i64,
    (begin, end): (NaiveDateTime, NaiveDateTime),
    segment_tags: &[String],
    segments_by_admin: bool,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO tb_seckill_voucher
         (voucher_id, stock, begin_time, end_time, segments, segment_tags, segments_by_admin)
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(voucher_id)
    .bind(stock)
    .bind(begin)
    .bind(end)
    .bind(segment_tags.len() as u32 + 1)
    .bind(segment_tags.join(","))
    .bind(segments_by_admin)
    .execute(db)
    .await?;
    Ok(())
}

/// The voucher's sale row, or `None` for a voucher that is not a seckill one.
pub(in crate::seckill) async fn sale<'e>(db: impl MySqlExecutor<'e>, voucher_id: u64) -> sqlx::Result<Option<SaleRow>> {
    sqlx::query_as(
        "SELECT sv.stock, sv.begin_time, sv.end_time, CAST(v.status AS SIGNED) AS shelf, sv.create_time
         FROM tb_seckill_voucher sv LEFT JOIN tb_voucher v ON v.id = sv.voucher_id
         WHERE sv.voucher_id = ?",
    )
    .bind(voucher_id)
    .fetch_optional(db)
    .await
}

/// A sale with its voucher's id.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub(in crate::seckill) struct VoucherSale {
    pub(crate) voucher_id: u64,
    #[sqlx(flatten)]
    pub(crate) sale: SaleRow,
}

/// The sales opening after `after` and by `by`, the first to open first,
/// at most `limit`: what an instance reads ahead of their opening. A range
/// on `idx_sale_begin`, so the sales already on, ended or scheduled
/// further ahead are not read, however many there are.
pub(super) const SALES_OPENING: &str =
    "SELECT sv.voucher_id, sv.stock, sv.begin_time, sv.end_time, CAST(v.status AS SIGNED) AS shelf, sv.create_time
     FROM tb_seckill_voucher sv LEFT JOIN tb_voucher v ON v.id = sv.voucher_id
     WHERE sv.begin_time > ? AND sv.begin_time <= ?
     ORDER BY sv.begin_time LIMIT ?";

pub(in crate::seckill) async fn sales_opening<'e>(
    db: impl MySqlExecutor<'e>,
    after: NaiveDateTime,
    by: NaiveDateTime,
    limit: u32,
) -> sqlx::Result<Vec<VoucherSale>> {
    sqlx::query_as(SALES_OPENING).bind(after).bind(by).bind(limit).fetch_all(db).await
}

/// Of these vouchers, the ones with stock left: one statement for every
/// voucher an instance holds for sold out, by their primary keys.
pub(in crate::seckill) async fn in_stock_of<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_ids: &[u64],
) -> sqlx::Result<HashSet<u64>> {
    if voucher_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let mut select = in_stock_of_query(voucher_ids);
    Ok(select.build_query_scalar::<u64>().fetch_all(db).await?.into_iter().collect())
}

/// `in_stock_of`'s statement for these ids (its plan is tested).
pub(super) fn in_stock_of_query(voucher_ids: &[u64]) -> QueryBuilder<'_, MySql> {
    let mut select: QueryBuilder<MySql> = QueryBuilder::new(
        "SELECT voucher_id FROM tb_seckill_voucher FORCE INDEX (PRIMARY) WHERE stock > 0 AND voucher_id IN ",
    );
    select.push_tuples(super::padding::padded(voucher_ids), |mut row, id| {
        row.push_bind(id);
    });
    select
}

/// The hash tags of the voucher's segments 1.. (comma-separated, `''` for
/// one segment) and the voucher's stamp (`SaleRow::stamp`), read
/// together once per voucher and instance: the stamp is what an
/// instance's first order compares Redis's `made` with and never changes
/// while the row lives; the tags change once at most, when a voucher found
/// hot is split (`record_split`), and the order script tells an instance
/// that routed by the old ones. `None` for a voucher that is not a
/// seckill one.
pub(in crate::seckill) async fn segment_tags_and_stamp<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
) -> sqlx::Result<Option<(String, String)>> {
    let row: Option<(String, NaiveDateTime, NaiveDateTime, NaiveDateTime)> = sqlx::query_as(
        "SELECT segment_tags, create_time, begin_time, end_time FROM tb_seckill_voucher WHERE voucher_id = ?",
    )
    .bind(voucher_id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|(tags, created, begin, end)| (tags, stamp_of(created, begin, end))))
}

/// What a split reads of a sale: whether it is sold in one segment that
/// nobody chose, and until when.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(in crate::seckill) struct SplitRow {
    pub(crate) segments: u8,
    pub(crate) segment_tags: String,
    pub(crate) segments_by_admin: bool,
    pub(crate) begin_time: NaiveDateTime,
    pub(crate) end_time: NaiveDateTime,
}

pub(in crate::seckill) async fn split_row<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
) -> sqlx::Result<Option<SplitRow>> {
    sqlx::query_as(
        "SELECT segments, segment_tags, segments_by_admin, begin_time, end_time
         FROM tb_seckill_voucher WHERE voucher_id = ?",
    )
    .bind(voucher_id)
    .fetch_optional(db)
    .await
}

/// Records that the voucher is sold in these segments from now on (the
/// tags of segments 1..): only a voucher of one segment the admin did not
/// choose changes. True when the row names these very tags, by this call
/// or by an earlier try of the same split.
pub(in crate::seckill) async fn record_split(
    db: &sqlx::MySqlPool,
    voucher_id: u64,
    tags: &[String],
) -> sqlx::Result<bool> {
    let tags = tags.join(",");
    let changed = sqlx::query(
        "UPDATE tb_seckill_voucher SET segments = ?, segment_tags = ?
         WHERE voucher_id = ? AND segments = 1 AND segment_tags = '' AND segments_by_admin = FALSE",
    )
    .bind(tags.split(',').count() as u32 + 1)
    .bind(&tags)
    .bind(voucher_id)
    .execute(db)
    .await?
    .rows_affected();
    if changed == 1 {
        return Ok(true);
    }
    let recorded: Option<String> =
        sqlx::query_scalar("SELECT segment_tags FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher_id)
            .fetch_optional(db)
            .await?;
    Ok(recorded.as_deref() == Some(tags.as_str()))
}

/// Whether the voucher is on the shelf, read under a shared lock taken
/// first in the order's transaction: an admin taking it off the shelf waits
/// for the orders that read it on, and every order after sees it off. (The
/// shared lock before the stock row's exclusive one, in every order
/// transaction, so the admin's update can deadlock with none.)
pub(in crate::seckill) async fn on_shelf<'e>(db: impl MySqlExecutor<'e>, voucher_id: u64) -> sqlx::Result<bool> {
    let status: Option<i64> =
        sqlx::query_scalar("SELECT CAST(status AS SIGNED) FROM tb_voucher WHERE id = ? LOCK IN SHARE MODE")
            .bind(voucher_id)
            .fetch_optional(db)
            .await?;
    Ok(status == Some(ON_SHELF))
}

/// `on_shelf` for the vouchers of one group commit, in one statement: the
/// ids on the shelf. The shared locks are taken in the ids' order, as the
/// stock rows' locks after them: two such transactions wait for each
/// other, never in a circle. On the primary key, whatever the table's
/// size: a scan would lock every row it passed.
pub(in crate::seckill) async fn on_shelf_of<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_ids: &[u64],
) -> sqlx::Result<HashSet<u64>> {
    let mut select: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT id, CAST(status AS SIGNED) FROM tb_voucher FORCE INDEX (PRIMARY) WHERE id IN ");
    select.push_tuples(super::padding::padded(voucher_ids), |mut row, id| {
        row.push_bind(id);
    });
    select.push(" ORDER BY id LOCK IN SHARE MODE");
    let rows = select.build_query_as::<(u64, i64)>().fetch_all(db).await?;
    Ok(rows.into_iter().filter(|(_, status)| *status == ON_SHELF).map(|(id, _)| id).collect())
}

/// `lock_stock` for the vouchers of one group commit, in one statement
/// and in the ids' order: voucher id -> stock, for the seckill ones.
pub(in crate::seckill) async fn lock_stocks<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_ids: &[u64],
) -> sqlx::Result<HashMap<u64, i32>> {
    let mut select: QueryBuilder<MySql> = QueryBuilder::new(
        "SELECT voucher_id, stock FROM tb_seckill_voucher FORCE INDEX (PRIMARY) WHERE voucher_id IN ",
    );
    select.push_tuples(super::padding::padded(voucher_ids), |mut row, id| {
        row.push_bind(id);
    });
    select.push(" ORDER BY voucher_id FOR UPDATE");
    Ok(select.build_query_as::<(u64, i32)>().fetch_all(db).await?.into_iter().collect())
}

/// `take_stock` for several vouchers in one statement: (voucher, units)
/// each, every row guarded by its own units. `false` when some row had
/// fewer left than asked (the caller holds their locks and rolls back).
pub(in crate::seckill) async fn take_stocks<'e>(
    db: impl MySqlExecutor<'e>,
    takes: &[(u64, u64)],
) -> sqlx::Result<bool> {
    if takes.is_empty() {
        return Ok(true);
    }
    let units = |update: &mut QueryBuilder<'_, MySql>| {
        update.push("CASE voucher_id");
        for (voucher_id, units) in super::padding::padded(takes) {
            update.push(" WHEN ").push_bind(voucher_id).push(" THEN ").push_bind(units);
        }
        update.push(" END");
    };
    let mut update: QueryBuilder<MySql> =
        QueryBuilder::new("UPDATE tb_seckill_voucher FORCE INDEX (PRIMARY) SET stock = stock - ");
    units(&mut update);
    update.push(" WHERE voucher_id IN ");
    update.push_tuples(super::padding::padded(takes), |mut row, (voucher_id, _)| {
        row.push_bind(voucher_id);
    });
    update.push(" AND stock >= ");
    units(&mut update);
    Ok(update.build().execute(db).await?.rows_affected() == takes.len() as u64)
}

/// Takes the voucher's row lock and reads its stock: every check made
/// after it in the same transaction holds until the commit. `None` for a
/// voucher that is not a seckill one.
pub(in crate::seckill) async fn lock_stock<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE")
        .bind(voucher_id)
        .fetch_optional(db)
        .await
}

/// The voucher's segment tags as its row records them, read with the row
/// lock (taken, or held already by the caller's transaction): a split
/// recorded by another transaction is seen, never an older snapshot.
/// `None` for a voucher that is not a seckill one.
pub(in crate::seckill) async fn lock_segment_tags<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("SELECT segment_tags FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE")
        .bind(voucher_id)
        .fetch_optional(db)
        .await
}

/// The course's guarded update, for `units` at once: `false` when the
/// row has fewer than `units` left, and then nothing changed.
pub(in crate::seckill) async fn take_stock<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    units: u64,
) -> sqlx::Result<bool> {
    let taken = sqlx::query("UPDATE tb_seckill_voucher SET stock = stock - ? WHERE voucher_id = ? AND stock >= ?")
        .bind(units)
        .bind(voucher_id)
        .bind(units)
        .execute(db)
        .await?
        .rows_affected();
    Ok(taken == 1)
}

/// The admin's correction of the stock row (its lock held by the caller).
pub(in crate::seckill) async fn set_stock<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    stock: i32,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE tb_seckill_voucher SET stock = ? WHERE voucher_id = ?")
        .bind(stock)
        .bind(voucher_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Units back into the voucher's stock (its row lock held by the caller).
pub(in crate::seckill) async fn give_back<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    units: u64,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE tb_seckill_voucher SET stock = stock + ? WHERE voucher_id = ?")
        .bind(units)
        .bind(voucher_id)
        .execute(db)
        .await?;
    Ok(())
}
