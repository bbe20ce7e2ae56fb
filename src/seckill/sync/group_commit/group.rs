//! One group's transaction: who wins, the statements up to the commit, and
//! the last look at the locks before it (what each member is then told is
//! `answer.rs`).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::Arc,
};

use sqlx::{MySql, MySqlPool, Transaction};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::{
    events::{OrderCreated, Outbox},
    seckill::{
        error::SeckillResult,
        model::PathUse,
        store::{self, NewOrder, OrderOwner},
        sync::admission::Gate,
    },
};

/// One order waiting for its group.
pub(super) struct Member {
    pub(super) voucher_id: u64,
    /// The voucher's gate: what the group learns of its stock goes there.
    pub(super) gate: Arc<Gate>,
    pub(super) user_id: u64,
    pub(super) order_id: i64,
    /// The sale path the order spends (guarded vouchers).
    pub(super) spend: Option<PathUse>,
    /// Cancelled when the user's lock is lost: the order must not commit.
    pub(super) lost: CancellationToken,
    pub(super) reply: oneshot::Sender<SeckillResult<()>>,
}

impl Member {
    pub(super) fn owner(&self) -> OrderOwner {
        OrderOwner { user_id: self.user_id, voucher_id: self.voucher_id }
    }

    pub(super) fn created(&self) -> OrderCreated {
        OrderCreated { voucher_id: self.voucher_id, order_id: self.order_id, user_id: self.user_id }
    }
}

/// What the group's transaction decided, by index into the group.
pub(super) struct Decided {
    /// Committed.
    pub(super) winners: HashSet<usize>,
    /// Refused as duplicates, with the id of the order the user holds.
    pub(super) duplicates: HashMap<usize, Option<i64>>,
    /// Came with a sale path that placed an order before.
    pub(super) spent: HashSet<usize>,
    /// Their voucher was off the shelf.
    pub(super) off_shelf: HashSet<usize>,
    /// Each voucher's stock after the commit. The rest were sold out.
    pub(super) stock_left: HashMap<u64, i64>,
}

pub(super) enum GroupOutcome {
    Committed(Box<Decided>),
    LockLost,
}

/// The statements ran; the transaction waits for its commit.
pub(super) struct Prepared {
    tx: Transaction<'static, MySql>,
    decided: Decided,
}

impl Prepared {
    /// The last look before the commit: no order commits without its lock.
    pub(super) async fn commit(self, group: &[Member]) -> Result<GroupOutcome, GroupError> {
        let winners = &self.decided.winners;
        if winners.iter().any(|&i| group[i].lost.is_cancelled()) {
            return Ok(GroupOutcome::LockLost);
        }
        if let Err(err) = self.tx.commit().await {
            let orders = winners.iter().map(|&i| (group[i].order_id, group[i].owner())).collect();
            return Err(GroupError::CommitFailed(orders, err));
        }
        Ok(GroupOutcome::Committed(Box::new(self.decided)))
    }
}

/// Resolves when any member's lock is lost.
pub(super) async fn any_lost(group: &[Member]) {
    futures::future::select_all(group.iter().map(|m| Box::pin(m.lost.cancelled()))).await;
}

pub(super) enum GroupError {
    /// The insert was refused (a constraint, a trigger): some row is bad.
    Refused(sqlx::Error),
    /// The `COMMIT` of these orders (and their owners) failed; it may have
    /// happened anyway.
    CommitFailed(Vec<(i64, OrderOwner)>, sqlx::Error),
    Other(sqlx::Error),
}

impl From<sqlx::Error> for GroupError {
    fn from(err: sqlx::Error) -> Self {
        Self::Other(err)
    }
}

/// What the group's statements read under the rows' locks.
struct Read {
    /// Vouchers on the shelf, with their stock.
    stocks: HashMap<u64, i32>,
    /// (user, voucher) -> the live order the user holds.
    holding: HashMap<(u64, u64), i64>,
    /// Members whose sale path was spent before.
    spent: HashSet<usize>,
}

/// The group's statements, up to its commit. A group holds the orders of
/// one voucher or of several (vouchers opening together share their
/// commits): every statement covers all of them at once, so fifty hot rows
/// cost one transaction, not fifty.
pub(super) async fn prepare_group(db: &MySqlPool, outbox: &Outbox, group: &[Member]) -> Result<Prepared, GroupError> {
    // Each voucher's members in arrival order, the vouchers in id order.
    let mut by_voucher: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, member) in group.iter().enumerate() {
        by_voucher.entry(member.voucher_id).or_default().push(i);
    }
    let vouchers: Vec<u64> = by_voucher.keys().copied().collect();
    let mut tx = db.begin().await?;
    let read = read_locked(&mut tx, &vouchers, group).await?;
    let mut decided = Decided {
        winners: HashSet::new(),
        duplicates: HashMap::new(),
        spent: read.spent,
        off_shelf: HashSet::new(),
        stock_left: HashMap::new(),
    };
    // (voucher, its winners in arrival order)
    let mut taken: Vec<(u64, Vec<usize>)> = Vec::new();
    for (voucher, members) in by_voucher {
        let Some(&stock) = read.stocks.get(&voucher) else {
            decided.off_shelf.extend(members);
            continue;
        };
        let users: Vec<u64> = members.iter().map(|&i| group[i].user_id).collect();
        let holding: HashMap<u64, i64> =
            users.iter().filter_map(|&u| read.holding.get(&(u, voucher)).map(|&held| (u, held))).collect();
        let spent: HashSet<usize> = (0..members.len()).filter(|&j| decided.spent.contains(&members[j])).collect();
        let choice = choose(&users, &holding, &spent, stock);
        decided.duplicates.extend(choice.duplicates.into_iter().map(|(j, held)| (members[j], held)));
        decided.stock_left.insert(voucher, i64::from(stock) - choice.winners.len() as i64);
        if !choice.winners.is_empty() {
            taken.push((voucher, choice.winners.iter().map(|&j| members[j]).collect()));
        }
    }
    write_winners(&mut tx, outbox, group, &taken).await?;
    decided.winners = taken.into_iter().flat_map(|(_, winners)| winners).collect();
    Ok(Prepared { tx, decided })
}

/// The shelf (shared locks), the stock rows (their locks), then, holding
/// both until the commit, the live orders the members' users hold and
/// the sale paths spent.
async fn read_locked(
    tx: &mut Transaction<'static, MySql>,
    vouchers: &[u64],
    group: &[Member],
) -> Result<Read, GroupError> {
    let shelved = store::on_shelf_of(&mut **tx, vouchers).await?;
    let shelved: Vec<u64> = vouchers.iter().copied().filter(|v| shelved.contains(v)).collect();
    if shelved.is_empty() {
        return Ok(Read { stocks: HashMap::new(), holding: HashMap::new(), spent: HashSet::new() });
    }
    let stocks = store::lock_stocks(&mut **tx, &shelved).await?;
    let pairs: Vec<(u64, u64)> =
        group.iter().filter(|m| stocks.contains_key(&m.voucher_id)).map(|m| (m.user_id, m.voucher_id)).collect();
    let holding = store::held_orders_of(&mut **tx, &pairs).await?;
    let paths: Vec<u64> = group.iter().filter_map(|m| m.spend.map(|p| p.id)).collect();
    let spent_paths = store::spent_paths(&mut **tx, &paths).await?;
    let spent = (0..group.len()).filter(|&i| group[i].spend.is_some_and(|p| spent_paths.contains(&p.id))).collect();
    Ok(Read { stocks, holding, spent })
}

/// The winners' units taken, their rows inserted (one statement for all
/// vouchers), their paths spent and their events written.
async fn write_winners(
    tx: &mut Transaction<'static, MySql>,
    outbox: &Outbox,
    group: &[Member],
    taken: &[(u64, Vec<usize>)],
) -> Result<(), GroupError> {
    if taken.is_empty() {
        return Ok(());
    }
    let takes: Vec<(u64, u64)> = taken.iter().map(|(voucher, winners)| (*voucher, winners.len() as u64)).collect();
    if !store::take_stocks(&mut **tx, &takes).await? {
        return Err(GroupError::Other(sqlx::Error::Protocol(format!(
            "the locked stock rows refused the units they were read to have: {takes:?}"
        ))));
    }
    let orders: Vec<(u64, NewOrder)> = taken
        .iter()
        .flat_map(|(voucher, winners)| {
            winners
                .iter()
                .map(|&i| (*voucher, NewOrder { id: group[i].order_id, user_id: group[i].user_id, create_time: None }))
        })
        .collect();
    let paths: Vec<PathUse> =
        taken.iter().flat_map(|(_, winners)| winners.iter().filter_map(|&i| group[i].spend)).collect();
    // A path spent by a transaction that slipped past its user's lock
    // refuses the group, retried one order per transaction.
    let written = async {
        store::insert_orders_of(&mut **tx, orders.iter().map(|(v, o)| (*v, o))).await?;
        store::spend_paths(&mut **tx, &paths).await?;
        let created: Vec<OrderCreated> =
            taken.iter().flat_map(|(_, winners)| winners.iter().map(|&i| group[i].created())).collect();
        outbox.created(tx, &created).await
    };
    written.await.map_err(|err: sqlx::Error| match err {
        sqlx::Error::Database(_) => GroupError::Refused(err),
        other => GroupError::Other(other),
    })
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
