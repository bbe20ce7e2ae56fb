//! The front door of one instance: whose word about the client it believes
//! (nginx's, through its socket; nobody's over TCP by default), what it
//! closes (a request head that stalls, an idle connection, a body that
//! stalls), how many connections it holds, and the answers to bodies and
//! ids it cannot take.

use hmdp_test_support as common;

use std::time::{Duration, Instant};

use common::{ADMIN_KEY, TestApp, expect_error, expect_ok};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

async fn admin_create(api: &common::Api, key: &str, client: &str) -> reqwest::Response {
    let now = chrono::Utc::now();
    let body = common::seckill_body(
        1,
        &(now - chrono::Duration::minutes(1)).to_rfc3339(),
        &(now + chrono::Duration::hours(1)).to_rfc3339(),
    );
    api.client
        .post(api.url("/voucher/seckill"))
        .header("x-admin-key", key)
        .header("x-real-ip", client)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The probe's finding: after ten wrong admin keys from one address, the
/// right key straight to the instance with another `X-Real-IP` was 200.
#[tokio::test]
async fn a_spoofed_x_real_ip_sent_straight_to_an_instance_is_ignored_and_nginxs_is_believed() {
    let app = TestApp::spawn().await;
    // Straight over TCP, each guess claiming another address: all of them
    // are the peer's, 127.0.0.1.
    for i in 0..10 {
        let guess =
            admin_create(&app.api, &format!("a-wrong-admin-key-guess-number-{i}"), &format!("10.1.1.{i}")).await;
        expect_error(guess, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    }
    let spoofed = admin_create(&app.api, ADMIN_KEY, "10.7.7.7").await;
    expect_error(spoofed, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;

    // Through nginx's socket the header is believed: 10.7.7.7 is a client
    // of its own, untouched by the peer's guesses ...
    expect_ok(admin_create(&app.behind_nginx, ADMIN_KEY, "10.7.7.7").await).await;
    // ... and one that guesses is held to its own count.
    for i in 0..10 {
        let guess = admin_create(&app.behind_nginx, &format!("a-wrong-admin-key-guess-number-{i}"), "10.8.8.8").await;
        expect_error(guess, StatusCode::FORBIDDEN, "FORBIDDEN").await;
    }
    let locked = admin_create(&app.behind_nginx, ADMIN_KEY, "10.8.8.8").await;
    expect_error(locked, StatusCode::TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS").await;
    expect_ok(admin_create(&app.behind_nginx, ADMIN_KEY, "10.9.9.9").await).await;
}

/// Reads until the instance closes the connection; how long that took.
async fn closed_after(stream: &mut TcpStream, since: Instant, within: Duration) -> Duration {
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "still open after {within:?}");
    since.elapsed()
}

/// One response on a keep-alive connection: its status line.
async fn one_response(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let complete = |seen: &[u8]| {
        let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") else { return false };
        let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
        let length: usize =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
        seen.len() >= end + 4 + length
    };
    while !complete(&seen) {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_stalled_request_head_and_an_idle_connection_are_closed_on_time_while_health_stays_fast() {
    let header = Duration::from_millis(1_000);
    let keepalive = Duration::from_millis(2_000);
    let app = TestApp::spawn_with(|c| {
        c.server.header_timeout_ms = 1_000;
        c.server.keepalive_timeout_ms = 2_000;
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let opened = Instant::now();

    // One that says nothing, one that sends its head a byte every 100 ms
    // (each byte arrives; the head never ends), one idle after an answer.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nhost: test\r\nx-slow: ").await.unwrap();
    let (mut slow_read, mut slow_write) = slow.into_split();
    let dripping = tokio::spawn(async move {
        while slow_write.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    assert!(one_response(&mut idle, "/health").await.contains("200"));

    // While all three are held, a new client is answered at once.
    let health = app.get("/health", None).await;
    assert_eq!(health.status(), StatusCode::OK);
    assert!(opened.elapsed() < header, "/health was answered after the stalled ones' deadline");

    // Half-way through its keep-alive the idle one still serves, and its
    // wait starts again from that answer.
    tokio::time::sleep(keepalive / 2).await;
    assert!(one_response(&mut idle, "/health").await.contains("200"));
    let answered = Instant::now();

    let silent_closed = closed_after(&mut silent, opened, Duration::from_secs(10)).await;
    let mut buf = [0u8; 64];
    let slow_closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match slow_read.read(&mut buf).await {
                Ok(0) | Err(_) => return opened.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the slow head's connection was closed");
    dripping.abort();
    let idle_closed = closed_after(&mut idle, answered, Duration::from_secs(10)).await;

    let late = Duration::from_secs(3);
    for (what, took, due) in
        [("silent", silent_closed, header), ("slow head", slow_closed, header), ("idle", idle_closed, keepalive)]
    {
        assert!(
            took + Duration::from_millis(100) >= due && took < due + late,
            "{what}: closed after {took:?}, due {due:?}"
        );
    }
}

#[tokio::test]
async fn a_body_that_stalls_is_answered_408_and_one_past_the_limit_413_in_the_envelope() {
    let app = TestApp::spawn_with(|c| c.server.body_timeout_ms = 500).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let head =
        "POST /user/login HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: 60\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"phone":"#).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""errorCode":"REQUEST_TIMEOUT""#), "{answer}");

    let big = json!({ "phone": "13800000000", "code": "123456", "x": "y".repeat(70_000) });
    let resp = app.post_json("/user/login", None, &big).await;
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE").await;
    let (_, token) = app.seed_users(1).await.remove(0);
    let voucher = app.open_seckill(1).await;
    let resp = app
        .client
        .post(app.url(&format!("/voucher-order/seckill/{voucher}/path")))
        .header("authorization", &token)
        .body("x".repeat(70_000))
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE").await;
}

#[tokio::test]
async fn past_max_connections_the_next_connection_is_served_only_once_one_closes() {
    let app = TestApp::spawn_with(|c| {
        c.server.max_connections = 2;
        c.server.header_timeout_ms = 1_000;
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let opened = Instant::now();
    let holders = [TcpStream::connect(&addr).await.unwrap(), TcpStream::connect(&addr).await.unwrap()];
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The kernel completes the connection; the instance takes it only
    // when the silent two are closed at their header deadline.
    let mut third = TcpStream::connect(&addr).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), one_response(&mut third, "/health")).await.unwrap();
    let waited = opened.elapsed();
    assert!(status.contains("200"), "{status}");
    assert!(waited >= Duration::from_millis(900), "served after {waited:?}, before a place was free");
    drop(holders);
}

#[tokio::test]
async fn bodies_are_json_objects_without_unknown_fields_and_a_malformed_id_is_400() {
    let app = TestApp::spawn().await;
    let login = |body: &'static str| {
        app.client.post(app.url("/user/login")).header("content-type", "application/json").body(body).send()
    };
    // An array was read as the fields in order, and then refused as a
    // wrong code (401): a body that is no object is a 400.
    for refused in [
        r#"["13800000000", "123456"]"#,
        r#"{"phone": "13800000000", "code": "123456", "remember": true}"#,
        r#""13800000000""#,
        "42",
    ] {
        expect_error(login(refused).await.unwrap(), StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
    // The course's login form carries `password` from its other tab: known,
    // and ignored (no code was sent, so the login itself fails).
    let course = login(r#"{"phone": "13800000000", "code": "123456", "password": ""}"#).await.unwrap();
    expect_error(course, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;

    let (_, token) = app.seed_users(1).await.remove(0);
    for path in ["/voucher-order/-1", "/voucher-order/abc", "/voucher-order/9223372036854775808", "/voucher-order/1.5"]
    {
        expect_error(app.get(path, Some(&token)).await, StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
    expect_error(app.get("/voucher-order/0", Some(&token)).await, StatusCode::NOT_FOUND, "NOT_FOUND").await;
    for (method, path) in [
        (reqwest::Method::POST, "/voucher-order/-7/cancel"),
        (reqwest::Method::POST, "/voucher-order/-7/refund"),
        (reqwest::Method::POST, "/voucher-order/-7/use"),
    ] {
        let resp = app
            .client
            .request(method, app.url(path))
            .header("authorization", &token)
            .header("x-admin-key", ADMIN_KEY)
            .send()
            .await
            .unwrap();
        expect_error(resp, StatusCode::BAD_REQUEST, "VALIDATION").await;
    }
    let pay = app
        .client
        .post(app.url("/voucher-order/12/pay"))
        .header("authorization", &token)
        .json(&json!([1]))
        .send()
        .await
        .unwrap();
    expect_error(pay, StatusCode::BAD_REQUEST, "VALIDATION").await;
    let voucher = app.open_seckill(1).await;
    let solution_as_array = app
        .client
        .post(app.url(&format!("/voucher-order/seckill/{voucher}/path")))
        .header("authorization", &token)
        .json(&json!(["token", "12"]))
        .send()
        .await
        .unwrap();
    expect_error(solution_as_array, StatusCode::BAD_REQUEST, "VALIDATION").await;
}

#[tokio::test]
async fn the_instance_names_no_server_software() {
    let app = TestApp::spawn().await;
    let resp = app.get("/health", None).await;
    assert!(resp.headers().get("server").is_none(), "{:?}", resp.headers());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["success"], true);
}

/// Opens a connection that sends a login's head (a body of 1,000 bytes
/// announced) and then one body byte every `every`, for ever; its reader.
async fn trickle(addr: &str, every: Duration) -> tokio::net::tcp::OwnedReadHalf {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (read, mut write) = stream.into_split();
    let head =
        "POST /user/login HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
    write.write_all(head.as_bytes()).await.unwrap();
    tokio::spawn(async move {
        while write.write_all(b" ").await.is_ok() {
            tokio::time::sleep(every).await;
        }
    });
    read
}

/// The probe's finding: 1,100 connections each trickling a login body a
/// byte every 4 s held every place for work, and the whole sale stopped.
/// Here 20 trickles against 4 places in flight: a request that has all it
/// needs is still served (it would be refused 503 `OVERLOADED` if the
/// trickles held places), and each trickle is answered 408 and closed at
/// its whole deadline, though it never paused as long as the gap deadline.
#[tokio::test]
async fn a_trickled_body_holds_no_place_in_flight_and_is_cut_off_at_its_whole_deadline() {
    let app = TestApp::spawn_with(|c| {
        c.server.body_timeout_ms = 1_000;
        c.server.body_deadline_ms = 2_000;
        c.server.max_in_flight = 4;
        c.server.max_working = 2;
    })
    .await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let (_, token) = app.seed_users(1).await.remove(0);
    let opened = Instant::now();
    let mut trickles = Vec::new();
    for _ in 0..20 {
        trickles.push(trickle(&addr, Duration::from_millis(300)).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    while opened.elapsed() < Duration::from_millis(1_500) {
        expect_ok(app.get("/user/me", Some(&token)).await).await;
        let login = app.post_json("/user/login", None, &json!({ "phone": "13800000000", "code": "000000" })).await;
        expect_error(login, StatusCode::UNAUTHORIZED, "UNAUTHORIZED").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for mut read in trickles {
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), read.read_to_end(&mut answer)).await.unwrap().unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains(r#""errorCode":"REQUEST_TIMEOUT""#), "{answer}");
    }
    let closed = opened.elapsed();
    assert!((Duration::from_millis(1_900)..Duration::from_millis(4_000)).contains(&closed), "closed after {closed:?}");
}

/// The probe's finding: 400 answers repeated serde's and axum's own words.
/// Each malformed request here is answered in the API's words: the field
/// as the API names it, what it takes, and nothing of the library.
#[tokio::test]
async fn a_malformed_request_is_told_what_is_wrong_in_the_apis_words() {
    let app = TestApp::spawn().await;
    let (_, token) = app.seed_users(1).await.remove(0);
    let voucher = app.open_seckill(1).await;
    let message = |resp: reqwest::Response| async move {
        let body = expect_error(resp, StatusCode::BAD_REQUEST, "VALIDATION").await;
        body["errorMsg"].as_str().unwrap().to_owned()
    };
    let post = |path: String, body: &'static str| {
        app.client
            .post(app.url(&path))
            .header("authorization", &token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let said = [
        (
            message(post("/user/login".into(), r#"{"phone": "13800000000", "code": "1", "x": 1}"#).await.unwrap())
                .await,
            "`x` is not a field of this request",
        ),
        (
            message(post("/user/login".into(), r#"{"phone": 13800000000, "code": "123456"}"#).await.unwrap()).await,
            "`phone` must be a string",
        ),
        (message(post("/user/login".into(), r#"{"phone": "13800000000"}"#).await.unwrap()).await, "`code` is required"),
        (
            message(post("/user/login".into(), r#"{"phone": "13800000000", "#).await.unwrap()).await,
            "the body is not valid JSON: it ends too early",
        ),
        (
            message(
                post(format!("/voucher-order/seckill/{voucher}/path"), r#"{"challenge": "t", "nonce": true}"#)
                    .await
                    .unwrap(),
            )
            .await,
            r#"the body must be {"challenge", "nonce"}: `nonce` must be decimal digits, as a string or a whole number"#,
        ),
        (
            message(post("/voucher-order/12/pay".into(), r#"{"payType": -1}"#).await.unwrap()).await,
            "`payType` is out of range",
        ),
        (
            message(post("/voucher-order/12/pay".into(), r#"{"payType": "1"}"#).await.unwrap()).await,
            "`payType` must be a whole number",
        ),
        (
            message(app.get("/voucher-order/-1", Some(&token)).await).await,
            "the id in the path must be a whole number from 0 to 9223372036854775807",
        ),
        (
            message(app.get("/voucher-order/mine?page=x", Some(&token)).await).await,
            "a query parameter has a value it does not take: see the route in /openapi.json",
        ),
        (
            message(app.get("/voucher-order/mine?pages=2", Some(&token)).await).await,
            "`pages` is not a query parameter of this route",
        ),
    ];
    for (said, meant) in &said {
        assert_eq!(said, meant);
    }
    let times = json!({ "shopId": 1, "title": "t", "payValue": 1, "actualValue": 2, "stock": 1,
        "beginTime": "yesterday", "endTime": "2030-01-01T00:00:00+08:00" });
    let said = message(app.post_json("/voucher/seckill", Some(ADMIN_KEY), &times).await).await;
    assert_eq!(said, "`beginTime` must be an RFC 3339 time with an offset, e.g. 2026-11-22T10:00:00+08:00");
}
