//! JMeter's aggregate report: one row per outcome and a total, latencies
//! from HDR histograms, throughput over the wall time from the first
//! request sent to the last answer.

use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Success,
    /// 202: accepted, but no Redis replica acknowledged it in time (the
    /// asynchronous mode on a cluster); a failover may still lose it.
    Unreplicated,
    SoldOut,
    Duplicate,
    TooManyRequests,
    /// 503 UNAVAILABLE (a dependency fault, as the contract answers it) or
    /// OVERLOADED (a full instance, refused before any work).
    Unavailable,
    /// Anything else; `call` says what, by status.
    Other,
}

const OUTCOMES: [(Outcome, &str); 7] = [
    (Outcome::Success, "success"),
    (Outcome::Unreplicated, "202 unreplicated"),
    (Outcome::SoldOut, "SOLD_OUT"),
    (Outcome::Duplicate, "DUPLICATE_ORDER"),
    (Outcome::TooManyRequests, "429"),
    (Outcome::Unavailable, "503"),
    (Outcome::Other, "other"),
];

/// Raw samples per worker; histograms are built once, at the end (a set of
/// full-range histograms per worker would cost a thousand workers
/// gigabytes of page faults on the machine being measured).
pub struct Recorder {
    samples: Vec<(Outcome, u64)>,
    first_sent: Option<Instant>,
    last_done: Option<Instant>,
}

fn histogram() -> Histogram<u64> {
    // Microseconds, 1 µs to 10 min, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

impl Recorder {
    pub fn new() -> Self {
        Self { samples: Vec::new(), first_sent: None, last_done: None }
    }

    pub fn record(&mut self, outcome: Outcome, sent: Instant, done: Instant) {
        let micros = (done - sent).as_micros().clamp(1, 600_000_000) as u64;
        self.samples.push((outcome, micros));
        self.first_sent = Some(self.first_sent.map_or(sent, |t| t.min(sent)));
        self.last_done = Some(self.last_done.map_or(done, |t| t.max(done)));
    }

    pub fn merge(&mut self, other: Recorder) {
        self.samples.extend(other.samples);
        self.first_sent = match (self.first_sent, other.first_sent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_done = match (self.last_done, other.last_done) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn first_sent(&self) -> Option<Instant> {
        self.first_sent
    }

    pub fn count(&self, outcome: Outcome) -> u64 {
        self.samples.iter().filter(|(o, _)| *o == outcome).count() as u64
    }

    pub fn summary(&self) -> Summary {
        let wall = match (self.first_sent, self.last_done) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let mut histograms: Vec<Histogram<u64>> = OUTCOMES.iter().map(|_| histogram()).collect();
        for (outcome, micros) in &self.samples {
            histograms[index(*outcome)].saturating_record(*micros);
        }
        let mut total = histogram();
        let mut rows = Vec::new();
        for ((_, label), h) in OUTCOMES.iter().zip(&histograms) {
            total.add(h).expect("same bounds");
            if !h.is_empty() {
                rows.push(Row::of(label, h, wall, !matches!(*label, "success" | "202 unreplicated")));
            }
        }
        let errors =
            total.len() - histograms[index(Outcome::Success)].len() - histograms[index(Outcome::Unreplicated)].len();
        let mut total_row = Row::of("TOTAL", &total, wall, false);
        total_row.error_pct = percent(errors, total.len());
        rows.push(total_row);
        Summary { wall_secs: wall, rows }
    }
}

fn index(outcome: Outcome) -> usize {
    OUTCOMES.iter().position(|(o, _)| *o == outcome).expect("every outcome is listed")
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub wall_secs: f64,
    pub rows: Vec<Row>,
}

/// Latencies in milliseconds, as JMeter prints them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub label: String,
    pub samples: u64,
    pub average_ms: f64,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// JMeter's meaning: share of non-2xx answers (SOLD_OUT counts).
    pub error_pct: f64,
    pub throughput_per_sec: f64,
}

impl Row {
    fn of(label: &str, h: &Histogram<u64>, wall: f64, all_errors: bool) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            label: label.to_owned(),
            samples: h.len(),
            average_ms: h.mean() / 1000.0,
            median_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            min_ms: ms(h.min()),
            max_ms: ms(h.max()),
            error_pct: if all_errors { 100.0 } else { 0.0 },
            throughput_per_sec: if wall > 0.0 { h.len() as f64 / wall } else { 0.0 },
        }
    }
}

pub fn render(summary: &Summary) -> String {
    let mut out = format!(
        "Aggregate report (wall time {:.3} s, latencies in ms)\n{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>12}\n",
        summary.wall_secs,
        "Label",
        "# Samples",
        "Average",
        "Median",
        "90% Line",
        "95% Line",
        "99% Line",
        "Min",
        "Max",
        "Error %",
        "Throughput"
    );
    for r in &summary.rows {
        out.push_str(&format!(
            "{:<16} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.2}% {:>10.1}/s\n",
            r.label,
            r.samples,
            r.average_ms,
            r.median_ms,
            r.p90_ms,
            r.p95_ms,
            r.p99_ms,
            r.min_ms,
            r.max_ms,
            r.error_pct,
            r.throughput_per_sec
        ));
    }
    out
}
