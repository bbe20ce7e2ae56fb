//! The fault injected by the caller's command, at its moment, and whether
//! it showed it happened and every instance served again after.

use std::time::{Duration, Instant};

use super::{args::ChaosArgs, probe::serving_again};

/// What the injection showed.
#[derive(Debug, Clone)]
pub struct Injection {
    pub happened: bool,
    pub evidence: String,
    /// Every instance answered `/ready` within `RECOVERY` of the fault's end.
    pub recovered: bool,
    /// When the injection began and when it returned (the fault over: a
    /// killed master's replica promoted, a paused Redis let go).
    pub started: Instant,
    pub ended: Instant,
}

impl Injection {
    /// Whether `at` fell while the fault lasted.
    pub fn lasted(&self, at: Instant) -> bool {
        (self.started..=self.ended).contains(&at)
    }
}

/// Starts the fault's clock: the command runs `fault_at` after now, and the
/// instances are watched once it returns. The command finds the sale's
/// (first) voucher in `SALE_VOUCHER_ID` (a fault aimed at the voucher's
/// master), and all of them, comma-separated, in `SALE_VOUCHER_IDS`.
pub fn inject(args: &ChaosArgs, client: reqwest::Client, vouchers: &[u64]) -> tokio::task::JoinHandle<Injection> {
    let (command, at, instances) =
        (args.inject.clone().unwrap_or_default(), Duration::from_secs_f64(args.fault_at), args.instances.clone());
    let first = vouchers.first().map(u64::to_string).unwrap_or_default();
    let all = vouchers.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    tokio::spawn(async move {
        tokio::time::sleep(at).await;
        let started = Instant::now();
        let ran = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .env("SALE_VOUCHER_ID", first)
            .env("SALE_VOUCHER_IDS", all)
            .output()
            .await;
        let ended = Instant::now();
        let (happened, evidence) = match ran {
            Ok(out) => {
                let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                (
                    out.status.success(),
                    if said.is_empty() { String::from_utf8_lossy(&out.stderr).trim().to_owned() } else { said },
                )
            }
            Err(err) => (false, format!("could not run {command:?}: {err}")),
        };
        eprintln!("fault: {}{evidence}", if happened { "" } else { "FAILED: " });
        let recovered = serving_again(&client, &instances).await;
        Injection { happened, evidence, recovered, started, ended }
    })
}
