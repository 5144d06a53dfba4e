//! Prometheus metrics of a worker, kept and exposed with `prometheus-client`.
//!
//! Every metric is registered once, in [`Metrics::default`], with the name the
//! docs and the Grafana dashboard use; the crate writes the OpenMetrics text
//! (label values escaped, counters with their `_total` suffix). Updates are
//! atomic adds, except the histograms' and the label families' short locks.

use std::time::Duration;

use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram;
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets in seconds: 50 µs to 10 s, enough for both fingerprinting
/// (sub-millisecond) and Redis round trips under load; finest below 3 ms, so a
/// quantile read from them can be held to a 2 ms target.
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
#[derive(Debug, Clone)]
pub struct Histogram(histogram::Histogram);

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram(histogram::Histogram::new(BUCKETS))
    }
}

impl Histogram {
    /// A histogram of counts (buckets 0, 1, 2, 4, … 16384).
    pub fn counts() -> Histogram {
        Histogram(histogram::Histogram::new(COUNT_BUCKETS))
    }

    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }

    pub fn observe_value(&self, v: f64) {
        self.0.observe(v);
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ArticleLabels {
    verdict: String,
    signal: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    reason: String,
}

/// All metrics of one worker process. Shared by `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    articles: Family<ArticleLabels, Counter>,
    rejected: Family<RejectedLabels, Counter>,
    pub replayed: Counter,
    pub claimed: Counter,
    /// Times the reader stopped reading new entries, `order_slack` past an
    /// entry pending on another consumer, or a batch waited for an earlier
    /// one held elsewhere (`order.rs`).
    pub order_waits: Counter,
    /// Milliseconds it spent so.
    pub order_wait_ms: Counter,
    /// Batches that decided while another consumer still held an earlier
    /// entry, after waiting the whole bound: where verdicts may not be in
    /// stream order.
    pub order_given_up: Counter,
    pub dead_letters: Counter,
    /// Output entries not written because the input entry was already acked
    /// (another worker finished it first): the exactly-once guard at work.
    pub commit_skipped: Counter,
    pub redis_errors: Counter,
    /// Times the worker became unavailable (a call failing with a transient
    /// Redis error, `health.rs`).
    pub redis_outages: Counter,
    pub reconnects: Counter,
    pub index_retries: Counter,
    /// Commits that fewer than `worker.wait_replicas` replicas acknowledged
    /// within `worker.wait_timeout_ms` (each then sent again).
    pub replica_waits_timed_out: Counter,
    /// Index writes found lost when acking their entries (a failover lost
    /// them, or their bucket expired since), each entry then decided again;
    /// one lost again in a later round counts again.
    pub writes_lost: Counter,
    pub pending: Gauge,
    pub lag: Gauge,
    pub in_flight: Gauge,
    pub fingerprint_latency: Histogram,
    pub index_latency: Histogram,
    pub commit_latency: Histogram,
    pub read_latency: Histogram,
    /// Index entries each check examined (see `Outcome::examined`).
    pub examined: Histogram,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            articles: Family::default(),
            rejected: Family::default(),
            replayed: Counter::default(),
            claimed: Counter::default(),
            order_waits: Counter::default(),
            order_wait_ms: Counter::default(),
            order_given_up: Counter::default(),
            dead_letters: Counter::default(),
            commit_skipped: Counter::default(),
            redis_errors: Counter::default(),
            redis_outages: Counter::default(),
            reconnects: Counter::default(),
            index_retries: Counter::default(),
            replica_waits_timed_out: Counter::default(),
            writes_lost: Counter::default(),
            pending: Gauge::default(),
            lag: Gauge::default(),
            in_flight: Gauge::default(),
            fingerprint_latency: Histogram::default(),
            index_latency: Histogram::default(),
            commit_latency: Histogram::default(),
            read_latency: Histogram::default(),
            examined: Histogram::counts(),
        };
        m.registered()
    }
}

impl Metrics {
    /// Register every metric under its documented name. Counters are named
    /// without `_total`: the exposition adds it. The crate ends each help text
    /// with a period.
    fn registered(mut self) -> Metrics {
        self.register_counters();
        self.register_gauges();
        self.register_histograms();
        self
    }

    fn register_counters(&mut self) {
        let r = &mut self.registry;
        r.register(
            "simdedup_articles",
            "Output entries written, by verdict and deciding signal",
            self.articles.clone(),
        );
        r.register(
            "simdedup_rejected",
            "Rejected input entries, by reason code",
            self.rejected.clone(),
        );
        for (name, help, c) in [
            (
                "simdedup_replayed",
                "Checks answered from a stored verdict (redeliveries, resent ids)",
                &self.replayed,
            ),
            (
                "simdedup_claimed",
                "Entries taken over from consumers whose liveness key expired",
                &self.claimed,
            ),
            (
                "simdedup_order_waits",
                "Times the reader (order_slack past) or a batch waited for an earlier entry pending on another consumer",
                &self.order_waits,
            ),
            (
                "simdedup_order_wait_milliseconds",
                "Time the reader and batches spent waiting for earlier entries pending on other consumers",
                &self.order_wait_ms,
            ),
            (
                "simdedup_order_given_up",
                "Batches that decided while another consumer still held an earlier entry, after waiting the whole bound",
                &self.order_given_up,
            ),
            (
                "simdedup_dead_letters",
                "Entries written to the dead-letter stream",
                &self.dead_letters,
            ),
            (
                "simdedup_commit_skipped",
                "Finished entries whose output was not written because another consumer had already acked them",
                &self.commit_skipped,
            ),
            (
                "simdedup_redis_errors",
                "Failed Redis calls of the stream protocol (each retried)",
                &self.redis_errors,
            ),
            (
                "simdedup_redis_outages",
                "Times the worker became unavailable: a Redis call failing with a transient error (OOM, LOADING, BUSY, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, unreachable)",
                &self.redis_outages,
            ),
            (
                "simdedup_redis_reconnects",
                "Redis connections found broken and re-established",
                &self.reconnects,
            ),
            (
                "simdedup_index_retries",
                "Index calls retried after the index was unavailable",
                &self.index_retries,
            ),
            (
                "simdedup_replica_waits_timed_out",
                "Commits fewer than worker.wait_replicas replicas acknowledged within worker.wait_timeout_ms (each held and sent again)",
                &self.replica_waits_timed_out,
            ),
            (
                "simdedup_writes_lost",
                "Index writes found lost when acking their entries (a failover lost them, or their bucket expired since); each entry is decided again",
                &self.writes_lost,
            ),
        ] {
            r.register(name, help, c.clone());
        }
    }

    fn register_gauges(&mut self) {
        let r = &mut self.registry;
        for (name, help, g) in [
            (
                "simdedup_pending",
                "Entries delivered to the group but not yet acked (all consumers)",
                &self.pending,
            ),
            (
                "simdedup_lag",
                "Entries in the input stream not yet delivered to the group",
                &self.lag,
            ),
            (
                "simdedup_in_flight",
                "Entries this worker has read and not finished",
                &self.in_flight,
            ),
        ] {
            r.register(name, help, g.clone());
        }
    }

    fn register_histograms(&mut self) {
        let commit_help = format!(
            "Time of one ack-and-emit script call (up to {} entries of a batch)",
            super::ack::ENTRIES_PER_CALL
        );
        let r = &mut self.registry;
        for (name, help, h) in [
            (
                "simdedup_fingerprint_seconds",
                "Time to parse and fingerprint one article",
                &self.fingerprint_latency,
            ),
            (
                "simdedup_index_seconds",
                "Time of one index call (check, query or delete), Redis round trips included",
                &self.index_latency,
            ),
            ("simdedup_commit_seconds", &commit_help, &self.commit_latency),
            (
                "simdedup_read_seconds",
                "Time of one non-empty XREADGROUP/XAUTOCLAIM read",
                &self.read_latency,
            ),
            (
                "simdedup_candidates_per_check",
                "Index entries one check examined: block-list entries read plus the articles listed under its content and sketch hashes (0 for a replay)",
                &self.examined,
            ),
        ] {
            r.register(name, help, h.0.clone());
        }
    }

    /// Count one output entry by verdict and, for duplicates, signal.
    pub fn article(&self, verdict: &str, signal: Option<&str>) {
        self.articles
            .get_or_create(&ArticleLabels {
                verdict: verdict.to_owned(),
                signal: signal.unwrap_or("none").to_owned(),
            })
            .inc();
    }

    pub fn rejected(&self, code: &str) {
        self.rejected
            .get_or_create(&RejectedLabels {
                reason: code.to_owned(),
            })
            .inc();
    }

    /// Output entries counted so far with this verdict and signal (`none` for no signal).
    pub fn articles_count(&self, verdict: &str, signal: &str) -> u64 {
        self.articles
            .get_or_create(&ArticleLabels {
                verdict: verdict.to_owned(),
                signal: signal.to_owned(),
            })
            .get()
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
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
            text.contains("simdedup_articles_total{verdict=\"duplicate\",signal=\"simhash\"} 2"),
            "{text}"
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
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"0.0\"} 1"));
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"4.0\"} 2"));
        assert!(text.contains("simdedup_candidates_per_check_bucket{le=\"128.0\"} 3"));
        assert!(text.contains("simdedup_candidates_per_check_sum 103"));
    }

    /// Label values come from input (a rejection reason may one day carry
    /// text): the exposition escapes them, so one odd value cannot break the
    /// whole scrape.
    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.rejected("bad \"quote\" \\ and\nnewline");
        let text = m.render();
        assert!(
            text.contains(r#"simdedup_rejected_total{reason="bad \"quote\" \\ and\nnewline"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn every_documented_metric_is_exposed() {
        // A labelled family shows once it has a series.
        let m = Metrics::default();
        m.article("unique", None);
        m.rejected("malformed_json");
        let text = m.render();
        for name in [
            "simdedup_articles_total",
            "simdedup_rejected_total",
            "simdedup_replayed_total",
            "simdedup_claimed_total",
            "simdedup_order_waits_total",
            "simdedup_order_wait_milliseconds_total",
            "simdedup_order_given_up_total",
            "simdedup_dead_letters_total",
            "simdedup_commit_skipped_total",
            "simdedup_redis_errors_total",
            "simdedup_redis_outages_total",
            "simdedup_redis_reconnects_total",
            "simdedup_index_retries_total",
            "simdedup_replica_waits_timed_out_total",
            "simdedup_writes_lost_total",
            "simdedup_pending",
            "simdedup_lag",
            "simdedup_in_flight",
            "simdedup_fingerprint_seconds",
            "simdedup_index_seconds",
            "simdedup_commit_seconds",
            "simdedup_read_seconds",
            "simdedup_candidates_per_check",
        ] {
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{name} missing:\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
