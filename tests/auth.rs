//! Login, sessions and the two layers, through the HTTP API.

use hmdp_test_support as common;

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::Utc;
use common::{JWT_SECRET, TestApp, expect_error, expect_ok, phone, proxy::Proxy};
use hmdp::auth::Claims;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use redis::AsyncCommands;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_user_logs_in_with_the_stored_code_and_sees_themselves() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(1)).await;

    let me = expect_ok(app.get("/user/me", Some(&token)).await).await;
    let id = me["data"]["id"].as_u64().expect("numeric id");
    let nick = me["data"]["nickName"].as_str().unwrap();
    assert!(nick.starts_with("user_") && nick.len() == 15, "nick name {nick}");
    assert!(me["data"].get("icon").is_some());

    let row: (u64, String) =
        sqlx::query_as("SELECT id, phone FROM tb_user WHERE id = ?").bind(id).fetch_one(&app.db).await.unwrap();
    assert_eq!(row.1, phone(1));

    // Both header styles are accepted.
    let bearer = format!("Bearer {token}");
    expect_ok(app.get("/user/me", Some(&bearer)).await).await;

    // A second login of the same phone is the same user.
    app.redis.clone().del::<_, ()>(app.keys.login_code_cooldown(&phone(1))).await.unwrap();
    let again = app.login(&phone(1)).await;
    assert_ne!(again, token);
    let me_again = expect_ok(app.get("/user/me", Some(&again)).await).await;
    assert_eq!(me_again["data"]["id"].as_u64(), Some(id));
    let users: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_user").fetch_one(&app.db).await.unwrap();
    assert_eq!(users, 1);
}

#[tokio::test]
async fn the_code_is_six_digits_with_a_two_minute_ttl() {
    let app = TestApp::spawn().await;
    expect_ok(app.send_code(&phone(2)).await).await;
    let code = app.stored_code(&phone(2)).await.unwrap();
    assert_eq!(code.len(), 6);
    assert!(code.bytes().all(|b| b.is_ascii_digit()));
    let ttl: i64 = app.redis.clone().ttl(app.keys.login_code(&phone(2))).await.unwrap();
    assert!((110..=120).contains(&ttl), "ttl {ttl}");
}

#[tokio::test]
async fn invalid_phones_are_rejected_with_400() {
    let app = TestApp::spawn().await;
    for bad in ["12345", "12800000000", "1380000000x", "138000000001", ""] {
        expect_error(app.send_code(bad).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
        expect_error(app.post_login(bad, "123456").await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
    // No phone parameter at all.
    expect_error(app.post("/user/code", None).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
}

#[tokio::test]
async fn a_wrong_code_is_401_and_a_used_code_cannot_be_reused() {
    let app = TestApp::spawn().await;
    let p = phone(3);
    expect_ok(app.send_code(&p).await).await;
    let code = app.stored_code(&p).await.unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    expect_error(app.post_login(&p, wrong).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;

    expect_ok(app.post_login(&p, &code).await).await;
    expect_error(app.post_login(&p, &code).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    assert_eq!(app.stored_code(&p).await, None, "a used code is deleted");
}

#[tokio::test]
async fn after_five_wrong_codes_even_the_right_one_fails() {
    let app = TestApp::spawn().await;
    let p = phone(4);
    expect_ok(app.send_code(&p).await).await;
    let code = app.stored_code(&p).await.unwrap();
    let wrong = if code == "000000" { "111111" } else { "000000" };
    for _ in 0..5 {
        expect_error(app.post_login(&p, wrong).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    }
    expect_error(app.post_login(&p, &code).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    assert_eq!(app.stored_code(&p).await, None, "the code is dropped after five wrong tries");
}

#[tokio::test]
async fn wrong_codes_raced_concurrently_get_at_most_five_comparisons() {
    // The app reaches Redis through a proxy that counts the calls of the
    // code-comparing script: a check-then-compare race would compare more
    // than five times while the counter lags behind.
    let proxy = Proxy::to_redis().await;
    let app = TestApp::spawn_with(|c| {
        common::redis_behind(&proxy, c);
    })
    .await;
    let compare = redis::Script::new(include_str!("../lua/consume_code.lua"));
    // Loaded beforehand, so each comparison is one EVALSHA (no NOSCRIPT retry).
    let _: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(include_str!("../lua/consume_code.lua"))
        .query_async(&mut app.redis.clone())
        .await
        .unwrap();
    let p = phone(5);
    expect_ok(app.send_code(&p).await).await;
    let code = app.stored_code(&p).await.unwrap();
    proxy.count(compare.get_hash().as_bytes());
    // Twenty different wrong codes at once.
    let wrong: Vec<String> =
        (0..20u32).map(|i| format!("{:06}", (code.parse::<u32>().unwrap() + 1 + i) % 1_000_000)).collect();
    let tries = wrong.iter().map(|w| app.post_login(&p, w));
    for resp in futures::future::join_all(tries).await {
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(proxy.counted(), 5, "comparisons made against one code");
    expect_error(app.post_login(&p, &code).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    assert_eq!(proxy.counted(), 5, "no comparison once the code is dropped");
}

#[tokio::test]
async fn a_second_code_within_sixty_seconds_is_429() {
    let app = TestApp::spawn().await;
    expect_ok(app.send_code(&phone(6)).await).await;
    expect_error(app.send_code(&phone(6)).await, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;
    // Another phone is not affected.
    expect_ok(app.send_code(&phone(7)).await).await;
}

#[tokio::test]
async fn malformed_codes_are_400() {
    let app = TestApp::spawn().await;
    for bad in ["12345", "1234567", "abcdef", ""] {
        expect_error(app.post_login(&phone(8), bad).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
}

fn claims(sub: &str, sid: &str, exp_offset: i64) -> Claims {
    let now = Utc::now().timestamp();
    Claims { sub: sub.into(), sid: sid.into(), iat: now, exp: now + exp_offset }
}

fn parts(token: &str) -> (String, String) {
    let mut it = token.split('.');
    let header = it.next().unwrap().to_owned();
    let payload = it.next().unwrap().to_owned();
    (header, payload)
}

#[tokio::test]
async fn bad_tokens_are_all_401_in_the_envelope() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(9)).await;
    let me = expect_ok(app.get("/user/me", Some(&token)).await).await;
    let id = me["data"]["id"].as_u64().unwrap().to_string();
    let sid = app.state.auth.tokens.verify(&token).unwrap().sid;

    let (header, payload) = parts(&token);
    let forged = format!("{header}.{payload}.{}", URL_SAFE_NO_PAD.encode(b"not the signature"));

    let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let alg_none = format!("{none_header}.{payload}.");

    let hs512 = jsonwebtoken::encode(
        &Header::new(Algorithm::HS512),
        &claims(&id, &sid, 3600),
        &EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap();

    let expired = app.state.auth.tokens.sign(&claims(&id, &sid, -3600)).unwrap();

    let other_secret = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(&id, &sid, 3600),
        &EncodingKey::from_secret(b"some-other-secret-0123456789"),
    )
    .unwrap();

    // A valid signature naming someone else's id with this session.
    let wrong_subject = app.state.auth.tokens.sign(&claims("999999", &sid, 3600)).unwrap();

    // The labels name the cases; expect_error checks the whole envelope.
    for (_case, bad) in [
        ("forged signature", forged.as_str()),
        ("alg none", alg_none.as_str()),
        ("HS512 with the right secret", hs512.as_str()),
        ("expired", expired.as_str()),
        ("other secret", other_secret.as_str()),
        ("wrong subject", wrong_subject.as_str()),
        ("garbage", "garbage-string"),
        ("empty bearer", "Bearer "),
    ] {
        expect_error(app.get("/user/me", Some(bad)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    }
    expect_error(app.get("/user/me", None).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    // The genuine token still works: the rejections above were about the tokens.
    expect_ok(app.get("/user/me", Some(&token)).await).await;
}

#[tokio::test]
async fn logout_kills_the_token_even_before_its_exp() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(10)).await;
    expect_ok(app.get("/user/me", Some(&token)).await).await;
    expect_ok(app.post("/user/logout", Some(&token)).await).await;
    expect_error(app.get("/user/me", Some(&token)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    expect_error(app.post("/user/logout", Some(&token)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    assert!(app.state.auth.tokens.verify(&token).is_ok(), "the JWT itself is still unexpired");
}

#[tokio::test]
async fn an_expired_session_kills_the_token() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(11)).await;
    let sid = app.state.auth.tokens.verify(&token).unwrap().sid;
    app.redis.clone().del::<_, ()>(app.keys.session(&sid)).await.unwrap();
    expect_error(app.get("/user/me", Some(&token)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}

#[tokio::test]
async fn a_request_slides_the_session_ttl() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(12)).await;
    let sid = app.state.auth.tokens.verify(&token).unwrap().sid;
    let key = app.keys.session(&sid);
    let mut redis = app.redis.clone();
    let fields: std::collections::HashMap<String, String> = redis.hgetall(&key).await.unwrap();
    assert!(fields.contains_key("id") && fields.contains_key("nickName") && fields.contains_key("icon"));

    redis.expire::<_, ()>(&key, 100).await.unwrap();
    let before: i64 = redis.ttl(&key).await.unwrap();
    // Any route refreshes, even a public one: the refresh layer is on all.
    expect_ok(app.get("/health", Some(&token)).await).await;
    let after: i64 = redis.ttl(&key).await.unwrap();
    assert!(after > before, "ttl before {before}, after {after}");
    assert!(after > 1700, "slid back to 30 min, got {after}");
}

#[tokio::test]
async fn a_busy_user_slides_the_session_once_a_minute_and_a_deleted_session_still_ends_at_once() {
    let app = TestApp::spawn().await;
    let token = app.login(&phone(13)).await;
    let sid = app.state.auth.tokens.verify(&token).unwrap().sid;
    let key = app.keys.session(&sid);
    let mut redis = app.redis.clone();
    expect_ok(app.get("/user/me", Some(&token)).await).await;
    redis.expire::<_, ()>(&key, 100).await.unwrap();
    expect_ok(app.get("/user/me", Some(&token)).await).await;
    let ttl: i64 = redis.ttl(&key).await.unwrap();
    assert!((1..=100).contains(&ttl), "slid again within the minute: ttl {ttl}");
    // Not slid, but still read: logout (the session gone) counts at once.
    redis.del::<_, ()>(&key).await.unwrap();
    expect_error(app.get("/user/me", Some(&token)).await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
}

/// A 429 in the envelope with a `Retry-After` of at least one second and at
/// most `window`.
async fn expect_rate_limited(resp: reqwest::Response, window: u64) {
    let retry_after: u64 = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After header");
    assert!((1..=window).contains(&retry_after), "Retry-After {retry_after}");
    expect_error(resp, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;
}

#[tokio::test]
async fn codes_per_phone_are_limited_per_day_whatever_the_cooldown() {
    let app = TestApp::spawn_with(|c| c.limits.sms_codes_per_phone_day = 2).await;
    let target = phone(30);
    for _ in 0..2 {
        expect_ok(app.send_code(&target).await).await;
        app.redis.clone().del::<_, ()>(app.keys.login_code_cooldown(&target)).await.unwrap();
    }
    expect_rate_limited(app.send_code(&target).await, 24 * 3600).await;
    expect_ok(app.send_code(&phone(31)).await).await;
}

#[tokio::test]
async fn codes_per_client_address_are_limited_per_hour() {
    let app = TestApp::spawn_with(|c| c.limits.sms_codes_per_addr_hour = 3).await;
    for i in 0..3 {
        expect_ok(app.send_code(&phone(40 + i)).await).await;
    }
    expect_rate_limited(app.send_code(&phone(43)).await, 3600).await;
    // Another client behind nginx (which sets X-Real-IP) has its own count.
    let nginx = &app.behind_nginx;
    let other =
        nginx.client.post(nginx.url(&format!("/user/code?phone={}", phone(44)))).header("x-real-ip", "10.1.2.3");
    expect_ok(other.send().await.unwrap()).await;
}

#[tokio::test]
async fn x_real_ip_sent_straight_to_an_instance_does_not_make_a_new_client() {
    // The test client connects over TCP from 127.0.0.1, which no instance
    // trusts by default (any local process can connect from there): it is a
    // client sending its own X-Real-IP. 40 requests with 40 addresses were
    // all answered 200 under a limit of 3 per address once; the peer is
    // what counts.
    let app = TestApp::spawn_with(|c| c.limits.sms_codes_per_addr_hour = 3).await;
    let sends = (0..10u32).map(|i| {
        app.client
            .post(app.url(&format!("/user/code?phone={}", phone(60 + i))))
            .header("x-real-ip", format!("10.1.2.{i}"))
            .send()
    });
    let statuses: Vec<StatusCode> =
        futures::future::join_all(sends).await.into_iter().map(|r| r.unwrap().status()).collect();
    let granted = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let limited = statuses.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert_eq!((granted, limited), (3, 7), "{statuses:?}");
}

#[tokio::test]
async fn wrong_codes_per_phone_are_limited_per_day_even_across_new_codes() {
    let app = TestApp::spawn_with(|c| c.limits.login_failures_per_phone_day = 3).await;
    let target = phone(50);
    expect_ok(app.send_code(&target).await).await;
    for _ in 0..3 {
        expect_error(app.post_login(&target, "000000").await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    }
    // A fresh code buys no more guesses today, and even the right one is
    // refused until the window ends.
    app.redis.clone().del::<_, ()>(app.keys.login_code_cooldown(&target)).await.unwrap();
    expect_ok(app.send_code(&target).await).await;
    let code = app.stored_code(&target).await.unwrap();
    expect_rate_limited(app.post_login(&target, &code).await, 24 * 3600).await;
}

#[tokio::test]
async fn logins_per_client_address_are_limited_per_hour() {
    let app = TestApp::spawn_with(|c| c.limits.logins_per_addr_hour = 2).await;
    for i in 0..2 {
        expect_error(app.post_login(&phone(60 + i), "123456").await, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
    }
    expect_rate_limited(app.post_login(&phone(62), "123456").await, 3600).await;
}

#[tokio::test]
async fn orders_per_user_are_limited() {
    let app = TestApp::spawn_with(|c| c.limits.orders_per_user_10s = 3).await;
    let voucher = app.open_seckill(5).await;
    let (_, token) = app.seed_users(1).await.remove(0);
    expect_ok(app.order(voucher, &token).await).await;
    for _ in 0..2 {
        expect_error(app.order(voucher, &token).await, StatusCode::CONFLICT, "DUPLICATE_ORDER").await;
    }
    expect_rate_limited(app.order(voucher, &token).await, 10).await;
}

/// A request from a client behind nginx: through the instance's socket,
/// where X-Real-IP is believed.
fn from_addr(req: reqwest::RequestBuilder, addr: &str) -> reqwest::RequestBuilder {
    req.header("x-real-ip", addr)
}

#[tokio::test]
async fn a_stranger_spending_a_phones_limits_does_not_lock_its_owner_out() {
    // Both limits used to count the phone alone: 20 wrong codes, or 10 code
    // requests, from anyone blocked the owner for a day.
    let app = TestApp::spawn_with(|c| {
        c.limits.login_failures_per_phone_day = 3;
        c.limits.sms_codes_per_phone_day = 2;
    })
    .await;
    let victim = phone(70);
    let code_from = |addr: &'static str| {
        from_addr(app.behind_nginx.client.post(app.behind_nginx.url(&format!("/user/code?phone={victim}"))), addr)
            .send()
    };
    let login_from = |addr: &'static str, code: String| {
        let body = json!({ "phone": victim, "code": code });
        from_addr(app.behind_nginx.client.post(app.behind_nginx.url("/user/login")).json(&body), addr).send()
    };

    // The stranger spends both of their allowances on the victim's phone.
    expect_ok(code_from("10.6.6.6").await.unwrap()).await;
    for _ in 0..3 {
        expect_error(login_from("10.6.6.6", "000000".into()).await.unwrap(), StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
            .await;
    }
    expect_rate_limited(login_from("10.6.6.6", "000000".into()).await.unwrap(), 24 * 3600).await;
    app.redis.clone().del::<_, ()>(app.keys.login_code_cooldown(&victim)).await.unwrap();
    expect_ok(code_from("10.6.6.6").await.unwrap()).await;
    app.redis.clone().del::<_, ()>(app.keys.login_code_cooldown(&victim)).await.unwrap();
    expect_rate_limited(code_from("10.6.6.6").await.unwrap(), 24 * 3600).await;

    // The owner, from their own address, still gets a code and logs in.
    expect_ok(code_from("192.0.2.7").await.unwrap()).await;
    let code = app.stored_code(&victim).await.expect("the owner's code");
    let token = expect_ok(login_from("192.0.2.7", code).await.unwrap()).await;
    assert!(token["data"].as_str().is_some(), "{token}");
}

#[tokio::test]
async fn many_addresses_together_still_meet_the_phones_ceiling() {
    // Three times the per-address limit, over every address: what a
    // stranger with many addresses can still do to a phone.
    let app = TestApp::spawn_with(|c| c.limits.login_failures_per_phone_day = 2).await;
    let target = phone(71);
    expect_ok(app.send_code(&target).await).await;
    let body = json!({ "phone": target, "code": "000000" });
    let mut statuses = Vec::new();
    for i in 0..8 {
        // A fresh code every time, so the per-code attempt cap never ends it.
        let mut redis = app.redis.clone();
        redis.del::<_, ()>(app.keys.login_code_attempts(&target)).await.unwrap();
        redis.set::<_, _, ()>(app.keys.login_code(&target), "123456").await.unwrap();
        let req = from_addr(
            app.behind_nginx.client.post(app.behind_nginx.url("/user/login")).json(&body),
            &format!("10.7.7.{i}"),
        );
        statuses.push(req.send().await.unwrap().status());
    }
    let refused = statuses.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert_eq!((statuses.len() - refused, refused), (6, 2), "{statuses:?}");
}

/// The probe's finding: straight at an instance, each loopback alias
/// (127.0.0.2, 127.0.1.9, ...) was a client of its own with a fresh budget.
/// They are one host, and counted as one.
#[tokio::test]
async fn every_loopback_alias_straight_at_an_instance_shares_one_budget() {
    let app = TestApp::spawn_with(|c| c.limits.sms_codes_per_addr_hour = 3).await;
    let from = |alias: &str| reqwest::Client::builder().local_address(alias.parse().ok()).build().unwrap();
    let mut statuses = Vec::new();
    for (i, alias) in ["127.0.0.2", "127.0.0.3", "127.0.1.9", "127.0.0.4", "127.9.9.9"].into_iter().enumerate() {
        let sent = from(alias).post(app.url(&format!("/user/code?phone={}", phone(80 + i as u32)))).send();
        statuses.push(sent.await.unwrap().status());
    }
    assert_eq!(statuses[..3], [StatusCode::OK; 3], "{statuses:?}");
    assert_eq!(statuses[3..], [StatusCode::TOO_MANY_REQUESTS; 2], "{statuses:?}");
}

/// The probe's finding: a limit that checked and then counted let a burst
/// through before its counts landed (49 wrong logins at once: 26 counted
/// against a limit of 20). Each try now takes its place first, in one step:
/// exactly the limit's worth are compared and the rest refused.
#[tokio::test]
async fn a_burst_of_wrong_codes_never_counts_past_the_limit() {
    let app = TestApp::spawn_with(|c| c.limits.login_failures_per_phone_day = 20).await;
    let target = phone(90);
    expect_ok(app.send_code(&target).await).await;
    let tries = (0..49).map(|_| app.post_login(&target, "000000"));
    let statuses: Vec<StatusCode> = futures::future::join_all(tries).await.into_iter().map(|r| r.status()).collect();
    let wrong = statuses.iter().filter(|s| **s == StatusCode::UNAUTHORIZED).count();
    let refused = statuses.iter().filter(|s| **s == StatusCode::TOO_MANY_REQUESTS).count();
    assert_eq!((wrong, refused), (20, 29), "{statuses:?}");
    let counted: Option<u64> =
        app.redis.clone().get(app.keys.rate("login:fail-addr", &format!("{target}:loopback"))).await.unwrap();
    assert_eq!(counted, Some(20));
}
