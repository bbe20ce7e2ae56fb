//! Group commit on the hot row. One transaction per order tops out at a few
//! thousand commits per second on one stock row; the same update and insert
//! for many orders in one transaction costs little more than for one.
//! MariaDB has no hot-row grouping of its own (AliSQL's inventory hint,
//! PolarDB's hot-row group update), so the service does it.
//!
//! Each voucher gets one worker per instance. A request that holds its
//! user's lock hands the order over and waits for the answer, which comes
//! only after the commit that contains the order; the request then
//! releases the lock. The worker commits the orders that are ready
//! together: the voucher's row lock, one query for duplicates, `min(stock,
//! k)` units in one guarded update, one multi-row insert, and, last before
//! the commit, a look at every member's lock. One bad order never fails its
//! group: a duplicate, a lost lock or a sold-out order leaves it with its
//! own answer, and a group whose insert the database refuses is retried one
//! order per transaction, so the refused row alone fails.
//!
//! Workers are owned: one that saw no order for `worker_idle` leaves the
//! map and ends (a year of daily sales is not a year of idle tasks), and
//! every worker ends when the committer is stopped at shutdown.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use serde::Serialize;
use sqlx::{MySql, MySqlPool, Transaction};
use tokio::sync::{mpsc, oneshot};

/// How long past its deadline an order waits for its group's commit.
const COMMIT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{
    admission::Gate,
    transaction::{commit_reservation, reserve, settle_lost_commit},
};
use crate::seckill::{
    error::{SeckillError, SeckillResult},
    model::PathUse,
    store::{self, NewOrder},
};

/// The per-voucher workers of one instance.
#[derive(Clone)]
pub(crate) struct GroupCommitter {
    db: MySqlPool,
    batch_max: usize,
    wait: Duration,
    /// A worker that saw no order for this long ends.
    idle: Duration,
    queues: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Member>>>>,
    stats: Arc<Stats>,
    /// Cancelled at shutdown: every worker ends.
    stop: CancellationToken,
    workers: TaskTracker,
}

/// One order waiting for its group.
struct Member {
    user_id: u64,
    order_id: i64,
    /// The sale path the order spends (guarded vouchers).
    spend: Option<PathUse>,
    /// Cancelled when the user's lock is lost: the order must not commit.
    lost: CancellationToken,
    reply: oneshot::Sender<SeckillResult<()>>,
}

#[derive(Debug, Default)]
struct Stats {
    groups: AtomicU64,
    committed: AtomicU64,
    largest: AtomicU64,
    retried_one_by_one: AtomicU64,
}

/// What the group commits did, for tests and operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GroupStats {
    /// Transactions that committed a group.
    pub groups: u64,
    /// Orders committed in those groups.
    pub committed: u64,
    /// The most orders one group handled (committed or answered).
    pub largest: u64,
    /// Groups whose insert was refused and that were retried one by one.
    pub(crate) retried_one_by_one: u64,
}

impl GroupCommitter {
    pub(crate) fn new(
        db: MySqlPool,
        batch_max: usize,
        wait: Duration,
        idle: Duration,
        stop: CancellationToken,
        workers: TaskTracker,
    ) -> Self {
        let (queues, stats) = (Arc::default(), Arc::default());
        Self { db, batch_max: batch_max.max(1), wait, idle, queues, stats, stop, workers }
    }

    /// Workers running now: one per voucher that had an order lately.
    pub(crate) fn workers(&self) -> usize {
        self.queues.lock().expect("group queues poisoned").len()
    }

    pub(crate) fn stats(&self) -> GroupStats {
        GroupStats {
            groups: self.stats.groups.load(Relaxed),
            committed: self.stats.committed.load(Relaxed),
            largest: self.stats.largest.load(Relaxed),
            retried_one_by_one: self.stats.retried_one_by_one.load(Relaxed),
        }
    }

    /// Commits the order with the next group of its voucher; returns once
    /// that group committed (or the order was refused).
    pub(super) async fn commit(
        &self,
        gate: &Arc<Gate>,
        voucher_id: u64,
        user_id: u64,
        order_id: i64,
        spend: Option<PathUse>,
        lost: CancellationToken,
    ) -> SeckillResult<()> {
        let (reply, answer) = oneshot::channel();
        let gone = lost.clone();
        self.enqueue(gate, voucher_id, Member { user_id, order_id, spend, lost, reply })?;
        // The worker answers an order whose deadline passed at once, unless
        // its group is committing: the commit is never raced, but it is not
        // waited for without bound either (a MariaDB that stopped answering
        // mid-commit). Past the grace the outcome is unknown, and said so.
        let overdue = async {
            gone.cancelled().await;
            tokio::time::sleep(COMMIT_GRACE).await;
        };
        tokio::select! {
            answer = answer => {
                answer.map_err(|_| SeckillError::unavailable("the group commit worker stopped before answering"))?
            }
            () = overdue => Err(SeckillError::Unavailable(anyhow::anyhow!(
                "order {order_id}: its group's commit did not answer in time; whether it committed is unknown (GET /voucher-order/{order_id} tells)"
            ))),
        }
    }

    /// Hands the order to the voucher's worker, starting one if there is
    /// none. Under the map's lock, like a worker's leaving: an order is
    /// never sent to a worker that already decided to end.
    fn enqueue(&self, gate: &Arc<Gate>, voucher_id: u64, member: Member) -> SeckillResult<()> {
        if self.stop.is_cancelled() {
            return Err(SeckillError::unavailable("the instance is shutting down"));
        }
        let mut queues = self.queues.lock().expect("group queues poisoned");
        let queue = queues.entry(voucher_id).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.workers.spawn(run(self.clone(), gate.clone(), voucher_id, rx));
            tx
        });
        queue.send(member).map_err(|_| SeckillError::internal(anyhow::anyhow!("voucher {voucher_id}'s worker is gone")))
    }

    /// The worker's way out after `idle` without an order: it leaves the
    /// map only if nothing arrived meanwhile. `true` when it may end.
    fn leave_if_idle(&self, voucher_id: u64, queue: &mpsc::UnboundedReceiver<Member>) -> bool {
        let mut queues = self.queues.lock().expect("group queues poisoned");
        if !queue.is_empty() {
            return false;
        }
        queues.remove(&voucher_id);
        true
    }
}

/// Gathers what is ready (and, with a wait, what arrives within it), then
/// commits it; while one group commits, the next gathers. Ends when idle
/// for the committer's `idle`, or at shutdown (answering what still waits).
async fn run(committer: GroupCommitter, gate: Arc<Gate>, voucher_id: u64, mut queue: mpsc::UnboundedReceiver<Member>) {
    loop {
        let first = tokio::select! {
            () = committer.stop.cancelled() => break,
            first = queue.recv() => first,
            () = tokio::time::sleep(committer.idle) => {
                if committer.leave_if_idle(voucher_id, &queue) {
                    tracing::debug!(voucher_id, "group commit worker idle; ended");
                    return;
                }
                continue;
            }
        };
        let Some(first) = first else { break };
        let mut group = vec![first];
        let deadline = tokio::time::Instant::now() + committer.wait;
        while group.len() < committer.batch_max {
            match queue.try_recv() {
                Ok(member) => group.push(member),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if committer.wait.is_zero() => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    tokio::select! {
                        member = queue.recv() => match member {
                            Some(member) => group.push(member),
                            None => break,
                        },
                        () = tokio::time::sleep_until(deadline) => break,
                    }
                }
            }
        }
        committer.stats.largest.fetch_max(group.len() as u64, Relaxed);
        commit_group(&committer, &gate, voucher_id, group).await;
    }
    committer.queues.lock().expect("group queues poisoned").remove(&voucher_id);
    queue.close();
    while let Ok(member) = queue.try_recv() {
        let _ = member.reply.send(Err(SeckillError::unavailable("the instance is shutting down")));
    }
}

async fn commit_group(committer: &GroupCommitter, gate: &Gate, voucher_id: u64, mut group: Vec<Member>) {
    loop {
        // Orders whose lock is gone, or whose request is gone, leave first.
        let (group_taken, gone): (Vec<Member>, Vec<Member>) =
            std::mem::take(&mut group).into_iter().partition(|m| !m.lost.is_cancelled() && !m.reply.is_closed());
        for member in gone {
            let _ = member.reply.send(Err(SeckillError::lock_lost()));
        }
        if group_taken.is_empty() {
            return;
        }
        if gate.is_sold_out() {
            answer_all(group_taken, || SeckillError::SoldOut);
            return;
        }
        // A lock lost while the statements run drops, and so rolls back,
        // the transaction: its holder is answered now, not when the row
        // frees. The commit itself is never raced.
        let prepared = tokio::select! {
            biased;
            () = any_lost(&group_taken) => None,
            prepared = prepare_group(&committer.db, voucher_id, &group_taken) => Some(prepared),
        };
        let outcome = match prepared {
            None => Ok(GroupOutcome::LockLost),
            Some(Ok(None)) => Ok(GroupOutcome::OffShelf),
            Some(Ok(Some(prepared))) => prepared.commit(&group_taken).await,
            Some(Err(err)) => Err(err),
        };
        match outcome {
            Ok(GroupOutcome::Committed { winners, duplicates, spent, stock_left }) => {
                if stock_left == 0 {
                    gate.mark_sold_out();
                }
                committer.stats.groups.fetch_add(1, Relaxed);
                committer.stats.committed.fetch_add(winners.len() as u64, Relaxed);
                for (i, member) in group_taken.into_iter().enumerate() {
                    let _ = member.reply.send(if spent.contains(&i) {
                        Err(SeckillError::PathUsed)
                    } else {
                        committed_answer(i, &winners, &duplicates)
                    });
                }
                return;
            }
            Ok(GroupOutcome::OffShelf) => {
                answer_all(group_taken, || SeckillError::OffShelf);
                return;
            }
            // A lock went before the commit: nothing was committed; again
            // without the orders that lost it.
            Ok(GroupOutcome::LockLost) => group = group_taken,
            Err(GroupError::Refused(err)) => {
                tracing::warn!(voucher_id, size = group_taken.len(), error = %err, "group insert refused; one order per transaction");
                committer.stats.retried_one_by_one.fetch_add(1, Relaxed);
                for member in group_taken {
                    let answer = one_by_one(&committer.db, gate, voucher_id, &member).await;
                    let _ = member.reply.send(answer);
                }
                return;
            }
            Err(GroupError::CommitFailed(order_ids, err)) => {
                let settled = settle_lost_commit(&committer.db, &order_ids, err).await;
                if settled.is_ok() {
                    committer.stats.groups.fetch_add(1, Relaxed);
                    committer.stats.committed.fetch_add(order_ids.len() as u64, Relaxed);
                }
                for member in group_taken {
                    let _ = member.reply.send(lost_commit_answer(&settled, &order_ids, member.order_id));
                }
                return;
            }
            Err(GroupError::Other(err)) => {
                let err = SeckillError::from(err);
                let unavailable = matches!(err, SeckillError::Unavailable(_));
                tracing::warn!(voucher_id, error = %err, "group commit failed");
                answer_all(group_taken, || {
                    if unavailable {
                        SeckillError::unavailable("the group's transaction failed")
                    } else {
                        SeckillError::internal(anyhow::anyhow!("the group's transaction failed"))
                    }
                });
                return;
            }
        }
    }
}

fn answer_all(group: Vec<Member>, err: impl Fn() -> SeckillError) {
    for member in group {
        let _ = member.reply.send(Err(err()));
    }
}

enum GroupOutcome {
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
struct Prepared {
    tx: Transaction<'static, MySql>,
    winners: Vec<usize>,
    duplicates: HashMap<usize, Option<i64>>,
    spent: HashSet<usize>,
    stock_left: i64,
}

impl Prepared {
    /// The last look before the commit: no order commits without its lock.
    async fn commit(self, group: &[Member]) -> Result<GroupOutcome, GroupError> {
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
async fn any_lost(group: &[Member]) {
    futures::future::select_all(group.iter().map(|m| Box::pin(m.lost.cancelled()))).await;
}

enum GroupError {
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
async fn prepare_group(db: &MySqlPool, voucher_id: u64, group: &[Member]) -> Result<Option<Prepared>, GroupError> {
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

/// The answer of member `i` of a committed group.
fn committed_answer(i: usize, winners: &HashSet<usize>, duplicates: &HashMap<usize, Option<i64>>) -> SeckillResult<()> {
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
fn lost_commit_answer(settled: &SeckillResult<()>, committed: &[i64], order_id: i64) -> SeckillResult<()> {
    match settled {
        Ok(()) if committed.contains(&order_id) => Ok(()),
        // Not in the committed orders: a duplicate or sold out, which a
        // retry of the request tells.
        Ok(()) => Err(SeckillError::unavailable("the group's answer was lost")),
        Err(SeckillError::Unavailable(_)) => Err(SeckillError::unavailable("the group's commit failed or is unknown")),
        Err(_) => Err(SeckillError::internal(anyhow::anyhow!("the group's commit failed"))),
    }
}

/// The design card's transaction for one member of a refused group.
async fn one_by_one(db: &MySqlPool, gate: &Gate, voucher_id: u64, member: &Member) -> SeckillResult<()> {
    let reservation = reserve(db, member.user_id, voucher_id, member.order_id, member.spend).await;
    commit_reservation(db, gate, member.order_id, &member.lost, reservation).await
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::{choose, committed_answer, lost_commit_answer};
    use crate::seckill::error::SeckillError;

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
            matches!(lost_commit_answer(&found, &[5, 6], 7), Err(SeckillError::Unavailable(_))),
            "an order not found committed is never told sold out or duplicate: a retry tells"
        );
        let unknown = Err(SeckillError::unavailable("MariaDB is gone"));
        assert!(matches!(lost_commit_answer(&unknown, &[5], 5), Err(SeckillError::Unavailable(_))));
        let broken = Err(SeckillError::internal(anyhow::anyhow!("a bug")));
        assert!(matches!(lost_commit_answer(&broken, &[5], 5), Err(SeckillError::Internal(_))));
    }
}
