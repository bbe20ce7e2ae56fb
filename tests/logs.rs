//! What reaches the logs at INFO: never an SMS code (whoever reads the logs
//! could log in as anyone), never a whole phone number, and never a
//! request id as a client wrote it. A test binary of its own, because it
//! owns the process's log subscriber.

use hmdp_test_support as common;

use std::{
    io::Write,
    sync::{Arc, Mutex},
};

use clap::Parser;
use common::TestApp;
use hmdp::config::AuthSettings;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    auth: AuthSettings,
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_login_logs_neither_the_code_nor_the_whole_phone_nor_a_forged_request_id_at_info() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt().with_env_filter("info").with_ansi(false).with_writer(move || writer.clone()).init();

    // The login settings as `hmdp serve` reads them, from an environment
    // without LOG_SMS_CODES: what a deployment gets when it says nothing.
    // SAFETY: this test binary's only test, and the runtime is a current-
    // thread one: no other thread reads the environment meanwhile.
    unsafe { std::env::remove_var("LOG_SMS_CODES") };
    let Cli { auth } = Cli::try_parse_from(["hmdp", "--jwt-secret", common::JWT_SECRET]).expect("the flags parse");
    assert!(!auth.log_sms_codes, "LOG_SMS_CODES is off by default");
    let app = TestApp::spawn_with(|c| c.auth = auth).await;
    let phone = "13912345678";
    // A request id that would write log fields of its own is replaced.
    let forged = "abc status=500 user_id=1 injected";
    let sent = app.client.post(app.url(&format!("/user/code?phone={phone}"))).header("x-request-id", forged);
    let sent = common::expect_ok(sent.send().await.unwrap()).await;
    assert_eq!(sent["success"], true);
    let code = app.stored_code(phone).await.expect("code stored");
    let token = common::expect_ok(app.post_login(phone, &code).await).await["data"].as_str().unwrap().to_owned();
    common::expect_ok(app.get(&format!("/user/me?phone={phone}"), Some(&token)).await).await;

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("sms code issued"), "the issue is logged: {logs}");
    assert!(logs.contains("139****5678"), "the phone appears masked: {logs}");
    assert!(!logs.contains(phone), "the whole phone appears: {logs}");
    let numbers: Vec<&str> = logs.split(|c: char| !c.is_ascii_digit()).collect();
    assert!(!numbers.contains(&code.as_str()), "the code {code} was logged: {logs}");
    assert!(!logs.lines().any(|l| l.contains("code=")), "a code field was logged: {logs}");
    assert!(!logs.contains("injected"), "a client's request id was logged as sent: {logs}");
    assert!(logs.contains("request_id="), "the request's span and its id are logged: {logs}");
}
