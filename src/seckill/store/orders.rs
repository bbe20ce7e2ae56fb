//! `tb_voucher_order`: orders inserted and found (their life after the
//! sale: `after_sale.rs`).

use std::collections::HashMap;

use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlExecutor, QueryBuilder};

use crate::seckill::model::OrderView;

/// The unique index that makes "one order per user" the database's
/// decision, not only the lock's.
pub const UNIQUE_ORDER_INDEX: &str = "uk_user_voucher";

/// The columns of `OrderView`, as a literal for `concat!`: the SQL stays a
/// compile-time string.
macro_rules! order_columns {
    () => {
        "id, user_id, voucher_id, pay_type, status, create_time, pay_time, use_time, refund_time, update_time"
    };
}

/// An order row to insert. Without `create_time` the column's default
/// (MariaDB's clock) stamps it; the asynchronous consumer passes the time
/// the order was accepted in Redis.
pub(in crate::seckill) struct NewOrder {
    pub(crate) id: i64,
    pub(crate) user_id: u64,
    pub(crate) create_time: Option<NaiveDateTime>,
}

/// One multi-row insert. A user who already holds an order for the voucher
/// runs into `UNIQUE_ORDER_INDEX`: the database has the last word.
pub(in crate::seckill) async fn insert_orders<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    orders: &[NewOrder],
) -> sqlx::Result<u64> {
    insert_orders_of(db, orders.iter().map(|order| (voucher_id, order))).await
}

/// `insert_orders` of several vouchers at once: (voucher, order) each.
pub(in crate::seckill) async fn insert_orders_of<'e, 'o>(
    db: impl MySqlExecutor<'e>,
    orders: impl ExactSizeIterator<Item = (u64, &'o NewOrder)>,
) -> sqlx::Result<u64> {
    if orders.len() == 0 {
        return Ok(0);
    }
    let mut insert: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time) ");
    insert.push_values(orders, |mut row, (voucher_id, order)| {
        row.push_bind(order.id).push_bind(order.user_id).push_bind(voucher_id);
        match order.create_time {
            Some(at) => row.push_bind(at),
            None => row.push("DEFAULT"),
        };
    });
    Ok(insert.build().execute(db).await?.rows_affected())
}

/// The live orders of these (user, voucher) pairs: (user id, voucher id)
/// -> order id. For a group commit of several vouchers, one statement: a
/// point lookup per pair on the unique index (a row constructor's IN is a
/// range on both columns), so a user's past orders are never read.
pub(in crate::seckill) async fn held_orders_of<'e>(
    db: impl MySqlExecutor<'e>,
    pairs: &[(u64, u64)],
) -> sqlx::Result<HashMap<(u64, u64), i64>> {
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = held_orders_of_query(pairs).build_query_as::<(u64, u64, i64)>().fetch_all(db).await?;
    Ok(rows.into_iter().map(|(user, voucher, id)| ((user, voucher), id)).collect())
}

/// `held_orders_of`'s statement for these pairs (its plan is tested).
pub(super) fn held_orders_of_query(pairs: &[(u64, u64)]) -> QueryBuilder<'_, MySql> {
    let mut holders: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT user_id, live_voucher, id FROM tb_voucher_order WHERE (user_id, live_voucher) IN ");
    holders.push_tuples(super::padding::padded(pairs), |mut row, (user_id, voucher_id)| {
        row.push_bind(user_id).push_bind(voucher_id);
    });
    holders
}

/// The live orders (not cancelled, not refunded) these users hold for the
/// voucher: user id -> order id. On the unique index.
pub(in crate::seckill) async fn held_orders<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
    user_ids: &[u64],
) -> sqlx::Result<HashMap<u64, i64>> {
    if user_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut holders: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT user_id, id FROM tb_voucher_order WHERE live_voucher = ");
    holders.push_bind(voucher_id).push(" AND user_id IN ");
    holders.push_tuples(user_ids, |mut row, user_id| {
        row.push_bind(*user_id);
    });
    Ok(holders.build_query_as::<(u64, i64)>().fetch_all(db).await?.into_iter().collect())
}

/// The id of the order the user holds for the voucher, if it has its row.
pub(in crate::seckill) async fn held_order<'e>(
    db: impl MySqlExecutor<'e>,
    user_id: u64,
    voucher_id: u64,
) -> sqlx::Result<Option<i64>> {
    Ok(held_orders(db, voucher_id, &[user_id]).await?.remove(&user_id))
}

/// Which of these order ids have their row.
pub(in crate::seckill) async fn existing_orders<'e>(
    db: impl MySqlExecutor<'e>,
    order_ids: &[i64],
) -> sqlx::Result<HashMap<i64, OrderOwner>> {
    owners(db, order_ids, "").await
}

/// Which of these order ids have their row once no transaction is still
/// writing them, for a `COMMIT` whose answer was lost. The connection that
/// sent it may be gone while MariaDB is still committing (a killed
/// connection's commit runs to its end, through the binary log's group
/// commit): a plain read then misses rows that land a moment later, and
/// their buyers would be told their orders failed. A locking read waits for
/// the locks of an insert not yet committed or rolled back, and then reads
/// what became of it. Taken outside a transaction, its locks last the
/// statement.
pub(in crate::seckill) async fn settled_orders<'e>(
    db: impl MySqlExecutor<'e>,
    order_ids: &[i64],
) -> sqlx::Result<HashMap<i64, OrderOwner>> {
    owners(db, order_ids, " LOCK IN SHARE MODE").await
}

async fn owners<'e>(
    db: impl MySqlExecutor<'e>,
    order_ids: &[i64],
    locking: &'static str,
) -> sqlx::Result<HashMap<i64, OrderOwner>> {
    if order_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut query: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT id, user_id, voucher_id FROM tb_voucher_order WHERE id IN ");
    query.push_tuples(order_ids, |mut row, id| {
        row.push_bind(*id);
    });
    query.push(locking);
    let rows: Vec<(i64, u64, u64)> = query.build_query_as().fetch_all(db).await?;
    Ok(rows.into_iter().map(|(id, user_id, voucher_id)| (id, OrderOwner { user_id, voucher_id })).collect())
}

/// Whose an order row is. An id found with another owner than the order
/// that carries it is a collision (a sequence that went backwards), never
/// "already persisted".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::seckill) struct OrderOwner {
    pub(crate) user_id: u64,
    pub(crate) voucher_id: u64,
}

/// Every order of the voucher: (order id, user id, live: neither
/// cancelled nor refunded). On `idx_voucher_unpaid`: a load or a
/// reconciliation reads its voucher's orders, not the history's
/// (`plans.rs` holds it there).
pub(super) const ORDERS_OF_VOUCHER: &str =
    "SELECT id, user_id, CAST(live_voucher IS NOT NULL AS SIGNED) FROM tb_voucher_order WHERE voucher_id = ?";

pub(in crate::seckill) async fn orders_of_voucher<'e>(
    db: impl MySqlExecutor<'e>,
    voucher_id: u64,
) -> sqlx::Result<Vec<(i64, u64, bool)>> {
    let rows: Vec<(i64, u64, i64)> = sqlx::query_as(ORDERS_OF_VOUCHER).bind(voucher_id).fetch_all(db).await?;
    Ok(rows.into_iter().map(|(id, user, live)| (id, user, live == 1)).collect())
}

/// The order if it exists and belongs to `user_id`.
pub(super) const OWNED_ORDER: &str =
    concat!("SELECT ", order_columns!(), " FROM tb_voucher_order WHERE id = ? AND user_id = ?");

pub(in crate::seckill) async fn owned_order<'e>(
    db: impl MySqlExecutor<'e>,
    order_id: i64,
    user_id: u64,
) -> sqlx::Result<Option<OrderView>> {
    sqlx::query_as::<_, OrderView>(OWNED_ORDER).bind(order_id).bind(user_id).fetch_optional(db).await
}

/// One page of the user's orders, newest first (ids grow with time). On
/// `uk_user_voucher`: the user's orders are read, however long the
/// history.
pub(super) const OWNED_ORDERS: &str =
    concat!("SELECT ", order_columns!(), " FROM tb_voucher_order WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?");

pub(in crate::seckill) async fn owned_orders<'e>(
    db: impl MySqlExecutor<'e>,
    user_id: u64,
    limit: u32,
    offset: u64,
) -> sqlx::Result<Vec<OrderView>> {
    sqlx::query_as::<_, OrderView>(OWNED_ORDERS).bind(user_id).bind(limit).bind(offset).fetch_all(db).await
}

pub(super) const COUNT_OWNED: &str = "SELECT COUNT(*) FROM tb_voucher_order WHERE user_id = ?";

pub(in crate::seckill) async fn count_owned<'e>(db: impl MySqlExecutor<'e>, user_id: u64) -> sqlx::Result<u64> {
    let total: i64 = sqlx::query_scalar(COUNT_OWNED).bind(user_id).fetch_one(db).await?;
    Ok(total.max(0) as u64)
}

/// The order row, whoever holds it (the shop's redemption, the payment
/// callback).
pub(super) const ORDER_BY_ID: &str = concat!("SELECT ", order_columns!(), " FROM tb_voucher_order WHERE id = ?");

pub(in crate::seckill) async fn order_by_id<'e>(
    db: impl MySqlExecutor<'e>,
    order_id: i64,
) -> sqlx::Result<Option<OrderView>> {
    sqlx::query_as::<_, OrderView>(ORDER_BY_ID).bind(order_id).fetch_optional(db).await
}
