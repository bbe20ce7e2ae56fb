//! `seckill-load check-history`: the history held to the tables, voucher
//! by voucher. The facts are gathered here (the tables, the buyers' own
//! lookups, Redis); `judge` weighs them.

use std::{collections::HashSet, path::PathBuf};

use super::{
    file::{Entry, read},
    judge::{Rules, VoucherFacts, judge},
};
use crate::{audit, fate, report::Outcome};

#[derive(clap::Parser)]
#[command(name = "seckill-load check-history", about = "Read a sale's history (--history) against the tables")]
pub struct CheckArgs {
    #[arg(long)]
    history: PathBuf,
    /// When the fault was healed (Unix ms): the checker says how long the
    /// service took to answer normally again after it.
    #[arg(long)]
    healed_at_ms: Option<u64>,
    /// Stock changed mid-sale through the admin's route (the sale's
    /// `--stock-delta-file`): counted as there from the start.
    #[arg(long)]
    stock_delta_file: Option<PathBuf>,
    /// A fault that kills an instance takes its answers with it: rows
    /// whose user was never told are counted, not failed.
    #[arg(long)]
    untold_allowed: bool,
    /// The service ran with the replica wait off (`ORDER_REPLICA_ACKS=0`)
    /// through a master's failover: its 200s were never on a replica, and
    /// those a demoted master took along are counted, not failed.
    #[arg(long)]
    replica_wait_off: bool,
    /// Fail when the sale went longer than this without selling (between
    /// two successes, or from the last success to the last buyer turned
    /// away while nothing was sold out): a fault that cuts one instance off
    /// must leave the other selling. Needs `--healed-at-ms`: a sale whose
    /// last answer came before the fault ended tested nothing, and fails.
    #[arg(long)]
    max_stall_ms: Option<u64>,
    /// Where the orders answered 202 are looked up, each with its buyer's
    /// token from `--tokens` (the sale's): each must end `CONFIRMED` or
    /// `FAILED`, none vanished.
    #[arg(long, requires = "tokens")]
    base_url: Option<String>,
    #[arg(long, requires = "base_url")]
    tokens: Option<PathBuf>,
    /// The asynchronous mode's Redis, read against MariaDB once drained
    /// (`hmdp reconcile`): stock, buyers, nothing pending.
    #[arg(long)]
    reconcile: bool,
    #[command(flatten)]
    db: hmdp::config::DatabaseUrl,
    #[command(flatten)]
    redis: hmdp::config::RedisSettings,
}

impl CheckArgs {
    /// What the run allows and asks of the history.
    pub(super) fn rules(&self) -> Rules {
        Rules {
            healed_at_ms: self.healed_at_ms,
            untold_allowed: self.untold_allowed,
            replica_wait_off: self.replica_wait_off,
            max_stall_ms: self.max_stall_ms,
        }
    }
}

/// `seckill-load check-history`: exits non-zero when a 200 is not its
/// buyer's row, a 202's fate and its row disagree, a row was never told,
/// a voucher's ledger does not add up exactly, or there was nothing to
/// check. Prints the verdict as JSON: the sale's findings added up, and
/// each voucher's.
pub async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let (sale, entries) = read(&args.history)?;
    anyhow::ensure!(!entries.is_empty(), "the history holds no request: there is nothing to check");
    let vouchers = sale.vouchers();
    let stock_added = match &args.stock_delta_file {
        Some(path) => audit::read_stock_deltas(path)?,
        None => 0,
    };
    // The admin's stock route changes one voucher: with several, which one
    // is not on record.
    anyhow::ensure!(
        stock_added == 0 || vouchers.len() == 1,
        "stock changed mid-sale by {stock_added} in a sale of {} vouchers: the change names no voucher",
        vouchers.len()
    );
    let db = hmdp::startup::connect_database(args.db.as_str(), 2).await?;
    let fates = match (&args.base_url, &args.tokens) {
        (Some(base_url), Some(tokens)) => {
            Some(fate::ask(base_url, tokens, &asked(&entries, |e| e.outcome == Outcome::Unreplicated)).await?)
        }
        _ => None,
    };
    let mut redis = match args.reconcile {
        true => Some(hmdp::startup::connect_redis(&args.redis).await?),
        false => None,
    };
    let keys = hmdp::keys::Keys::new(&args.redis.key_prefix);
    let mut facts = Vec::with_capacity(vouchers.len());
    for before in vouchers {
        let id = before.voucher_id;
        let rows = audit::voucher_rows(&db, id).await?;
        let resolutions = match (&args.base_url, &args.tokens) {
            (Some(base_url), Some(tokens)) => {
                let holders: HashSet<u64> = rows.values().filter(|r| r.live).map(|r| r.user_id).collect();
                let unsettled = asked(&entries, |e| e.voucher_id == Some(id) && e.settled_nothing());
                Some(fate::resolve(base_url, tokens, &unsettled, id, &holders).await?)
            }
            _ => None,
        };
        let reconciliation = match &mut redis {
            Some(redis) => Some(hmdp::seckill::reconcile(&db, redis, &keys, id).await?),
            None => None,
        };
        facts.push(VoucherFacts {
            before,
            rows,
            after: audit::Snapshot::read(&db, id).await?,
            duplicate_pairs: audit::duplicate_pairs(&db, id).await?,
            stock_added,
            resolutions,
            reconciliation,
        });
    }
    let verdict = judge(&args.rules(), &entries, &facts, fates);
    println!("{}", serde_json::to_string_pretty(&verdict)?);
    anyhow::ensure!(verdict.problems.is_empty(), "the history against the tables: {}", verdict.problems.join("; "));
    Ok(())
}

/// The entries `which` picks, as the buyers' lookups need them.
fn asked(entries: &[Entry], which: impl Fn(&Entry) -> bool) -> Vec<fate::Asked> {
    entries
        .iter()
        .filter(|e| which(e))
        .map(|e| fate::Asked { user: e.user, user_id: e.user_id, order_id: e.order_id })
        .collect()
}
