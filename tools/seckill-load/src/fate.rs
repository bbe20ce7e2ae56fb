//! What became of the orders answered 202 ("accepted, not yet on a Redis
//! replica"), asked as their buyers would ask: `GET /voucher-order/{id}`
//! with each buyer's own token, once the sale has drained. The service
//! promises that each ends with its row (`CONFIRMED`) or `FAILED` with its
//! unit given back; an order its own buyer is told does not exist (404)
//! has vanished, and the goal is none. A buyer whose answer settled
//! nothing (no answer, 502, 503, 504) finds out from their order list
//! (`GET /voucher-order/mine`) whether the order exists: the list must say
//! what the rows say.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
    time::Duration,
};

use futures::{StreamExt, stream};
use serde::Serialize;
use serde_json::Value;

use crate::{audit::Fate, users::tokens_from_file};

/// Lookups in flight at once.
const LOOKUPS_AT_ONCE: usize = 32;
/// A lookup refused for the moment (429, 5xx, no answer) is asked again
/// this many times, a little later each time.
const LOOKUP_TRIES: u32 = 5;

/// The 202 orders by the state their buyer was told.
#[derive(Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fates {
    pub asked: u64,
    pub confirmed: u64,
    pub failed: u64,
    /// Still waiting for MariaDB when asked.
    pub pending: u64,
    /// 404: no such order, told to its own buyer.
    pub vanished: u64,
    /// The lookup never got an answer in the contract.
    pub unanswered: u64,
    /// Each order told `CONFIRMED` or `FAILED`, by id: the checker holds
    /// the first to its buyer's row and the second to no row at all.
    #[serde(skip)]
    pub by_order: HashMap<i64, Fate>,
}

impl Fates {
    /// What a drained sale's 202 orders must not be: vanished, still
    /// pending, or unknown.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.vanished > 0 {
            problems.push(format!("{} orders answered 202 vanished (404 to their buyer)", self.vanished));
        }
        if self.pending > 0 {
            problems.push(format!("{} orders answered 202 still PENDING after the drain", self.pending));
        }
        if self.unanswered > 0 {
            problems.push(format!("{} lookups of orders answered 202 got no answer", self.unanswered));
        }
        problems
    }
}

/// The buyers whose answer settled nothing, by what their order list says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolutions {
    pub asked: u64,
    /// The list shows an order of the sale's voucher.
    pub holding: u64,
    pub not_holding: u64,
    /// The list and the rows disagree (or the list never answered).
    pub told_wrong: u64,
}

impl Resolutions {
    /// Another voucher's resolutions added to these.
    pub fn add(&mut self, other: &Resolutions) {
        self.asked += other.asked;
        self.holding += other.holding;
        self.not_holding += other.not_holding;
        self.told_wrong += other.told_wrong;
    }

    pub fn problems(&self) -> Vec<String> {
        if self.told_wrong == 0 {
            return Vec::new();
        }
        vec![format!("{} buyers whose answer settled nothing were told wrong by their order list", self.told_wrong)]
    }
}

/// A request as the checks here need it: the user's place in the run
/// (its line of the tokens file), its id when known, and the order id
/// its answer named.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    pub user: usize,
    pub user_id: Option<u64>,
    pub order_id: Option<i64>,
}

/// Each user whose answer settled nothing (`unsettled`) asks their order
/// list; `holders` are the users MariaDB holds a live order of the voucher
/// of.
pub async fn resolve(
    base_url: &str,
    tokens: &Path,
    unsettled: &[Asked],
    voucher: u64,
    holders: &HashSet<u64>,
) -> anyhow::Result<Resolutions> {
    let users = tokens_from_file(tokens)?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let unsettled: Vec<(Option<u64>, Option<&str>)> =
        unsettled.iter().map(|a| (a.user_id, users.get(a.user).map(|u| u.token.as_str()))).collect();
    let told: Vec<(Option<u64>, Option<bool>)> = stream::iter(unsettled)
        .map(|(user_id, token)| {
            let client = &client;
            async move {
                let Some(token) = token else { return (user_id, None) };
                (user_id, holds(client, base_url, token, voucher).await)
            }
        })
        .buffer_unordered(LOOKUPS_AT_ONCE)
        .collect()
        .await;
    let mut resolutions = Resolutions::default();
    for (user_id, holding) in told {
        resolutions.asked += 1;
        let truth = user_id.map(|u| holders.contains(&u));
        match holding {
            Some(true) => resolutions.holding += 1,
            Some(false) => resolutions.not_holding += 1,
            None => {}
        }
        if holding.is_none() || truth.is_none() || holding != truth {
            resolutions.told_wrong += 1;
        }
    }
    Ok(resolutions)
}

/// Whether the user's order list shows a live order of `voucher` (its
/// first page of 100: a sale's buyer holds one).
async fn holds(client: &reqwest::Client, base_url: &str, token: &str, voucher: u64) -> Option<bool> {
    let url = format!("{base_url}/voucher-order/mine?page=1&pageSize=100");
    asked_until_answered(client, &url, token, |status, body| {
        let list = body["data"].as_array().filter(|_| status == 200)?;
        Some(list.iter().any(|o| {
            o["voucherId"].as_u64() == Some(voucher)
                && !matches!(o["statusName"].as_str(), Some("CANCELLED" | "REFUNDED"))
        }))
    })
    .await
}

/// `GET url` as the buyer `token`, asked again (a little later each time,
/// `LOOKUP_TRIES` in all) until `read` takes the answer (status, body).
async fn asked_until_answered<T>(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    read: impl Fn(u16, &Value) -> Option<T>,
) -> Option<T> {
    for attempt in 1..=LOOKUP_TRIES {
        if let Ok(answer) = client.get(url).header("authorization", token).send().await {
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            if let Some(read) = read(status, &body) {
                return Some(read);
            }
        }
        tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
    }
    None
}

enum State {
    Confirmed,
    Failed,
    Pending,
    Vanished,
    Unanswered,
}

/// Each order answered 202 (`accepted`), asked at `base_url` with its
/// buyer's token.
pub async fn ask(base_url: &str, tokens: &Path, accepted: &[Asked]) -> anyhow::Result<Fates> {
    let users = tokens_from_file(tokens)?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let mut fates = Fates::default();
    let mut orders = Vec::new();
    for e in accepted {
        fates.asked += 1;
        match (e.order_id, users.get(e.user)) {
            (Some(id), Some(user)) => orders.push((id, user.token.as_str())),
            _ => fates.unanswered += 1,
        }
    }
    let states: Vec<(i64, State)> = stream::iter(orders)
        .map(|(id, token)| {
            let client = &client;
            async move { (id, state_of(client, base_url, id, token).await) }
        })
        .buffer_unordered(LOOKUPS_AT_ONCE)
        .collect()
        .await;
    for (id, state) in states {
        match state {
            State::Confirmed => fates.by_order.insert(id, Fate::Confirmed),
            State::Failed => fates.by_order.insert(id, Fate::Failed),
            _ => None,
        };
        *match state {
            State::Confirmed => &mut fates.confirmed,
            State::Failed => &mut fates.failed,
            State::Pending => &mut fates.pending,
            State::Vanished => &mut fates.vanished,
            State::Unanswered => &mut fates.unanswered,
        } += 1;
    }
    Ok(fates)
}

async fn state_of(client: &reqwest::Client, base_url: &str, id: i64, token: &str) -> State {
    let url = format!("{base_url}/voucher-order/{id}");
    asked_until_answered(client, &url, token, |status, body| match (status, body["data"]["state"].as_str()) {
        (200, Some("CONFIRMED")) => Some(State::Confirmed),
        (200, Some("FAILED")) => Some(State::Failed),
        (200, Some("PENDING")) => Some(State::Pending),
        (404, _) => Some(State::Vanished),
        _ => None,
    })
    .await
    .unwrap_or(State::Unanswered)
}
