//! One HTTP client of the service, for the in-process app and the nginx
//! stack alike: the same calls, the same outcome tallies.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Response, StatusCode};
use serde_json::Value;

/// Requests in flight at once from one `order_all`: a real race, within
/// the 1,024 file descriptors many machines give a process (client and
/// server share the test process).
const IN_FLIGHT: usize = 256;

#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    admin_key: String,
}

/// How one order request ended: "OK" or its errorCode, and which instance
/// answered (`X-Instance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub code: String,
    pub instance: String,
    /// The order id of a success.
    pub order_id: Option<String>,
}

impl Api {
    pub fn new(base: impl Into<String>, admin_key: impl Into<String>, idle_per_host: usize) -> Self {
        Self {
            base: base.into(),
            client: reqwest::Client::builder().pool_max_idle_per_host(idle_per_host).build().unwrap(),
            admin_key: admin_key.into(),
        }
    }

    /// A client that reaches the service through its unix socket
    /// (`PROXY_SOCKET`), as nginx does: its `X-Real-IP` is believed.
    pub fn through_socket(path: &std::path::Path, admin_key: impl Into<String>) -> Self {
        Self {
            base: "http://nginx".into(),
            client: reqwest::Client::builder().unix_socket(path).build().unwrap(),
            admin_key: admin_key.into(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Response {
        let mut req = self.client.get(self.url(path));
        if let Some(token) = token {
            req = req.header("authorization", token);
        }
        req.send().await.unwrap()
    }

    pub async fn post(&self, path: &str, token: Option<&str>) -> Response {
        let mut req = self.client.post(self.url(path));
        if let Some(token) = token {
            req = req.header("authorization", token);
        }
        req.send().await.unwrap()
    }

    pub async fn post_json(&self, path: &str, admin_key: Option<&str>, body: &Value) -> Response {
        let mut req = self.client.post(self.url(path)).json(body);
        if let Some(key) = admin_key {
            req = req.header("x-admin-key", key);
        }
        req.send().await.unwrap()
    }

    pub async fn put_json(&self, path: &str, admin_key: Option<&str>, body: &Value) -> Response {
        let mut req = self.client.put(self.url(path)).json(body);
        if let Some(key) = admin_key {
            req = req.header("x-admin-key", key);
        }
        req.send().await.unwrap()
    }

    /// The admin's stock route.
    pub async fn set_stock(&self, voucher_id: u64, stock: Value) -> Response {
        let path = format!("/voucher/seckill/{voucher_id}/stock");
        self.put_json(&path, Some(&self.admin_key.clone()), &serde_json::json!({ "stock": stock })).await
    }

    pub async fn send_code(&self, phone: &str) -> Response {
        self.post(&format!("/user/code?phone={phone}"), None).await
    }

    pub async fn post_login(&self, phone: &str, code: &str) -> Response {
        self.post_json("/user/login", None, &serde_json::json!({ "phone": phone, "code": code })).await
    }

    /// A seckill voucher whose window is open now, through the admin API.
    pub async fn open_seckill(&self, stock: i64) -> u64 {
        let now = chrono::Utc::now();
        self.create_seckill(stock, now - chrono::Duration::minutes(1), now + chrono::Duration::hours(1)).await
    }

    /// A seckill voucher open now whose stock is sold in `segments`.
    pub async fn open_seckill_in_segments(&self, stock: i64, segments: u8) -> u64 {
        let now = chrono::Utc::now();
        let (begin, end) = (now - chrono::Duration::minutes(1), now + chrono::Duration::hours(1));
        let mut body = seckill_body(stock, &begin.to_rfc3339(), &end.to_rfc3339());
        body["segments"] = serde_json::json!(segments);
        let created = expect_ok(self.post_json("/voucher/seckill", Some(&self.admin_key), &body).await).await;
        created["data"].as_u64().expect("voucher id")
    }

    pub async fn create_seckill(
        &self,
        stock: i64,
        begin: chrono::DateTime<chrono::Utc>,
        end: chrono::DateTime<chrono::Utc>,
    ) -> u64 {
        let body = seckill_body(stock, &begin.to_rfc3339(), &end.to_rfc3339());
        let created = expect_ok(self.post_json("/voucher/seckill", Some(&self.admin_key), &body).await).await;
        created["data"].as_u64().expect("voucher id")
    }

    pub async fn order(&self, voucher_id: u64, token: &str) -> Response {
        self.post(&format!("/voucher-order/seckill/{voucher_id}"), Some(token)).await
    }

    /// One order per token, up to `IN_FLIGHT` at once; outcomes in token
    /// order.
    pub async fn order_all<T: AsRef<str>>(&self, voucher_id: u64, tokens: &[T]) -> Vec<Outcome> {
        use futures::StreamExt;
        futures::stream::iter(tokens)
            .map(|token| async move { outcome(self.order(voucher_id, token.as_ref()).await).await })
            .buffered(IN_FLIGHT)
            .collect()
            .await
    }
}

/// Reads an order answer; a success must carry the order id as a string.
/// A 202 (accepted, no Redis replica has it yet) is "UNREPLICATED".
pub async fn outcome(resp: Response) -> Outcome {
    let status = resp.status();
    let instance = resp.headers().get("x-instance").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body: Value = resp.json().await.expect("JSON envelope");
    if body["success"] == true {
        assert!(status == StatusCode::OK || status == StatusCode::ACCEPTED, "{status}: {body}");
        assert!(body["data"].as_str().is_some_and(|id| id.parse::<i64>().is_ok()), "order id string: {body}");
        let code = if status == StatusCode::OK { "OK" } else { "UNREPLICATED" };
        Outcome { code: code.to_owned(), instance, order_id: body["data"].as_str().map(str::to_owned) }
    } else {
        Outcome { code: body["errorCode"].as_str().unwrap_or("?").to_owned(), instance, order_id: None }
    }
}

/// Outcomes by errorCode ("OK" for success).
pub fn tally(outcomes: &[Outcome]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for o in outcomes {
        *counts.entry(o.code.clone()).or_insert(0) += 1;
    }
    counts
}

pub fn instances(outcomes: &[Outcome]) -> BTreeSet<String> {
    outcomes.iter().map(|o| o.instance.clone()).collect()
}

/// Asserts a 200 with `success: true` and returns the body.
pub async fn expect_ok(resp: Response) -> Value {
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON body");
    assert_eq!(status, StatusCode::OK, "body: {body}");
    assert_eq!(body["success"], true, "body: {body}");
    body
}

/// Asserts the failure envelope with this status and errorCode.
pub async fn expect_error(resp: Response, status: StatusCode, code: &str) -> Value {
    let got = resp.status();
    let body: Value = resp.json().await.expect("JSON envelope body");
    assert_eq!(got, status, "body: {body}");
    assert_eq!(body["success"], false, "body: {body}");
    assert_eq!(body["errorCode"], code, "body: {body}");
    assert!(body["errorMsg"].as_str().is_some_and(|m| !m.is_empty()), "body: {body}");
    // Only a duplicate says something more: the id of the order held.
    match body.get("data") {
        None => {}
        Some(id) if code == "DUPLICATE_ORDER" => {
            assert!(id.as_str().is_some_and(|id| id.parse::<i64>().is_ok()), "order id string: {body}")
        }
        Some(_) => panic!("a failure with data: {body}"),
    }
    body
}

pub fn seckill_body(stock: i64, begin: &str, end: &str) -> Value {
    serde_json::json!({
        "shopId": 1,
        "title": "100 off 50",
        "subTitle": "weekdays only",
        "rules": "one per person",
        "payValue": 8000,
        "actualValue": 10000,
        "type": 1,
        "stock": stock,
        "beginTime": begin,
        "endTime": end,
    })
}
