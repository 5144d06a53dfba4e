//! Fill an index, or check articles against it, on a Redis server given by URL:
//! the two halves of measuring the commit script's *instructions* per check
//! under `valgrind --tool=callgrind`, which counts the same for the same calls
//! however busy the host is (wall-clock Redis time on a shared 2-core VM moves
//! by 30 % between runs minutes apart).
//!
//! ```sh
//! cargo build --release -p simdedup-bench --features examples --example commit_profile
//! E=target/release/examples/commit_profile
//! redis-server --port 7001 --save "" --appendonly no --dir /tmp/cp &
//! $E fill redis://127.0.0.1:7001 200000 1700000000000    # prints nothing but progress
//! redis-cli -p 7001 SAVE && redis-cli -p 7001 SHUTDOWN NOSAVE
//! valgrind --tool=callgrind --toggle-collect=evalShaCommand \
//!     redis-server --port 7001 --dir /tmp/cp --dbfilename dump.rdb --save "" &
//! $E check redis://127.0.0.1:7001 200000 1700000000000 5000 16
//! redis-cli -p 7001 SHUTDOWN NOSAVE; callgrind_annotate callgrind.out.*
//! ```
//!
//! `fill URL N NOW_MS` preloads articles 0..N of `simdedup-bench`'s generator
//! (seed 1, spread over the 48 h before NOW_MS) into namespace `bench`;
//! `check URL N NOW_MS M CONCURRENCY` loads the view, then
//! checks articles N..N+M through the real path, CONCURRENCY in flight, and
//! prints the checks per second and the duplicates found. NOW_MS must be the
//! fill's, and the check must run within a few hours of it (the articles'
//! times are NOW_MS).
use std::time::{Duration, Instant};

use simdedup::connect::ConnectOptions;
use simdedup::decision::DecisionConfig;
use simdedup::index::{Index, RedisIndex, RedisIndexOptions};
use simdedup_bench::synthetic::FingerprintGen;

// The allocator of the `simdedup` binary (src/main.rs), so that the client's
// CPU per check is the worker's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WINDOW_MS: u64 = 48 * 3_600_000;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
        panic!("argument {i}: {what} (see the doc comment of simdedup-bench/examples/commit_profile.rs)")
    })
}

/// This process' CPU time so far (user + system, from `/proc/self/stat`, in
/// clock ticks of 1/100 s): the client's own cost per check.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) and its ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime: fields 14 and 15 of the line, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode: String = arg(&args, 1, "fill or check");
    let url: String = arg(&args, 2, "Redis URL");
    let n: u64 = arg(&args, 3, "articles in the index");
    let now: i64 = arg(&args, 4, "NOW_MS");
    let options = RedisIndexOptions {
        expected_articles: n,
        connect: ConnectOptions {
            response_timeout: Duration::from_secs(600),
            ..ConnectOptions::default()
        },
        ..Default::default()
    };
    let index = RedisIndex::connect(&url, "bench", DecisionConfig::default(), options)
        .await
        .expect("connect");
    let gen = FingerprintGen::new(1, now, WINDOW_MS);
    match mode.as_str() {
        "fill" => {
            let chunk = 1000;
            let mut start = 0;
            while start < n {
                let mut tasks = Vec::new();
                for c in (start..(start + 8 * chunk).min(n)).step_by(chunk as usize) {
                    let index = index.clone();
                    let entries: Vec<_> = (c..(c + chunk).min(n))
                        .map(|i| gen.preload_entry(i, n))
                        .collect();
                    tasks.push(tokio::spawn(async move { index.preload(&entries).await }));
                }
                for t in tasks {
                    t.await.expect("task").expect("preload");
                }
                start = (start + 8 * chunk).min(n);
                eprint!("\rpreloaded {start}");
            }
            eprintln!();
        }
        "check" => {
            let m: u64 = arg(&args, 5, "checks");
            let conc: u64 = arg(&args, 6, "checks in flight");
            index.catch_up().await.expect("load the view");
            let cpu0 = cpu_seconds();
            let started = Instant::now();
            let mut tasks = Vec::new();
            for w in 0..conc {
                let index = index.clone();
                tasks.push(tokio::spawn(async move {
                    let mut duplicates = 0u64;
                    let mut i = n + w;
                    while i < n + m {
                        let outcome = index.check_and_insert(&gen.entry(i)).await.expect("check");
                        duplicates += u64::from(outcome.verdict.is_duplicate());
                        i += conc;
                    }
                    duplicates
                }));
            }
            let mut duplicates = 0;
            for t in tasks {
                duplicates += t.await.expect("task");
            }
            let secs = started.elapsed().as_secs_f64();
            let cpu = cpu_seconds() - cpu0;
            println!(
                "{m} checks in {secs:.1} s ({:.0}/s), this process' CPU {:.1} µs per check, \
                 {duplicates} duplicates (expected {})",
                m as f64 / secs,
                cpu * 1e6 / m as f64,
                FingerprintGen::expected_duplicates(n..n + m)
            );
        }
        other => panic!("mode {other}: use fill or check"),
    }
}
