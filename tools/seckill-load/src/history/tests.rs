//! The checker on made-up histories: no database, no stack.

use std::collections::HashMap;

use clap::Parser;

use super::{
    check::CheckArgs,
    file::{Entry, Header, VoucherBefore, read, write},
    judge::{Findings, VoucherFacts, find, judge, user_ids},
};
use crate::{audit, fate, report::Outcome};

fn entry(user: usize, outcome: Outcome, status: Option<u16>, order_id: Option<i64>, sent_ms: u64) -> Entry {
    Entry {
        sent_ms,
        answered_ms: sent_ms + 5,
        user,
        user_id: Some(user as u64 + 100),
        voucher_id: Some(7),
        status,
        error_code: None,
        order_id,
        outcome,
        attempts: 1,
    }
}

#[test]
fn a_history_written_reads_back_the_same() {
    let path = std::env::temp_dir().join(format!("history-{}.jsonl", std::process::id()));
    let header = Header::new(&[VoucherBefore { voucher_id: 7, stock_before: 100, orders_before: 0 }], 2);
    let entries =
        vec![entry(2, Outcome::SoldOut, Some(409), None, 20), entry(1, Outcome::Success, Some(200), Some(9), 10)];
    write(&path, &header, &entries).unwrap();
    let (read_header, read_entries) = read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(read_header, header);
    assert_eq!(read_entries, vec![entries[1].clone(), entries[0].clone()], "sorted by the time sent");
}

#[test]
fn a_200_without_its_row_is_found_and_a_202_without_it_only_counted() {
    // User i has id 100 + i; user 0 holds order 500.
    let rows = live(&[(100, 500)]);
    let entries = [
        entry(0, Outcome::Success, Some(200), Some(500), 0),
        entry(1, Outcome::Success, Some(200), Some(501), 0),
        entry(2, Outcome::Unreplicated, Some(202), Some(502), 0),
    ];
    let found = found(&entries, &rows, &HashMap::new(), None);
    let answers = found.answers.unwrap();
    assert_eq!((answers.success_without_row, found.accepted, answers.unreplicated_without_row), (1, 1, 1));
    assert_eq!(answers.rows_told_failed, 0);
}

#[test]
fn an_answer_that_settled_nothing_is_resolved_against_the_rows() {
    let rows = live(&[(100, 500)]);
    let entries = [entry(0, Outcome::Other, None, None, 0), entry(1, Outcome::Other, Some(502), None, 0)];
    let found = found(&entries, &rows, &HashMap::new(), None);
    assert_eq!((found.unsettled, found.unsettled_with_order), (2, 1));
    assert_eq!(found.answers.unwrap().rows_told_failed, 1, "user 0 holds an order nobody told it of");
}

#[test]
fn users_of_unknown_id_leave_the_answers_unjudged() {
    let mut unknown = entry(0, Outcome::Success, Some(200), Some(500), 0);
    unknown.user_id = None;
    assert_eq!(found(&[unknown], &audit::Rows::new(), &HashMap::new(), None).answers, None);
}

#[test]
fn the_longest_stall_is_the_widest_gap_between_two_sales() {
    let entries = [
        entry(0, Outcome::Success, Some(200), Some(500), 0),
        entry(1, Outcome::Unavailable, Some(503), None, 100),
        entry(2, Outcome::Success, Some(200), Some(502), 4_000),
        entry(3, Outcome::Unreplicated, Some(202), Some(503), 4_100),
    ];
    assert_eq!(found(&entries, &audit::Rows::new(), &HashMap::new(), None).longest_stall_ms, 4_000);
    assert_eq!(found(&entries[..1], &audit::Rows::new(), &HashMap::new(), None).longest_stall_ms, 0);
}

#[test]
fn an_order_told_on_a_retry_counts_as_sold_when_its_first_attempt_was_sent() {
    // Placed at about 100 ms, its answer lost, told by DUPLICATE_ORDER on
    // a retry 30 s on: the sale did not stop for 30 s.
    let told_late = Entry { answered_ms: 30_100, attempts: 2, ..entry(1, Outcome::Success, Some(409), Some(501), 100) };
    let entries = [
        entry(0, Outcome::Success, Some(200), Some(500), 0),
        told_late,
        entry(2, Outcome::Success, Some(200), Some(502), 1_000),
        entry(3, Outcome::SoldOut, Some(409), None, 1_100),
    ];
    assert_eq!(found(&entries, &audit::Rows::new(), &HashMap::new(), None).longest_stall_ms, 905);
}

#[test]
fn the_time_to_answer_normally_runs_from_the_heal_to_the_last_abnormal_answer() {
    let entries = [
        entry(0, Outcome::Unavailable, Some(503), None, 900),
        entry(1, Outcome::Unavailable, Some(503), None, 1_200),
        entry(2, Outcome::SoldOut, Some(409), None, 1_500),
    ];
    assert_eq!(found(&entries, &audit::Rows::new(), &HashMap::new(), Some(1_000)).abnormal_after_heal_ms, Some(205));
    assert_eq!(found(&entries, &audit::Rows::new(), &HashMap::new(), Some(1_300)).abnormal_after_heal_ms, None);
}

/// One voucher's findings, its entries' users the whole sale's.
fn found(
    entries: &[Entry],
    rows: &audit::Rows,
    fates: &HashMap<i64, audit::Fate>,
    healed_at_ms: Option<u64>,
) -> Findings {
    let users = user_ids(entries);
    find(&entries.iter().collect::<Vec<_>>(), users.as_deref(), rows, fates, healed_at_ms)
}

/// The live rows of (user id, order id).
fn live(rows: &[(u64, i64)]) -> audit::Rows {
    rows.iter().map(|&(user_id, id)| (id, audit::Row { user_id, live: true })).collect()
}

/// A made-up sale checked as `check-history` checks it: users 0.. (ids
/// 100..) bought from a voucher of `STOCK` units that had no order;
/// `rows` are the live orders afterwards (user id, order id), `fates` what
/// each order answered 202 became as its buyer is told (`CONFIRMED`,
/// `FAILED`), `flags` the checker's command line.
fn problems_of(entries: &[Entry], rows: &[(u64, i64)], fates: &[(i64, &str)], flags: &[&str]) -> Vec<String> {
    const STOCK: i64 = 100;
    let args = CheckArgs::parse_from(["check-history", "--history", "made-up.jsonl"].iter().chain(flags));
    let by_order: HashMap<i64, audit::Fate> = fates
        .iter()
        .map(|&(id, state)| (id, if state == "FAILED" { audit::Fate::Failed } else { audit::Fate::Confirmed }))
        .collect();
    let told = |state: audit::Fate| by_order.values().filter(|s| **s == state).count() as u64;
    let fates = fate::Fates {
        asked: by_order.len() as u64,
        confirmed: told(audit::Fate::Confirmed),
        failed: told(audit::Fate::Failed),
        by_order: by_order.clone(),
        ..fate::Fates::default()
    };
    let orders = rows.len() as i64;
    let facts = VoucherFacts {
        before: VoucherBefore { voucher_id: 7, stock_before: STOCK, orders_before: 0 },
        rows: live(rows),
        after: audit::Snapshot::new(STOCK - orders, orders),
        duplicate_pairs: 0,
        stock_added: 0,
        resolutions: None,
        reconciliation: None,
    };
    judge(&args.rules(), entries, &[facts], Some(fates)).problems
}

fn answered(user: usize, outcome: Outcome, order_id: Option<i64>) -> Entry {
    let status = match outcome {
        Outcome::Success => 200,
        Outcome::Unreplicated => 202,
        Outcome::SoldOut | Outcome::Duplicate => 409,
        Outcome::Unavailable => 503,
        _ => 500,
    };
    entry(user, outcome, Some(status), order_id, 1_000 + 10 * user as u64)
}

#[test]
fn the_honest_history_passes() {
    // 0 and 1 bought; 2 was told 202 and it was kept; 3 was told 202 and
    // it failed (no row); 4 was told SOLD_OUT; 1 asked again and was told
    // which order it holds; 5 got a 503 and holds nothing.
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(1, Outcome::Success, Some(501)),
        answered(2, Outcome::Unreplicated, Some(502)),
        answered(3, Outcome::Unreplicated, Some(503)),
        answered(4, Outcome::SoldOut, None),
        answered(1, Outcome::Duplicate, Some(501)),
        answered(5, Outcome::Unavailable, None),
    ];
    let rows = [(100, 500), (101, 501), (102, 502)];
    let fates = [(502, "CONFIRMED"), (503, "FAILED")];
    assert_eq!(problems_of(&entries, &rows, &fates, &[]), Vec::<String>::new());
}

#[test]
fn a_200_whose_id_is_another_buyers_row_fails() {
    // 0 was told 200 with order 500, but 500 is 1's row (1 was told so):
    // 0's order was lost to an id collision, and 0 holds nothing.
    let entries = [answered(0, Outcome::Success, Some(500)), answered(1, Outcome::Duplicate, Some(500))];
    let problems = problems_of(&entries, &[(101, 500)], &[], &[]);
    assert!(!problems.is_empty(), "a 200 on another buyer's row passed");
    // The same with the other buyer told 202, and that order confirmed.
    let entries = [answered(0, Outcome::Success, Some(500)), answered(1, Outcome::Unreplicated, Some(500))];
    let problems = problems_of(&entries, &[(101, 500)], &[(500, "CONFIRMED")], &[]);
    assert!(!problems.is_empty(), "a 200 on a confirmed 202's row passed");
}

#[test]
fn a_missing_row_covered_by_a_persisted_202_fails() {
    // Two 200s named order 500 (one row, 2's), and 1's 202 persisted: two
    // rows for two 200s and a persisted 202, one row short.
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(2, Outcome::Success, Some(500)),
        answered(1, Outcome::Unreplicated, Some(501)),
    ];
    let problems = problems_of(&entries, &[(102, 500), (101, 501)], &[(501, "CONFIRMED")], &[]);
    assert!(problems.iter().any(|p| p.contains("ledger")), "{problems:?}");
}

#[test]
fn a_202_told_failed_must_have_no_row() {
    let entries = [answered(0, Outcome::Success, Some(500)), answered(1, Outcome::Unreplicated, Some(501))];
    let problems = problems_of(&entries, &[(100, 500), (101, 501)], &[(501, "FAILED")], &[]);
    assert!(!problems.is_empty(), "a FAILED order kept its row");
}

#[test]
fn a_202_told_confirmed_must_be_its_buyers_row() {
    let entries = [answered(0, Outcome::Success, Some(500)), answered(1, Outcome::Unreplicated, Some(501))];
    let problems = problems_of(&entries, &[(100, 500)], &[(501, "CONFIRMED")], &[]);
    assert!(!problems.is_empty(), "a CONFIRMED order without its row passed");
}

#[test]
fn rows_never_told_excuse_only_themselves() {
    // An instance killed with the answers it held: 3 holds an order nobody
    // told it of, and that is allowed.
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(1, Outcome::SoldOut, None),
        answered(2, Outcome::SoldOut, None),
        answered(3, Outcome::Other, None),
    ];
    assert_eq!(problems_of(&entries, &[(100, 500), (103, 503)], &[], &["--untold-allowed"]), Vec::<String>::new());
    // But not a 200 lost to a collision beside it: two 200s on one row.
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(1, Outcome::SoldOut, None),
        answered(2, Outcome::Success, Some(500)),
        answered(3, Outcome::Other, None),
    ];
    let problems = problems_of(&entries, &[(102, 500), (103, 503)], &[], &["--untold-allowed"]);
    assert!(!problems.is_empty(), "an untold row covered a 200 lost to a collision");
}

#[test]
fn with_the_replica_wait_off_a_lost_200_is_counted_but_another_buyers_row_is_no_loss() {
    // 0's 200 went with a demoted master; 1's 202 was kept, 2's failed.
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(1, Outcome::Unreplicated, Some(501)),
        answered(2, Outcome::Unreplicated, Some(502)),
    ];
    let fates = [(501, "CONFIRMED"), (502, "FAILED")];
    assert_eq!(problems_of(&entries, &[(101, 501)], &fates, &["--replica-wait-off"]), Vec::<String>::new());
    let entries = [answered(0, Outcome::Success, Some(500)), answered(1, Outcome::Duplicate, Some(500))];
    let problems = problems_of(&entries, &[(101, 500)], &[], &["--replica-wait-off"]);
    assert!(!problems.is_empty(), "a 200 on another buyer's row was taken for a loss");
}

/// Sales answered at `sold` ms, then `refused` answers of 503 at those ms.
fn timeline(sold: &[u64], refused: &[u64]) -> Vec<Entry> {
    let sales = sold.iter().enumerate().map(|(i, at)| entry(i, Outcome::Success, Some(200), Some(500 + i as i64), *at));
    let refusals =
        refused.iter().enumerate().map(|(i, at)| entry(sold.len() + i, Outcome::Unavailable, Some(503), None, *at));
    sales.chain(refusals).collect()
}

fn stall_problems(entries: &[Entry], flags: &[&str]) -> Vec<String> {
    let rows: Vec<(u64, i64)> = entries
        .iter()
        .filter(|e| e.outcome == Outcome::Success)
        .map(|e| (e.user as u64 + 100, e.order_id.unwrap()))
        .collect();
    problems_of(entries, &rows, &[], flags)
}

#[test]
fn a_stall_check_of_a_sale_that_ended_before_the_fault_ended_is_void() {
    // Sold every 100 ms until 1 s; the fault ended at 5 s.
    let entries = timeline(&[0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1_000], &[]);
    let problems = stall_problems(&entries, &["--max-stall-ms", "4000", "--healed-at-ms", "5000"]);
    assert!(problems.iter().any(|p| p.contains("void")), "{problems:?}");
    // Without the fault's end there is nothing to hold the sale to.
    let problems = stall_problems(&entries, &["--max-stall-ms", "4000"]);
    assert!(problems.iter().any(|p| p.contains("void")), "{problems:?}");
    // A sale that outlasted the fault is judged.
    let problems = stall_problems(&entries, &["--max-stall-ms", "4000", "--healed-at-ms", "900"]);
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn a_sale_that_stopped_selling_while_buyers_were_turned_away_stalled() {
    // Two sales, then only 503s from 200 ms to 6 s: the fault ended at 5 s.
    let entries = timeline(&[0, 100], &[200, 2_000, 4_000, 6_000]);
    let problems = stall_problems(&entries, &["--max-stall-ms", "4000", "--healed-at-ms", "5000"]);
    assert!(problems.iter().any(|p| p.contains("sold nothing")), "{problems:?}");
}

#[test]
fn an_old_single_voucher_history_still_reads() {
    let path = std::env::temp_dir().join(format!("history-old-{}.jsonl", std::process::id()));
    let old = concat!(
        r#"{"sale":{"voucherId":7,"stockBefore":100,"ordersBefore":0,"buyers":1}}"#,
        "\n",
        r#"{"sentMs":10,"answeredMs":15,"user":0,"userId":100,"status":200,"errorCode":null,"orderId":500,"outcome":"success","attempts":1}"#,
        "\n"
    );
    std::fs::write(&path, old).unwrap();
    let read_back = read(&path);
    std::fs::remove_file(&path).ok();
    let (header, entries) = read_back.unwrap();
    assert_eq!(header.vouchers(), [VoucherBefore { voucher_id: 7, stock_before: 100, orders_before: 0 }]);
    assert_eq!(entries[0].voucher_id, Some(7), "an old entry is of the header's voucher");
    let problems = judge(&Default::default(), &entries, &[facts(7, &[(100, 500)])], None).problems;
    assert_eq!(problems, Vec::<String>::new());
}

#[test]
fn a_history_of_several_vouchers_names_each_entrys_and_refuses_a_stranger() {
    let path = std::env::temp_dir().join(format!("history-many-{}.jsonl", std::process::id()));
    let vouchers = [7, 8].map(|voucher_id| VoucherBefore { voucher_id, stock_before: 50, orders_before: 0 });
    let header = Header::new(&vouchers, 2);
    let entries = vec![on(7, answered(0, Outcome::Success, Some(500))), on(8, answered(1, Outcome::SoldOut, None))];
    write(&path, &header, &entries).unwrap();
    let read_back = read(&path);
    let (read_header, read_entries) = read_back.unwrap();
    assert_eq!((read_header.vouchers(), read_entries), (vouchers.to_vec(), entries.clone()));
    write(&path, &header, &[on(9, answered(0, Outcome::SoldOut, None))]).unwrap();
    let stranger = read(&path).map(|_| ());
    std::fs::remove_file(&path).ok();
    let why = stranger.unwrap_err().to_string();
    assert!(why.contains("voucher 9 is none of the sale's [7, 8]"), "{why}");
}

/// `entry`, ordering `voucher`.
fn on(voucher: u64, entry: Entry) -> Entry {
    Entry { voucher_id: Some(voucher), ..entry }
}

/// A voucher of 50 units, no order before, and these live rows (user id,
/// order id) after.
fn facts(voucher_id: u64, rows: &[(u64, i64)]) -> VoucherFacts {
    let orders = rows.len() as i64;
    VoucherFacts {
        before: VoucherBefore { voucher_id, stock_before: 50, orders_before: 0 },
        rows: live(rows),
        after: audit::Snapshot::new(50 - orders, orders),
        duplicate_pairs: 0,
        stock_added: 0,
        resolutions: None,
        reconciliation: None,
    }
}

#[test]
fn each_voucher_of_a_sale_is_held_to_its_own_rows_and_ledger() {
    // Buyers 0 and 2 ordered voucher 7, buyers 1 and 3 voucher 8.
    let entries = [
        on(7, answered(0, Outcome::Success, Some(500))),
        on(8, answered(1, Outcome::Success, Some(501))),
        on(7, answered(2, Outcome::Unreplicated, Some(502))),
        on(8, answered(3, Outcome::SoldOut, None)),
    ];
    let honest = [facts(7, &[(100, 500), (102, 502)]), facts(8, &[(101, 501)])];
    let verdict = judge(&Default::default(), &entries, &honest, None);
    assert_eq!(verdict.problems, Vec::<String>::new());
    assert_eq!((verdict.findings.requests, verdict.vouchers.len()), (4, 2));
    let answers = verdict.findings.answers.unwrap();
    assert_eq!((answers.success_orders, answers.accepted_persisted), (2, 1), "the vouchers added up");
    assert_eq!(verdict.ledger["newOrders"], 3);

    // Buyer 0's order 500 landed on voucher 8: voucher 7's 200 has no row,
    // and voucher 8 holds a row nobody was told of, though the sale's
    // rows add up.
    let misplaced = [facts(7, &[(102, 502)]), facts(8, &[(101, 501), (100, 500)])];
    let problems = judge(&Default::default(), &entries, &misplaced, None).problems;
    assert!(
        problems.iter().any(|p| p.starts_with("voucher 7: 1 answers of 200 without their buyer's row")),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p.starts_with("voucher 8: 1 rows whose user was never told")), "{problems:?}");
}

/// The after-sale scenario as its history records it: buyer 0's order
/// expired unpaid (its row cancelled, its unit back), buyer 1 paid, and
/// buyer 2, refused in the first wave, bought the returned unit in the
/// second.
fn after_sale(rows: audit::Rows) -> Vec<String> {
    let entries = [
        answered(0, Outcome::Success, Some(500)),
        answered(1, Outcome::Success, Some(501)),
        answered(2, Outcome::SoldOut, None),
        entry(2, Outcome::Success, Some(200), Some(502), 9_000),
    ];
    let live_orders = rows.values().filter(|r| r.live).count() as i64;
    let facts = VoucherFacts {
        before: VoucherBefore { voucher_id: 7, stock_before: 2, orders_before: 0 },
        rows,
        after: audit::Snapshot::new(2 - live_orders, live_orders),
        duplicate_pairs: 0,
        stock_added: 0,
        resolutions: None,
        reconciliation: None,
    };
    judge(&Default::default(), &entries, &[facts], None).problems
}

#[test]
fn a_200_whose_order_expired_is_still_its_buyers_row_and_the_second_wave_is_held_too() {
    let row = |user_id, live| audit::Row { user_id, live };
    let honest = [(500, row(100, false)), (501, row(101, true)), (502, row(102, true))];
    assert_eq!(after_sale(honest.into_iter().collect()), Vec::<String>::new());
    // The expired order's row gone altogether: its 200 was not kept.
    let lost = [(501, row(101, true)), (502, row(102, true))];
    let problems = after_sale(lost.into_iter().collect());
    assert!(problems.iter().any(|p| p.contains("1 answers of 200 without their buyer's row")), "{problems:?}");
    // The second wave's order made no row: its 200 was not kept either.
    let second_lost = [(500, row(100, false)), (501, row(101, true))];
    let problems = after_sale(second_lost.into_iter().collect());
    assert!(problems.iter().any(|p| p.contains("1 answers of 200 without their buyer's row")), "{problems:?}");
}
