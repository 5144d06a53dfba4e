//! Prometheus metrics of a worker, hand-rolled on atomics.
//!
//! A dozen counters, two gauges and three histograms do not justify a metrics
//! framework (and its compile time on a 2-core box); the text exposition format
//! is simple and stable. Everything here is lock-free except the label maps,
//! whose locks are held for a hash-map lookup.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Latency buckets in seconds: 50 µs to 10 s, enough for both fingerprinting
/// (sub-millisecond) and Redis round trips under load; finest below 3 ms, so a
/// quantile read from them can be held to a 2 ms target (issue 3).
const BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5, 0.002, 0.003, 0.005,
    0.01, 0.025, 0.1, 1.0, 10.0,
];

/// Count buckets for "index entries examined per check": 0, then powers of two.
const COUNT_BUCKETS: [f64; 16] = [
    0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0,
];

/// A histogram with fixed buckets: latencies in seconds ([`Histogram::default`])
/// or counts ([`Histogram::counts`]).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64; 16],
    buckets: [AtomicU64; 16],
    count: AtomicU64,
    /// Sum of the observed values in millionths (µs for latencies).
    sum_millionths: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::with_bounds(&BUCKETS)
    }
}

impl Histogram {
    fn with_bounds(bounds: &'static [f64; 16]) -> Histogram {
        Histogram {
            bounds,
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_millionths: AtomicU64::new(0),
        }
    }

    /// A histogram of counts (buckets 0, 1, 2, 4, … 16384).
    pub fn counts() -> Histogram {
        Histogram::with_bounds(&COUNT_BUCKETS)
    }

    pub fn observe(&self, d: Duration) {
        self.observe_value(d.as_secs_f64());
    }

    pub fn observe_value(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_millionths
            .fetch_add((v * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_millionths.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// A counter family keyed by label values.
#[derive(Debug, Default)]
struct Family(Mutex<BTreeMap<String, u64>>);

impl Family {
    fn inc(&self, labels: String, by: u64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(labels).or_insert(0) += by;
    }

    fn get(&self, labels: &str) -> u64 {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(labels).copied().unwrap_or(0)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (labels, v) in map.iter() {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

fn counter(out: &mut String, name: &str, help: &str, v: &AtomicU64) {
    let v = v.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, v: &AtomicI64) {
    let v = v.load(Ordering::Relaxed);
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

/// Label values here are our own verdict/signal/reason codes (no quotes or
/// backslashes), so they need no escaping.
fn label(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect::<Vec<_>>()
        .join(",")
}

/// All metrics of one worker process. Shared by `Arc`.
#[derive(Debug)]
pub struct Metrics {
    articles: Family,
    rejected: Family,
    pub replayed: AtomicU64,
    pub claimed: AtomicU64,
    pub dead_letters: AtomicU64,
    /// Output entries not written because the input entry was already acked
    /// (another worker finished it first): the exactly-once guard at work.
    pub commit_skipped: AtomicU64,
    pub redis_errors: AtomicU64,
    /// Times the worker became unavailable (a call failing with a transient
    /// Redis error, `health.rs`).
    pub redis_outages: AtomicU64,
    pub reconnects: AtomicU64,
    pub index_retries: AtomicU64,
    pub pending: AtomicI64,
    pub lag: AtomicI64,
    pub in_flight: AtomicI64,
    pub fingerprint_latency: Histogram,
    pub index_latency: Histogram,
    pub commit_latency: Histogram,
    pub read_latency: Histogram,
    /// Index entries each check examined (see `Outcome::examined`).
    pub examined: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            articles: Family::default(),
            rejected: Family::default(),
            replayed: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            commit_skipped: AtomicU64::new(0),
            redis_errors: AtomicU64::new(0),
            redis_outages: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            index_retries: AtomicU64::new(0),
            pending: AtomicI64::new(0),
            lag: AtomicI64::new(0),
            in_flight: AtomicI64::new(0),
            fingerprint_latency: Histogram::default(),
            index_latency: Histogram::default(),
            commit_latency: Histogram::default(),
            read_latency: Histogram::default(),
            examined: Histogram::counts(),
        }
    }
}

impl Metrics {
    /// Count one output entry by verdict and, for duplicates, signal.
    pub fn article(&self, verdict: &str, signal: Option<&str>) {
        self.articles.inc(
            label(&[("verdict", verdict), ("signal", signal.unwrap_or("none"))]),
            1,
        );
    }

    pub fn rejected(&self, code: &str) {
        self.rejected.inc(label(&[("reason", code)]), 1);
    }

    /// Output entries counted so far with this verdict and signal (`none` for no signal).
    pub fn articles_count(&self, verdict: &str, signal: &str) -> u64 {
        self.articles
            .get(&label(&[("verdict", verdict), ("signal", signal)]))
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        self.articles.render(
            &mut out,
            "simdedup_articles_total",
            "Output entries written, by verdict and deciding signal.",
        );
        self.rejected.render(
            &mut out,
            "simdedup_rejected_total",
            "Rejected input entries, by reason code.",
        );
        counter(
            &mut out,
            "simdedup_replayed_total",
            "Checks answered from a stored verdict (redeliveries, resent ids).",
            &self.replayed,
        );
        counter(
            &mut out,
            "simdedup_claimed_total",
            "Entries taken over from consumers whose liveness key expired.",
            &self.claimed,
        );
        counter(
            &mut out,
            "simdedup_dead_letters_total",
            "Entries written to the dead-letter stream.",
            &self.dead_letters,
        );
        counter(&mut out, "simdedup_commit_skipped_total", "Finished entries whose output was not written because another consumer had already acked them.", &self.commit_skipped);
        counter(
            &mut out,
            "simdedup_redis_errors_total",
            "Failed Redis calls of the stream protocol (each retried).",
            &self.redis_errors,
        );
        counter(
            &mut out,
            "simdedup_redis_outages_total",
            "Times the worker became unavailable: a Redis call failing with a transient error (OOM, LOADING, BUSY, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, unreachable).",
            &self.redis_outages,
        );
        counter(
            &mut out,
            "simdedup_redis_reconnects_total",
            "Redis connections found broken and re-established.",
            &self.reconnects,
        );
        counter(
            &mut out,
            "simdedup_index_retries_total",
            "Index calls retried after the index was unavailable.",
            &self.index_retries,
        );
        gauge(
            &mut out,
            "simdedup_pending",
            "Entries delivered to the group but not yet acked (all consumers).",
            &self.pending,
        );
        gauge(
            &mut out,
            "simdedup_lag",
            "Entries in the input stream not yet delivered to the group.",
            &self.lag,
        );
        gauge(
            &mut out,
            "simdedup_in_flight",
            "Entries this worker has read and not finished.",
            &self.in_flight,
        );
        self.fingerprint_latency.render(
            &mut out,
            "simdedup_fingerprint_seconds",
            "Time to parse and fingerprint one article.",
        );
        self.index_latency.render(
            &mut out,
            "simdedup_index_seconds",
            "Time of one index call (check, query or delete), Redis round trips included.",
        );
        self.commit_latency.render(
            &mut out,
            "simdedup_commit_seconds",
            &format!(
                "Time of one ack-and-emit script call (up to {} entries of a batch).",
                super::commit::ENTRIES_PER_CALL
            ),
        );
        self.read_latency.render(
            &mut out,
            "simdedup_read_seconds",
            "Time of one non-empty XREADGROUP/XAUTOCLAIM read.",
        );
        self.examined.render(
            &mut out,
            "simdedup_candidates_per_check",
            "Index entries one check examined: SimHashes read from block sets plus stored articles fetched (0 for a replay).",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::default();
        m.article("duplicate", Some("simhash"));
        m.article("duplicate", Some("simhash"));
        m.article("unique", None);
        m.fingerprint_latency.observe(Duration::from_micros(80));
        m.fingerprint_latency.observe(Duration::from_millis(3));
        let text = m.render();
        assert!(
            text.contains("simdedup_articles_total{verdict=\"duplicate\",signal=\"simhash\"} 2")
        );
        assert!(text.contains("simdedup_articles_total{verdict=\"unique\",signal=\"none\"} 1"));
        assert!(text.contains("simdedup_fingerprint_seconds_bucket{le=\"0.0001\"} 1"));
        assert!(text.contains("simdedup_fingerprint_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("simdedup_fingerprint_seconds_count 2"));
        assert_eq!(m.articles_count("unique", "none"), 1);
        m.examined.observe_value(0.0);
        m.examined.observe_value(3.0);
        m.examined.observe_value(100.0);
        let text = m.render();
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"0\"} 1"));
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"4\"} 2"));
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"128\"} 3"));
        assert!(text.contains("simdedup_candidates_per_check_sum 103"));
    }
}
