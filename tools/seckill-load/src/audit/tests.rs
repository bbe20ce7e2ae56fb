//! The audit on made-up sales: no database.

use std::collections::HashMap;

use super::*;

fn verdict(stock_after: i64, orders_after: i64, duplicates: i64, successes: u64) -> Audit {
    let before = Snapshot { stock: 100, orders: 0 };
    let after = Snapshot { stock: stock_after, orders: orders_after };
    Audit::judge(1, &before, &after, duplicates, successes, 0, 0)
}

#[test]
fn a_202_may_lose_its_row_but_a_200_may_not() {
    let users = [10, 11];
    let rows = Rows::from([(100, Row { user_id: 10, live: true })]);
    let answers = [(0, Outcome::Unreplicated, Some(100)), (1, Outcome::Unreplicated, Some(101))];
    let check = judge_answers(&users, &rows, &answers, &HashMap::new());
    assert_eq!((check.success_without_row, check.unreplicated_without_row, check.rows_told_failed), (0, 1, 0));
    let before = Snapshot { stock: 100, orders: 0 };
    let kept_one = Snapshot { stock: 99, orders: 1 };
    assert!(Audit::judge(1, &before, &kept_one, 0, 0, 2, 0).passed, "a lost 202 is allowed");
    assert!(!Audit::judge(1, &before, &kept_one, 0, 2, 0, 0).passed, "a lost 200 is not");
}

#[test]
fn a_clean_sell_out_passes() {
    let audit = verdict(0, 100, 0, 100);
    assert!(audit.passed && audit.oversold == 0 && audit.stock_plus_orders_is_initial);
}

#[test]
fn an_oversell_fails() {
    let audit = verdict(0, 101, 0, 101);
    assert_eq!(audit.oversold, 1);
    assert!(!audit.passed);
}

#[test]
fn a_duplicate_pair_fails() {
    assert!(!verdict(0, 100, 1, 100).passed);
}

#[test]
fn stock_that_vanished_without_an_order_fails() {
    let audit = verdict(0, 99, 0, 99);
    assert!(!audit.stock_plus_orders_is_initial && !audit.passed);
}

#[test]
fn a_sale_whose_orders_lack_their_events_at_the_consumer_fails() {
    let rows = BTreeMap::from([(1_i64, 1_u8), (2, 1)]);
    let both = BTreeMap::from([(1_i64, vec!["created".to_owned()]), (2, vec!["created".to_owned()])]);
    let one = BTreeMap::from([(1_i64, vec!["created".to_owned()])]);
    assert!(verdict(0, 100, 0, 100).with_events(EventsAudit::judge(&[7], &rows, &both)).passed);
    assert!(!verdict(0, 100, 0, 100).with_events(EventsAudit::judge(&[7], &rows, &one)).passed);
}

fn refusals(buyers: u64, leaving_stock: u64, outside_contract: u64) -> Refusals {
    Refusals { buyers, leaving_stock, outside_contract, demand_met: false }
}

#[test]
fn stock_left_to_more_buyers_than_units_fails_unless_refusals_explain_it() {
    // 200 buyers for 100 units, 50 sold, the rest told SOLD_OUT.
    let stalled = verdict(50, 50, 0, 50).with_refusals(refusals(200, 0, 0));
    assert!(stalled.unsold_unexplained && !stalled.passed);
    // The same, with 50 answers that leave a unit (429, 503).
    let explained = verdict(50, 50, 0, 50).with_refusals(refusals(200, 50, 0));
    assert!(!explained.unsold_unexplained && explained.passed);
    assert!(!verdict(50, 50, 0, 50).with_refusals(refusals(200, 49, 0)).passed, "one unit too many");
    // Fewer buyers than units: stock is left by design.
    assert!(verdict(50, 50, 0, 50).with_refusals(refusals(50, 0, 0)).passed);
}

#[test]
fn an_answer_outside_the_contract_fails() {
    assert!(!verdict(0, 100, 0, 100).with_refusals(refusals(100, 1, 1)).passed);
}

#[test]
fn a_success_answer_without_its_order_fails() {
    assert!(!verdict(1, 99, 0, 100).passed, "an answered order must exist in the table");
}

#[test]
fn stock_added_mid_sale_counts_as_there_from_the_start() {
    let before = Snapshot { stock: 100, orders: 0 };
    let after = Snapshot { stock: 0, orders: 150 };
    let raised = Audit::judge(1, &before, &after, 0, 150, 0, 50);
    assert!(raised.passed && raised.oversold == 0, "{raised:?}");
    let unexplained = Audit::judge(1, &before, &after, 0, 150, 0, 0);
    assert!(!unexplained.passed && unexplained.oversold == 50, "{unexplained:?}");
    let lowered = Audit::judge(1, &before, &Snapshot { stock: 0, orders: 60 }, 0, 60, 0, -40);
    assert!(lowered.passed, "{lowered:?}");
}

#[test]
fn stock_left_after_every_refused_buyer_came_back_and_bought_is_explained() {
    let before = Snapshot { stock: 100, orders: 0 };
    let after = Snapshot { stock: 30, orders: 70 };
    let refusals = |demand_met| Refusals { buyers: 300, leaving_stock: 0, outside_contract: 0, demand_met };
    let judged = |demand_met| Audit::judge(1, &before, &after, 0, 70, 0, 0).with_refusals(refusals(demand_met));
    assert!(!judged(false).passed, "30 units left to 300 buyers with nothing to explain it");
    assert!(judged(true).passed, "the second wave bought all it wanted: the 30 had no buyer");
}

#[test]
fn a_200_naming_another_buyers_order_fails_the_audit() {
    // Buyer 0 was told 200 with order 500, which is buyer 1's row.
    let audit = audited_sale(&[(0, Outcome::Success, Some(500)), (1, Outcome::Duplicate, Some(500))], &[(11, 500)]);
    assert!(!audit.passed, "{audit:?}");
}

#[test]
fn a_sales_ledger_counts_a_202_only_when_it_persisted() {
    // Two 200s name one row; 1's 202 persisted and fills the ledger's
    // gap unless each answer is held to its own buyer's row.
    let answers =
        [(0, Outcome::Success, Some(500)), (2, Outcome::Success, Some(500)), (1, Outcome::Unreplicated, Some(501))];
    let audit = audited_sale(&answers, &[(12, 500), (11, 501)]);
    assert!(!audit.passed, "{audit:?}");
}

#[test]
fn an_honest_sale_with_a_202_lost_passes() {
    let answers = [
        (0, Outcome::Success, Some(500)),
        (1, Outcome::Unreplicated, Some(501)),
        (2, Outcome::Unreplicated, Some(502)),
    ];
    let audit = audited_sale(&answers, &[(10, 500), (11, 501)]);
    assert!(audit.passed, "{audit:?}");
}
