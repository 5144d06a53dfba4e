//! The worker run every high-availability topology goes through: two workers
//! on the Redis index reached by one URL, a feed of near-duplicate groups, an
//! optional failover in the middle, and the stream contract checked on the
//! primary that holds the namespace once it is over.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use simdedup::decision::DecisionConfig;
use simdedup::index::{RedisIndex, RedisIndexOptions};
use simdedup::keys::Keys;
use simdedup::settings::Settings;
use simdedup::worker::shutdown::ShutdownTrigger;
use simdedup::worker::{RunSummary, Worker, WorkerConfig};

use crate::worker_common::*;

/// Upper bound of every wait (against hangs, not a timing assertion).
pub const LIMIT: Duration = Duration::from_secs(120);
const GROUPS: u64 = 40;
const COPIES: u64 = 5;

/// `(id, text)` of the feed: `GROUPS` groups of `COPIES` near-duplicates,
/// interleaved so copies of a group arrive apart.
fn feed() -> Vec<(String, String)> {
    (0..COPIES)
        .flat_map(|v| (0..GROUPS).map(move |g| (format!("g{g}-v{v}"), article_text(g, v))))
        .collect()
}

fn add(conn: &mut redis::Connection, keys: &Keys, articles: &[(String, String)]) {
    for (id, text) in articles {
        xadd_article(conn, keys, id, text);
    }
}

/// Blocking work from an async test (the runtime keeps its other threads).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// What a run measured.
pub struct Report {
    /// From the failover's start to the first output written by the new primary.
    pub failover_to_output: Option<Duration>,
}

/// Feed the namespace `ns` through two workers reaching Redis by `url`;
/// `primary()` connects to the node holding the namespace now. When
/// `failover` is given, it is run once the workers are midway, and must
/// return when a new primary serves. Then checks: every input entry present
/// on the (new) primary answered by exactly one output, nothing pending, one
/// kept per group.
pub async fn run(
    url: &str,
    ns: &str,
    primary: impl Fn() -> redis::Connection,
    failover: Option<Box<dyn FnOnce() + '_>>,
) -> Report {
    run_with(url, ns, primary, failover, fast_config()).await
}

/// [`run`] with the workers' settings based on `base` (each gets its own
/// consumer name and a batch of 4).
pub async fn run_with(
    url: &str,
    ns: &str,
    primary: impl Fn() -> redis::Connection,
    failover: Option<Box<dyn FnOnce() + '_>>,
    base: WorkerConfig,
) -> Report {
    let keys = Keys::new(ns);
    let articles = feed();
    let (first, rest) = articles.split_at(articles.len() * 3 / 4);
    blocking(|| add(&mut primary(), &keys, first));
    let (trigger, _) = ShutdownTrigger::new();
    let fingerprinter = Settings::default().fingerprinter().unwrap();
    let mut handles = Vec::new();
    for i in 0..2 {
        let index = RedisIndex::connect(
            url,
            ns,
            DecisionConfig::default(),
            RedisIndexOptions::default(),
        )
        .await
        .expect("the index connects through the same URL");
        let config = WorkerConfig {
            consumer: format!("w{i}"),
            batch_size: 4,
            ..base.clone()
        };
        let worker = Worker::new(
            url,
            ns,
            std::sync::Arc::new(index),
            fingerprinter.clone(),
            config,
            1 << 20,
        )
        .unwrap();
        let shutdown = trigger.subscribe();
        handles.push(tokio::spawn(async move { worker.run(shutdown).await }));
    }
    let out = keys.output_stream();
    let mut report = Report {
        failover_to_output: None,
    };
    if let Some(failover) = failover {
        blocking(|| {
            wait_until("workers midway", LIMIT, || xlen(&mut primary(), &out) >= 40);
        });
        let started = Instant::now();
        blocking(failover);
        // New entries for the new primary; the first output it writes after
        // them is the workers' first since the failover.
        let before = blocking(|| {
            let mut conn = primary();
            let before = xlen(&mut conn, &out);
            add(&mut conn, &keys, rest);
            before
        });
        blocking(|| {
            wait_until("a first output after the failover", LIMIT, || {
                redis::cmd("XLEN")
                    .arg(&out)
                    .query::<usize>(&mut primary())
                    .is_ok_and(|n| n > before)
            })
        });
        report.failover_to_output = Some(started.elapsed());
    } else {
        blocking(|| add(&mut primary(), &keys, rest));
    }
    blocking(|| {
        wait_until("every input answered, nothing pending", LIMIT, || {
            let mut conn = primary();
            xlen(&mut conn, &out) >= xlen(&mut conn, &keys.input_stream())
                && pending(&mut conn, &keys, "simdedup") == 0
        })
    });
    trigger.fire();
    for h in handles {
        let summary: RunSummary = h.await.unwrap().expect("the worker ran to its end");
        assert_eq!(summary.abandoned, 0);
    }
    let outputs = blocking(|| assert_exactly_once(&mut primary(), &keys, "simdedup"));
    assert_one_kept_per_group(&outputs, GROUPS as usize);
    report
}
