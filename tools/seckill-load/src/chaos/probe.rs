//! What the instances say after a fault: serving again, the lock holds
//! they lost, a fresh order sold on each.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long an instance may take to serve again once the fault is over.
pub(super) const RECOVERY: Duration = Duration::from_secs(5);

/// Every instance answers `/ready` within `RECOVERY`.
pub(super) async fn serving_again(client: &reqwest::Client, instances: &[String]) -> bool {
    let deadline = Instant::now() + RECOVERY;
    for instance in instances {
        loop {
            let ready = client.get(format!("http://{instance}/ready")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    true
}

/// Lock holds lost so far, summed over the instances' `/metrics`.
pub async fn locks_lost(client: &reqwest::Client, instances: &[String]) -> u64 {
    let mut sum = 0;
    for instance in instances {
        if let Ok(answer) = client.get(format!("http://{instance}/metrics")).send().await
            && let Ok(text) = answer.text().await
        {
            sum += sample(&text, "hmdp_lock_events_total", &[("event", "lost")]).unwrap_or(0.0) as u64;
        }
    }
    sum
}

/// One sample of Prometheus' text format: the metric with exactly these
/// labels among its own.
pub(super) fn sample(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (name_and_labels, value) = line.rsplit_once(' ')?;
        let (name, rest) = match name_and_labels.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}')?),
            None => (name_and_labels, ""),
        };
        if name != metric {
            return None;
        }
        let have: Vec<(&str, &str)> = rest
            .split(',')
            .filter(|pair| !pair.is_empty())
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k, v.trim_matches('"')))
            })
            .collect();
        labels.iter().all(|wanted| have.contains(wanted)).then(|| value.parse().ok()).flatten()
    })
}

/// How long after the sale an instance may still answer a fresh order 503
/// (MariaDB or Redis unreachable) before the probe calls it broken: a
/// request that met the fault may hold a connection of the old primary
/// for its whole deadline, and the connection after it is made anew.
pub(super) const ORDERS_AGAIN_WITHIN: Duration = Duration::from_secs(15);

/// After the sale: a fresh voucher sells one order on every instance that
/// must serve (answering `/ready` is not taking orders). An instance that
/// answers 503 is asked again, the same buyer, until `ORDERS_AGAIN_WITHIN`
/// has passed; any other refusal fails at once. `Ok(())` or why not.
pub async fn orders_again(
    client: &reqwest::Client,
    instances: &[String],
    admin_key: &str,
    tokens: &[&str],
) -> Result<(), String> {
    let now = chrono::Utc::now();
    let body = json!({
        "shopId": 1, "title": "chaos: orders again", "payValue": 1, "actualValue": 2, "type": 1, "stock": 5,
        "beginTime": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endTime": (now + chrono::Duration::hours(1)).to_rfc3339(),
    });
    let first = instances.first().ok_or("no instance")?;
    let created: Value = client
        .post(format!("http://{first}/voucher/seckill"))
        .header("x-admin-key", admin_key)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("creating a voucher: {e}"))?
        .json()
        .await
        .map_err(|e| format!("creating a voucher: {e}"))?;
    let voucher = created["data"].as_u64().ok_or(format!("creating a voucher answered {created}"))?;
    for (instance, token) in instances.iter().zip(tokens) {
        let started = Instant::now();
        let mut unavailable = 0;
        loop {
            let answer = client
                .post(format!("http://{instance}/voucher-order/seckill/{voucher}"))
                .header("authorization", *token)
                .send()
                .await
                .map_err(|e| format!("{instance}: {e}"))?;
            let answer: Value = answer.json().await.map_err(|e| format!("{instance}: {e}"))?;
            match order_again_answer(&answer, unavailable) {
                AgainAnswer::Placed => break,
                AgainAnswer::Unavailable if started.elapsed() < ORDERS_AGAIN_WITHIN => {
                    unavailable += 1;
                    eprintln!("{instance}: a fresh order answered 503 ({answer}); asked again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                AgainAnswer::Unavailable | AgainAnswer::Refused => {
                    let waited = started.elapsed().as_secs_f64();
                    return Err(format!("{instance}: {answer} (after {unavailable} earlier 503s, {waited:.1} s)"));
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
enum AgainAnswer {
    Placed,
    Unavailable,
    Refused,
}

/// A fresh order's answer. After a 503 the same buyer may be told that
/// they hold the order already: the 503's commit happened, so the
/// instance did sell.
fn order_again_answer(answer: &Value, earlier_unavailable: u32) -> AgainAnswer {
    match answer["errorCode"].as_str() {
        _ if answer["success"] == true => AgainAnswer::Placed,
        Some("UNAVAILABLE") => AgainAnswer::Unavailable,
        Some("DUPLICATE_ORDER") if earlier_unavailable > 0 => AgainAnswer::Placed,
        _ => AgainAnswer::Refused,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{AgainAnswer, order_again_answer};

    #[test]
    fn a_fresh_order_is_asked_again_only_after_a_503() {
        let placed = json!({"success": true, "data": "1"});
        let unavailable = json!({"success": false, "errorCode": "UNAVAILABLE"});
        let duplicate = json!({"success": false, "errorCode": "DUPLICATE_ORDER", "data": "1"});
        let sold_out = json!({"success": false, "errorCode": "SOLD_OUT"});
        assert_eq!(order_again_answer(&placed, 0), AgainAnswer::Placed);
        assert_eq!(order_again_answer(&unavailable, 0), AgainAnswer::Unavailable);
        assert_eq!(order_again_answer(&duplicate, 1), AgainAnswer::Placed, "the 503's commit happened");
        assert_eq!(order_again_answer(&duplicate, 0), AgainAnswer::Refused, "a fresh buyer holds nothing");
        assert_eq!(order_again_answer(&sold_out, 3), AgainAnswer::Refused);
    }
}
