//! Index measurements at one size: fill with [`RedisIndex::preload`], Redis
//! memory per article, then check-and-insert through the real path
//! ([`Index::check_and_insert`]: gather, decide in Rust, commit) with the Redis
//! time and CPU each check costs.

use std::ops::Range;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::task::JoinSet;

use super::info::{is_bench_command, is_script_command, monitor_origins, Info, Origins};
use super::progress::Progress;
use super::synthetic::FingerprintGen;
use super::BenchError;
use simdedup::index::{Index, RedisIndex};

/// Articles per preload pipeline, and pipelines in flight.
const PRELOAD_CHUNK: u64 = 1000;
const PRELOAD_PIPELINES: usize = 8;

/// Redis memory at a size.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Memory {
    /// Articles in the index.
    pub articles: u64,
    /// `used_memory` minus that of the empty server.
    pub used_bytes: u64,
    pub bytes_per_article: f64,
    pub keys: u64,
    pub rss_bytes: u64,
    /// The memory by key family (`b`, `f`, `i`, … of `simdedup:{NS}:<family>:…`),
    /// from `MEMORY USAGE` of a sample of the keys, largest first.
    pub families: Vec<KeyFamily>,
}

/// One family of keys of the index and the memory it takes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KeyFamily {
    pub name: String,
    pub keys: u64,
    /// Estimated from the sampled keys: their `MEMORY USAGE` (key, value and
    /// its main-dict entry; not its expires entry) times keys / sampled.
    pub bytes: u64,
}

/// Every how many keys one is sampled for [`memory_by_family`].
const FAMILY_SAMPLE_EVERY: u64 = 10;

/// Fill articles `range` of `gen` with [`RedisIndex::preload`], pipelined, in
/// time order ([`FingerprintGen::preload_entry`]).
/// Watches `INFO memory` as it goes and stops with
/// [`BenchError::MemoryBudget`] when the projected size passes `limit_bytes`.
pub async fn preload(
    index: &RedisIndex,
    conn: &mut MultiplexedConnection,
    gen: FingerprintGen,
    range: Range<u64>,
    base_used: u64,
    limit_bytes: u64,
    progress: bool,
) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let total = range.end - range.start;
    let range_end = range.end;
    let mut bar = Progress::new(&format!("preloading {total}"), total, progress);
    let mut tasks = JoinSet::new();
    let mut next = range.start;
    let mut done = 0u64;
    let mut last_check = Instant::now();
    while next < range.end || !tasks.is_empty() {
        while next < range.end && tasks.len() < PRELOAD_PIPELINES {
            let chunk = next..(next + PRELOAD_CHUNK).min(range.end);
            next = chunk.end;
            let index = index.clone();
            tasks.spawn(async move {
                let entries: Vec<_> = chunk
                    .clone()
                    .map(|i| gen.preload_entry(i, range_end))
                    .collect();
                index.preload(&entries).await.map(|()| entries.len() as u64)
            });
        }
        if let Some(joined) = tasks.join_next().await {
            done += joined.map_err(|e| BenchError::Task(e.to_string()))??;
        }
        if last_check.elapsed() >= Duration::from_secs(1) || done == total {
            last_check = Instant::now();
            let used = Info::fetch(conn, "memory").await?.num("used_memory") as u64;
            let grown = used.saturating_sub(base_used);
            let projected = base_used + grown / done.max(1) * total;
            if done >= total / 100 && projected > limit_bytes {
                return Err(BenchError::MemoryBudget {
                    articles: range.end,
                    projected_bytes: projected,
                    limit_bytes,
                });
            }
            bar.update(
                done,
                &format!(
                    "redis {:.2} GB ({:.0} B/article)",
                    used as f64 / 1e9,
                    grown as f64 / done.max(1) as f64
                ),
            );
        }
    }
    bar.finish();
    Ok(started.elapsed())
}

/// Redis memory now, over `articles` articles.
pub async fn memory(
    conn: &mut MultiplexedConnection,
    base_used: u64,
    articles: u64,
) -> Result<Memory, BenchError> {
    let mem = Info::fetch(conn, "memory").await?;
    let keys = Info::fetch(conn, "keyspace").await?.keys();
    let used = (mem.num("used_memory") as u64).saturating_sub(base_used);
    Ok(Memory {
        articles,
        used_bytes: used,
        bytes_per_article: used as f64 / articles.max(1) as f64,
        keys,
        rss_bytes: mem.num("used_memory_rss") as u64,
        families: memory_by_family(conn).await?,
    })
}

/// Where the memory goes: every key `SCAN`ned, grouped by the family letter
/// after the namespace (`simdedup:{NS}:f:…` → `f`), and `MEMORY USAGE … SAMPLES
/// 0` (exact) of every [`FAMILY_SAMPLE_EVERY`]th key of a family. What the
/// families do not account for is Redis's own: the expires dict entries and
/// the hash tables' bucket arrays.
pub async fn memory_by_family(
    conn: &mut MultiplexedConnection,
) -> Result<Vec<KeyFamily>, BenchError> {
    // family -> (keys, keys sampled, bytes of the sampled keys)
    let mut by: std::collections::BTreeMap<String, (u64, u64, u64)> = Default::default();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(2000)
            .query_async(conn)
            .await?;
        let mut sampled = Vec::new();
        let mut pipe = redis::pipe();
        for key in batch {
            let family = key.split(':').nth(2).unwrap_or("?").to_owned();
            let e = by.entry(family.clone()).or_default();
            if e.0.is_multiple_of(FAMILY_SAMPLE_EVERY) {
                pipe.cmd("MEMORY")
                    .arg("USAGE")
                    .arg(&key)
                    .arg("SAMPLES")
                    .arg(0);
                sampled.push(family);
            }
            e.0 += 1;
        }
        if !sampled.is_empty() {
            // A key that expired between SCAN and MEMORY USAGE answers nil.
            let sizes: Vec<Option<u64>> = pipe.query_async(conn).await?;
            for (family, size) in sampled.into_iter().zip(sizes) {
                let e = by.get_mut(&family).expect("counted above");
                e.1 += 1;
                e.2 += size.unwrap_or(0);
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut families: Vec<KeyFamily> = by
        .into_iter()
        .map(|(name, (keys, sampled, bytes))| KeyFamily {
            name,
            keys,
            bytes: (bytes as f64 * keys as f64 / sampled.max(1) as f64) as u64,
        })
        .collect();
    families.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
    Ok(families)
}

/// What the measured checks cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checks {
    pub checks: u64,
    pub concurrency: usize,
    pub seconds: f64,
    /// Client-side latency of `check_and_insert`, microseconds.
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub duplicates: u64,
    pub expected_duplicates: u64,
    /// Redis time per check from `INFO commandstats`: the scripts' time plus the
    /// time of the commands the client sent itself (commands run by scripts are
    /// inside the scripts' time and not counted again).
    pub redis_us_per_check: f64,
    /// Of which the scripts (EVALSHA).
    pub script_us_per_check: f64,
    pub evalsha_usec_per_call: f64,
    pub scripts_per_check: f64,
    /// Commands the client sent itself (not scripts), per check.
    pub plain_commands_per_check: f64,
    /// Commands run inside scripts, per check.
    pub script_commands_per_check: f64,
    /// `used_cpu_user + used_cpu_sys` of the server over the checks, per check
    /// (includes network handling).
    pub redis_cpu_us_per_check: f64,
}

/// Run `range` of `gen` through `check_and_insert` with `concurrency` tasks;
/// sorted latencies (µs) and the number of duplicates found.
async fn run_checks(
    index: &RedisIndex,
    gen: FingerprintGen,
    range: Range<u64>,
    concurrency: usize,
    progress: Option<&mut Progress>,
) -> Result<(Vec<u64>, u64), BenchError> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for w in 0..concurrency as u64 {
        let index = index.clone();
        let range = range.clone();
        let done = done.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut duplicates = 0u64;
            let mut i = range.start + w;
            while i < range.end {
                let entry = gen.entry(i);
                let t = Instant::now();
                let outcome = index.check_and_insert(&entry).await?;
                latencies.push(t.elapsed().as_micros() as u64);
                duplicates += u64::from(outcome.verdict.is_duplicate());
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i += concurrency as u64;
            }
            Ok::<_, BenchError>((latencies, duplicates))
        });
    }
    let mut latencies = Vec::with_capacity((range.end - range.start) as usize);
    let mut duplicates = 0;
    let mut progress = progress;
    loop {
        tokio::select! {
            joined = tasks.join_next() => {
                let Some(joined) = joined else { break };
                let (l, d) = joined.map_err(|e| BenchError::Task(e.to_string()))??;
                latencies.extend(l);
                duplicates += d;
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if let Some(p) = progress.as_deref_mut() {
            p.update(done.load(std::sync::atomic::Ordering::Relaxed), "");
        }
    }
    latencies.sort_unstable();
    Ok((latencies, duplicates))
}

/// The `p`-th percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Which commands a check sends itself and which its scripts run: a short
/// calibration of `range` under `MONITOR` (before the measured checks, since
/// `MONITOR` slows Redis down).
pub async fn calibrate(
    index: &RedisIndex,
    host_port: &str,
    gen: FingerprintGen,
    range: Range<u64>,
) -> Result<Origins, BenchError> {
    let work = run_checks(index, gen, range, 4, None);
    let (origins, result) = monitor_origins(host_port, work).await?;
    result?;
    Ok(origins)
}

/// Measure `range` of `gen` through `check_and_insert`, `concurrency` at a
/// time, after `CONFIG RESETSTAT`. `origins` (from [`calibrate`]) says which
/// commands' time is not already inside the scripts' time.
pub async fn measure_checks(
    index: &RedisIndex,
    conn: &mut MultiplexedConnection,
    gen: FingerprintGen,
    range: Range<u64>,
    concurrency: usize,
    origins: &Origins,
    progress: bool,
) -> Result<Checks, BenchError> {
    let n = range.end - range.start;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    let cpu0 = Info::fetch(conn, "cpu").await?.cpu_seconds();
    let mut bar = Progress::new(&format!("checking {n}"), n, progress);
    let started = Instant::now();
    let (latencies, duplicates) =
        run_checks(index, gen, range.clone(), concurrency, Some(&mut bar)).await?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish();
    let cpu = Info::fetch(conn, "cpu").await?.cpu_seconds() - cpu0;
    let stats = Info::fetch(conn, "commandstats").await?.command_stats();
    let per = |x: f64| x / n.max(1) as f64;
    let (mut script_us, mut scripts, mut evalsha) = (0.0, 0.0, (0.0, 0.0));
    let (mut plain_us, mut plain_calls, mut inner_calls) = (0.0, 0.0, 0.0);
    for (name, s) in &stats {
        if is_bench_command(name) {
            continue;
        }
        if is_script_command(name) {
            script_us += s.usec;
            scripts += s.calls;
            if name == "evalsha" {
                evalsha = (s.calls, s.usec);
            }
            continue;
        }
        // The share of this command's calls the client sent (MONITOR); a
        // command the calibration never saw counts as the client's.
        let share = match origins.get(name.split('|').next().unwrap_or(name)) {
            Some(&(client, lua)) if client + lua > 0 => client as f64 / (client + lua) as f64,
            _ => 1.0,
        };
        plain_us += s.usec * share;
        plain_calls += s.calls * share;
        inner_calls += s.calls * (1.0 - share);
    }
    // Where the time goes, command by command (`SIMDEDUP_LOG=simdedup=debug`).
    for (name, s) in stats.iter().filter(|(name, _)| !is_bench_command(name)) {
        tracing::debug!(
            command = %name,
            calls_per_check = format_args!("{:.2}", per(s.calls)),
            usec_per_check = format_args!("{:.1}", per(s.usec)),
            usec_per_call = format_args!("{:.2}", s.usec_per_call()),
            "commandstats"
        );
    }
    Ok(Checks {
        checks: n,
        concurrency,
        seconds,
        p50_us: percentile(&latencies, 50.0),
        p99_us: percentile(&latencies, 99.0),
        max_us: latencies.last().copied().unwrap_or(0),
        duplicates,
        expected_duplicates: FingerprintGen::expected_duplicates(range),
        redis_us_per_check: per(script_us + plain_us),
        script_us_per_check: per(script_us),
        evalsha_usec_per_call: if evalsha.0 > 0.0 {
            evalsha.1 / evalsha.0
        } else {
            0.0
        },
        scripts_per_check: per(scripts),
        plain_commands_per_check: per(plain_calls),
        script_commands_per_check: per(inner_calls),
        redis_cpu_us_per_check: per(cpu * 1e6),
    })
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
