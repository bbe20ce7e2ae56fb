//! Every statement on `tb_order_outbox` and `tb_outbox_lease`.

use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::change::Change;

pub(super) async fn insert_created(
    conn: &mut MySqlConnection,
    voucher_id: u64,
    orders: &[(i64, u64)],
) -> sqlx::Result<()> {
    let change = Change::Created;
    let mut insert: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) ");
    insert.push_values(orders, |mut row, (order_id, user_id)| {
        row.push_bind(*order_id)
            .push_bind(*user_id)
            .push_bind(voucher_id)
            .push_bind(change.name())
            .push_bind(change.state());
    });
    insert.build().execute(conn).await?;
    Ok(())
}

pub(super) async fn insert_changed(conn: &mut MySqlConnection, change: Change, order_ids: &[i64]) -> sqlx::Result<()> {
    let mut insert: QueryBuilder<MySql> = QueryBuilder::new(
        "INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) SELECT id, user_id, voucher_id, ",
    );
    insert.push_bind(change.name()).push(", ").push_bind(change.state());
    insert.push(" FROM tb_voucher_order WHERE status = ").push_bind(change.status());
    insert.push(" AND id IN ");
    insert.push_tuples(order_ids, |mut row, id| {
        row.push_bind(*id);
    });
    insert.build().execute(conn).await?;
    Ok(())
}

/// Idempotent on the event's identity.
pub(super) async fn insert_failed(
    conn: &mut MySqlConnection,
    voucher_id: u64,
    orders: &[(i64, u64)],
) -> sqlx::Result<()> {
    let change = Change::Failed;
    let mut insert: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT INTO tb_order_outbox (order_id, user_id, voucher_id, type, state) ");
    insert.push_values(orders, |mut row, (order_id, user_id)| {
        row.push_bind(*order_id)
            .push_bind(*user_id)
            .push_bind(voucher_id)
            .push_bind(change.name())
            .push_bind(change.state());
    });
    insert.push(" ON DUPLICATE KEY UPDATE seq = seq");
    insert.build().execute(conn).await?;
    Ok(())
}
