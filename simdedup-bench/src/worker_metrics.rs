//! What the workers of an end-to-end run saw: their index-call latency, read
//! from each worker's own `/metrics` endpoint just before it is stopped.
//!
//! The latency target is the *worker-observed* p99 at 10 M articles. The index
//! measurement ([`super::index`]) times checks from a bench client with 16 in
//! flight; this is the other reading: the `simdedup_index_seconds` histogram of
//! real workers under the end-to-end load, summed over the workers, and its
//! quantiles estimated the way Prometheus' `histogram_quantile` does (linear
//! within a bucket), so the figure is what an operator's dashboard would show.
//! The parsing and the estimate are pure functions, tested without I/O.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde::Serialize;

/// The histogram of index-call latency a worker exports.
pub const INDEX_SECONDS: &str = "simdedup_index_seconds";

/// A Prometheus histogram: (upper bound, cumulative count) per bucket, `+Inf`
/// last, as exported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets(pub Vec<(f64, u64)>);

impl Buckets {
    /// The cumulative buckets of histogram `name` in a text exposition, or
    /// `None` when it has none.
    pub fn parse(text: &str, name: &str) -> Option<Buckets> {
        let prefix = format!("{name}_bucket{{le=\"");
        let buckets: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(&prefix)?;
                let (le, count) = rest.split_once("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, count.trim().parse().ok()?))
            })
            .collect();
        (!buckets.is_empty()).then_some(Buckets(buckets))
    }

    /// The sum of two histograms with the same buckets (two workers).
    pub fn add(&mut self, other: &Buckets) {
        if self.0.is_empty() {
            self.0 = other.0.clone();
            return;
        }
        for ((le, n), (le2, n2)) in self.0.iter_mut().zip(&other.0) {
            debug_assert_eq!(le, le2, "workers of one build export the same buckets");
            *n += n2;
        }
    }

    pub fn count(&self) -> u64 {
        self.0.last().map_or(0, |&(_, n)| n)
    }

    /// The `q`-quantile (0–1) in the histogram's unit: linear interpolation
    /// inside the bucket that holds it, as Prometheus' `histogram_quantile`;
    /// the largest finite bound when it falls in `+Inf`. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let (mut lower, mut below) = (0.0, 0u64);
        for &(le, cumulative) in &self.0 {
            if cumulative as f64 >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = (cumulative - below) as f64;
                let share = if inside > 0.0 {
                    (rank - below as f64) / inside
                } else {
                    1.0
                };
                return Some(lower + (le - lower) * share);
            }
            (lower, below) = (le, cumulative);
        }
        Some(lower)
    }
}

/// Index-call latency of a run's workers, summed over them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IndexLatency {
    /// Index calls observed (check-and-insert attempts, deletes, queries).
    pub calls: u64,
    /// Of the index calls.
    pub p50_us: f64,
    pub p99_us: f64,
}

impl IndexLatency {
    /// From the summed `simdedup_index_seconds`.
    pub fn from_buckets(calls: &Buckets) -> Option<IndexLatency> {
        Some(IndexLatency {
            calls: calls.count(),
            p50_us: calls.quantile(0.50)? * 1e6,
            p99_us: calls.quantile(0.99)? * 1e6,
        })
    }
}

/// `GET /metrics` from a worker's HTTP listener on 127.0.0.1:`port`.
pub fn scrape(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    match reply.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_owned()),
        _ => Err(std::io::Error::other(format!(
            "unexpected reply from the worker's /metrics: {}",
            reply.lines().next().unwrap_or("(empty)")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simdedup::worker::metrics::Metrics;

    #[test]
    fn reads_a_workers_histogram_and_estimates_quantiles() {
        let m = Metrics::default();
        // 98 calls of 0.4 ms, one of 1.2 ms, one of 20 s (beyond every bound).
        for _ in 0..98 {
            m.index_latency.observe(Duration::from_micros(400));
        }
        m.index_latency.observe(Duration::from_micros(1200));
        m.index_latency.observe(Duration::from_secs(20));
        let b = Buckets::parse(&m.render(), INDEX_SECONDS).expect("the histogram");
        assert_eq!(b.count(), 100);
        assert_eq!(b.0.last().map(|x| x.0), Some(f64::INFINITY));
        // The median lies in the 0.3–0.5 ms bucket that holds the 98 calls:
        // rank 50 of 98 there.
        let p50 = b.quantile(0.5).unwrap();
        assert!(
            (p50 - (0.0003 + 0.0002 * 50.0 / 98.0)).abs() < 1e-9,
            "{p50}"
        );
        // The 99th call is the 1.2 ms one, in the 1–1.5 ms bucket, alone there.
        let p99 = b.quantile(0.99).unwrap();
        assert!((p99 - 0.0015).abs() < 1e-9, "{p99}");
        // The last one is past every finite bound: the largest one is reported.
        assert_eq!(b.quantile(1.0), Some(10.0));
        assert!(Buckets::parse(&m.render(), "simdedup_nothing").is_none());
    }

    #[test]
    fn workers_histograms_add_up() {
        let text = |a: u64, b: u64| {
            format!(
                "x_bucket{{le=\"0.001\"}} {a}\nx_bucket{{le=\"+Inf\"}} {b}\nx_sum 1\nx_count {b}\n"
            )
        };
        let mut sum = Buckets::default();
        sum.add(&Buckets::parse(&text(3, 4), "x").unwrap());
        sum.add(&Buckets::parse(&text(5, 5), "x").unwrap());
        assert_eq!(sum.0, vec![(0.001, 8), (f64::INFINITY, 9)]);
        let l = IndexLatency::from_buckets(&sum).unwrap();
        assert_eq!(l.calls, 9);
        assert!(l.p50_us < 1000.0 && l.p99_us == 1000.0, "{l:?}");
        assert!(IndexLatency::from_buckets(&Buckets::default()).is_none());
    }
}
