//! The JMeter plan must keep working with what the service and
//! `hmdp seed-users` produce: same CSV columns, same route, same header.

use hmdp_test_support as common;

use common::{TestApp, expect_ok};

const PLAN: &str = include_str!("load/seckill.jmx");

fn string_prop<'a>(doc: &'a roxmltree::Document, element: &str, name: &str) -> &'a str {
    doc.descendants()
        .find(|n| n.has_tag_name(element))
        .unwrap_or_else(|| panic!("no {element} in the plan"))
        .descendants()
        .find(|n| n.has_tag_name("stringProp") && n.attribute("name") == Some(name))
        .and_then(|n| n.text())
        .unwrap_or_else(|| panic!("no {name} in {element}"))
}

/// `${__P(name,default)}` and `${name}` replaced by values.
fn expand(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (name, value) in values {
        if let Some(start) = out.find(&format!("${{__P({name}")) {
            let end = start + out[start..].find('}').expect("closing brace") + 1;
            out.replace_range(start..end, value);
        }
        out = out.replace(&format!("${{{name}}}"), value);
    }
    assert!(!out.contains("${"), "unexpanded variable in {out}");
    out
}

#[tokio::test]
async fn the_jmeter_plan_places_an_order_with_seed_users_output() {
    let doc = roxmltree::Document::parse(PLAN).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "jmeterTestPlan");
    let collector = doc.descendants().find(|n| n.has_tag_name("ResultCollector")).expect("a result listener");
    assert_eq!(collector.attribute("guiclass"), Some("StatVisualizer"), "the aggregate report");

    // Tokens exactly as `hmdp seed-users` writes them, for this test's app.
    let app = TestApp::spawn().await;
    let config = &app.state.config;
    let csv_path = std::env::temp_dir().join(format!("hmdp-tokens-{}.csv", uuid::Uuid::new_v4().simple()));
    let seeded = std::process::Command::new(env!("CARGO_BIN_EXE_hmdp"))
        .args(["seed-users", "--count", "3", "--first-phone", "16600000000", "--out"])
        .arg(&csv_path)
        .env("DATABASE_URL", config.db.url.as_str())
        .env("REDIS_URL", &config.redis.url)
        .env("REDIS_KEY_PREFIX", &config.redis.key_prefix)
        .env("JWT_SECRET", &config.auth.jwt_secret)
        .output()
        .unwrap();
    assert!(seeded.status.success(), "{}", String::from_utf8_lossy(&seeded.stderr));
    let csv = std::fs::read_to_string(&csv_path).unwrap();
    std::fs::remove_file(&csv_path).ok();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert_eq!(string_prop(&doc, "CSVDataSet", "variableNames"), header, "CSV columns");
    assert_eq!(lines.clone().count(), 3);
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    let columns: Vec<&str> = header.split(',').collect();
    let row: Vec<(&str, &str)> = columns.iter().copied().zip(first.iter().copied()).collect();

    // The plan's own path and header, filled in, place a real order.
    let voucher = app.open_seckill(5).await.to_string();
    let path = expand(string_prop(&doc, "HTTPSamplerProxy", "HTTPSampler.path"), &[("voucherId", &voucher)]);
    assert_eq!(string_prop(&doc, "HTTPSamplerProxy", "HTTPSampler.method"), "POST");
    let header_name = string_prop(&doc, "HeaderManager", "Header.name");
    let header_value = expand(string_prop(&doc, "HeaderManager", "Header.value"), &row);
    let resp = app.client.post(app.url(&path)).header(header_name, header_value).send().await.unwrap();
    let body = expect_ok(resp).await;
    assert!(body["data"].as_str().is_some_and(|id| id.parse::<i64>().is_ok()));
    assert_eq!(app.orders_of(voucher.parse().unwrap()).await, (1, 1));
}
