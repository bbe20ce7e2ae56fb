//! The order after the sale: payment, cancellation, refund, the shop's
//! redemption, and the unpaid timeout that gives the unit back.
//!
//! MariaDB decides every transition with a conditional update on the order's
//! status, so of two that race (a late payment and the timeout, a cancel
//! and a payment) exactly one wins and the other is told what happened.
//! A unit comes back into `tb_seckill_voucher.stock` in the transaction
//! that ends the order, under the voucher's row lock (taken first, as every
//! order transaction does), and the mode learns it under that same lock:
//! in the asynchronous mode Redis's stock is set from the row and the
//! buyer's slot freed, which is idempotent, so doing it twice returns
//! nothing twice.

use std::{sync::Arc, time::Duration};

use chrono::TimeDelta;
use sqlx::MySqlPool;
use tokio_util::sync::CancellationToken;

use crate::events::{Change, Outbox};

use super::{
    error::{SeckillError, SeckillResult},
    mode::Mode,
    model::{OrderState, OrderView, status},
    order, store,
};

/// How often each instance looks for unpaid orders past their deadline.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Vouchers, and orders of one voucher, handled per sweep at most.
const SWEEP_VOUCHERS: u32 = 100;
const SWEEP_ORDERS: u32 = 500;

/// A sub-state of its own (`State<Arc<AfterSale>>`): the order routes
/// call it straight, not through the `Seckill`.
pub(crate) struct AfterSale {
    pub(super) db: MySqlPool,
    pub(super) pay_timeout_s: u64,
    /// Where each transition writes its event, in its own transaction.
    pub(super) outbox: Outbox,
    /// Told of every unit returned, and given each round.
    pub(super) mode: Arc<Mode>,
}

impl AfterSale {
    pub(super) fn pay_timeout(&self) -> TimeDelta {
        TimeDelta::seconds(self.pay_timeout_s as i64)
    }

    /// The seam a payment provider's confirmed callback would call: there is
    /// no provider, so paying is this state change. Idempotent on the order
    /// id: the same payment again answers the paid order.
    pub(crate) async fn confirm_payment(
        &self,
        order_id: i64,
        owner: Option<u64>,
        pay_type: u8,
    ) -> SeckillResult<OrderView> {
        let mut order = self.order(order_id, owner).await?;
        if order.status == Some(status::UNPAID) {
            let mut tx = self.db.begin().await?;
            let paid = store::confirm_payment(&mut *tx, order_id, pay_type, self.pay_timeout_s).await?;
            if paid {
                self.outbox.changed(&mut tx, Change::Paid, &[order_id]).await?;
            }
            tx.commit().await?;
            // Paid now, or what beat the payment to it (the timeout).
            order = self.order(order_id, owner).await?;
            if paid {
                transition("paid");
                return Ok(order);
            }
        }
        match order.status.unwrap_or_default() {
            status::PAID if order.pay_type == Some(pay_type) => Ok(order),
            status::PAID => Err(SeckillError::OrderState("the order is already paid, with another pay type")),
            status::UNPAID => Err(SeckillError::OrderExpired),
            status::CANCELLED if self.expired(&order) => Err(SeckillError::OrderExpired),
            status::CANCELLED => Err(SeckillError::OrderState("the order was cancelled")),
            _ => Err(SeckillError::OrderState("only an unpaid order can be paid")),
        }
    }

    /// The owner cancels an unpaid order; its unit goes back. Cancelling a
    /// cancelled order answers it again.
    pub(crate) async fn cancel(&self, order_id: i64, owner: u64) -> SeckillResult<OrderView> {
        self.end(
            order_id,
            owner,
            status::UNPAID,
            status::CANCELLED,
            "only an unpaid order can be cancelled (a paid one is refunded)",
        )
        .await
    }

    /// The owner gets a paid, unused order refunded at once (there is no
    /// provider to wait for); its unit goes back.
    pub(crate) async fn refund(&self, order_id: i64, owner: u64) -> SeckillResult<OrderView> {
        self.end(order_id, owner, status::PAID, status::REFUNDED, "only a paid, unused order can be refunded").await
    }

    /// The shop redeems a paid order. Redeeming it again answers it again.
    pub(crate) async fn redeem(&self, order_id: i64) -> SeckillResult<OrderView> {
        let mut tx = self.db.begin().await?;
        let used = store::redeem(&mut *tx, order_id).await?;
        if used {
            self.outbox.changed(&mut tx, Change::Used, &[order_id]).await?;
        }
        tx.commit().await?;
        let order = self.order(order_id, None).await?;
        if used {
            transition("used");
            return Ok(order);
        }
        match order.status.unwrap_or_default() {
            status::USED => Ok(order),
            _ => Err(SeckillError::OrderState("only a paid order can be used")),
        }
    }

    async fn end(
        &self,
        order_id: i64,
        owner: u64,
        from: u8,
        to: u8,
        refusal: &'static str,
    ) -> SeckillResult<OrderView> {
        let order = self.order(order_id, Some(owner)).await?;
        let mut tx = self.db.begin().await?;
        let stock = store::lock_stock(&mut *tx, order.voucher_id).await?;
        let ended = store::end_order(&mut *tx, order_id, from, to).await?;
        if ended {
            let change = if to == status::REFUNDED { Change::Refunded } else { Change::Cancelled };
            self.outbox.changed(&mut tx, change, &[order_id]).await?;
            store::give_back(&mut *tx, order.voucher_id, 1).await?;
            let db_stock = i64::from(stock.unwrap_or_default()) + 1;
            self.mode.units_returned(&mut tx, order.voucher_id, db_stock, &[owner]).await;
        }
        tx.commit().await?;
        let order = self.order(order_id, Some(owner)).await?;
        if !ended {
            return match order.status {
                Some(now) if now == to => Ok(order),
                // The timeout cancelled it first: cancelled all the same.
                Some(status::CANCELLED) if to == status::CANCELLED => Ok(order),
                _ => Err(SeckillError::OrderState(refusal)),
            };
        }
        transition(status::name(to).unwrap_or("ended"));
        metrics::counter!("hmdp_units_returned_total").increment(1);
        Ok(order)
    }

    /// The order with its row, for its owner (`None`: anyone's); an order
    /// still pending in Redis cannot change state yet. For an owner the row
    /// is looked up by id and owner in one query, so another user's order
    /// and an order that does not exist take the same path, and the same
    /// time: an id's existence cannot be told by timing.
    async fn order(&self, order_id: i64, owner: Option<u64>) -> SeckillResult<OrderView> {
        let Some(user) = owner else {
            let row = store::order_by_id(&self.db, order_id).await?;
            return row.map(|order| order.with_terms(self.pay_timeout())).ok_or(SeckillError::NoSuchOrder);
        };
        if let Some(order) = store::owned_order(&self.db, order_id, user).await? {
            return Ok(order.with_terms(self.pay_timeout()));
        }
        // Pending in Redis (an asynchronous order not persisted yet).
        let rows = order::Rows { primary: &self.db, replica: None };
        match self.mode.find_owned(rows, order_id, user).await? {
            Some(view) if view.state == OrderState::Pending => {
                Err(SeckillError::OrderState("the order is still being recorded: try again in a moment"))
            }
            Some(view) if view.state == OrderState::Failed => {
                Err(SeckillError::OrderState("the order could not be recorded"))
            }
            // Persisted between the two looks.
            Some(view) => Ok(view.with_terms(self.pay_timeout())),
            None => Err(SeckillError::NoSuchOrder),
        }
    }

    fn expired(&self, order: &OrderView) -> bool {
        order.create_time + self.pay_timeout() <= chrono::Utc::now().naive_utc()
    }

    /// One sweep: every unpaid order past its deadline is cancelled and its
    /// unit returned, voucher by voucher under the voucher's row lock (two
    /// instances sweeping take turns; the second finds nothing left).
    /// Returns the orders cancelled.
    pub(super) async fn sweep(&self) -> SeckillResult<u64> {
        let mut cancelled = 0;
        for voucher in store::vouchers_with_expired_orders(&self.db, self.pay_timeout_s, SWEEP_VOUCHERS).await? {
            let mut tx = self.db.begin().await?;
            let Some(stock) = store::lock_stock(&mut *tx, voucher).await? else {
                continue;
            };
            let expired = store::lock_expired_orders(&mut *tx, voucher, self.pay_timeout_s, SWEEP_ORDERS).await?;
            let ids: Vec<i64> = expired.iter().map(|(id, _, _)| *id).collect();
            let n = store::cancel_unpaid(&mut *tx, &ids).await?;
            self.outbox.changed(&mut tx, Change::Expired, &ids).await?;
            store::give_back(&mut *tx, voucher, n).await?;
            if n > 0 {
                let users: Vec<u64> = expired.iter().map(|(_, user, _)| *user).collect();
                let db_stock = i64::from(stock) + n as i64;
                self.mode.units_returned(&mut tx, voucher, db_stock, &users).await;
            }
            tx.commit().await?;
            if n == 0 {
                continue;
            }
            let now = chrono::Utc::now().naive_utc();
            for (_, _, created) in &expired {
                let lag = (now - (*created + self.pay_timeout())).num_milliseconds().max(0) as f64 / 1000.0;
                metrics::histogram!("hmdp_order_expiry_lag_seconds").record(lag);
            }
            metrics::counter!("hmdp_order_transitions_total", "to" => "CANCELLED", "by" => "timeout").increment(n);
            metrics::counter!("hmdp_units_returned_total").increment(n);
            tracing::info!(voucher, cancelled = n, "unpaid orders past their deadline cancelled; units returned");
            cancelled += n;
        }
        Ok(cancelled)
    }

    /// Sweeps every `SWEEP_EVERY` until `stop`. Every instance runs one;
    /// MariaDB keeps them from cancelling an order twice. Each round the
    /// mode settles too: units another instance returned sell here within a
    /// round, and what Redis missed is told again.
    pub(super) async fn run_sweeper(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(SWEEP_EVERY) => {}
            }
            if let Err(err) = self.sweep().await {
                tracing::warn!(error = %err, "the unpaid-order sweep failed; again in a moment");
            }
            self.mode.settle().await;
        }
    }
}

fn transition(to: &'static str) {
    metrics::counter!("hmdp_order_transitions_total", "to" => to, "by" => "request").increment(1);
}
