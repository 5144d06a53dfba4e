//! The floor of the design card: what a minimal SimHash index costs Redis per
//! check-and-insert at 1 M articles, with none of simdedup's extra signals.
//!
//! The target is ≤ 50 µs of Redis time per check-and-insert (`INFO
//! commandstats` `usec` summed per check) at 1 M articles. This example measures the card itself, done
//! minimally, as a lower bound:
//!
//! - 64-bit SimHash, four 16-bit blocks (pigeonhole: Hamming ≤ 3 ⇒ one block
//!   equal), 24 h buckets, a 48 h window, so a check reads 3 buckets;
//! - per bucket `L` (keys `floor:{bench}:…`): `i:L:TTT` HASH id → SimHash (16
//!   hex), split by the top bits of a hash of the id into ~128-entry listpacks;
//!   block SETs of SimHashes as signed decimals (intsets), `b:L:P:XXXX` (one per
//!   position, `--layout positional`) or `b:L:XXXX` (shared by the 4 positions,
//!   `--layout shared`); `n:L` HASH with the counter `n`; every key gets
//!   `EXPIREAT` once, when it is created;
//! - one check = one pipeline (12 `SMEMBERS`, 3 `HGET` of the id for
//!   idempotency, 3 `HGET` of the counters), Hamming distances in Rust, then one
//!   `EVALSHA` that writes (counter, id, 4 block sets, `EXPIREAT` on creation).
//!   The commit does **no validation** of what the pipeline read (no counter
//!   comparison, no retry): the floor excludes it.
//!
//! A private `redis-server` is preloaded with N random SimHashes over 3 buckets
//! (25 % / 50 % / 25 %, as a 48 h window ending at 12:00 UTC), then M fresh
//! random SimHashes are checked, C at a time, after `CONFIG RESETSTAT`. Redis
//! time per check = `EVALSHA` + the client's `SMEMBERS` and `HGET` (the commands
//! the script runs are counted inside `EVALSHA` and in their own rows as well,
//! so those rows are shown but not added).
//!
//! ```sh
//! cargo run --release -p simdedup-bench --features examples --example card_floor -- --articles 1000000 --checks 50000 \
//!     --concurrency 16 --layout positional
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Pipeline, Script, Value};
use simdedup::redis_server::RedisServer;
use simdedup_bench::info::Info;

/// Prefix of every key (a Redis Cluster hash tag, as the real index has).
const PREFIX: &str = "floor:{bench}:";
/// Bucket labels, oldest first; checks insert into the last one (the current bucket).
const LABELS: [&str; 3] = ["b0", "b1", "b2"];
/// Index of the current bucket.
const CURRENT: usize = 2;
/// Commands per preload pipeline (about).
const PIPELINE_COMMANDS: usize = 10_000;
/// Target entries per `i:` hash (below `hash-max-listpack-entries`, 512).
const HASH_ENTRIES: usize = 128;
/// Seeds of the preloaded and of the checked SimHashes.
const SEED_PRELOAD: u64 = 0x5eed_0001;
const SEED_CHECK: u64 = 0x5eed_0002;

/// The commit: the writes of an accepted article, nothing else.
///
/// No validation: it does not re-read the counters the pipeline read, so a
/// concurrent insert of a near duplicate is not caught (this is a floor).
/// `EXPIREAT` only when the write created the key: `HINCRBY` answering 1 (the
/// counter), `HSET id hex "" ""` answering 2 (the `i:` hash carries an empty
/// field, so 2 new fields means a new hash), `SADD` answering 1 with `SCARD` 1,
/// asked only when the client's read found that set empty.
const COMMIT_LUA: &str = r#"
-- KEYS[1] = n:L (counter hash), KEYS[2] = i:L:TTT (id -> SimHash),
-- KEYS[3..6] = the 4 block sets of the SimHash
-- ARGV[1] = id, ARGV[2] = SimHash (16 hex), ARGV[3] = SimHash (signed decimal),
-- ARGV[4] = EXPIREAT (unix s), ARGV[5..8] = '1' if the read found block set 1..4 empty
local at = ARGV[4]
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
if n == 1 then redis.call('EXPIREAT', KEYS[1], at) end
if redis.call('HSET', KEYS[2], ARGV[1], ARGV[2], '', '') == 2 then
  redis.call('EXPIREAT', KEYS[2], at)
end
for j = 1, 4 do
  local key = KEYS[2 + j]
  if redis.call('SADD', key, ARGV[3]) == 1 and ARGV[4 + j] == '1'
      and redis.call('SCARD', key) == 1 then
    redis.call('EXPIREAT', key, at)
  end
end
return n
"#;

#[derive(Parser, Debug)]
#[command(about = "Redis cost per check of the minimal design card (a floor)")]
struct Args {
    /// Articles preloaded over the 3 buckets.
    #[arg(long, default_value_t = 1_000_000)]
    articles: u64,
    /// Checks measured.
    #[arg(long, default_value_t = 50_000)]
    checks: u64,
    /// Checks in flight (tasks on one multiplexed connection).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Block sets: one per position and value, or one per value.
    #[arg(long, value_enum, default_value_t = Layout::Positional)]
    layout: Layout,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Layout {
    /// `b:L:P:XXXX`: one set per block position P (0–3) and value.
    Positional,
    /// `b:L:XXXX`: one set per value, shared by the 4 positions.
    Shared,
}

/// splitmix64: the `i`-th value of the stream `seed`.
fn splitmix64(seed: u64, i: u64) -> u64 {
    let mut z = seed
        .wrapping_add(i.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A cheap hash of an id: FNV-1a, then the splitmix64 finalizer.
fn id_hash(id: &str) -> u64 {
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    splitmix64(h, 0)
}

/// Ids like `article-0000001` (15 bytes).
fn article_id(i: u64) -> String {
    format!("article-{i:07}")
}

/// Block `p` (0 = the top 16 bits) of a SimHash.
fn block(h: u64, p: usize) -> u16 {
    (h >> (48 - 16 * p)) as u16
}

/// Smallest `k` with `n / 2^k ≤ HASH_ENTRIES`.
fn shape(n: u64) -> u32 {
    let mut k = 0;
    while (n >> k) > HASH_ENTRIES as u64 {
        k += 1;
    }
    k
}

/// Where a check looks and writes.
struct Keys {
    layout: Layout,
    /// Shape `k` of each bucket's `i:` hashes.
    shapes: [u32; 3],
}

impl Keys {
    fn counter(&self, b: usize) -> String {
        format!("{PREFIX}n:{}", LABELS[b])
    }

    /// The `i:` hash of `id` in bucket `b`, and its number in that bucket.
    fn id_hash_key(&self, b: usize, id: &str) -> (String, usize) {
        let k = self.shapes[b];
        let tag = if k == 0 { 0 } else { id_hash(id) >> (64 - k) };
        let width = k.div_ceil(4).max(1) as usize;
        (
            format!("{PREFIX}i:{}:{tag:0width$x}", LABELS[b]),
            tag as usize,
        )
    }

    /// The set of block `p` of `h` in bucket `b`, and its number in that bucket.
    fn block_key(&self, b: usize, p: usize, h: u64) -> (String, usize) {
        let v = block(h, p);
        match self.layout {
            Layout::Positional => (
                format!("{PREFIX}b:{}:{p}:{v:04x}", LABELS[b]),
                (p << 16) | v as usize,
            ),
            Layout::Shared => (format!("{PREFIX}b:{}:{v:04x}", LABELS[b]), v as usize),
        }
    }

    fn block_keys_per_bucket(&self) -> usize {
        match self.layout {
            Layout::Positional => 4 << 16,
            Layout::Shared => 1 << 16,
        }
    }
}

async fn connect(server: &RedisServer) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(server.url())?;
    let cfg = AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(120)));
    Ok(client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?)
}

/// Fill the 3 buckets with `n` random articles, in pipelines of about
/// [`PIPELINE_COMMANDS`] commands; `EXPIREAT` follows each key's first write.
async fn preload(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    sizes: [u64; 3],
    expire_at: u64,
) -> Result<()> {
    let total: u64 = sizes.iter().sum();
    let started = Instant::now();
    let mut pipe = Pipeline::new();
    let mut cmds = 0usize;
    let mut article = 0u64;
    let mut next_report = 100_000u64;
    for (b, &size) in sizes.iter().enumerate() {
        let bucket_end = article + size;
        let mut seen_i = vec![false; 1usize << keys.shapes[b]];
        let mut seen_b = vec![false; keys.block_keys_per_bucket()];
        let counter = keys.counter(b);
        let mut counter_new = true;
        let mut pending = 0u64;
        while article < bucket_end {
            let id = article_id(article);
            let h = splitmix64(SEED_PRELOAD, article);
            let hex = format!("{h:016x}");
            let (ikey, tag) = keys.id_hash_key(b, &id);
            if seen_i[tag] {
                pipe.hset(&ikey, &id, &hex).ignore();
            } else {
                // A new `i:` hash gets the empty field (see COMMIT_LUA) and its expiry.
                seen_i[tag] = true;
                pipe.hset_multiple(&ikey, &[(id.as_str(), hex.as_str()), ("", "")])
                    .ignore();
                pipe.expire_at(&ikey, expire_at as i64).ignore();
                cmds += 1;
            }
            for p in 0..4 {
                let (bkey, slot) = keys.block_key(b, p, h);
                pipe.sadd(&bkey, h as i64).ignore();
                if !seen_b[slot] {
                    seen_b[slot] = true;
                    pipe.expire_at(&bkey, expire_at as i64).ignore();
                    cmds += 1;
                }
            }
            cmds += 5;
            pending += 1;
            article += 1;
            if cmds >= PIPELINE_COMMANDS || article == bucket_end {
                // The counter moves by the articles of this pipeline.
                pipe.hincr(&counter, "n", pending).ignore();
                if counter_new {
                    counter_new = false;
                    pipe.expire_at(&counter, expire_at as i64).ignore();
                }
                let _: () = std::mem::take(&mut pipe).query_async(conn).await?;
                pending = 0;
                cmds = 0;
                if article >= next_report || article == total {
                    next_report += 100_000;
                    eprintln!(
                        "preload: {article}/{total} articles, {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }
    Ok(())
}

/// What the checks found, one task's share.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    members: u64,
    duplicates: u64,
    seen_ids: u64,
    inserted: u64,
}

/// One check-and-insert of article `preloaded + j`.
async fn check(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    script: &Script,
    preloaded: u64,
    j: u64,
    expire_at: u64,
    tally: &mut Tally,
) -> Result<()> {
    let id = article_id(preloaded + j);
    let h = splitmix64(SEED_CHECK, j);
    // (a) one pipeline: 12 SMEMBERS, 3 HGET of the id, 3 HGET of the counters.
    let mut pipe = Pipeline::new();
    for b in 0..3 {
        for p in 0..4 {
            pipe.smembers(keys.block_key(b, p, h).0);
        }
    }
    for b in 0..3 {
        pipe.hget(keys.id_hash_key(b, &id).0, &id);
    }
    for b in 0..3 {
        pipe.hget(keys.counter(b), "n");
    }
    let replies: Vec<Value> = pipe.query_async(conn).await?;
    if replies.len() != 18 {
        bail!("pipeline answered {} replies, not 18", replies.len());
    }
    let mut replies = replies.into_iter();
    // (b) Hamming distances of every member.
    let mut empty = [false; 4];
    let mut best = u32::MAX;
    for b in 0..3 {
        for slot in empty.iter_mut() {
            let members: Vec<i64> = redis::from_redis_value(replies.next().unwrap())?;
            tally.members += members.len() as u64;
            if b == CURRENT {
                *slot = members.is_empty();
            }
            for m in members {
                best = best.min((m as u64 ^ h).count_ones());
            }
        }
    }
    let mut seen = false;
    for _ in 0..3 {
        let v: Option<String> = redis::from_redis_value(replies.next().unwrap())?;
        seen |= v.is_some();
    }
    for _ in 0..3 {
        let _counter: Option<u64> = redis::from_redis_value(replies.next().unwrap())?;
    }
    if seen {
        tally.seen_ids += 1;
        return Ok(());
    }
    if best <= 3 {
        tally.duplicates += 1;
        return Ok(());
    }
    // (c) the commit script: the writes only.
    let mut inv = script.prepare_invoke();
    inv.key(keys.counter(CURRENT))
        .key(keys.id_hash_key(CURRENT, &id).0);
    for p in 0..4 {
        inv.key(keys.block_key(CURRENT, p, h).0);
    }
    inv.arg(&id)
        .arg(format!("{h:016x}"))
        .arg(h as i64)
        .arg(expire_at);
    for e in empty {
        inv.arg(if e { "1" } else { "0" });
    }
    let _handle: i64 = inv.invoke_async(conn).await?;
    tally.inserted += 1;
    Ok(())
}

fn percentile(sorted: &[u64], pct: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let server = RedisServer::start().context("starting a private redis-server")?;
    let mut conn = connect(&server).await?;
    eprintln!(
        "redis-server {} on port {} (pid {}); load average {}",
        server.binary().display(),
        server.port(),
        server.pid(),
        loadavg()
    );

    let n = args.articles;
    let sizes = [n / 4, n / 2, n - n / 4 - n / 2];
    let keys = Arc::new(Keys {
        layout: args.layout,
        shapes: sizes.map(shape),
    });
    let expire_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() + 3 * 86_400;

    let mem0 = Info::fetch(&mut conn, "memory").await?.num("used_memory");
    preload(&mut conn, &keys, sizes, expire_at).await?;
    let mem1 = Info::fetch(&mut conn, "memory").await?.num("used_memory");
    let nkeys = Info::fetch(&mut conn, "keyspace").await?.keys();

    // Sanity: the encodings the card relies on.
    let (sample_i, _) = keys.id_hash_key(1, &article_id(sizes[0]));
    let (sample_b, _) = keys.block_key(1, 0, splitmix64(SEED_PRELOAD, sizes[0]));
    let enc_i: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&sample_i)
        .query_async(&mut conn)
        .await?;
    let enc_b: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&sample_b)
        .query_async(&mut conn)
        .await?;
    let hlen: u64 = redis::cmd("HLEN")
        .arg(&sample_i)
        .query_async(&mut conn)
        .await?;

    let script = Arc::new(Script::new(COMMIT_LUA));
    script.prepare_invoke().load_async(&mut conn).await?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut conn)
        .await?;
    let cpu0 = Info::fetch(&mut conn, "cpu").await?.cpu_seconds();
    let load_before = loadavg();

    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (mut conn, keys, script, next) =
            (conn.clone(), keys.clone(), script.clone(), next.clone());
        let checks = args.checks;
        tasks.spawn(async move {
            let mut tally = Tally::default();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= checks {
                    break;
                }
                let t = Instant::now();
                check(&mut conn, &keys, &script, n, j, expire_at, &mut tally).await?;
                tally.latencies_us.push(t.elapsed().as_micros() as u64);
            }
            anyhow::Ok(tally)
        });
    }
    let mut all = Tally::default();
    while let Some(done) = tasks.join_next().await {
        let t = done??;
        all.latencies_us.extend(t.latencies_us);
        all.members += t.members;
        all.duplicates += t.duplicates;
        all.seen_ids += t.seen_ids;
        all.inserted += t.inserted;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = Info::fetch(&mut conn, "cpu").await?.cpu_seconds() - cpu0;
    let stats = Info::fetch(&mut conn, "commandstats")
        .await?
        .command_stats();
    let load_after = loadavg();
    all.latencies_us.sort_unstable();

    let m = args.checks.max(1) as f64;
    let stat = |name: &str| stats.get(name).copied().unwrap_or_default();
    let (smembers, hget, evalsha) = (stat("smembers"), stat("hget"), stat("evalsha"));
    let redis_us = smembers.usec + hget.usec + evalsha.usec;

    println!("card floor: {:?} layout", args.layout);
    println!(
        "  articles {n} (buckets {} / {} / {}, i: shapes k = {:?}), checks {}, concurrency {}",
        sizes[0], sizes[1], sizes[2], keys.shapes, args.checks, args.concurrency
    );
    println!(
        "  load average before checks {load_before}, after {load_after}; redis-server {}",
        server.binary().display()
    );
    println!(
        "  memory: used_memory +{:.0} bytes = {:.1} bytes per article ({nkeys} keys; \
         sample {sample_i} {enc_i} with {hlen} fields, {sample_b} {enc_b})",
        mem1 - mem0,
        (mem1 - mem0) / n.max(1) as f64
    );
    println!(
        "  checks: {:.1} s, {:.0} checks/s; inserted {}, duplicates (Hamming ≤ 3) {}, ids seen {}, \
         retries 0 (the commit does no validation: the floor excludes it)",
        seconds,
        m / seconds,
        all.inserted,
        all.duplicates,
        all.seen_ids
    );
    println!(
        "  members per SMEMBERS: {:.2} (per check {:.1})",
        all.members as f64 / (m * 12.0),
        all.members as f64 / m
    );
    println!(
        "  client latency per check: p50 {} µs, p99 {} µs, max {} µs",
        percentile(&all.latencies_us, 50.0),
        percentile(&all.latencies_us, 99.0),
        all.latencies_us.last().copied().unwrap_or(0)
    );
    println!(
        "  INFO commandstats (per check = / {} checks):",
        args.checks
    );
    println!(
        "    {:<18} {:>10} {:>12} {:>12}  counted",
        "command", "calls/chk", "µs/check", "µs/call"
    );
    for (name, s) in &stats {
        let counted = match name.as_str() {
            "smembers" | "hget" | "evalsha" => "yes (client)",
            "info" | "config|resetstat" | "script|load" | "client|setinfo" => "no (bench)",
            _ => "no (inside evalsha)",
        };
        println!(
            "    {:<18} {:>10.2} {:>12.2} {:>12.3}  {counted}",
            name,
            s.calls / m,
            s.usec / m,
            s.usec_per_call()
        );
    }
    println!(
        "  Redis µs per check: {:.2} = SMEMBERS {:.2} ({:.2} calls) + HGET {:.2} ({:.2} calls) \
         + EVALSHA {:.2} ({:.2} calls)",
        redis_us / m,
        smembers.usec / m,
        smembers.calls / m,
        hget.usec / m,
        hget.calls / m,
        evalsha.usec / m,
        evalsha.calls / m
    );
    println!(
        "  Redis CPU (used_cpu_user + used_cpu_sys) per check: {:.2} µs",
        cpu * 1e6 / m
    );
    drop(conn);
    drop(server);
    Ok(())
}
