//! The consumer's events held against the orders: every order row has its
//! events, applied in the order its life allows, each once, and its view
//! (the state the events left) is its row's state; an event for an order
//! without a row is only an asynchronous order's `failed`, whose view is
//! FAILED.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::MySqlPool;

use crate::inbox;

/// The events an order's status implies, in order (`cancelled` also
/// stands for `expired`, the timeout's cancel).
fn expected(status: u8) -> Option<&'static [&'static str]> {
    Some(match status {
        1 => &["created"],
        2 => &["created", "paid"],
        3 => &["created", "paid", "used"],
        4 => &["created", "cancelled"],
        6 => &["created", "paid", "refunded"],
        _ => return None,
    })
}

/// The state a row's status names, as the events' `state` does.
fn state_of(status: u8) -> Option<&'static str> {
    Some(match status {
        1 => "UNPAID",
        2 => "PAID",
        3 => "USED",
        4 => "CANCELLED",
        6 => "REFUNDED",
        _ => return None,
    })
}

fn matches(status: u8, seen: &[String]) -> bool {
    let Some(want) = expected(status) else { return false };
    want.len() == seen.len() && want.iter().zip(seen).all(|(w, s)| w == s || (*w == "cancelled" && s == "expired"))
}

/// How many examples of each failure a report names.
const EXAMPLES: usize = 5;

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsAudit {
    pub vouchers: Vec<u64>,
    pub order_rows: usize,
    pub orders_with_events: usize,
    pub events: usize,
    /// Rows whose events are missing, doubled, or were applied out of
    /// order.
    pub wrong: usize,
    /// Orders whose view is not their row's state (a failed order's not
    /// FAILED), once the events are all applied.
    pub views_wrong: usize,
    /// Orders with events and no row, other than one `failed`.
    pub without_row: usize,
    pub failed_orders: usize,
    pub examples: Vec<String>,
    pub passed: bool,
}

impl EventsAudit {
    /// `rows`: order id -> status; `seen`: order id -> its event types in
    /// the order they were applied.
    pub fn judge(vouchers: &[u64], rows: &BTreeMap<i64, u8>, seen: &BTreeMap<i64, Vec<String>>) -> Self {
        let mut audit = EventsAudit {
            vouchers: vouchers.to_vec(),
            order_rows: rows.len(),
            orders_with_events: seen.len(),
            events: seen.values().map(Vec::len).sum(),
            ..Default::default()
        };
        let none = Vec::new();
        for (order, status) in rows {
            let got = seen.get(order).unwrap_or(&none);
            if !matches(*status, got) {
                audit.wrong += 1;
                if audit.examples.len() < EXAMPLES {
                    audit.examples.push(format!("order {order} (status {status}): events {got:?}"));
                }
            }
        }
        for (order, got) in seen.iter().filter(|(order, _)| !rows.contains_key(order)) {
            if got.len() == 1 && got[0] == "failed" {
                audit.failed_orders += 1;
            } else {
                audit.without_row += 1;
                if audit.examples.len() < EXAMPLES {
                    audit.examples.push(format!("order {order} has no row: events {got:?}"));
                }
            }
        }
        audit.passed = audit.wrong == 0 && audit.without_row == 0;
        audit
    }

    /// Also holds each order's view (order id -> state) against its row's
    /// state, and a failed order's against FAILED.
    pub fn with_views(
        mut self,
        rows: &BTreeMap<i64, u8>,
        seen: &BTreeMap<i64, Vec<String>>,
        views: &BTreeMap<i64, String>,
    ) -> Self {
        let failed =
            seen.iter().filter(|(order, got)| !rows.contains_key(order) && got.len() == 1 && got[0] == "failed");
        let wanted = rows
            .iter()
            .map(|(order, status)| (*order, state_of(*status)))
            .chain(failed.map(|(order, _)| (*order, Some("FAILED"))));
        for (order, want) in wanted {
            let view = views.get(&order).map(String::as_str);
            if want.is_none() || view != want {
                self.views_wrong += 1;
                if self.examples.len() < EXAMPLES {
                    self.examples.push(format!("order {order}: view {view:?}, its row's state {want:?}"));
                }
            }
        }
        self.passed &= self.views_wrong == 0;
        self
    }

    pub async fn run(orders_db: &MySqlPool, downstream: &MySqlPool, vouchers: &[u64]) -> sqlx::Result<Self> {
        let mut rows = BTreeMap::new();
        for voucher in vouchers {
            let found: Vec<(i64, u8)> = sqlx::query_as("SELECT id, status FROM tb_voucher_order WHERE voucher_id = ?")
                .bind(voucher)
                .fetch_all(orders_db)
                .await?;
            rows.extend(found);
        }
        let seen = inbox::events_of(downstream, vouchers).await?;
        let views = inbox::views_of(downstream, vouchers).await?;
        Ok(Self::judge(vouchers, &rows, &seen).with_views(&rows, &seen, &views))
    }

    pub fn render(&self) -> String {
        let mut text = format!(
            "Order events at the consumer, vouchers {:?}\n  order rows {}, with events {}, events {}\n  rows with wrong events {}\n  orders with events and no row {} (and {} failed, as they should)\n  orders whose view is not their row's state {}\n",
            self.vouchers,
            self.order_rows,
            self.orders_with_events,
            self.events,
            self.wrong,
            self.without_row,
            self.failed_orders,
            self.views_wrong
        );
        for example in &self.examples {
            text.push_str(&format!("    {example}\n"));
        }
        text.push_str(&format!("  result {}\n", if self.passed { "PASS" } else { "FAIL" }));
        text
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::EventsAudit;

    fn seen(list: &[(i64, &[&str])]) -> BTreeMap<i64, Vec<String>> {
        list.iter().map(|(id, kinds)| (*id, kinds.iter().map(|k| (*k).to_owned()).collect())).collect()
    }

    #[test]
    fn each_row_must_have_its_lifes_events_once_in_order() {
        let rows = BTreeMap::from([(1, 1u8), (2, 3), (3, 4), (4, 6)]);
        let good = seen(&[
            (1, &["created"]),
            (2, &["created", "paid", "used"]),
            (3, &["created", "expired"]),
            (4, &["created", "paid", "refunded"]),
            (9, &["failed"]),
        ]);
        let audit = EventsAudit::judge(&[7], &rows, &good);
        assert!(audit.passed, "{}", audit.render());
        assert_eq!(audit.failed_orders, 1);

        let with = |order: i64, kinds: Option<&[&str]>| {
            let mut all = good.clone();
            match kinds {
                Some(kinds) => all.insert(order, kinds.iter().map(|k| (*k).to_owned()).collect()),
                None => all.remove(&order),
            };
            all
        };
        for bad in [
            with(1, None),
            with(1, Some(&["created", "created"])),
            with(2, Some(&["created", "used", "paid"])),
            with(5, Some(&["created"])),
            with(9, Some(&["failed", "failed"])),
        ] {
            assert!(!EventsAudit::judge(&[7], &rows, &bad).passed, "{bad:?}");
        }
    }
}
