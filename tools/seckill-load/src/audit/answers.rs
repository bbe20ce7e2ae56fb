//! Answers against rows, user by user: a 200 must have its row, and a row
//! must have been told.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use sqlx::MySqlPool;

use crate::report::Outcome;

/// Answers against rows, user by user: what a fault can make the service
/// say wrongly.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerCheck {
    /// Success answers whose order id has no row.
    pub success_without_row: u64,
    /// 202 answers whose order id has no row: lost with a master, as the
    /// answer warned.
    pub unreplicated_without_row: u64,
    /// Rows of this run's users who were never told success (nor told
    /// `DUPLICATE_ORDER` with that very order's id).
    pub rows_told_failed: u64,
}

/// `None` when some user's id is unknown (tokens without a `userId`).
pub async fn check_answers(
    db: &MySqlPool,
    voucher: u64,
    user_ids: &[Option<u64>],
    answers: &[(usize, Outcome, Option<i64>)],
) -> anyhow::Result<Option<AnswerCheck>> {
    let Some(user_ids) = user_ids.iter().copied().collect::<Option<Vec<u64>>>() else { return Ok(None) };
    let rows: HashMap<u64, i64> =
        sqlx::query_as::<_, (u64, i64)>("SELECT user_id, id FROM tb_voucher_order WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_all(db)
            .await?
            .into_iter()
            .collect();
    Ok(Some(judge_answers(&user_ids, &rows, answers)))
}

/// The verdict from the rows (user -> order id) and the answers alone.
pub(crate) fn judge_answers(
    user_ids: &[u64],
    rows: &HashMap<u64, i64>,
    answers: &[(usize, Outcome, Option<i64>)],
) -> AnswerCheck {
    let row_ids: HashSet<i64> = rows.values().copied().collect();
    let mut told: HashSet<u64> = HashSet::new();
    let mut success_without_row = 0;
    let mut unreplicated_without_row = 0;
    for &(user, outcome, order_id) in answers {
        let user_id = user_ids[user];
        match outcome {
            Outcome::Success | Outcome::Unreplicated if order_id.is_some_and(|id| row_ids.contains(&id)) => {
                told.insert(user_id);
            }
            Outcome::Success => success_without_row += 1,
            Outcome::Unreplicated => unreplicated_without_row += 1,
            Outcome::Duplicate if order_id.is_some() && rows.get(&user_id) == order_id.as_ref() => {
                told.insert(user_id);
            }
            _ => {}
        }
    }
    let ours: HashSet<u64> = user_ids.iter().copied().collect();
    let rows_told_failed = rows.keys().filter(|u| ours.contains(u) && !told.contains(u)).count() as u64;
    AnswerCheck { success_without_row, unreplicated_without_row, rows_told_failed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked_user_by_user_against_the_rows() {
        let users = [10, 11, 12, 13];
        let rows = HashMap::from([(10, 100), (11, 101), (12, 102)]);
        let answers = [
            (0, Outcome::Success, Some(100)),   // told success, has its row
            (1, Outcome::Other, None),          // a 503, but the row exists: a lie
            (2, Outcome::Duplicate, Some(102)), // told which order it holds
            (3, Outcome::Success, Some(103)),   // told success, no row: a lie
        ];
        let check = judge_answers(&users, &rows, &answers);
        assert_eq!((check.success_without_row, check.rows_told_failed), (1, 1));
    }
}
