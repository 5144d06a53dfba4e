//! Memory and Redis-time measurement of the Redis index at N synthetic articles.
//!
//! Starts its own `redis-server` on a free port (never touches 6379), fills the
//! index with N − M articles spread over the last 48 h (≈ 1 in 5 a near-duplicate
//! of an earlier one, 12-hash sketches as fingerprint v1 produces), resets Redis's
//! statistics, then runs M more checks through the real path (gather → decide →
//! commit) and prints Redis memory per article (`INFO memory`, over all N), and
//! for the M measured checks: Redis CPU per check (`INFO cpu`), `INFO
//! commandstats` (EVALSHA usec_per_call, commands run per check) and client-side
//! latency percentiles.
//!
//! cargo run --release -p simdedup-bench --features examples --example redis_index_bench -- [N] [concurrency] [bucket_hours] [M] [preload]
//!
//! `preload` fills the first N − M articles with `RedisIndex::preload` (pipelined
//! inserts that skip the check: for 10 M, where checking everything would take
//! hours on a small machine); without it they go through the real path too.
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use simdedup::connect::ConnectOptions;
use simdedup::decision::DecisionConfig;
use simdedup::index::{Index, IndexEntry, RedisIndex, RedisIndexOptions};
use simdedup_bench::synthetic::FingerprintGen;

/// Article `i`: the generator of `simdedup-bench` (1 in 5 a near-duplicate of
/// article `i - 1001`, spread over the last 48 h), seed 0.
fn article(i: u64, now: i64) -> IndexEntry {
    FingerprintGen::new(0, now, 48 * 3_600_000).entry(i)
}

fn info(url: &str, section: &str) -> String {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("INFO").arg(section).query(&mut c).unwrap()
}

fn field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn cmd(url: &str, args: &[&str]) -> redis::Value {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut q = redis::cmd(args[0]);
    for a in &args[1..] {
        q.arg(*a);
    }
    q.query(&mut c).unwrap()
}

/// Run checks of articles `range` with `conc` tasks; latencies (µs) and duplicates.
async fn run_checks(
    idx: &RedisIndex,
    range: std::ops::Range<u64>,
    conc: u64,
    now: i64,
) -> (Vec<u64>, u64) {
    let mut handles = Vec::new();
    for w in 0..conc {
        let idx = idx.clone();
        let range = range.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut dups = 0u64;
            let mut i = range.start + w;
            while i < range.end {
                let e = article(i, now);
                let t = Instant::now();
                let out = idx.check_and_insert(&e).await.unwrap();
                lat.push(t.elapsed().as_micros() as u64);
                dups += u64::from(out.verdict.is_duplicate());
                i += conc;
            }
            (lat, dups)
        }));
    }
    let mut lat = Vec::new();
    let mut dups = 0;
    for h in handles {
        let (l, d) = h.await.unwrap();
        lat.extend(l);
        dups += d;
    }
    lat.sort_unstable();
    (lat, dups)
}

fn expected_dups(range: std::ops::Range<u64>) -> u64 {
    FingerprintGen::expected_duplicates(range)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let conc: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(32);
    let bucket_h: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(24);
    let m: u64 = args
        .get(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or((n / 10).min(100_000))
        .min(n);
    let preload = args.get(5).is_some_and(|a| a == "preload");
    // A private server on a free port (never the shared 6379), stopped and
    // removed when `server` drops.
    let server = simdedup::redis_server::RedisServer::start()
        .unwrap_or_else(|e| panic!("this bench starts its own Redis: {e}"));
    let url = server.url();
    let opts = RedisIndexOptions {
        bucket_ms: Some(bucket_h * 3_600_000),
        expected_articles: n,
        // Preload pipelines of 2,000 commits queue behind each other on a
        // loaded machine: well past the default 500 ms.
        connect: ConnectOptions {
            response_timeout: std::time::Duration::from_secs(60),
            ..ConnectOptions::default()
        },
        ..Default::default()
    };
    let idx = RedisIndex::connect(&url, "bench", DecisionConfig::default(), opts)
        .await
        .unwrap();
    let mem0 = field(&info(&url, "memory"), "used_memory");
    let cpu = |i: &str| field(i, "used_cpu_user") + field(i, "used_cpu_sys");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let fill = n - m;
    let started = Instant::now();
    let mut fill_lat = Vec::new();
    let mut fill_dups = 0;
    if preload {
        let chunk = 2_000u64;
        let mut start = 0;
        while start < fill {
            let end = (start + chunk * conc).min(fill);
            let mut tasks = Vec::new();
            for c in (start..end).step_by(chunk as usize) {
                let idx = idx.clone();
                let batch: Vec<IndexEntry> =
                    (c..(c + chunk).min(end)).map(|i| article(i, now)).collect();
                tasks.push(tokio::spawn(
                    async move { idx.preload(&batch).await.unwrap() },
                ));
            }
            for t in tasks {
                t.await.unwrap();
            }
            start = end;
            if start % 1_000_000 < chunk * conc {
                eprintln!(
                    "preloaded {start} in {:.0} s",
                    started.elapsed().as_secs_f64()
                );
            }
        }
    } else {
        (fill_lat, fill_dups) = run_checks(&idx, 0..fill, conc, now).await;
    }
    let fill_wall = started.elapsed();
    cmd(&url, &["CONFIG", "RESETSTAT"]);
    // Per-script times (BENCH_SLOWLOG=1): the slow log at threshold 0 keeps the
    // last 10,000 commands. It logs every command scripts run too, which costs
    // Redis time: off for the headline figures.
    let slowlog = std::env::var("BENCH_SLOWLOG").is_ok_and(|v| v == "1");
    if slowlog {
        cmd(&url, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        cmd(&url, &["CONFIG", "SET", "slowlog-max-len", "10000"]);
    }
    let cpu0 = cpu(&info(&url, "cpu"));
    let started = Instant::now();
    let (lat, dups) = run_checks(&idx, fill..n, conc, now).await;
    let wall = started.elapsed();
    let cpu_s = cpu(&info(&url, "cpu")) - cpu0;
    let mem_info = info(&url, "memory");
    let mem = field(&mem_info, "used_memory") - mem0;
    let stats = info(&url, "commandstats");
    let mut script_calls = 0.0;
    let mut inner_calls = 0.0;
    let mut lines = Vec::new();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let (name, rest) = line.split_once(':').unwrap();
        let get = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let name = name.trim_start_matches("cmdstat_");
        if matches!(name, "evalsha" | "eval") {
            script_calls += get("calls");
        } else if !matches!(name, "info" | "config") {
            inner_calls += get("calls");
        }
        lines.push((
            get("calls"),
            format!(
                "  {name}: {:.2}/check, usec_per_call {}",
                get("calls") / m as f64,
                get("usec_per_call")
            ),
        ));
    }
    lines.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut per_script: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let log = if slowlog {
        cmd(&url, &["SLOWLOG", "GET", "10000"])
    } else {
        redis::Value::Nil
    };
    if let redis::Value::Array(entries) = log {
        for e in entries {
            let redis::Value::Array(f) = e else { continue };
            let usec: u64 = redis::from_redis_value(f[2].clone()).unwrap_or(0);
            let argv: Vec<Vec<u8>> = redis::from_redis_value(f[3].clone()).unwrap_or_default();
            if argv
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"evalsha"))
            {
                let sha = String::from_utf8_lossy(&argv[1]).into_owned();
                let entry = per_script.entry(sha).or_default();
                entry.0 += 1;
                entry.1 += usec;
            }
        }
    }
    // The index's scripts as loaded: lua/prelude.lua, then the script.
    let names = [
        (
            redis::Script::new(concat!(
                include_str!("../../lua/prelude.lua"),
                include_str!("../../lua/commit.lua")
            )),
            "commit",
        ),
        (
            redis::Script::new(concat!(
                include_str!("../../lua/prelude.lua"),
                include_str!("../../lua/lookup.lua")
            )),
            "lookup",
        ),
    ];
    let keys = field(
        &info(&url, "keyspace")
            .replace("db0:keys=", "db0:")
            .replace(',', "\n"),
        "db0",
    );
    let pct = |l: &[u64], p: usize| l.get(l.len() * p / 100).copied().unwrap_or(0);
    println!(
        "articles: {n} ({} filled {}, {m} measured), concurrency: {conc}, bucket: {bucket_h} h, buckets: {}",
        fill,
        if preload { "by preload" } else { "by checks" },
        idx.buckets().await.unwrap().len()
    );
    println!(
        "redis used_memory delta: {:.1} MB = {:.0} bytes/article; keys: {keys} ({:.2}/article); used_memory_rss {:.0} MB",
        mem / 1e6,
        mem / n as f64,
        keys / n as f64,
        field(&mem_info, "used_memory_rss") / 1e6
    );
    if !preload && fill > 0 {
        println!(
            "fill: {:.0} checks/s, duplicates {fill_dups} (expected {}), client p50 {} µs, p99 {} µs",
            fill as f64 / fill_wall.as_secs_f64(),
            expected_dups(0..fill),
            pct(&fill_lat, 50),
            pct(&fill_lat, 99)
        );
    } else if preload {
        println!("fill: {:.0} s", fill_wall.as_secs_f64());
    }
    println!(
        "measured {m} checks: duplicates {dups} (expected {}), {:.0} checks/s",
        expected_dups(fill..n),
        m as f64 / wall.as_secs_f64()
    );
    println!(
        "  redis CPU per check: {:.1} µs; scripts per check: {:.2}; commands run by scripts per check: {:.1}",
        cpu_s * 1e6 / m as f64,
        script_calls / m as f64,
        inner_calls / m as f64
    );
    for (_, l) in lines {
        println!("{l}");
    }
    for (sha, (calls, usec)) in &per_script {
        let name = names
            .iter()
            .find(|(s, _)| s.get_hash() == sha)
            .map_or(sha.as_str(), |(_, n)| n);
        println!(
            "  {name}.lua: {:.1} µs per call ({calls} calls in the slow log)",
            *usec as f64 / *calls as f64
        );
    }
    println!(
        "  client latency p50 {} µs, p90 {} µs, p99 {} µs, max {} µs",
        pct(&lat, 50),
        pct(&lat, 90),
        pct(&lat, 99),
        lat.last().copied().unwrap_or(0)
    );
    // Memory by key family: `simdedup-bench` prints it (simdedup-bench/src/index.rs,
    // memory_by_family).
    drop(server);
}
