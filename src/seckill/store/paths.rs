//! `tb_seckill_path_use`: the sale paths that placed an order, each once,
//! kept until they expire.

use sqlx::{MySql, MySqlExecutor, QueryBuilder};

use crate::seckill::model::PathUse;

/// Which of these sale paths placed an order already (synchronous mode):
/// their ids in `tb_seckill_path_use`.
pub(in crate::seckill) async fn spent_paths<'e>(
    db: impl MySqlExecutor<'e>,
    path_ids: &[u64],
) -> sqlx::Result<std::collections::HashSet<u64>> {
    if path_ids.is_empty() {
        return Ok(Default::default());
    }
    let mut spent: QueryBuilder<MySql> =
        QueryBuilder::new("SELECT path_id FROM tb_seckill_path_use WHERE path_id IN (");
    let mut ids = spent.separated(", ");
    for id in path_ids {
        ids.push_bind(*id);
    }
    spent.push(")");
    let found: Vec<u64> = spent.build_query_scalar().fetch_all(db).await?;
    Ok(found.into_iter().collect())
}

/// The key a path spent twice runs into: `tb_seckill_path_use`'s primary key.
pub(in crate::seckill) const SPENT_PATH_KEY: &str = "PRIMARY";

/// Spends sale paths in the transaction of the orders they place, kept
/// until they expire; a path spent meanwhile runs into `SPENT_PATH_KEY`.
pub(in crate::seckill) async fn spend_paths<'e>(db: impl MySqlExecutor<'e>, paths: &[PathUse]) -> sqlx::Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let mut insert: QueryBuilder<MySql> = QueryBuilder::new("INSERT INTO tb_seckill_path_use (path_id, expires_at) ");
    insert.push_values(paths, |mut row, path| {
        let expires = chrono::DateTime::from_timestamp_millis(path.expires_ms).unwrap_or_default().naive_utc();
        row.push_bind(path.id).push_bind(expires);
    });
    insert.build().execute(db).await?;
    Ok(())
}

/// Forgets spent paths a minute past their expiry, a bounded batch per
/// call: an expired path is refused as expired without them.
pub(in crate::seckill) async fn forget_spent_paths<'e>(db: impl MySqlExecutor<'e>) -> sqlx::Result<u64> {
    let deleted = sqlx::query(
        "DELETE FROM tb_seckill_path_use WHERE expires_at < UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE LIMIT 10000",
    )
    .execute(db)
    .await?;
    Ok(deleted.rows_affected())
}
