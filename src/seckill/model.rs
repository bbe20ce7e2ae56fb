//! The order as its owner sees it, in whichever state it is: `PENDING`
//! (accepted in Redis, not yet in MariaDB), `CONFIRMED` (its row), `FAILED`
//! (dead-lettered, stock given back).

use chrono::NaiveDateTime;
use serde::{Serialize, Serializer};

use crate::http::time;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum OrderState {
    Pending,
    #[default]
    Confirmed,
    Failed,
}

#[derive(Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrderView {
    #[serde(serialize_with = "as_string")]
    #[schema(value_type = String)]
    pub(crate) id: i64,
    pub(crate) user_id: u64,
    pub(crate) voucher_id: u64,
    /// A row is confirmed by being there.
    #[sqlx(skip)]
    pub(crate) state: OrderState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pay_type: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u8>,
    #[serde(serialize_with = "time::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) create_time: NaiveDateTime,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) pay_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) use_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) refund_time: Option<NaiveDateTime>,
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) update_time: Option<NaiveDateTime>,
    /// `status` by name: UNPAID, PAID, USED, CANCELLED, REFUNDING, REFUNDED.
    #[sqlx(skip)]
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub(crate) status_name: Option<&'static str>,
    /// An unpaid order's: creation + `ORDER_PAY_TIMEOUT_S`; unpaid after it,
    /// the order is cancelled and its unit returned.
    #[sqlx(skip)]
    #[serde(serialize_with = "time::serialize_opt", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) pay_deadline: Option<NaiveDateTime>,
}

/// The course's order statuses.
pub(crate) mod status {
    pub(crate) const UNPAID: u8 = 1;
    pub(crate) const PAID: u8 = 2;
    pub(crate) const USED: u8 = 3;
    pub(crate) const CANCELLED: u8 = 4;
    pub(crate) const REFUNDING: u8 = 5;
    pub(crate) const REFUNDED: u8 = 6;

    pub(crate) fn name(status: u8) -> Option<&'static str> {
        Some(match status {
            UNPAID => "UNPAID",
            PAID => "PAID",
            USED => "USED",
            CANCELLED => "CANCELLED",
            REFUNDING => "REFUNDING",
            REFUNDED => "REFUNDED",
            _ => return None,
        })
    }
}

impl OrderView {
    /// Fills what the row does not hold: the status's name and, while the
    /// order is unpaid (a pending order is too), its payment deadline.
    pub(crate) fn with_terms(mut self, pay_timeout: chrono::TimeDelta) -> Self {
        if self.state == OrderState::Pending && self.status.is_none() {
            self.status = Some(status::UNPAID);
        }
        self.status_name = self.status.and_then(status::name);
        self.pay_deadline = (self.status == Some(status::UNPAID)).then(|| self.create_time + pay_timeout);
        self
    }
}

fn as_string<S: Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&id.to_string())
}

/// An order the service accepted. `replicated` is false only in the
/// asynchronous mode, when the replicas did not acknowledge it within the
/// bound: it is accepted, but a master that dies now would take it along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedOrder {
    pub(crate) id: i64,
    pub(crate) replicated: bool,
}

impl PlacedOrder {
    /// Its row is committed in MariaDB: nothing in Redis can lose it.
    pub(crate) fn committed(id: i64) -> Self {
        Self { id, replicated: true }
    }
}

/// What the admin's stock route did: `stock` units for sale from now on,
/// besides the orders already accepted and not yet in MariaDB
/// (asynchronous mode), which keep theirs.
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StockSet {
    pub(crate) stock: i32,
    /// The units that were for sale just before: `stock - previous` is
    /// what the change added (a load tool's audit needs it).
    pub(crate) previous: i64,
    pub(crate) awaiting_persistence: u64,
}

/// A guarded voucher's sale path, checked and about to be spent: the order
/// it comes with spends it in the order script or transaction that places
/// the order, so a path places one order at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathUse {
    pub(crate) id: u64,
    /// When the path expires, epoch ms: its use is kept until then.
    pub(crate) expires_ms: i64,
}

impl PathUse {
    /// How long its use must still be kept, from `now_ms`: to its expiry,
    /// and a second more for clocks apart.
    pub(crate) fn keep_ms(&self, now_ms: i64) -> i64 {
        (self.expires_ms - now_ms).max(0) + 1_000
    }
}
