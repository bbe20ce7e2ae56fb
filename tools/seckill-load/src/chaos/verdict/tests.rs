//! The chaos verdict on made-up runs.

use std::{collections::BTreeMap, time::Instant};

use super::{Injection, Run};
use crate::audit::{AnswerCheck, Audit};
use crate::chaos::probe::sample;

fn clean_audit() -> Audit {
    Audit {
        voucher_id: 7,
        initial_stock: 4_000,
        orders: 4_000,
        remaining_stock: 0,
        oversold: 0,
        duplicate_pairs: 0,
        stock_plus_orders_is_initial: true,
        new_orders: 4_000,
        orders_match_answers: true,
        success_answers: 4_000,
        unreplicated_answers: 0,
        redis: None,
        events: None,
        answers: Some(AnswerCheck { success_orders: 4_000, ..AnswerCheck::default() }),
        buyers: 6_000,
        refusals_leaving_stock: 0,
        unsold_unexplained: false,
        answers_outside_contract: 0,
        passed: true,
    }
}

fn happened() -> Injection {
    let now = Instant::now();
    Injection { happened: true, evidence: "12 connections killed".into(), recovered: true, started: now, ended: now }
}

/// A synchronous run of `fault` over `audits` (2.4 s, the fault at 0.5 s),
/// the rest of it a clean one's; each test changes what it is about.
fn run_of<'a>(
    fault: &'a str,
    audits: &'a [Audit],
    others: &'a BTreeMap<String, u64>,
    injection: &'a Injection,
) -> Run<'a> {
    static SERVED_AGAIN: Result<(), String> = Ok(());
    Run {
        mode: "sync",
        fault,
        fault_at: 0.5,
        wall_secs: 2.4,
        outcomes: vec![],
        others,
        retries: None,
        after_sale: None,
        audits,
        load_passed: audits.iter().all(|a| a.passed),
        injection,
        orders_again: &SERVED_AGAIN,
        locks_lost: 0,
        during_fault: 0,
    }
}

fn verdict(audit: &Audit, injection: &Injection, wall_secs: f64) -> Vec<String> {
    let others = BTreeMap::new();
    Run {
        wall_secs,
        outcomes: vec![("SUCCESS".into(), 4_000), ("SOLD_OUT".into(), 2_000)],
        ..run_of("db-kill", std::slice::from_ref(audit), &others, injection)
    }
    .problems()
}

#[test]
fn a_clean_sale_under_a_fault_that_happened_passes() {
    assert_eq!(verdict(&clean_audit(), &happened(), 2.4), Vec::<String>::new());
}

#[test]
fn an_undersold_sale_fails() {
    let mut audit = clean_audit();
    // 300 units left while buyers were told SOLD_OUT, with nothing that
    // explains it (the audit's own finding).
    audit.remaining_stock = 300;
    audit.orders = 3_700;
    audit.new_orders = 3_700;
    audit.success_answers = 3_700;
    audit.answers = Some(AnswerCheck { success_orders: 3_700, ..AnswerCheck::default() });
    audit.unsold_unexplained = true;
    audit.passed = false;
    let problems = verdict(&audit, &happened(), 2.4);
    assert!(problems.iter().any(|p| p.contains("300 units unsold")), "{problems:?}");
}

#[test]
fn a_fault_that_did_nothing_fails_even_when_the_sale_was_clean() {
    let nothing =
        Injection { happened: false, evidence: "no connection of database hmdp was killed".into(), ..happened() };
    let problems = verdict(&clean_audit(), &nothing, 2.4);
    assert_eq!(problems, ["the fault did not happen: no connection of database hmdp was killed"]);
}

#[test]
fn a_sale_over_before_its_fault_proves_nothing() {
    let problems = verdict(&clean_audit(), &happened(), 0.4);
    assert!(problems.iter().any(|p| p.contains("ended before the fault")), "{problems:?}");
}

#[test]
fn a_success_without_its_row_fails_and_an_instance_kill_may_lose_only_answers() {
    let mut audit = clean_audit();
    audit.answers = Some(AnswerCheck { success_orders: 4_000, success_without_row: 2, ..AnswerCheck::default() });
    audit.new_orders = 3_998;
    let problems = verdict(&audit, &happened(), 2.4);
    assert!(problems.iter().any(|p| p.contains("2 success answers without their row")), "{problems:?}");

    // SIGKILL takes the answers of the process along: rows whose user
    // was not told success are that, and nothing else may go.
    let mut audit = clean_audit();
    audit.answers =
        Some(AnswerCheck { success_orders: 3_995, rows_told_failed: 5, untold_live_rows: 5, ..AnswerCheck::default() });
    audit.success_answers = 3_995;
    audit.passed = false;
    let (others, injection) = (BTreeMap::from([("HTTP 502 not an envelope".to_owned(), 5)]), happened());
    let run = Run { locks_lost: 3, ..run_of("instance-kill", std::slice::from_ref(&audit), &others, &injection) };
    assert_eq!(run.problems(), Vec::<String>::new());
    assert!(run.row().starts_with("| sync | instance-kill | 2.40 s |"), "{}", run.row());
    assert!(run.row().contains("; 0 sold in the 0.00 s the fault lasted"), "{}", run.row());
}

#[test]
fn a_lock_metric_is_read_by_its_labels() {
    let text = "# TYPE hmdp_lock_events_total counter\n\
                hmdp_lock_events_total{event=\"acquired\"} 120\n\
                hmdp_lock_events_total{event=\"lost\"} 3\n\
                hmdp_lock_events_total_other 9\n";
    assert_eq!(sample(text, "hmdp_lock_events_total", &[("event", "lost")]), Some(3.0));
    assert_eq!(sample(text, "hmdp_lock_events_total", &[("event", "renewed")]), None);
}

#[test]
fn a_chaos_run_whose_200_names_another_buyers_order_fails() {
    use crate::report::Outcome;
    // Buyer 0 was told 200 with order 500, which is buyer 1's row.
    let answers = [(0, Outcome::Success, Some(500)), (1, Outcome::Duplicate, Some(500))];
    let audit = crate::audit::audited_sale(&answers, &[(11, 500)]);
    let problems = verdict(&audit, &happened(), 2.4);
    assert!(!problems.is_empty(), "{audit:?}");
}

#[test]
fn a_sale_of_several_vouchers_is_summed_in_its_row_and_each_problem_names_its_voucher() {
    let (mut first, mut second) = (clean_audit(), clean_audit());
    first.voucher_id = 7;
    second.voucher_id = 8;
    second.remaining_stock = 2;
    second.new_orders = 3_998;
    second.answers = Some(AnswerCheck { success_orders: 4_000, success_without_row: 2, ..AnswerCheck::default() });
    second.passed = false;
    let audits = [first, second];
    let (others, injection) = (BTreeMap::new(), happened());
    let run = run_of("redis-master-kill", &audits, &others, &injection);
    let problems = run.problems();
    assert!(problems.iter().any(|p| p == "voucher 8: 2 success answers without their row"), "{problems:?}");
    assert!(!problems.iter().any(|p| p.starts_with("voucher 7:")), "{problems:?}");
    // Oversold, duplicates, 200s without a row, 202s, rows untold, stock left.
    assert!(run.row().contains("| 0 | 0 | 2 | 0 / 0 | 0 | 2 |"), "{}", run.row());
}

#[test]
fn a_row_whose_buyer_was_not_told_is_counted_when_an_instances_a_masters_or_the_primarys_host_was_lost_not_when_a_master_was_killed()
 {
    // The order's call held in a link to a host that answers nothing ends
    // 503 at the request's deadline, and the order may still have reached
    // the replica promoted in its place; a lost instance's host takes the
    // answers it held.
    let mut audit = clean_audit();
    audit.answers =
        Some(AnswerCheck { success_orders: 3_999, rows_told_failed: 1, untold_live_rows: 1, ..AnswerCheck::default() });
    audit.success_answers = 3_999;
    audit.passed = false;
    let (others, injection) = (BTreeMap::new(), happened());
    let lost = run_of("lost-redis-master-host", std::slice::from_ref(&audit), &others, &injection);
    assert_eq!(lost.problems(), Vec::<String>::new());
    let lost = run_of("lost-app-host", std::slice::from_ref(&audit), &others, &injection);
    assert_eq!(lost.problems(), Vec::<String>::new());
    for also in
        ["lost-app-host-twice", "lost-redis-master-host-twice", "lost-db-primary-host", "lost-db-primary-host-twice"]
    {
        assert_eq!(run_of(also, std::slice::from_ref(&audit), &others, &injection).problems(), Vec::<String>::new());
    }
    let killed = run_of("redis-master-kill", std::slice::from_ref(&audit), &others, &injection);
    assert!(
        killed.problems().iter().any(|p| p.contains("1 rows whose user was not told success")),
        "{:?}",
        killed.problems()
    );
}
