//! The strategy lab against the real MariaDB and Redis: the strategies that
//! must be correct pass their audit, and the broken ones break on every
//! run, because the lab makes their race certain.

use hmdp_test_support::scratch;

use hmdp_lab::{Experiment, LabOptions, LabReport};

fn small(only: &[Experiment]) -> LabOptions {
    LabOptions {
        users: 400,
        stock: 120,
        concurrency: 64,
        double_click_percent: 20,
        only: only.to_vec(),
        ..Default::default()
    }
}

async fn run_lab(options: &LabOptions) -> LabReport {
    let (config, database, prefix) = scratch::test_config();
    let report = hmdp_lab::run(&config, options).await;
    scratch::cleanup(database, prefix).await;
    report.expect("the lab ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_strategy_oversells_and_sells_twice_on_every_run() {
    for run in 0..3 {
        let report = run_lab(&small(&[Experiment::Naive])).await;
        let naive = &report.strategies[0];
        assert!(naive.audit.oversold > 0, "run {run}: no oversell: {:?}", naive.audit);
        assert!(naive.audit.duplicates > 0, "run {run}: no duplicate order: {:?}", naive.audit);
        assert!(naive.audit.stock_left < 0, "run {run}: the stock did not go below zero: {:?}", naive.audit);
        assert!(report.unexpected().is_empty(), "{:?}", report.unexpected());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_correct_strategy_sells_its_stock_once_per_buyer() {
    let correct: Vec<Experiment> = Experiment::STRATEGIES.into_iter().filter(|e| e.must_be_correct()).collect();
    let report = run_lab(&small(&correct)).await;
    assert_eq!(report.strategies.len(), correct.len());
    for run in &report.strategies {
        assert!(run.audit.clean(), "{}: {:?}", run.name, run.audit);
        assert_eq!(run.audit.orders as u64, run.successes, "{}: rows and success answers differ", run.name);
        if run.strategy == Experiment::VersionCas {
            assert!(run.audit.stock_left > 0, "version CAS without retries sold everything: {:?}", run.audit);
            assert!(run.refusals.get("VERSION_CONFLICT").copied().unwrap_or(0) > 0);
        } else {
            assert_eq!(run.audit.stock_left, 0, "{} left stock with 400 buyers for 120", run.name);
        }
    }
    assert!(report.unexpected().is_empty(), "{:?}", report.unexpected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_lock_pitfall_shows_and_the_watchdog_lock_shows_none() {
    let options = LabOptions { quick: true, only: Experiment::LOCK_SCENARIOS.to_vec(), ..Default::default() };
    let report = run_lab(&options).await;
    let by = |e: Experiment| report.locks.iter().find(|r| r.name == e.name()).expect("scenario ran");
    let setnx = by(Experiment::SetnxNoExpiry);
    assert_eq!(setnx.deadlocked as usize, setnx.tasks - 1, "{setnx:?}");
    for pitfall in [Experiment::ExpiryNoOwnerCheck, Experiment::CheckThenDelete] {
        let run = by(pitfall);
        assert!(run.overlaps > 0 && run.foreign_deletes > 0, "{run:?}");
    }
    let lease = by(Experiment::LeaseShorterThanWork);
    assert!(lease.overlaps > 0 && lease.lost_leases > 0, "{lease:?}");
    let watchdog = by(Experiment::Watchdog);
    assert_eq!(
        (watchdog.overlaps, watchdog.foreign_deletes, watchdog.lost_leases, watchdog.deadlocked),
        (0, 0, 0, 0),
        "{watchdog:?}"
    );
    assert_eq!(watchdog.acquisitions, (watchdog.tasks * 2) as u64);
    assert!(report.unexpected().is_empty(), "{:?}", report.unexpected());
}
