//! The history on disk: a first line `{"sale": Header}`, then one `Entry`
//! a line, sorted by the time each request was sent. A sale of several
//! vouchers lists them all in its header and names each entry's; a history
//! written before there could be several (no `vouchers`, no entry's
//! `voucherId`) reads as the sale of its one voucher.

use std::{
    io::{BufRead, Write},
    path::Path,
};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::report::Outcome;

/// The sale the requests were sent to, as it stood before the first: its
/// first voucher at the top (as a history of one voucher always had it),
/// and every voucher in `vouchers`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub voucher_id: u64,
    pub stock_before: i64,
    pub orders_before: i64,
    /// Users who came to buy (bots aside).
    pub buyers: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vouchers: Vec<VoucherBefore>,
}

/// One voucher of the sale before its first request.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VoucherBefore {
    pub voucher_id: u64,
    pub stock_before: i64,
    pub orders_before: i64,
}

impl Header {
    /// The header of a sale of `vouchers` (at least one), in their order.
    pub fn new(vouchers: &[VoucherBefore], buyers: u64) -> Self {
        let first = vouchers[0];
        Self {
            voucher_id: first.voucher_id,
            stock_before: first.stock_before,
            orders_before: first.orders_before,
            buyers,
            vouchers: vouchers.to_vec(),
        }
    }

    /// Every voucher of the sale; an old history's one.
    pub fn vouchers(&self) -> Vec<VoucherBefore> {
        match self.vouchers.as_slice() {
            [] => vec![VoucherBefore {
                voucher_id: self.voucher_id,
                stock_before: self.stock_before,
                orders_before: self.orders_before,
            }],
            all => all.to_vec(),
        }
    }
}

/// One request, by its last answer (a retrying client's attempts are one
/// request).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Unix time in ms: the first attempt sent, the last answered.
    pub sent_ms: u64,
    pub answered_ms: u64,
    /// The user's place in the run, and its id when known.
    pub user: usize,
    pub user_id: Option<u64>,
    /// The voucher ordered; absent in a history of one voucher written
    /// before there could be several (the header's, then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voucher_id: Option<u64>,
    /// None: no answer (the connection failed or was lost).
    pub status: Option<u16>,
    pub error_code: Option<String>,
    pub order_id: Option<i64>,
    pub outcome: Outcome,
    pub attempts: u32,
}

impl Entry {
    /// An answer that says nothing of the order: it may exist or not.
    pub(super) fn settled_nothing(&self) -> bool {
        matches!(self.status, None | Some(502..=504))
    }

    /// When its sale happened, as near as the buyer can tell: its answer,
    /// or, for an order it was told of on a retry (`DUPLICATE_ORDER`
    /// naming it: an earlier attempt placed it and its answer was lost),
    /// the first attempt's sending, not the retry's answer many seconds on.
    pub(super) fn sold_at_ms(&self) -> u64 {
        match (self.outcome, self.status) {
            (Outcome::Success, Some(409)) => self.sent_ms,
            _ => self.answered_ms,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct HeaderLine {
    sale: Header,
}

pub fn write(path: &Path, header: &Header, entries: &[Entry]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut out, &HeaderLine { sale: header.clone() })?;
    out.write_all(b"\n")?;
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by_key(|e| e.sent_ms);
    for entry in sorted {
        serde_json::to_writer(&mut out, entry)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

pub fn read(path: &Path) -> anyhow::Result<(Header, Vec<Entry>)> {
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let first = lines.next().context("the history is empty: not even its sale")??;
    let HeaderLine { sale } = serde_json::from_str(&first).context("the history's first line is not its sale")?;
    let vouchers: Vec<u64> = sale.vouchers().iter().map(|v| v.voucher_id).collect();
    let mut entries = Vec::new();
    for (n, line) in lines.enumerate() {
        let line = line?;
        let mut entry: Entry = serde_json::from_str(&line).with_context(|| format!("line {} of the history", n + 2))?;
        let voucher = *entry.voucher_id.get_or_insert(sale.voucher_id);
        anyhow::ensure!(
            vouchers.contains(&voucher),
            "line {} of the history: voucher {voucher} is none of the sale's {vouchers:?}",
            n + 2
        );
        entries.push(entry);
    }
    Ok((sale, entries))
}
