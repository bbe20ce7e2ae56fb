//! What every member of a group is told, whatever its transaction did:
//! committed, refused and retried one by one, a lost commit settled, or
//! failed.

use std::{
    collections::{HashMap, HashSet},
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use sqlx::MySqlPool;

use super::group::{Decided, GroupError, GroupOutcome, Member};
use crate::{
    events::Outbox,
    seckill::{
        error::{SeckillError, SeckillResult},
        sync::transaction::{commit_reservation, reserve, settle_lost_commit},
    },
};

/// What the group commits did, counted as their members are answered.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) groups: AtomicU64,
    pub(super) committed: AtomicU64,
    pub(super) largest: AtomicU64,
    pub(super) retried_one_by_one: AtomicU64,
}

/// Every member of the group answered by its outcome; `Some(group)` when
/// a lock went before the commit: nothing was committed, and the group is
/// tried again without the orders that lost it.
pub(super) async fn answer(
    db: &MySqlPool,
    outbox: &Outbox,
    stats: &Stats,
    group: Vec<Member>,
    outcome: Result<GroupOutcome, GroupError>,
) -> Option<Vec<Member>> {
    match outcome {
        Ok(GroupOutcome::Committed(decided)) => answer_committed(stats, group, *decided),
        Ok(GroupOutcome::LockLost) => return Some(group),
        Err(GroupError::Refused(err)) => {
            tracing::warn!(size = group.len(), error = %err, "group insert refused; one order per transaction");
            stats.retried_one_by_one.fetch_add(1, Relaxed);
            for member in group {
                let answer = one_by_one(db, outbox, &member).await;
                let _ = member.reply.send(answer);
            }
        }
        Err(GroupError::CommitFailed(orders, err)) => {
            let settled = settle_lost_commit(db, &orders, err).await;
            let order_ids: Vec<i64> = orders.iter().map(|(id, _)| *id).collect();
            if settled.is_ok() {
                stats.groups.fetch_add(1, Relaxed);
                stats.committed.fetch_add(order_ids.len() as u64, Relaxed);
            }
            for member in group {
                let _ = member.reply.send(lost_commit_answer(&settled, &order_ids, member.order_id));
            }
        }
        Err(GroupError::Other(err)) => {
            let err = SeckillError::from(err);
            let unavailable = err.is_unavailable();
            tracing::warn!(size = group.len(), error = %err, "group commit failed");
            answer_all(group, || {
                if unavailable {
                    SeckillError::unavailable("the group's transaction failed")
                } else {
                    SeckillError::internal(anyhow::anyhow!("the group's transaction failed"))
                }
            });
        }
    }
    None
}

/// A committed group: each voucher left with no stock is sold out on its
/// gate, and each member told what the transaction decided for it.
fn answer_committed(stats: &Stats, group: Vec<Member>, decided: Decided) {
    for member in &group {
        if decided.stock_left.get(&member.voucher_id) == Some(&0) {
            member.gate.mark_sold_out();
        }
    }
    stats.groups.fetch_add(1, Relaxed);
    stats.committed.fetch_add(decided.winners.len() as u64, Relaxed);
    for (i, member) in group.into_iter().enumerate() {
        let _ = member.reply.send(if decided.off_shelf.contains(&i) {
            Err(SeckillError::OffShelf)
        } else if decided.spent.contains(&i) {
            Err(SeckillError::PathUsed)
        } else {
            committed_answer(i, &decided.winners, &decided.duplicates)
        });
    }
}

/// The course's transaction for one member of a refused group.
async fn one_by_one(db: &MySqlPool, outbox: &Outbox, member: &Member) -> SeckillResult<()> {
    let reservation = reserve(db, outbox, member.user_id, member.voucher_id, member.order_id, member.spend).await;
    commit_reservation(db, &member.gate, (member.order_id, member.owner()), &member.lost, reservation).await
}

pub(super) fn answer_all(group: Vec<Member>, err: impl Fn() -> SeckillError) {
    for member in group {
        let _ = member.reply.send(Err(err()));
    }
}

/// The answer of member `i` of a committed group.
pub(super) fn committed_answer(
    i: usize,
    winners: &HashSet<usize>,
    duplicates: &HashMap<usize, Option<i64>>,
) -> SeckillResult<()> {
    if winners.contains(&i) {
        Ok(())
    } else if let Some(&held) = duplicates.get(&i) {
        Err(SeckillError::DuplicateOrder(held))
    } else {
        Err(SeckillError::SoldOut)
    }
}

/// The answer of an order of a group whose `COMMIT` answer was lost, once
/// the lookup `settled` it: placed if its id is among the orders found
/// committed; otherwise never a refusal the order may not deserve.
pub(super) fn lost_commit_answer(settled: &SeckillResult<()>, committed: &[i64], order_id: i64) -> SeckillResult<()> {
    match settled {
        Ok(()) if committed.contains(&order_id) => Ok(()),
        // Not in the committed orders: a duplicate or sold out, which a
        // retry of the request tells.
        Ok(()) => Err(SeckillError::unavailable("the group's answer was lost")),
        Err(err) if err.is_unavailable() => Err(SeckillError::unavailable("the group's commit failed or is unknown")),
        Err(_) => Err(SeckillError::internal(anyhow::anyhow!("the group's commit failed"))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::{committed_answer, lost_commit_answer};
    use crate::seckill::error::SeckillError;

    #[test]
    fn a_committed_group_answers_winners_duplicates_and_the_sold_out() {
        let winners = HashSet::from([0]);
        let duplicates = HashMap::from([(1, Some(77))]);
        assert!(committed_answer(0, &winners, &duplicates).is_ok());
        assert!(matches!(committed_answer(1, &winners, &duplicates), Err(SeckillError::DuplicateOrder(Some(77)))));
        assert!(matches!(committed_answer(2, &winners, &duplicates), Err(SeckillError::SoldOut)));
    }

    #[test]
    fn a_lost_commit_answers_placed_only_for_the_orders_found_committed() {
        let found = Ok(());
        assert!(lost_commit_answer(&found, &[5, 6], 5).is_ok());
        assert!(
            lost_commit_answer(&found, &[5, 6], 7).is_err_and(|e| e.is_unavailable()),
            "an order not found committed is never told sold out or duplicate: a retry tells"
        );
        let unknown = Err(SeckillError::unavailable("MariaDB is gone"));
        assert!(lost_commit_answer(&unknown, &[5], 5).is_err_and(|e| e.is_unavailable()));
        let broken = Err(SeckillError::internal(anyhow::anyhow!("a bug")));
        assert_eq!(lost_commit_answer(&broken, &[5], 5).map_err(|e| e.error_code()), Err("INTERNAL"));
    }
}
