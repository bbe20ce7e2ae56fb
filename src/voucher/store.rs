//! Every statement on the voucher table, as the seckill's live in its
//! store: the handlers call these and hold no SQL.

use std::future::Future;

use sqlx::{MySqlExecutor, MySqlPool};

use super::model::{NewSeckill, NewVoucher, VoucherView};
use crate::{salepath, seckill};

pub(super) async fn insert_voucher<'e>(db: impl MySqlExecutor<'e>, voucher: &NewVoucher) -> sqlx::Result<u64> {
    let inserted = sqlx::query(
        "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(voucher.shop_id)
    .bind(&voucher.title)
    .bind(&voucher.sub_title)
    .bind(&voucher.rules)
    .bind(voucher.pay_value)
    .bind(voucher.actual_value)
    .bind(voucher.kind)
    .bind(voucher.status)
    .execute(db)
    .await?;
    Ok(inserted.last_insert_id())
}

/// Both rows in one transaction, so a seckill voucher never exists
/// half-made. `before_commit` runs with the new id and the segments wanted
/// while the rows are not yet visible (the sale chooses the segments' tags
/// and clears Redis under them there); its error rolls both back and
/// nothing is created.
pub(super) async fn insert_seckill_voucher<F, Fut, E>(
    db: &MySqlPool,
    voucher: &NewVoucher,
    sale: &NewSeckill,
    before_commit: F,
) -> Result<u64, E>
where
    F: FnOnce(u64, u8) -> Fut,
    Fut: Future<Output = Result<Vec<String>, E>>,
    E: From<sqlx::Error>,
{
    let mut tx = db.begin().await?;
    let id = insert_voucher(&mut *tx, voucher).await?;
    let (begin, end) = (sale.begin_time.naive_utc(), sale.end_time.naive_utc());
    let segment_tags = before_commit(id, sale.segments).await?;
    seckill::insert_sale(&mut *tx, id, sale.stock.into(), (begin, end), &segment_tags, sale.segments_by_admin).await?;
    salepath::record_terms(&mut *tx, id, sale.guard, sale.admit_per_second).await?;
    tx.commit().await?;
    Ok(id)
}

/// Puts a voucher on or off the shelf; `false` when there is no such
/// voucher. (Looked up first: MariaDB counts an update to the same value as
/// no row changed, which would read as "no such voucher".)
pub(super) async fn set_status(db: &MySqlPool, voucher_id: u64, status: u8) -> sqlx::Result<bool> {
    let exists: Option<u64> =
        sqlx::query_scalar("SELECT id FROM tb_voucher WHERE id = ?").bind(voucher_id).fetch_optional(db).await?;
    if exists.is_none() {
        return Ok(false);
    }
    sqlx::query("UPDATE tb_voucher SET status = ? WHERE id = ?").bind(status).bind(voucher_id).execute(db).await?;
    Ok(true)
}

/// A shop's vouchers on shelf, each with its sale row when it is a seckill
/// voucher (`stock`, `begin_time`, `end_time` NULL otherwise), in one
/// query.
pub(super) async fn shop_vouchers<'e>(db: impl MySqlExecutor<'e>, shop_id: u64) -> sqlx::Result<Vec<VoucherView>> {
    sqlx::query_as(
        "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value,
                v.type, v.status, sv.stock, sv.begin_time, sv.end_time, sv.segments,
                sv.sale_guard, sv.admit_per_second
         FROM tb_voucher v
         LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id
         WHERE v.shop_id = ? AND v.status = 1
         ORDER BY v.id",
    )
    .bind(shop_id)
    .fetch_all(db)
    .await
}
