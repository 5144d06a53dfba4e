//! The fault suite: `simdedup worker` processes on the Redis index, each test
//! with its own `redis-server`, through the faults a deployment meets — a
//! worker killed with SIGKILL mid-batch, a live consumer that holds entries
//! for long, Redis killed and restarted from its AOF, connections killed by
//! `CLIENT KILL`, Redis out of memory and lifted. After each: exactly one
//! output per input, nothing pending, one article kept per near-duplicate
//! group, no good article rejected.
//!
//! Waits have upper bounds against hangs. The recovery bounds asserted are
//! the mechanism's (liveness TTL plus claim interval), with slack for a busy
//! machine, never a speed figure.

use crate::support;
use crate::worker_common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use simdedup::keys::Keys;
use support::{free_port, http_get};
use worker_common::*;

const LIMIT: Duration = Duration::from_secs(120);
const GROUP: &str = "simdedup";
/// Groups of near-duplicates fed by each test, and articles per group.
const GROUPS: u64 = 400;
const COPIES: u64 = 4;

/// A `redis-server` with its data in its own directory, on a fixed port,
/// that a test can kill and start again on the same data: with an
/// append-only file (`start`), or other persistence (`start_with`).
struct Redis {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    persistence: Vec<String>,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Redis {
        Redis::start_with(&[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
    }

    /// Snapshots only when asked for (`SAVE`), and `DEBUG` allowed (to
    /// populate or reload it).
    fn start_debuggable() -> Redis {
        Redis::start_with(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
    }

    /// With `persistence`, the arguments every start is given.
    fn start_with(persistence: &[&str]) -> Redis {
        let bin = simdedup::redis_server::find_binary().expect(
            "these tests start their own redis-server: install it (apt-get install redis-server)",
        );
        let mut r = Redis {
            bin,
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            persistence: persistence.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        r.restart();
        r
    }

    /// Start the server again on the same port and data, and wait until it
    /// has loaded its data.
    fn restart(&mut self) {
        self.restart_with(&[]);
        // PING is refused (LOADING) until the data is loaded.
        wait_until("redis-server loaded its data", LIMIT, || {
            redis::cmd("PING")
                .query::<String>(&mut self.connection())
                .is_ok()
        });
    }

    /// Start the server again with `extra` arguments, and wait until this
    /// very process answers (`INFO server`'s `process_id` is its pid: the
    /// port was free a moment ago, and an answer from another test's server
    /// must not count). `INFO` answers while the data is still loading.
    fn restart_with(&mut self, extra: &[&str]) {
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(&self.persistence)
            .args(extra)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let pid = child.id();
        self.child = Some(child);
        wait_until("this redis-server answers", LIMIT, || {
            let info: Option<String> = redis::Client::open(self.url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("INFO").arg("server").query(&mut c))
                .ok();
            info.is_some_and(|i| i.contains(&format!("process_id:{pid}\r\n")))
        });
    }

    /// Stop the server with `SHUTDOWN SAVE` (its data written to its RDB)
    /// and wait for the process to end.
    fn shutdown_save(&mut self) {
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
            .arg("SAVE")
            .query(&mut self.connection());
        let status = self.child.take().expect("running").wait().unwrap();
        assert!(status.success(), "SHUTDOWN SAVE: {status:?}");
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A worker process at default settings but for its HTTP port, killed when
/// dropped.
struct Worker {
    child: Child,
    port: u16,
    name: String,
}

impl Worker {
    fn spawn(redis: &Redis, ns: &str, name: &str) -> Worker {
        Worker::spawn_with(redis, ns, name, &[])
    }

    /// With settings from the environment (`SIMDEDUP_WORKER__...`).
    fn spawn_with(redis: &Redis, ns: &str, name: &str, env: &[(&str, &str)]) -> Worker {
        Worker::spawn_args(redis, ns, name, env, &[])
    }

    /// With settings from the environment and more command-line flags.
    fn spawn_args(
        redis: &Redis,
        ns: &str,
        name: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Worker {
        Worker::spawn_at(&redis.url(), ns, name, env, args)
    }

    /// On Redis URL `url` (a user of its own, say).
    fn spawn_at(url: &str, ns: &str, name: &str, env: &[(&str, &str)], args: &[&str]) -> Worker {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args(["worker", "--redis-url", url, "--namespace", ns])
            .args(["--index", "redis", "--consumer", name])
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .args(args)
            .env_remove("SIMDEDUP_CONFIG")
            .env("SIMDEDUP_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn simdedup worker");
        Worker {
            child,
            port,
            name: name.to_owned(),
        }
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    fn ready(&self) -> bool {
        matches!(self.get("/readyz"), Some((200, _)))
    }

    /// The sum of every series of a labelled family (0 when none shows).
    fn metric_sum(&self, name: &str) -> u64 {
        let (_, body) = self.get("/metrics").expect("GET /metrics");
        body.lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
            .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
            .sum()
    }

    fn metric(&self, name: &str) -> u64 {
        support::metric(self.port, name).unwrap_or_else(|| panic!("{name} in /metrics"))
    }

    /// Send `sig` (`-STOP`, `-CONT`, ...) to the process.
    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Stop the process (SIGSTOP) at a moment its reader is blocked in
    /// `XREADGROUP` (the only client of the server doing so).
    fn freeze_in_blocked_read(&self, conn: &mut redis::Connection) {
        let signal = |sig: &str| self.signal(sig);
        wait_until("the worker frozen in a blocked read", LIMIT, || {
            signal("-STOP");
            let clients: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
            let blocked = clients.lines().any(|c| {
                c.contains(" cmd=xreadgroup ")
                    && c.split(' ')
                        .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
            });
            if !blocked {
                signal("-CONT");
            }
            blocked
        });
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn wait_ready(workers: &[&Worker]) {
    wait_until("workers ready", LIMIT, || workers.iter().all(|w| w.ready()));
}

/// XADD every article: `GROUPS` groups of `COPIES` near-duplicates, copies
/// spread over the stream (group g's copy v comes after every copy v - 1).
fn feed(conn: &mut redis::Connection, keys: &Keys) -> usize {
    let mut pipe = redis::pipe();
    for v in 0..COPIES {
        for g in 0..GROUPS {
            pipe.cmd("XADD")
                .arg(keys.input_stream())
                .arg("*")
                .arg("id")
                .arg(format!("g{g}-v{v}"))
                .arg("text")
                .arg(article_text(g, v))
                .ignore();
        }
    }
    pipe.query::<()>(conn).unwrap();
    (GROUPS * COPIES) as usize
}

fn consumer_pending(conn: &mut redis::Connection, keys: &Keys, consumer: &str) -> usize {
    let reply: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(keys.input_stream())
        .arg(GROUP)
        .arg("-")
        .arg("+")
        .arg(100_000)
        .arg(consumer)
        .query(conn)
        .unwrap();
    reply.len()
}

fn consumers(conn: &mut redis::Connection, keys: &Keys) -> Vec<String> {
    let reply: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(keys.input_stream())
        .arg(GROUP)
        .query(conn)
        .unwrap();
    reply
        .into_iter()
        .filter_map(|c| match c.get("name") {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect()
}

fn outputs(conn: &mut redis::Connection, keys: &Keys) -> usize {
    xlen(conn, &keys.output_stream())
}

/// Every input has exactly one output, nothing is pending, no article was
/// rejected, and each group has exactly one article kept, the others its
/// duplicates.
fn assert_all_answered_once(conn: &mut redis::Connection, keys: &Keys, total: usize) {
    wait_until("one output per input, nothing pending", LIMIT, || {
        outputs(conn, keys) >= total && pending(conn, keys, GROUP) == 0
    });
    let outs = read_stream(conn, &keys.output_stream());
    assert_eq!(outs.len(), total, "exactly one output per input");
    let mut sources: Vec<&String> = outs.iter().map(|(_, f)| &f["source"]).collect();
    sources.sort();
    sources.dedup();
    assert_eq!(sources.len(), total, "no input answered twice");
    let fields: Vec<_> = outs.into_iter().map(|(_, f)| f).collect();
    assert_one_kept_per_group(&fields, GROUPS as usize);
    assert_eq!(xlen(conn, &keys.dead_stream()), 0, "nothing dead-lettered");
}

/// Recovery, and exactly once after it: a worker stopped (SIGSTOP) while it
/// holds entries looks dead to its peer, which takes them over once its
/// liveness key expires (3 s TTL, 1 s scans by default), answers them, and
/// removes it from the group. Resumed (SIGCONT), the stopped worker finishes
/// the same entries and commits them: the ack-and-emit script finds them
/// acked already and writes nothing (`XACK` returns 0), so each input still
/// has exactly one output, and the resumed worker counts them as skipped.
///
/// The worker is stopped while its reader waits in `XREADGROUP BLOCK`,
/// before anything is fed: Redis serves the waiting read as the entries
/// arrive, so they enter the worker's pending list and its socket, and are
/// read and worked on only once it resumes.
#[test]
fn a_stopped_workers_entries_move_on_and_it_emits_nothing_for_them() {
    let redis = Redis::start();
    let keys = Keys::new("kill");
    let mut conn = redis.connection();
    let mut a = Worker::spawn_with(
        &redis,
        "kill",
        "a",
        &[("SIMDEDUP_WORKER__BLOCK_MS", "60000")],
    );
    wait_ready(&[&a]);
    a.freeze_in_blocked_read(&mut conn);
    let total = feed(&mut conn, &keys);
    let orphaned = consumer_pending(&mut conn, &keys, "a");
    assert!(orphaned > 0, "the stopped worker was served entries");
    let b = Worker::spawn(&redis, "kill", "b");
    wait_ready(&[&b]);
    // Without liveness-based recovery nobody takes them at all.
    wait_until("a's entries taken over and a removed", LIMIT, || {
        !consumers(&mut conn, &keys).contains(&a.name)
    });
    assert_all_answered_once(&mut conn, &keys, total);
    assert!(b.metric("simdedup_claimed_total") >= orphaned as u64);

    a.signal("-CONT");
    wait_until("the resumed worker finished its entries", LIMIT, || {
        a.metric("simdedup_commit_skipped_total") + a.metric_sum("simdedup_articles_total")
            >= orphaned as u64
    });
    assert_eq!(
        a.metric_sum("simdedup_articles_total"),
        0,
        "the resumed worker emitted nothing for entries answered by its peer"
    );
    assert_eq!(a.metric("simdedup_commit_skipped_total"), orphaned as u64);
    assert_all_answered_once(&mut conn, &keys, total);
    a.kill9();
}

/// Replay after a crash, through the Redis index: a worker decided and
/// stored articles (here: `RedisIndex` itself, as the worker does) and died
/// before it acknowledged their entries, which stay pending on it. The
/// worker that takes them over answers each with the verdict stored then,
/// marked `replayed`. The stored verdicts are not
/// what the texts would get now (the texts are unrelated; "copy" was stored
/// as a duplicate of "orig"), so a fresh decision would not pass.
#[test]
fn entries_of_a_crashed_worker_come_out_replayed_with_the_stored_verdicts() {
    use simdedup::decision::DecisionConfig;
    use simdedup::fingerprint::Fingerprint;
    use simdedup::index::{Index, IndexEntry, RedisIndex, RedisIndexOptions, Verdict};
    let redis = Redis::start();
    let keys = Keys::new("replay");
    let mut conn = redis.connection();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let fingerprint = |simhash: u64| Fingerprint {
        simhash,
        content: 7,
        signatures: (1..=24).collect(),
        words: 40,
        numbers: Vec::new(),
        ..Default::default()
    };
    let simhash = 0x9e37_79b9_7f4a_7c15u64;
    let stored = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let idx = RedisIndex::connect(
            &redis.url(),
            "replay",
            DecisionConfig::default(),
            RedisIndexOptions::default(),
        )
        .await
        .unwrap();
        let mut stored = Vec::new();
        for (id, simhash) in [("orig", simhash), ("copy", simhash ^ 0b11)] {
            let e = IndexEntry {
                id: id.into(),
                ts_ms: now_ms,
                fingerprint: fingerprint(simhash),
            };
            stored.push(idx.check_and_insert(&e).await.unwrap().verdict);
        }
        stored
    });
    assert_eq!(stored[0], Verdict::UNIQUE);
    let dup = stored[1]
        .duplicate()
        .expect("copy stored as orig's duplicate");
    assert_eq!(dup.dup_of, "orig");
    create_group(&mut conn, &keys);
    strand(&mut conn, &keys, "crashed", "orig", &article_text(1, 0));
    strand(&mut conn, &keys, "crashed", "copy", &article_text(2, 0));
    strand(&mut conn, &keys, "crashed", "fresh", &article_text(3, 0));
    let w = Worker::spawn(&redis, "replay", "w");
    let outs = answered(&mut conn, &keys, 3);
    let (o, c, f) = (&outs["orig"], &outs["copy"], &outs["fresh"]);
    assert_eq!(o["verdict"], "unique", "{o:?}");
    assert_eq!(o.get("replayed").map(String::as_str), Some("1"), "{o:?}");
    assert_eq!(c["verdict"], "duplicate", "the stored verdict: {c:?}");
    assert_eq!(c["dup_of"], "orig", "{c:?}");
    assert_eq!(c["distance"], dup.distance.to_string(), "{c:?}");
    assert_eq!(c.get("replayed").map(String::as_str), Some("1"), "{c:?}");
    assert_eq!(f["verdict"], "unique", "{f:?}");
    assert!(!f.contains_key("replayed"), "decided now: {f:?}");
    assert_eq!(w.metric("simdedup_claimed_total"), 3);
    assert_eq!(w.metric("simdedup_replayed_total"), 2);
}

/// A live consumer's entries are never taken, however long it holds them: a
/// consumer whose liveness key the test keeps fresh holds entries for three
/// TTLs while a worker runs; once the key lapses, the worker takes them.
#[test]
fn a_live_consumers_entries_are_never_taken() {
    let redis = Redis::start();
    let keys = Keys::new("slow");
    let mut conn = redis.connection();
    let w = Worker::spawn(&redis, "slow", "w");
    wait_ready(&[&w]);
    let total = feed(&mut conn, &keys);
    // "slow" reads a few entries and never finishes them while it lives.
    let alive = keys.alive(GROUP, "slow");
    let _: () = redis::cmd("SET")
        .arg(&alive)
        .arg(1)
        .arg("PX")
        .arg(3000)
        .query(&mut conn)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg("slow")
        .arg("COUNT")
        .arg(5)
        .arg("STREAMS")
        .arg(keys.input_stream())
        .arg(">")
        .query(&mut conn)
        .unwrap();
    let held = consumer_pending(&mut conn, &keys, "slow");
    let until = Instant::now() + Duration::from_secs(9);
    while Instant::now() < until {
        let _: () = redis::cmd("PEXPIRE")
            .arg(&alive)
            .arg(3000)
            .query(&mut conn)
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        consumer_pending(&mut conn, &keys, "slow"),
        held,
        "a live consumer keeps its entries"
    );
    assert_eq!(w.metric("simdedup_claimed_total"), 0);
    // It dies: its key lapses, and its entries move on.
    assert_all_answered_once(&mut conn, &keys, total);
    assert_eq!(w.metric("simdedup_claimed_total"), held as u64);
    wait_until("slow removed from the group", LIMIT, || {
        !consumers(&mut conn, &keys).contains(&"slow".to_owned())
    });
}

/// Two workers on namespace `ns` of `redis`, fed the articles; Redis killed
/// (SIGKILL) once a quarter is answered, and the workers seen unready.
/// Returns the workers and how many articles were fed.
fn kill_redis_mid_stream(redis: &mut Redis, keys: &Keys, ns: &str) -> (Worker, Worker, usize) {
    let mut conn = redis.connection();
    let a = Worker::spawn(redis, ns, "a");
    let b = Worker::spawn(redis, ns, "b");
    wait_ready(&[&a, &b]);
    let total = feed(&mut conn, keys);
    wait_until("a quarter answered", LIMIT, || {
        outputs(&mut conn, keys) >= total / 4
    });
    redis.kill();
    wait_until("workers see the outage", LIMIT, || !a.ready() && !b.ready());
    (a, b, total)
}

/// Redis killed with SIGKILL mid-stream and started again from its AOF.
#[test]
fn redis_killed_and_restarted_from_its_aof() {
    let mut redis = Redis::start();
    let keys = Keys::new("restart");
    let (a, b, total) = kill_redis_mid_stream(&mut redis, &keys, "restart");
    std::thread::sleep(Duration::from_secs(1));
    redis.restart();
    assert!(
        redis.dir().join("appendonlydir").exists(),
        "restarted from the AOF"
    );
    let mut conn = redis.connection();
    assert_all_answered_once(&mut conn, &keys, total);
    wait_until("workers ready again", LIMIT, || a.ready() && b.ready());
}

/// Redis killed mid-stream and started again without its data (no
/// persistence; as after a failover to a replica that had not synced yet):
/// the running workers create the consumer group again, load their views
/// again, and answer a new feed exactly once, one kept per group.
#[test]
fn redis_restarted_without_its_data() {
    let mut redis = Redis::start_with(&["--save", "", "--appendonly", "no"]);
    let keys = Keys::new("emptied");
    let (a, b, total) = kill_redis_mid_stream(&mut redis, &keys, "emptied");
    redis.restart();
    let mut conn = redis.connection();
    // The workers write keys of their own at once (history, group), but no
    // output without an input: the outputs written before are gone.
    assert_eq!(outputs(&mut conn, &keys), 0, "restarted without its data");
    assert_eq!(feed(&mut conn, &keys), total);
    assert_all_answered_once(&mut conn, &keys, total);
    wait_until("workers ready again", LIMIT, || a.ready() && b.ready());
}

/// Every client connection killed, again and again, while articles flow.
#[test]
fn client_kill_storm() {
    let redis = Redis::start();
    let keys = Keys::new("clientkill");
    let mut conn = redis.connection();
    let a = Worker::spawn(&redis, "clientkill", "a");
    let b = Worker::spawn(&redis, "clientkill", "b");
    wait_ready(&[&a, &b]);
    let total = feed(&mut conn, &keys);
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        // SKIPME yes (the default): the test's own connection survives.
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut conn)
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
    }
    assert_all_answered_once(&mut conn, &keys, total);
}

/// Redis out of memory (`maxmemory` just under what it uses, `noeviction`)
/// while articles flow, lifted after a while: the workers hold their
/// entries, answer 503 on /readyz with the reason, spend no delivery, and
/// finish everything once it is lifted.
#[test]
fn redis_out_of_memory_and_lifted() {
    let redis = Redis::start();
    let keys = Keys::new("oom");
    let mut conn = redis.connection();
    let a = Worker::spawn(&redis, "oom", "a");
    let b = Worker::spawn(&redis, "oom", "b");
    wait_ready(&[&a, &b]);
    let total = feed(&mut conn, &keys);
    wait_until("some answered", LIMIT, || {
        outputs(&mut conn, &keys) >= total / 10
    });
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - used / 10)
        .query(&mut conn)
        .unwrap();
    wait_until(
        "/readyz 503 with the reason",
        LIMIT,
        || matches!(a.get("/readyz"), Some((503, body)) if body.contains("OOM")),
    );
    // Hold the outage well past max_deliveries (5) claim scans.
    std::thread::sleep(Duration::from_secs(8));
    let during = outputs(&mut conn, &keys);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert!(during < total, "the outage caught articles in flight");
    assert_all_answered_once(&mut conn, &keys, total);
    wait_until("workers ready again", LIMIT, || a.ready() && b.ready());
    assert!(
        a.metric("simdedup_redis_outages_total") + b.metric("simdedup_redis_outages_total") >= 1
    );
}

/// XADD article `id` and have consumer `ghost` read it and die (it never
/// had a liveness key): the entry is stranded on it.
fn strand(conn: &mut redis::Connection, keys: &Keys, ghost: &str, id: &str, text: &str) {
    xadd_article(conn, keys, id, text);
    deliver(conn, keys, ghost);
}

/// Deliver the next new entry to `consumer` (`XREADGROUP`).
fn deliver(conn: &mut redis::Connection, keys: &Keys, consumer: &str) {
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(keys.input_stream())
        .arg(">")
        .query(conn)
        .unwrap();
}

/// Load the data again from the RDB last saved, dropping what came since.
fn reload_last_save(conn: &mut redis::Connection) {
    let _: () = redis::cmd("DEBUG")
        .arg("RELOAD")
        .arg("NOSAVE")
        .query(conn)
        .unwrap();
}

/// Once every one of `total` inputs is answered and nothing is pending: the
/// outputs by article id, exactly one per input.
fn answered(
    conn: &mut redis::Connection,
    keys: &Keys,
    total: usize,
) -> HashMap<String, HashMap<String, String>> {
    wait_until("one output per input, nothing pending", LIMIT, || {
        outputs(conn, keys) >= total && pending(conn, keys, GROUP) == 0
    });
    let outs = read_stream(conn, &keys.output_stream());
    assert_eq!(outs.len(), total, "exactly one output per input");
    let by_id: HashMap<_, _> = outs
        .into_iter()
        .map(|(_, f)| (f["id"].clone(), f))
        .collect();
    assert_eq!(by_id.len(), total, "one output per article id");
    by_id
}

/// Order across workers: an original stranded on a dead consumer is decided
/// before its copy, read by a live worker far later in the stream. The worker
/// reads `order_slack` (256) entries past the stranded one and stops; its
/// batches wait for earlier entries held elsewhere; its scan takes the
/// original over (liveness TTL + scan) and decides it first. Either rule alone
/// keeps the order here; with both off (`SIMDEDUP_WORKER__ORDER_SLACK=0
/// SIMDEDUP_WORKER__ORDER_ACROSS_WORKERS=false`) this test fails: the copy is
/// kept and the original marked its duplicate.
#[test]
fn an_original_stranded_on_a_dead_consumer_is_decided_before_its_copy() {
    let redis = Redis::start();
    let keys = Keys::new("order");
    let mut conn = redis.connection();
    create_group(&mut conn, &keys);
    strand(&mut conn, &keys, "ghost", "original", &article_text(1, 0));
    assert_eq!(consumer_pending(&mut conn, &keys, "ghost"), 1);
    // More than the slack plus a batch of other articles, then the copy.
    let fillers = 256 + 128 + 16;
    for g in 0..fillers {
        let text = article_text(1000 + g, 0);
        let id = format!("filler-{g}");
        xadd_article(&mut conn, &keys, &id, &text);
    }
    let copy = article_text(1, 1);
    xadd(
        &mut conn,
        &keys,
        &[("id", b"copy"), ("text", copy.as_bytes())],
    );
    let total = fillers as usize + 2;

    let w = Worker::spawn(&redis, "order", "w");
    let outs = answered(&mut conn, &keys, total);
    let verdict = |id: &str| {
        outs.get(id)
            .unwrap_or_else(|| panic!("an output for {id}"))
            .clone()
    };
    let (o, c) = (verdict("original"), verdict("copy"));
    assert_eq!(o["verdict"], "unique", "the original is kept: {o:?}");
    assert_eq!(
        c["verdict"], "duplicate",
        "the copy is its duplicate: {c:?}"
    );
    assert_eq!(c["dup_of"], "original");
    assert!(w.metric("simdedup_order_waits_total") > 0);
    assert_eq!(w.metric("simdedup_claimed_total"), 1);
}

/// Order across workers with many dead consumers: each holds an original,
/// and its copy, the next entry, waits in a batch of its own for it. A scan
/// takes the dead consumers over oldest entry first, so every copy's wait
/// ends when its own original is taken over and decided, well within the
/// bound. Taken over in another order (XINFO CONSUMERS lists them by name:
/// ghost-10 before ghost-2), batches wait out the bound and decide anyway
/// (`simdedup_order_given_up_total`), and this test fails. The race between
/// a take-over and a batch looking at the other consumers is covered by
/// `order::tests::a_batch_waits_for_entries_taken_over_while_it_looked`.
#[test]
fn dead_consumers_are_taken_over_oldest_entry_first() {
    const GHOSTS: u64 = 40;
    let redis = Redis::start();
    let keys = Keys::new("takeover-order");
    let mut conn = redis.connection();
    create_group(&mut conn, &keys);
    for g in 0..GHOSTS {
        let (original, copy) = (article_text(2000 + g, 0), article_text(2000 + g, 1));
        let (oid, cid) = (format!("original-{g}"), format!("copy-{g}"));
        strand(&mut conn, &keys, &format!("ghost-{g}"), &oid, &original);
        xadd(
            &mut conn,
            &keys,
            &[("id", cid.as_bytes()), ("text", copy.as_bytes())],
        );
    }
    let total = 2 * GHOSTS as usize;
    let w = Worker::spawn_with(
        &redis,
        "takeover-order",
        "w",
        &[
            ("SIMDEDUP_WORKER__BATCH_SIZE", "1"),
            ("SIMDEDUP_WORKER__MAX_IN_FLIGHT", "64"),
            ("SIMDEDUP_WORKER__LIVENESS_TTL_MS", "300"),
            ("SIMDEDUP_WORKER__CLAIM_INTERVAL_MS", "50"),
            ("SIMDEDUP_WORKER__BLOCK_MS", "20"),
        ],
    );
    let outs = answered(&mut conn, &keys, total);
    let verdict = |id: &str| {
        outs.get(id)
            .unwrap_or_else(|| panic!("an output for {id}"))
            .clone()
    };
    let mut inverted = Vec::new();
    for g in 0..GHOSTS {
        let (o, c) = (
            verdict(&format!("original-{g}")),
            verdict(&format!("copy-{g}")),
        );
        if o["verdict"] != "unique" || c["dup_of"] != format!("original-{g}") {
            inverted.push(g);
        }
    }
    assert!(
        inverted.is_empty(),
        "copies decided before their originals in groups {inverted:?}"
    );
    assert_eq!(w.metric("simdedup_claimed_total"), GHOSTS);
    assert_eq!(
        w.metric("simdedup_order_given_up_total"),
        0,
        "no batch waited out the bound"
    );
}

/// A worker for the transient-error tests: `--max-deliveries 1`, so an entry
/// delivered a second time (given up on and taken up again, instead of held
/// through the error) is dead-lettered and fails the test; retries every
/// 200 ms at most.
fn held_worker(redis: &Redis, ns: &str) -> Worker {
    Worker::spawn_args(
        redis,
        ns,
        "w",
        &[("SIMDEDUP_WORKER__BACKOFF_MAX_MS", "200")],
        &["--max-deliveries", "1"],
    )
}

/// Feed the articles and wait until the worker is mid-stream: some
/// answered, not all.
fn feed_and_start(conn: &mut redis::Connection, keys: &Keys) -> usize {
    let total = feed(conn, keys);
    wait_until("some answered", LIMIT, || outputs(conn, keys) >= total / 10);
    total
}

/// Wait until `w` answers 503 on /readyz naming `code`, while it holds
/// entries: the error met the articles in flight.
fn wait_unready_holding(w: &Worker, code: &str) {
    wait_until(
        &format!("/readyz 503 {code}"),
        LIMIT,
        || matches!(w.get("/readyz"), Some((503, body)) if body.contains(code)),
    );
    assert!(
        w.metric("simdedup_in_flight") > 0,
        "the worker held entries through {code}"
    );
}

/// After a transient error is lifted: every input answered exactly once,
/// nothing pending, nothing dead-lettered (with `--max-deliveries 1`:
/// nothing delivered twice), nothing taken over, and the server did answer
/// the worker `code` (its `INFO errorstats`).
fn assert_held_through(
    conn: &mut redis::Connection,
    keys: &Keys,
    total: usize,
    w: &Worker,
    codes: &[&str],
) {
    assert_all_answered_once(conn, keys, total);
    assert_eq!(w.metric("simdedup_claimed_total"), 0, "nothing taken over");
    assert_eq!(w.metric("simdedup_dead_letters_total"), 0);
    let stats: String = redis::cmd("INFO").arg("errorstats").query(conn).unwrap();
    for code in codes {
        assert!(
            stats.contains(&format!("errorstat_{code}:count=")),
            "the server answered {code}: {stats}"
        );
    }
    wait_until("ready again", LIMIT, || w.ready());
}

/// Redis busy with a long script (`BUSY` to every other client): the worker
/// holds its entries and retries; nothing is delivered twice.
#[test]
fn redis_busy_with_a_script_holds_the_entries() {
    let redis = Redis::start();
    let keys = Keys::new("busy");
    let mut conn = redis.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(50)
        .query(&mut conn)
        .unwrap();
    let w = held_worker(&redis, "busy");
    wait_ready(&[&w]);
    let total = feed_and_start(&mut conn, &keys);
    // Spins reading the clock for up to a minute, writing nothing (so
    // SCRIPT KILL may end it).
    let mut spinner = redis.connection();
    let script = std::thread::spawn(move || {
        redis::cmd("EVAL")
            .arg(
                "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
                 repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 6e7 return 1",
            )
            .arg(0)
            .query::<redis::Value>(&mut spinner)
    });
    wait_unready_holding(&w, "BUSY");
    let _: () = redis::cmd("SCRIPT").arg("KILL").query(&mut conn).unwrap();
    assert!(script.join().unwrap().is_err(), "the script was killed");
    assert_held_through(&mut conn, &keys, total, &w, &["BUSY"]);
}

/// Redis restarted on a data set that takes seconds to load (`LOADING` to
/// every command meanwhile): the worker, stopped (SIGSTOP) across the
/// shutdown so that no reply is lost with the connection, holds its entries
/// and retries until the data is there; nothing is delivered twice.
#[test]
fn redis_loading_its_data_holds_the_entries() {
    let mut redis = Redis::start_debuggable();
    let keys = Keys::new("loading");
    let mut conn = redis.connection();
    // 20,000 keys at 250 µs each (key-load-delay): 5 s of loading.
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(20_000)
        .arg("padding")
        .query(&mut conn)
        .unwrap();
    let w = held_worker(&redis, "loading");
    wait_ready(&[&w]);
    let total = feed_and_start(&mut conn, &keys);
    w.signal("-STOP");
    redis.shutdown_save();
    // Redis answers clients while loading only between chunks of the RDB
    // (2 MB by default, more than this data set): every 1 KB here.
    redis.restart_with(&[
        "--key-load-delay",
        "250",
        "--loading-process-events-interval-bytes",
        "1024",
    ]);
    w.signal("-CONT");
    wait_unready_holding(&w, "LOADING");
    let mut conn = redis.connection();
    wait_until("the data loaded", LIMIT, || {
        redis::cmd("INFO")
            .arg("persistence")
            .query::<String>(&mut conn)
            .is_ok_and(|i| i.contains("\r\nloading:0\r\n"))
    });
    assert_held_through(&mut conn, &keys, total, &w, &["LOADING"]);
}

/// The primary turned into a replica of a primary that does not answer
/// (port 1, where nothing listens): writes answer `READONLY`; then, with
/// `replica-serve-stale-data no`, everything answers `MASTERDOWN`. Lifted
/// with `REPLICAOF NO ONE` (the data kept). The worker holds its entries
/// through both; nothing is delivered twice.
#[test]
fn redis_readonly_and_masterdown_hold_the_entries() {
    let redis = Redis::start();
    let keys = Keys::new("demoted");
    let mut conn = redis.connection();
    let w = held_worker(&redis, "demoted");
    wait_ready(&[&w]);
    let total = feed_and_start(&mut conn, &keys);
    let replicaof = |conn: &mut redis::Connection, host: &str, port: &str| {
        let _: () = redis::cmd("REPLICAOF")
            .arg(host)
            .arg(port)
            .query(conn)
            .unwrap();
    };
    replicaof(&mut conn, "127.0.0.1", "1");
    wait_unready_holding(&w, "READONLY");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-serve-stale-data")
        .arg("no")
        .query(&mut conn)
        .unwrap();
    wait_unready_holding(&w, "MASTERDOWN");
    replicaof(&mut conn, "NO", "ONE");
    assert_held_through(&mut conn, &keys, total, &w, &["READONLY", "MASTERDOWN"]);
}

/// Change the ACL user `w` by `rules` (`ACL SETUSER w RULE…`): the tests
/// below hold a worker's acks by taking `XACK` from it ([`NO_XACK`]).
fn user_w(conn: &mut redis::Connection, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("w")
        .arg(rules)
        .query(conn)
        .unwrap();
}

/// The user `w` may do anything but `XACK`.
const NO_XACK: &[&str] = &["on", ">SECRET", "~*", "+@all", "-xack"];

/// A worker named `w` on namespace `ns`, logged in as the user `w`
/// (password `SECRET`), retrying at most every 200 ms.
fn worker_as_w(redis: &Redis, ns: &str) -> Worker {
    let url = redis.url().replacen("redis://", "redis://w:SECRET@", 1);
    let env = [("SIMDEDUP_WORKER__BACKOFF_MAX_MS", "200")];
    Worker::spawn_at(&url, ns, "w", &env, &[])
}

/// A verdict is written only where the index write it rests on is. Redis
/// answers a write before its replicas have it, so a failover can lose an
/// index write whose entry is still pending on the new primary; answered
/// there with the verdict of the lost write, the entry would leave the index
/// without its article, and a later copy would be kept as well.
///
/// Here the worker's user may not `XACK` at first, so the worker stores the
/// article and then retries its ack; Redis meanwhile reloads an RDB saved
/// with the entry delivered and nothing stored (as a replica promoted before
/// the write reached it), then lets the user `XACK`. The ack finds the
/// write missing, the worker decides the entry again, and the copy that
/// follows is its duplicate. Without the check in `lua/ack_and_emit.lua`
/// this test fails: both are kept.
#[test]
fn a_verdict_whose_index_write_was_lost_is_decided_again() {
    let redis = Redis::start_debuggable();
    let keys = Keys::new("lost");
    let mut conn = redis.connection();
    user_w(&mut conn, NO_XACK);
    create_group(&mut conn, &keys);
    strand(&mut conn, &keys, "w", "original", &article_text(1, 0));
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();

    let w = worker_as_w(&redis, "lost");
    let stored = |conn: &mut redis::Connection| {
        redis::cmd("KEYS")
            .arg(format!("{}a:*", keys.prefix()))
            .query::<Vec<String>>(conn)
            .unwrap()
            .len()
    };
    wait_until("the worker stored the article", LIMIT, || {
        stored(&mut conn) > 0
    });
    assert_eq!(
        outputs(&mut conn, &keys),
        0,
        "not acked: its user may not XACK"
    );
    reload_last_save(&mut conn);
    assert_eq!(stored(&mut conn), 0, "the write is lost");
    assert_eq!(consumer_pending(&mut conn, &keys, "w"), 1);
    user_w(&mut conn, &["+xack"]);
    answered(&mut conn, &keys, 1);

    xadd_article(&mut conn, &keys, "copy", &article_text(1, 1));
    let out = answered(&mut conn, &keys, 2);
    assert_eq!(out["original"]["verdict"], "unique");
    assert_eq!(out["copy"]["verdict"], "duplicate", "{:?}", out["copy"]);
    assert_eq!(out["copy"]["dup_of"], "original");
    assert!(w.metric("simdedup_writes_lost_total") >= 1);
    drop(w);

    // The same for a delete: the lost one is done again.
    user_w(&mut conn, &["-xack"]);
    xadd(&mut conn, &keys, &[("id", b"original"), ("op", b"delete")]);
    deliver(&mut conn, &keys, "w");
    let _: () = redis::cmd("SAVE").query(&mut conn).unwrap();
    let w = worker_as_w(&redis, "lost");
    let log = format!("{}deleted", keys.prefix());
    wait_until("the worker deleted the article", LIMIT, || {
        xlen(&mut conn, &log) > 0
    });
    reload_last_save(&mut conn);
    assert_eq!(xlen(&mut conn, &log), 0, "the delete is lost");
    user_w(&mut conn, &["+xack"]);
    wait_until("the delete answered", LIMIT, || {
        outputs(&mut conn, &keys) >= 3 && pending(&mut conn, &keys, GROUP) == 0
    });
    let out = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[2].1["op"], "delete");
    assert_eq!(out[2].1["verdict"], "deleted", "{:?}", out[2].1);
    assert_eq!(xlen(&mut conn, &log), 1, "deleted again");
    assert!(w.metric("simdedup_writes_lost_total") >= 1);
}

/// An entry decided again is judged as it was at first. Its index keys gone
/// between its check and its ack (as when its bucket expires or is evicted;
/// here deleted by hand, once its event time has left the window), the ack
/// finds its write lost and the worker decides it again: it is answered
/// (stored anew), not rejected `ts_too_old` by the clock of then. With the
/// clock of then, this test fails.
#[test]
fn an_entry_decided_again_is_judged_by_the_batchs_clock() {
    let redis = Redis::start_debuggable();
    let keys = Keys::new("late");
    let mut conn = redis.connection();
    user_w(&mut conn, NO_XACK);
    create_group(&mut conn, &keys);
    let window_ms = simdedup::decision::DecisionConfig::default().window_ms as u128;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    // Inside the window for the next 8 s: time for the worker to start and
    // decide it.
    let left = now() + 8000 - window_ms;
    let ts = left.to_string();
    let text = article_text(1, 0);
    xadd(
        &mut conn,
        &keys,
        &[
            ("id", b"late"),
            ("text", text.as_bytes()),
            ("ts", ts.as_bytes()),
        ],
    );
    let w = worker_as_w(&redis, "late");
    let index_keys = |conn: &mut redis::Connection| {
        let all: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", keys.prefix()))
            .query(conn)
            .unwrap();
        let streams = [
            keys.input_stream(),
            keys.output_stream(),
            keys.dead_stream(),
        ];
        all.into_iter()
            .filter(|k| !streams.contains(k))
            .filter(|k| !k.contains(":alive:"))
            .filter(|k| !k.ends_with(":history") && !k.ends_with(":version"))
            .collect::<Vec<_>>()
    };
    wait_until("the worker stored the article", LIMIT, || {
        index_keys(&mut conn).iter().any(|k| k.contains(":a:"))
    });
    // Then out of it (its bucket outlives it by the bucket's length).
    wait_until("the event time left the window", LIMIT, || {
        now() > left + window_ms
    });
    let _: () = redis::cmd("DEL")
        .arg(index_keys(&mut conn))
        .query(&mut conn)
        .unwrap();
    wait_until("the ack found the write lost", LIMIT, || {
        w.metric("simdedup_writes_lost_total") > 0
    });
    user_w(&mut conn, &["+xack"]);
    let out = answered(&mut conn, &keys, 1);
    assert_eq!(out["late"]["verdict"], "unique", "{:?}", out["late"]);
    assert_eq!(xlen(&mut conn, &keys.dead_stream()), 0);
}
