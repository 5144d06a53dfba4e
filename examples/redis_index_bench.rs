//! Memory and Redis-time measurement of the Redis index at N synthetic articles.
//!
//! Starts its own `redis-server` on a free port (never touches 6379), inserts N
//! articles spread over the last 48 h (≈ 1 in 5 a near-duplicate of an earlier
//! one, 12-signature sketches as fingerprint v1 produces), then prints Redis
//! memory per article and Redis time per check from `INFO`.
//!
//! cargo run --example redis_index_bench -- [N] [concurrency] [bucket_hours]
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use simdedup::decision::DecisionConfig;
use simdedup::fingerprint::Fingerprint;
use simdedup::index::{Index, IndexEntry, RedisIndex, RedisIndexOptions};

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn article(i: u64, now: i64) -> IndexEntry {
    // Every 5th article copies article i - 1001 (itself an original) with one SimHash bit flipped and
    // half of its sketch; the rest are unrelated.
    let src = if i % 5 == 4 && i >= 1001 { i - 1001 } else { i };
    let mut signatures: Vec<u32> = (0..12).map(|k| splitmix(src * 16 + k) as u32).collect();
    if src != i {
        for (k, s) in signatures.iter_mut().enumerate().skip(6) {
            *s = splitmix(i * 16 + k as u64 + 1_000_000_000_000) as u32;
        }
    }
    signatures.sort_unstable();
    let simhash = splitmix(src ^ 0xabcdef) ^ u64::from(src != i);
    IndexEntry {
        id: format!("article-{i:07}"),
        ts_ms: now - 48 * 3_600_000 + (i as i64 * 173_000 / 1000) % (48 * 3_600_000),
        fingerprint: Fingerprint {
            simhash,
            content: splitmix(i + 7_000_000_000),
            signatures,
            words: 300,
        },
    }
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

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let conc: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(32);
    let bucket_h: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(24);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("simdedup-bench-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("redis://127.0.0.1:{port}/");
    let opts = RedisIndexOptions {
        bucket_ms: Some(bucket_h * 3_600_000),
        ..Default::default()
    };
    let idx = RedisIndex::connect(&url, "bench", DecisionConfig::default(), opts)
        .await
        .unwrap();
    let mem0 = field(&info(&url, "memory"), "used_memory");
    let cpu = |i: &str| field(i, "used_cpu_user") + field(i, "used_cpu_sys");
    let cpu0 = cpu(&info(&url, "cpu"));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..conc {
        let idx = idx.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut dups = 0u64;
            let mut i = w;
            while i < n {
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
    let wall = started.elapsed();
    lat.sort_unstable();
    let mem = field(&info(&url, "memory"), "used_memory") - mem0;
    let cpu_s = cpu(&info(&url, "cpu")) - cpu0;
    let stats = info(&url, "commandstats");
    let mut total_usec = 0.0;
    let mut calls = Vec::new();
    for line in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let (name, rest) = line.split_once(':').unwrap();
        let get = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        total_usec += get("usec");
        calls.push(format!(
            "{name} calls={} usec_per_call={}",
            get("calls"),
            get("usec_per_call")
        ));
    }
    let keys = field(
        &info(&url, "keyspace")
            .replace("db0:keys=", "db0:")
            .replace(',', "\n"),
        "db0",
    );
    println!("articles: {n}, duplicates: {dups}, concurrency: {conc}, bucket: {bucket_h} h");
    println!("buckets: {:?}", idx.buckets().await.unwrap().len());
    println!(
        "redis used_memory delta: {:.0} MB, {:.0} bytes/article, keys: {keys}",
        mem / 1e6,
        mem / n as f64
    );
    // Commands run by a script are counted both in their own cmdstat and in the
    // script's, so the sum over-counts; Redis CPU time is the honest total.
    println!(
        "redis CPU per check: {:.1} µs (cmdstat sum, double-counting script internals: {:.1} µs)",
        cpu_s * 1e6 / n as f64,
        total_usec / n as f64
    );
    for c in calls {
        println!("  {c}");
    }
    println!(
        "client (debug build unless --release) latency p50 {} µs, p99 {} µs; {:.0} checks/s",
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100],
        n as f64 / wall.as_secs_f64()
    );
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
