//! What the workers of one sale saw: each answer (by user and voucher),
//! its timings, the unexpected ones by what they were, and the history.

use std::{collections::BTreeMap, time::Instant};

use crate::{
    history,
    report::{Outcome, Recorder},
};

/// An answer as the report counts it: the outcome, the order id when
/// there is one, and what an unexpected answer was.
pub(crate) type Answer = (Outcome, Option<i64>, Option<String>);

/// What the workers saw, merged.
pub(crate) struct Tally {
    pub(crate) recorder: Recorder,
    /// Each request's user, outcome and order id.
    pub(crate) answers: Vec<(usize, Outcome, Option<i64>)>,
    /// Unexpected answers, by what they were.
    pub(crate) others: BTreeMap<String, u64>,
    /// The same, by the place of the voucher ordered.
    pub(crate) others_by_voucher: BTreeMap<usize, BTreeMap<String, u64>>,
    pub(crate) succeeded_at: Vec<Instant>,
    pub(crate) sold_out_at: Vec<Instant>,
    /// When the last order that won a unit was sent.
    pub(crate) last_sale_sent: Option<Instant>,
    /// Every order sent, as `--history` writes it.
    pub(crate) history: Vec<history::Entry>,
}

impl Tally {
    pub(super) fn new() -> Self {
        Self {
            recorder: Recorder::new(),
            answers: Vec::new(),
            others: BTreeMap::new(),
            others_by_voucher: BTreeMap::new(),
            succeeded_at: Vec::new(),
            sold_out_at: Vec::new(),
            last_sale_sent: None,
            history: Vec::new(),
        }
    }

    pub(super) fn record(
        &mut self,
        (user, voucher): (usize, usize),
        (outcome, order_id, other): Answer,
        sent: Instant,
        answered: Instant,
    ) {
        self.recorder.record(outcome, sent, answered);
        match outcome {
            Outcome::Success | Outcome::Unreplicated => {
                self.succeeded_at.push(answered);
                self.last_sale_sent = self.last_sale_sent.max(Some(sent));
            }
            Outcome::SoldOut => self.sold_out_at.push(answered),
            _ => {}
        }
        if let Some(what) = other {
            *self.others_by_voucher.entry(voucher).or_default().entry(what.clone()).or_default() += 1;
            *self.others.entry(what).or_default() += 1;
        }
        self.answers.push((user, outcome, order_id));
    }

    /// A buyer turned away on the path route: counted, but no order was
    /// sent, so it is no sold-out answer to weigh against the last sale.
    pub(super) fn refused_on_path(&mut self, user: usize, (outcome, _, other): Answer) {
        let now = Instant::now();
        self.recorder.record(outcome, now, now);
        if let Some(what) = other {
            *self.others_by_voucher.entry(0).or_default().entry(what.clone()).or_default() += 1;
            *self.others.entry(what).or_default() += 1;
        }
        self.answers.push((user, outcome, None));
    }

    pub(super) fn merge(&mut self, part: Tally) {
        self.recorder.merge(part.recorder);
        self.answers.extend(part.answers);
        self.succeeded_at.extend(part.succeeded_at);
        self.sold_out_at.extend(part.sold_out_at);
        self.history.extend(part.history);
        self.last_sale_sent = self.last_sale_sent.max(part.last_sale_sent);
        for (what, n) in part.others {
            *self.others.entry(what).or_default() += n;
        }
        for (voucher, others) in part.others_by_voucher {
            let mine = self.others_by_voucher.entry(voucher).or_default();
            for (what, n) in others {
                *mine.entry(what).or_default() += n;
            }
        }
    }
}
