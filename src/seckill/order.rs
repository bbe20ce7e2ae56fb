//! Finding a user's orders by their rows: the replica first when there is
//! one, then the primary. The asynchronous mode looks in Redis before and
//! after (`asynchronous/pending.rs`): an id the service answered with is
//! never a 404 for its owner.

use sqlx::MySqlPool;

use super::{error::SeckillResult, model::OrderView, store};

/// Where an order's row is looked for: the replica first when there is one,
/// then the primary, which has every committed row.
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    pub(crate) primary: &'a MySqlPool,
    pub(crate) replica: Option<&'a MySqlPool>,
}

/// The order's row if it exists and belongs to `user_id`: the same `None`
/// for both, so an id reveals nothing about other users' orders.
pub(super) async fn owned_row(rows: Rows<'_>, order_id: i64, user_id: u64) -> SeckillResult<Option<OrderView>> {
    if let Some(replica) = rows.replica
        && let Some(row) = store::owned_order(replica, order_id, user_id).await?
    {
        return Ok(Some(row));
    }
    Ok(store::owned_order(rows.primary, order_id, user_id).await?)
}

/// One page of the user's orders, newest first, and how many there are in
/// all: first `pending`, the orders accepted but not yet rows (the newest,
/// as the consumers persist within moments; none in the synchronous mode),
/// then those with their row, newest first (ids grow with time).
pub(super) async fn page_owned(
    rows: Rows<'_>,
    pending: Vec<OrderView>,
    user_id: u64,
    page: u32,
    per_page: u32,
) -> SeckillResult<(Vec<OrderView>, u64)> {
    let db = rows.replica.unwrap_or(rows.primary);
    let offset = u64::from(page.saturating_sub(1)) * u64::from(per_page);
    let end = offset + u64::from(per_page);
    let held = pending.len() as u64;
    let mut orders: Vec<OrderView> =
        pending.into_iter().skip(offset.min(held) as usize).take((end.min(held) - offset.min(held)) as usize).collect();
    let (row_from, row_to) = (offset.max(held) - held, end.max(held) - held);
    if row_to > row_from {
        let limit = u32::try_from(row_to - row_from).unwrap_or(u32::MAX);
        orders.extend(store::owned_orders(db, user_id, limit, row_from).await?);
    }
    let total = store::count_owned(db, user_id).await? + held;
    Ok((orders, total))
}
