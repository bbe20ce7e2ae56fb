//! The JMeter-style sale of several vouchers at once, black-box: the
//! service spawned in-process (its own database and key prefix), the load
//! tool's binary run against it (found from HMDP_BASE_URL, as `scripts/hosts
//! env` sets it) with `--vouchers` and `--history`, then
//! `check-history` on what it wrote.

use std::path::{Path, PathBuf};

use hmdp_test_support::{ADMIN_KEY, OrderPath, TestApp, on_every_path};
use serde_json::Value;

on_every_path!(a_sale_of_four_vouchers_is_audited_and_checked_voucher_by_voucher);

/// Files of one test, removed when it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("seckill-load-test-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the load tool against `app` (its database, Redis and key prefix);
/// returns its stdout, or panics with everything it said.
async fn load_tool(app: &TestApp, args: &[&str]) -> String {
    let config = &app.state.config;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill-load"));
    command
        .args(args)
        .env("DATABASE_URL", config.db.url.as_str())
        .env("REDIS_URL", &config.redis.url)
        .env("REDIS_KEY_PREFIX", &config.redis.key_prefix)
        .env("ADMIN_KEY", ADMIN_KEY)
        // The stack's address as `eval "$(scripts/hosts env)"` gives it: the
        // sale below names no --base-url.
        .env("HMDP_BASE_URL", app.url(""));
    match &config.redis.cluster_nodes {
        Some(nodes) => command.env("REDIS_CLUSTER_NODES", nodes),
        None => command.env_remove("REDIS_CLUSTER_NODES"),
    };
    let out = command.output().await.expect("the load tool runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "seckill-load {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// 30 buyers for 22 units over 4 vouchers (6, 6, 5 and 5 units; 8, 8, 7
/// and 7 buyers): each voucher sells out, each is audited alone, the
/// history names every voucher, and `check-history` finds each voucher's
/// ledger exact. A sale of one voucher on the same service still writes
/// and checks the history it always did.
async fn a_sale_of_four_vouchers_is_audited_and_checked_voucher_by_voucher(path: OrderPath) {
    let app = TestApp::spawn_on(path).await;
    let scratch = Scratch::new();
    let tokens = scratch.path("tokens.csv");
    let users = app.seed_users(30).await;
    let csv: String = users.iter().map(|(id, token)| format!("{id},{token}\n")).collect();
    std::fs::write(&tokens, format!("userId,token\n{csv}")).unwrap();
    let (tokens, base) = (tokens.to_str().unwrap(), app.url(""));
    let reconcile: &[&str] = if path.is_async() { &["--reconcile"] } else { &[] };

    for (vouchers, stock) in [(4, 22), (1, 10)] {
        let history = scratch.path(&format!("sale-{vouchers}.jsonl"));
        let json = scratch.path(&format!("sale-{vouchers}.json"));
        let (history, json) = (history.to_str().unwrap(), json.to_str().unwrap());
        let (vouchers, stock) = (vouchers.to_string(), stock.to_string());
        #[rustfmt::skip]
        load_tool(&app, &[
            "--tokens", tokens, "--stock", &stock, "--vouchers", &vouchers,
            "--concurrency", "8", "--drain-timeout", "30", "--history", history, "--json", json,
        ]).await;
        let sale = read_json(Path::new(json));
        let ids: Vec<u64> = sale["voucherIds"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(ids.len().to_string(), vouchers, "{sale}");
        assert_eq!(sale["audit"]["newOrders"].to_string(), stock, "{sale}");
        assert_eq!(sale["audit"]["remainingStock"], 0, "{sale}");
        if ids.len() > 1 {
            let audits = sale["voucherAudits"].as_array().unwrap();
            let sold: Vec<i64> = audits.iter().map(|a| a["newOrders"].as_i64().unwrap()).collect();
            assert_eq!(sold, [6, 6, 5, 5], "{sale}");
            assert!(audits.iter().all(|a| a["passed"] == true && a["ordersMatchAnswers"] == true), "{sale}");
        }
        for (id, units) in ids.iter().zip([6, 6, 5, 5].iter().take(ids.len())) {
            let units = if ids.len() == 1 { 10 } else { *units };
            assert_eq!(app.orders_of(*id).await, (units, units), "voucher {id}: its units, one per buyer");
        }

        let header: Value =
            serde_json::from_str(std::fs::read_to_string(history).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(header["sale"]["vouchers"].as_array().map_or(1, Vec::len), ids.len(), "{header}");
        let mut args = vec!["check-history", "--history", history, "--base-url", &base, "--tokens", tokens];
        args.extend(reconcile);
        let checked: Value = serde_json::from_str(&load_tool(&app, &args).await).unwrap();
        assert_eq!(checked["problems"], serde_json::json!([]), "{checked}");
        assert_eq!(checked["vouchers"].as_array().unwrap().len(), ids.len(), "{checked}");
        let buyers = 30;
        assert_eq!(checked["findings"]["requests"], buyers, "{checked}");
        assert_eq!(checked["findings"]["answers"]["successOrders"].to_string(), stock, "{checked}");
    }
}
