//! Prometheus metrics. Events are counted where they happen, through the
//! `metrics` facade (requests in `http`, orders in `seckill`); what is a
//! level rather than an event (the pool, the lock's counters, the streams)
//! is read when Prometheus scrapes. `GET /metrics` is served on each
//! instance's own port; the public nginx server does not route it.

use std::sync::OnceLock;

use axum::{
    Router,
    extract::{FromRef, State},
    http::header,
    response::{IntoResponse, Response},
    routing::get,
};
use hmdp_redis::hot::HotKeys;
use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::MySqlPool;

use crate::seckill::Seckill;

/// Latency buckets in seconds: from a cached sold-out answer (sub-ms) to an
/// order that waited on the hot row for seconds.
const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The `metrics` facade sends every event to one process-wide recorder, so
/// the recorder is installed once per process and every app state built in
/// it (several in tests) renders from the same handle.
pub(crate) fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
                .expect("the buckets are not empty")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            describe();
            handle
        })
        .clone()
}

/// HELP lines: `promtool check metrics` (and whoever reads a dashboard)
/// wants every family explained. Names are listed here once, whichever
/// module counts them.
fn describe() {
    describe_orders();
    describe_serving();
    describe_order_paths();
    describe_order_events();
}

/// The outbox relay's (`ORDER_EVENTS=nats` only).
fn describe_order_events() {
    describe_gauge!(
        "hmdp_outbox_relay_active",
        "1 on the instance relaying order events (it holds the lease), 0 on the others"
    );
    describe_gauge!(
        "hmdp_outbox_backlog",
        "Order events written and not yet acknowledged by NATS, on the relaying instance"
    );
    describe_gauge!(
        "hmdp_outbox_oldest_seconds",
        Unit::Seconds,
        "How long the oldest order event not yet acknowledged by NATS has waited"
    );
    describe_histogram!(
        "hmdp_outbox_lag_seconds",
        Unit::Seconds,
        "From an order event's write to the relay's round that took it out after the broker's ack"
    );
    describe_counter!("hmdp_outbox_published_total", "Order events acknowledged by NATS");
    describe_counter!("hmdp_outbox_publish_failures_total", "Relay rounds that failed (NATS or MariaDB away)");
    describe_counter!("hmdp_outbox_duplicates_total", "Order events the broker dropped as copies of one it had");
}

/// The orders' life after the sale and what Redis was told about them.
fn describe_orders() {
    describe_counter!(
        "hmdp_order_transitions_total",
        "orders moved to a state (PAID, USED, CANCELLED, REFUNDED), by whom: a request or the unpaid timeout"
    );
    describe_counter!("hmdp_units_returned_total", "units given back to the stock by cancelled and refunded orders");
    describe_histogram!(
        "hmdp_order_expiry_lag_seconds",
        Unit::Seconds,
        "from an unpaid order's payment deadline to its cancel by the sweep"
    );
    describe_counter!(
        "hmdp_redis_stock_corrections_total",
        "times a voucher's Redis stock was set from MariaDB's row and changed (a refusal for lack of stock, a dead letter, the stock route)"
    );
    describe_counter!(
        "hmdp_redis_relearned_total",
        "times a voucher's Redis master changed (a failover) and its buyers and stock were learnt again from MariaDB"
    );
    describe_counter!(
        "hmdp_orders_vanished_total",
        "orders answered 202 that a demoted Redis master took along, recorded FAILED"
    );
}

/// Requests, connections, dependencies and the lock.
fn describe_serving() {
    describe_counter!("hmdp_http_requests_total", "HTTP requests answered, by method, matched route and status");
    describe_gauge!("hmdp_connections_open", "Connections open, by listener (tcp, or proxy: nginx's socket)");
    describe_counter!(
        "hmdp_connections_timed_out_total",
        "Connections closed by the instance, by listener and reason: header (no whole request head within HEADER_TIMEOUT_MS) or keepalive (idle past KEEPALIVE_TIMEOUT_MS)"
    );
    describe_counter!(
        "hmdp_connections_cap_reached_total",
        "Times a listener found MAX_CONNECTIONS open and waited for one to close before accepting"
    );
    describe_histogram!(
        "hmdp_http_request_duration_seconds",
        Unit::Seconds,
        "Time from the request's arrival to its answer, by method and matched route"
    );
    describe_counter!(
        "hmdp_seckill_orders_total",
        "Seckill orders answered, by mode and outcome (success or errorCode)"
    );
    describe_counter!(
        "hmdp_dependency_errors_total",
        "Calls to Redis or the database that failed, by dependency and kind (unavailable or error)"
    );
    describe_gauge!("hmdp_db_pool_connections", "Database pool connections, by state (idle, in_use)");
    describe_gauge!("hmdp_db_pool_max_connections", "The database pool's ceiling (DB_MAX_CONNECTIONS)");
    describe_counter!(
        "hmdp_lock_events_total",
        "Order lock events since start: acquired, reentered, contended, wait_timeout, renewed, lost, abandoned"
    );
    describe_gauge!(
        "hmdp_hot_keys",
        "Hash tags that took HOT_KEY_PERCENT or more of their Redis master's commands in the last 0.4 s, as this instance sampled them"
    );
    describe_counter!(
        "hmdp_hot_keys_found_total",
        "Hash tags found hot since start, each once per run of windows in which it stayed hot"
    );
}

/// The order paths: group commit, the asynchronous stream, segments, the
/// sale path, ids.
fn describe_order_paths() {
    describe_counter!("hmdp_group_commit_groups_total", "Transactions committed by the group-commit path");
    describe_counter!("hmdp_group_commit_orders_total", "Orders committed by the group-commit path");
    describe_gauge!("hmdp_async_stream_length", "Entries in a voucher's order stream (asynchronous mode)");
    describe_gauge!(
        "hmdp_async_pending_entries",
        "Entries delivered to the consumer group but not yet acknowledged (asynchronous mode)"
    );
    describe_gauge!("hmdp_async_consumer_lag", "Entries the consumer group has not yet read (asynchronous mode)");
    describe_counter!(
        "hmdp_async_consumer_failures_total",
        "Consumer rounds or batches that failed and will be retried"
    );
    describe_counter!(
        "hmdp_async_shared_batches_total",
        "Rounds whose batches of several streams (vouchers opening together) were persisted in one transaction"
    );
    describe_counter!(
        "hmdp_async_dead_lettered_total",
        "Stream entries moved to the dead-letter stream after too many deliveries"
    );
    describe_counter!(
        "hmdp_admin_key_failures_total",
        "Admin requests with a wrong or missing X-Admin-Key (each address may send 10 per 15 min)"
    );
    describe_gauge!("hmdp_segment_stock", "A voucher sold in segments: each segment's stock in Redis");
    describe_gauge!("hmdp_segment_buyers", "A voucher sold in segments: the users holding an order in each segment");
    describe_gauge!(
        "hmdp_segment_borrows_in_flight",
        "A voucher sold in segments: borrows each segment lent that are not yet credited"
    );
    describe_gauge!(
        "hmdp_segment_lends",
        "A voucher sold in segments: how many times each segment lent since its stock was put on sale"
    );
    describe_counter!(
        "hmdp_segment_units_recovered_total",
        "Units of borrows whose borrower died between the two halves, returned to their lender"
    );
    describe_counter!(
        "hmdp_sale_path_asks_total",
        "Asks for a guarded voucher's sale path that reached the line, by what they got (admitted, in_line, challenged, line_full, challenge_used)"
    );
    describe_counter!(
        "hmdp_order_id_collisions_total",
        "Accepted orders whose id another order's row already holds (an id sequence that went backwards): an alarm"
    );
}

pub(crate) fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    MySqlPool: FromRef<S>,
    Seckill: FromRef<S>,
    HotKeys: FromRef<S>,
    PrometheusHandle: FromRef<S>,
{
    Router::new().route("/metrics", get(scrape))
}

#[utoipa::path(get, path = "/metrics", tag = "operations",
    description = "Served on each instance's port; the public nginx server does not route it.",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub(crate) async fn scrape(
    State(pool): State<MySqlPool>,
    State(seckill): State<Seckill>,
    State(hot_keys): State<HotKeys>,
    State(handle): State<PrometheusHandle>,
) -> Response {
    let idle = pool.num_idle() as f64;
    gauge!("hmdp_db_pool_connections", "state" => "idle").set(idle);
    gauge!("hmdp_db_pool_connections", "state" => "in_use").set((f64::from(pool.size()) - idle).max(0.0));
    gauge!("hmdp_db_pool_max_connections").set(f64::from(pool.options().get_max_connections()));

    let locks = seckill.locks().metrics();
    for (what, value) in [
        ("acquired", locks.acquired),
        ("reentered", locks.reentered),
        ("contended", locks.contended),
        ("wait_timeout", locks.wait_timeouts),
        ("renewed", locks.renewals),
        ("lost", locks.lost),
        ("abandoned", locks.abandoned),
    ] {
        counter!("hmdp_lock_events_total", "event" => what).absolute(value);
    }

    gauge!("hmdp_hot_keys").set(hot_keys.current().len() as f64);
    counter!("hmdp_hot_keys_found_total").absolute(hot_keys.found());

    let groups = seckill.group_stats();
    counter!("hmdp_group_commit_groups_total").absolute(groups.groups);
    counter!("hmdp_group_commit_orders_total").absolute(groups.committed);

    if let Err(err) = seckill.record_metrics().await {
        counter!("hmdp_dependency_errors_total", "dependency" => "redis").increment(1);
        tracing::warn!(error = %err, "reading the order streams for /metrics");
    }
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render()).into_response()
}
