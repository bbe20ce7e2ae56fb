//! End to end through nginx and two instances: the stack `scripts/stack up`
//! runs. These tests need that stack, so plain `cargo test` skips them;
//! `scripts/test` brings the stack up and runs them with `--ignored`,
//! passing its address and secrets in the environment (HMDP_BASE_URL,
//! JWT_SECRET, ADMIN_KEY, DATABASE_URL, REDIS_URL, HMDP_STACK_DIR).

use std::{collections::BTreeSet, time::Duration};

use hmdp::{
    auth::{SessionStore, TokenKeys, seed_users},
    startup::{connect_database, connect_redis},
    state::Keys,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::MySqlPool;

struct Stack {
    base: String,
    client: reqwest::Client,
    db: MySqlPool,
    sessions: SessionStore,
    tokens: TokenKeys,
    admin_key: String,
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set (run through scripts/test)"))
}

impl Stack {
    async fn connect() -> Self {
        let redis = connect_redis(&env("REDIS_URL")).await.unwrap();
        Self {
            base: env("HMDP_BASE_URL"),
            client: reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap(),
            db: connect_database(&env("DATABASE_URL"), 8).await.unwrap(),
            sessions: SessionStore::from_parts(redis, Keys::new("")),
            tokens: TokenKeys::new(env("JWT_SECRET").as_bytes()),
            admin_key: env("ADMIN_KEY"),
        }
    }

    /// Logged-in users, made the way `hmdp seed-users` makes them.
    async fn users(&self, first_phone: u64, count: u64) -> Vec<String> {
        seed_users(&self.db, &self.sessions, &self.tokens, first_phone, count)
            .await
            .unwrap()
            .into_iter()
            .map(|u| u.token)
            .collect()
    }

    async fn open_seckill(&self, stock: i64) -> u64 {
        let now = chrono::Utc::now();
        let body = json!({
            "shopId": 1, "title": "e2e", "payValue": 100, "actualValue": 200, "type": 1, "stock": stock,
            "beginTime": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endTime": (now + chrono::Duration::hours(1)).to_rfc3339(),
        });
        let resp = self
            .client
            .post(format!("{}/voucher/seckill", self.base))
            .header("x-admin-key", &self.admin_key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        resp.json::<Value>().await.unwrap()["data"].as_u64().unwrap()
    }

    /// (errorCode or "OK", instance) of each order.
    async fn order_all(&self, voucher: u64, tokens: &[String]) -> Vec<(String, String)> {
        let requests = tokens.iter().map(|token| async move {
            let resp = self
                .client
                .post(format!("{}/voucher-order/seckill/{voucher}", self.base))
                .header("authorization", token)
                .send()
                .await
                .unwrap();
            let instance = resp.headers().get("x-instance").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
            let body: Value = resp.json().await.unwrap();
            let outcome = if body["success"] == true { "OK".to_owned() } else { body["errorCode"].as_str().unwrap().to_owned() };
            (outcome, instance)
        });
        futures::future::join_all(requests).await
    }

    async fn audit(&self, voucher: u64) -> (i64, i64, i32) {
        let (orders, users): (i64, i64) =
            sqlx::query_as("SELECT COUNT(*), COUNT(DISTINCT user_id) FROM tb_voucher_order WHERE voucher_id = ?")
                .bind(voucher)
                .fetch_one(&self.db)
                .await
                .unwrap();
        let stock: i32 = sqlx::query_scalar("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?")
            .bind(voucher)
            .fetch_one(&self.db)
            .await
            .unwrap();
        (orders, users, stock)
    }
}

fn count(outcomes: &[(String, String)], what: &str) -> usize {
    outcomes.iter().filter(|(o, _)| o == what).count()
}

fn instances(outcomes: &[(String, String)]) -> BTreeSet<String> {
    outcomes.iter().map(|(_, i)| i.clone()).collect()
}

#[tokio::test]
#[ignore = "needs the nginx stack; scripts/test runs it"]
async fn through_nginx_one_user_firing_forty_orders_at_both_instances_gets_one() {
    let stack = Stack::connect().await;
    let voucher = stack.open_seckill(100).await;
    let token = stack.users(13_700_000_000, 1).await.remove(0);
    let tokens = vec![token; 40];
    let outcomes = stack.order_all(voucher, &tokens).await;

    assert_eq!(instances(&outcomes), BTreeSet::from(["app1".to_owned(), "app2".to_owned()]), "both instances answered");
    assert_eq!(count(&outcomes, "OK"), 1, "{outcomes:?}");
    assert_eq!(count(&outcomes, "TOO_MANY_REQUESTS") + count(&outcomes, "DUPLICATE_ORDER"), 39, "{outcomes:?}");
    assert_eq!(stack.audit(voucher).await, (1, 1, 99));
}

#[tokio::test]
#[ignore = "needs the nginx stack; scripts/test runs it"]
async fn through_nginx_four_hundred_users_racing_for_a_hundred_and_fifty_get_exactly_that() {
    let stack = Stack::connect().await;
    let voucher = stack.open_seckill(150).await;
    let tokens = stack.users(13_710_000_000, 400).await;
    let outcomes = stack.order_all(voucher, &tokens).await;

    assert_eq!(instances(&outcomes).len(), 2, "both instances answered");
    assert_eq!(count(&outcomes, "OK"), 150, "{outcomes:?}");
    assert_eq!(count(&outcomes, "SOLD_OUT"), 250);
    assert_eq!(stack.audit(voucher).await, (150, 150, 0), "(orders, distinct users, stock)");
}

#[tokio::test]
#[ignore = "needs the nginx stack; scripts/test runs it"]
async fn with_one_instance_killed_nginx_keeps_serving_and_orders_stay_correct() {
    let stack = Stack::connect().await;
    let voucher = stack.open_seckill(20).await;
    let tokens = stack.users(13_720_000_000, 60).await;

    let pid_file = format!("{}/app2.pid", env("HMDP_STACK_DIR"));
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let killed = std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    assert!(killed.success());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let outcomes = stack.order_all(voucher, &tokens).await;
    assert_eq!(instances(&outcomes), BTreeSet::from(["app1".to_owned()]), "only the survivor answers");
    assert_eq!(count(&outcomes, "OK"), 20, "{outcomes:?}");
    assert_eq!(count(&outcomes, "SOLD_OUT"), 40, "{outcomes:?}");
    assert_eq!(stack.audit(voucher).await, (20, 20, 0));

    // Bring it back, as the stack was.
    let up = std::process::Command::new("bash").args(["scripts/stack", "up"]).output().unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    // nginx keeps a failed instance out for its fail_timeout (3 s); after
    // that both serve again.
    let mut seen = BTreeSet::new();
    for _ in 0..40 {
        let resp = stack.client.get(format!("{}/health", stack.base)).send().await.unwrap();
        seen.insert(resp.headers()["x-instance"].to_str().unwrap().to_owned());
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(seen.len(), 2, "app2 serves again: {seen:?}");
}
