//! Group commit on the hot row. One transaction per order tops out at a few
//! thousand commits per second on one stock row; the same update and insert
//! for many orders in one transaction costs little more than for one.
//! MariaDB has no hot-row grouping of its own (AliSQL's inventory hint,
//! PolarDB's hot-row group update), so the service does it.
//!
//! Vouchers are spread over `ORDER_BATCH_WORKERS` workers per instance (by
//! the id's remainder: consecutive ids, as MariaDB's `AUTO_INCREMENT` makes
//! them, fill every worker), and a voucher always goes to the same one. A request that holds its user's
//! lock hands the order over and waits for the answer, which comes only
//! after the commit that contains the order; the request then releases the
//! lock. The worker commits the orders that are ready together, whatever
//! their voucher: the vouchers' row locks (in id order), one query for
//! duplicates, each voucher's `min(stock, k)` units in one guarded update,
//! one multi-row insert, and, last before the commit, a look at every
//! member's lock. Fifty vouchers opening together are so committed in as
//! few transactions as one (a worker per voucher made fifty small groups
//! of what one voucher commits in one). One bad order never fails its
//! group: a duplicate, a lost lock or a sold-out order leaves it with its
//! own answer, and a group whose insert the database refuses is retried one
//! order per transaction, so the refused row alone fails.
//!
//! Workers are owned: one that saw no order for `worker_idle` leaves the
//! map and ends, and every worker ends when the committer is stopped at
//! shutdown.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, atomic::Ordering::Relaxed},
    time::Duration,
};

mod answer;
mod group;

use answer::{Stats, answer, answer_all};
use group::{GroupError, GroupOutcome, Member, any_lost, prepare_group};
use serde::Serialize;
use sqlx::MySqlPool;
use tokio::sync::{mpsc, oneshot};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::admission::Gate;
use crate::{
    config::SyncSettings,
    dependency::db_deadlock,
    events::Outbox,
    seckill::{
        error::{SeckillError, SeckillResult},
        model::PathUse,
    },
};

/// How long past its deadline an order waits for its group's commit.
const COMMIT_GRACE: Duration = Duration::from_secs(5);

/// The workers of one instance, by shard.
#[derive(Clone)]
pub(crate) struct GroupCommitter {
    db: MySqlPool,
    outbox: Outbox,
    batch_max: usize,
    /// Workers, each for the vouchers whose id leaves one remainder: more
    /// commit several vouchers' groups side by side (each transaction
    /// locks only its own vouchers' rows), fewer put more orders in each.
    /// A voucher's orders go to one worker, so each hot row has one
    /// transaction of each instance at a time.
    shards: u64,
    wait: Duration,
    /// A worker that saw no order for this long ends.
    idle: Duration,
    queues: Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Member>>>>,
    stats: Arc<Stats>,
    /// Cancelled at shutdown: every worker ends.
    stop: CancellationToken,
    workers: TaskTracker,
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
        outbox: Outbox,
        settings: &SyncSettings,
        stop: CancellationToken,
        workers: TaskTracker,
    ) -> Self {
        let (queues, stats) = (Arc::default(), Arc::default());
        Self {
            db,
            outbox,
            batch_max: settings.order_batch_max.max(1),
            shards: settings.order_batch_workers.max(1),
            wait: Duration::from_millis(settings.order_batch_wait_ms),
            idle: Duration::from_millis(settings.order_batch_worker_idle_ms),
            queues,
            stats,
            stop,
            workers,
        }
    }

    /// Workers running now: one per shard that had an order lately.
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

    /// Commits the order with the next group of its voucher's shard;
    /// returns once that group committed (or the order was refused).
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
        self.enqueue(Member { voucher_id, gate: gate.clone(), user_id, order_id, spend, lost, reply })?;
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
            () = overdue => Err(SeckillError::outcome_unknown(anyhow::anyhow!(
                "order {order_id}: its group's commit did not answer in time; whether it committed is unknown (GET /voucher-order/{order_id} tells)"
            ))),
        }
    }

    /// Hands the order to its shard's worker, starting one if there is
    /// none. Under the map's lock, like a worker's leaving: an order is
    /// never sent to a worker that already decided to end.
    fn enqueue(&self, member: Member) -> SeckillResult<()> {
        if self.stop.is_cancelled() {
            return Err(SeckillError::unavailable("the instance is shutting down"));
        }
        let shard = member.voucher_id % self.shards;
        let mut queues = self.queues.lock().expect("group queues poisoned");
        let queue = queues.entry(shard).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            self.workers.spawn(run(self.clone(), shard, rx));
            tx
        });
        queue.send(member).map_err(|_| SeckillError::internal(anyhow::anyhow!("group commit worker {shard} is gone")))
    }

    /// The worker's way out after `idle` without an order: it leaves the
    /// map only if nothing arrived meanwhile. `true` when it may end.
    fn leave_if_idle(&self, shard: u64, queue: &mpsc::UnboundedReceiver<Member>) -> bool {
        let mut queues = self.queues.lock().expect("group queues poisoned");
        if !queue.is_empty() {
            return false;
        }
        queues.remove(&shard);
        true
    }
}

/// Gathers what is ready (and, with a wait, what arrives within it), then
/// commits it; while one group commits, the next gathers. Ends when idle
/// for the committer's `idle`, or at shutdown (answering what still waits).
async fn run(committer: GroupCommitter, shard: u64, mut queue: mpsc::UnboundedReceiver<Member>) {
    loop {
        let first = tokio::select! {
            () = committer.stop.cancelled() => break,
            first = queue.recv() => first,
            () = tokio::time::sleep(committer.idle) => {
                if committer.leave_if_idle(shard, &queue) {
                    tracing::debug!(shard, "group commit worker idle; ended");
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
        commit_group(&committer, group).await;
    }
    committer.queues.lock().expect("group queues poisoned").remove(&shard);
    queue.close();
    while let Ok(member) = queue.try_recv() {
        let _ = member.reply.send(Err(SeckillError::unavailable("the instance is shutting down")));
    }
}

/// A group chosen as a deadlock's victim runs again this many times (it
/// committed nothing) before its members are answered 503.
const DEADLOCK_RETRIES: u32 = 2;

async fn commit_group(committer: &GroupCommitter, mut group: Vec<Member>) {
    let mut deadlocks = 0;
    loop {
        // Orders whose lock is gone, or whose request is gone, leave first,
        // then those whose voucher this instance knows sold out.
        let (group_taken, gone): (Vec<Member>, Vec<Member>) =
            std::mem::take(&mut group).into_iter().partition(|m| !m.lost.is_cancelled() && !m.reply.is_closed());
        for member in gone {
            let _ = member.reply.send(Err(SeckillError::lock_lost()));
        }
        let (group_taken, sold_out): (Vec<Member>, Vec<Member>) =
            group_taken.into_iter().partition(|m| !m.gate.is_sold_out());
        answer_all(sold_out, || SeckillError::SoldOut);
        if group_taken.is_empty() {
            return;
        }
        // A lock lost while the statements run drops, and so rolls back,
        // the transaction: its holder is answered now, not when the row
        // frees. The commit itself is never raced.
        let prepared = tokio::select! {
            biased;
            () = any_lost(&group_taken) => None,
            prepared = prepare_group(&committer.db, &committer.outbox, &group_taken) => Some(prepared),
        };
        let outcome = match prepared {
            None => Ok(GroupOutcome::LockLost),
            Some(Ok(prepared)) => prepared.commit(&group_taken).await,
            Some(Err(err)) => Err(err),
        };
        if let Err(GroupError::Other(err)) = &outcome
            && db_deadlock(err)
            && deadlocks < DEADLOCK_RETRIES
        {
            deadlocks += 1;
            tracing::warn!(size = group_taken.len(), "group commit chosen as a deadlock's victim; running it again");
            group = group_taken;
            continue;
        }
        match answer(&committer.db, &committer.outbox, &committer.stats, group_taken, outcome).await {
            Some(again) => group = again,
            None => return,
        }
    }
}
