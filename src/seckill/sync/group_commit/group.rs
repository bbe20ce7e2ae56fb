//! One group's transaction: who wins, the statements up to the commit, and
//! the last look at the locks before it (what each member is then told is
//! `answer.rs`).

use std::collections::{HashMap, HashSet};

use sqlx::{MySql, MySqlPool, Transaction};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{
    events::Outbox,
    seckill::{
        error::SeckillResult,
        model::PathUse,
        store::{self, NewOrder},
    },
};

/// One order waiting for its group.
pub(super) struct Member {
    pub(super) user_id: u64,
    pub(super) order_id: i64,
    /// The sale path the order spends (guarded vouchers).
    pub(super) spend: Option<PathUse>,
    /// Cancelled when the user's lock is lost: the order must not commit.
    pub(super) lost: CancellationToken,
    pub(super) reply: oneshot::Sender<SeckillResult<()>>,
}

pub(super) enum GroupOutcome {
    /// Indexes into the group: committed, and refused as duplicates; the
    /// rest were sold out.
    /// Duplicates carry the id of the order the user holds.
    Committed {
        winners: HashSet<usize>,
        duplicates: HashMap<usize, Option<i64>>,
        /// Came with a sale path that placed an order before.
        spent: HashSet<usize>,
        stock_left: i64,
    },
    LockLost,
    OffShelf,
}

/// The statements ran; the transaction waits for its commit.
pub(super) struct Prepared {
    tx: Transaction<'static, MySql>,
    winners: Vec<usize>,
    duplicates: HashMap<usize, Option<i64>>,
    spent: HashSet<usize>,
    stock_left: i64,
}

impl Prepared {
    /// The last look before the commit: no order commits without its lock.
    pub(super) async fn commit(self, group: &[Member]) -> Result<GroupOutcome, GroupError> {
        if self.winners.iter().any(|&i| group[i].lost.is_cancelled()) {
            return Ok(GroupOutcome::LockLost);
        }
        if let Err(err) = self.tx.commit().await {
            let order_ids: Vec<i64> = self.winners.iter().map(|&i| group[i].order_id).collect();
            return Err(GroupError::CommitFailed(order_ids, err));
        }
        Ok(GroupOutcome::Committed {
            winners: self.winners.into_iter().collect(),
            duplicates: self.duplicates,
            spent: self.spent,
            stock_left: self.stock_left,
        })
    }
}

/// Resolves when any member's lock is lost.
pub(super) async fn any_lost(group: &[Member]) {
    futures::future::select_all(group.iter().map(|m| Box::pin(m.lost.cancelled()))).await;
}

pub(super) enum GroupError {
    /// The insert was refused (a constraint, a trigger): some row is bad.
    Refused(sqlx::Error),
    /// The `COMMIT` of these orders failed; it may have happened anyway.
    CommitFailed(Vec<i64>, sqlx::Error),
    Other(sqlx::Error),
}

impl From<sqlx::Error> for GroupError {
    fn from(err: sqlx::Error) -> Self {
        Self::Other(err)
    }
}

/// The group's statements, up to its commit; `None` when the voucher is off
/// the shelf (nothing to commit).
pub(super) async fn prepare_group(
    db: &MySqlPool,
    outbox: &Outbox,
    voucher_id: u64,
    group: &[Member],
) -> Result<Option<Prepared>, GroupError> {
    let mut tx = db.begin().await?;
    if !store::on_shelf(&mut *tx, voucher_id).await? {
        return Ok(None);
    }
    // The row lock next: every check below holds until the commit.
    let stock = store::lock_stock(&mut *tx, voucher_id).await?.ok_or(sqlx::Error::RowNotFound)?;
    let users: Vec<u64> = group.iter().map(|m| m.user_id).collect();
    let holding = store::held_orders(&mut *tx, voucher_id, &users).await?;
    let paths: Vec<u64> = group.iter().filter_map(|m| m.spend.map(|p| p.id)).collect();
    let spent = store::spent_paths(&mut *tx, &paths).await?;
    let spent: HashSet<usize> = group
        .iter()
        .enumerate()
        .filter(|(_, m)| m.spend.is_some_and(|p| spent.contains(&p.id)))
        .map(|(i, _)| i)
        .collect();

    let Choice { winners, duplicates } = choose(&users, &holding, &spent, stock);
    let take = winners.len();
    if !winners.is_empty() {
        if !store::take_stock(&mut *tx, voucher_id, take as u64).await? {
            return Err(GroupError::Other(sqlx::Error::Protocol(format!(
                "the locked stock row refused {take} of its {stock} units"
            ))));
        }
        let orders: Vec<NewOrder> = winners
            .iter()
            .map(|&i| NewOrder { id: group[i].order_id, user_id: group[i].user_id, create_time: None })
            .collect();
        let paths: Vec<PathUse> = winners.iter().filter_map(|&i| group[i].spend).collect();
        // A path spent by a transaction that slipped past its user's lock
        // refuses the group, retried one order per transaction.
        let inserted = match store::insert_orders(&mut *tx, voucher_id, &orders).await {
            Ok(_) => store::spend_paths(&mut *tx, &paths).await,
            Err(err) => Err(err),
        };
        let inserted = match inserted {
            Ok(()) => outbox.created(&mut tx, voucher_id, &NewOrder::keys(&orders)).await,
            Err(err) => Err(err),
        };
        if let Err(err) = inserted {
            return Err(match err {
                sqlx::Error::Database(_) => GroupError::Refused(err),
                other => GroupError::Other(other),
            });
        }
    }
    Ok(Some(Prepared { tx, winners, duplicates, spent, stock_left: i64::from(stock) - take as i64 }))
}

/// Who of a group wins, by index: in arrival order, while `stock` lasts,
/// every user who holds no live order of the voucher and comes with no
/// spent path; the others are duplicates (with the order they hold), and
/// the rest are sold out. Members in `spent` are neither: their answer is
/// the spent path's.
struct Choice {
    winners: Vec<usize>,
    duplicates: HashMap<usize, Option<i64>>,
}

fn choose(users: &[u64], holding: &HashMap<u64, i64>, spent: &HashSet<usize>, stock: i32) -> Choice {
    // A user twice in one group (impossible under the per-user lock) would
    // be a duplicate the second time.
    let mut seen = HashSet::new();
    let (mut candidates, mut duplicates) = (Vec::new(), HashMap::new());
    for (i, user) in users.iter().enumerate() {
        if spent.contains(&i) {
            continue;
        }
        if let Some(&held) = holding.get(user) {
            duplicates.insert(i, Some(held));
        } else if !seen.insert(*user) {
            duplicates.insert(i, None);
        } else {
            candidates.push(i);
        }
    }
    candidates.truncate(usize::try_from(stock.max(0)).unwrap_or(0));
    Choice { winners: candidates, duplicates }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::choose;

    #[test]
    fn the_first_users_in_arrival_order_win_while_the_stock_lasts() {
        let choice = choose(&[10, 11, 12, 13], &HashMap::new(), &HashSet::new(), 2);
        assert_eq!(choice.winners, vec![0, 1]);
        assert!(choice.duplicates.is_empty());
    }

    #[test]
    fn a_user_holding_an_order_is_a_duplicate_naming_it_and_takes_no_unit() {
        let holding = HashMap::from([(11, 900)]);
        let choice = choose(&[10, 11, 12], &holding, &HashSet::new(), 2);
        assert_eq!(choice.winners, vec![0, 2], "the holder's unit goes to the next user");
        assert_eq!(choice.duplicates, HashMap::from([(1, Some(900))]));
    }

    #[test]
    fn a_member_with_a_spent_path_takes_no_unit_and_is_no_duplicate() {
        let holding = HashMap::from([(11, 900)]);
        let choice = choose(&[10, 11, 12], &holding, &HashSet::from([1]), 1);
        assert_eq!(choice.winners, vec![0]);
        assert!(choice.duplicates.is_empty(), "its answer is the spent path's, not the held order's");
    }

    #[test]
    fn a_user_twice_in_one_group_wins_once() {
        let choice = choose(&[10, 10, 11], &HashMap::new(), &HashSet::new(), 5);
        assert_eq!(choice.winners, vec![0, 2]);
        assert_eq!(choice.duplicates, HashMap::from([(1, None)]));
    }

    #[test]
    fn no_stock_or_a_negative_one_lets_nobody_win() {
        assert!(choose(&[10, 11], &HashMap::new(), &HashSet::new(), 0).winners.is_empty());
        assert!(choose(&[10, 11], &HashMap::new(), &HashSet::new(), -3).winners.is_empty());
    }
}
