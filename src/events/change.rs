//! What an event says happened to an order.

/// A change in an order's life: an event's type. An order makes each at
/// most once, so (order, change) names an event for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Created,
    Paid,
    Used,
    Cancelled,
    /// Cancelled by the unpaid timeout.
    Expired,
    Refunded,
    /// Accepted in the asynchronous mode and never persisted: its unit is
    /// back.
    Failed,
}

impl Change {
    /// The event's type, and its subject's last token (`orders.<type>`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Paid => "paid",
            Self::Used => "used",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
            Self::Refunded => "refunded",
            Self::Failed => "failed",
        }
    }

    /// `tb_voucher_order.status` after the change; `None` for an order
    /// that has no row.
    pub(crate) fn status(self) -> Option<u8> {
        match self {
            Self::Created => Some(1),
            Self::Paid => Some(2),
            Self::Used => Some(3),
            Self::Cancelled | Self::Expired => Some(4),
            Self::Refunded => Some(6),
            Self::Failed => None,
        }
    }

    /// The order's state after the change, as the order views name it.
    pub(crate) fn state(self) -> &'static str {
        match self {
            Self::Created => "UNPAID",
            Self::Paid => "PAID",
            Self::Used => "USED",
            Self::Cancelled | Self::Expired => "CANCELLED",
            Self::Refunded => "REFUNDED",
            Self::Failed => "FAILED",
        }
    }
}

/// An order whose row was just inserted, as its `created` event names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderCreated {
    pub(crate) voucher_id: u64,
    pub(crate) order_id: i64,
    pub(crate) user_id: u64,
}
