//! The `simdedup worker` binary: SIGKILL one worker mid-stream, the other
//! finishes its entries; SIGTERM stops a worker with exit status 0; /metrics,
//! /healthz and /readyz answer; each worker flag that changes behaviour
//! (`--fingerprint-nice`, `--max-deliveries`, `--shutdown-timeout-ms`,
//! `--wait-replicas`, `--ordered-index-concurrency`) has its effect seen from
//! outside.
//!
//! Each process uses `--index embedded` (its own index), so verdicts across
//! processes are not what is checked here: the stream protocol is (every input
//! exactly one output, nothing pending, nothing lost).

use crate::support;
use crate::worker_common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use simdedup::keys::Keys;
// A worker process, killed when dropped: a failing assertion must not leave
// workers running (they would hold the test's stderr open and keep working).
use support::KillOnDrop as Worker;
use support::{free_port, http_get, metric, RedisServer};
use worker_common::*;

const LIMIT: Duration = Duration::from_secs(180);

fn spawn_worker(server: &RedisServer, ns: &str, consumer: &str, http_port: u16) -> Worker {
    spawn_worker_with(server, ns, consumer, http_port, "embedded")
}

fn spawn_worker_with(
    server: &RedisServer,
    ns: &str,
    consumer: &str,
    http_port: u16,
    index: &str,
) -> Worker {
    spawn_worker_logging_to(
        server,
        ns,
        consumer,
        http_port,
        index,
        Stdio::inherit(),
        &[],
    )
}

/// A worker whose log (at `warn`) goes to `stderr`.
fn spawn_worker_logging_to(
    server: &RedisServer,
    ns: &str,
    consumer: &str,
    http_port: u16,
    index: &str,
    stderr: Stdio,
    extra: &[&str],
) -> Worker {
    let child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args([
            "worker",
            "--redis-url",
            &server.url(),
            "--namespace",
            ns,
            "--index",
            index,
            "--consumer",
            consumer,
            "--http-addr",
            &format!("127.0.0.1:{http_port}"),
            "--batch-size",
            "32",
            "--max-in-flight",
            "128",
            "--liveness-ttl-ms",
            "1000",
            "--claim-interval-ms",
            "200",
            "--block-ms",
            "200",
        ])
        .args(extra)
        .env_remove("SIMDEDUP_CONFIG")
        .env("SIMDEDUP_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn simdedup worker");
    Worker(child)
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig}");
}

fn consumer_pending(conn: &mut redis::Connection, keys: &Keys, consumer: &str) -> i64 {
    let reply: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(keys.input_stream())
        .arg("simdedup")
        .arg("-")
        .arg("+")
        .arg(10_000)
        .arg(consumer)
        .query(conn)
        .unwrap();
    reply.len() as i64
}

#[test]
fn sigkill_mid_stream_loses_nothing_and_duplicates_nothing() {
    let server = RedisServer::start();
    let keys = Keys::new("crash");
    let mut conn = server.connection();
    let total = 6000usize;
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = spawn_worker(&server, "crash", "a", port_a);
    let mut b = spawn_worker(&server, "crash", "b", port_b);
    // Both must be reading before the articles arrive, or the first one up may
    // finish them all while the other is still loading its dictionaries.
    wait_until("both workers ready", LIMIT, || {
        [port_a, port_b]
            .iter()
            .all(|&p| matches!(http_get(p, "/readyz"), Some((200, _))))
    });
    let mut pipe = redis::pipe();
    for i in 0..total {
        pipe.cmd("XADD")
            .arg(keys.input_stream())
            .arg("*")
            .arg("id")
            .arg(format!("c{i}"))
            .arg("text")
            .arg(article_text(i as u64, 0))
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    // Kill `a` while it holds entries (read, not yet acked): stopped
    // (SIGSTOP) at a moment it holds some, then killed.
    wait_until("a is mid-stream, stopped", LIMIT, || {
        signal(&a, "-STOP");
        let holds = consumer_pending(&mut conn, &keys, "a") > 0;
        if !holds {
            signal(&a, "-CONT");
        }
        holds
    });
    signal(&a, "-KILL");
    a.wait().unwrap();
    let orphaned = consumer_pending(&mut conn, &keys, "a");
    assert!(orphaned > 0, "a held entries when killed");
    wait_until("all outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= total
            && pending(&mut conn, &keys, "simdedup") == 0
    });
    // `b` claimed what `a` left behind, and says so on /metrics.
    let (status, metrics) = http_get(port_b, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200);
    let claimed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("simdedup_claimed_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("simdedup_claimed_total");
    assert!(
        claimed >= orphaned as u64,
        "b claimed a's {orphaned} orphans: {claimed}"
    );
    assert_eq!(http_get(port_b, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(port_b, "/readyz").unwrap().0, 200);
    signal(&b, "-TERM");
    let status = b.wait().unwrap();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");

    let outputs = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(outputs.len(), total, "exactly one output per input");
    let sources: HashSet<_> = outputs.iter().map(|(_, f)| f["source"].clone()).collect();
    assert_eq!(sources.len(), total);
    let inputs: HashSet<_> = read_stream(&mut conn, &keys.input_stream())
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(sources, inputs);
    assert_eq!(pending(&mut conn, &keys, "simdedup"), 0);
}

#[test]
fn sigterm_while_idle_or_busy_exits_zero_with_nothing_pending() {
    let server = RedisServer::start();
    let keys = Keys::new("term");
    let mut conn = server.connection();
    let port = free_port();
    let mut w = spawn_worker(&server, "term", "t", port);
    wait_until("ready", LIMIT, || {
        http_get(port, "/readyz").map(|r| r.0) == Some(200)
    });
    let total = 3000;
    let mut pipe = redis::pipe();
    for i in 0..total {
        pipe.cmd("XADD")
            .arg(keys.input_stream())
            .arg("*")
            .arg("id")
            .arg(format!("t{i}"))
            .arg("text")
            .arg(article_text(i as u64, 0))
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    wait_until("first outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) > 0
    });
    // Stopped mid-stream (SIGSTOP) until it holds entries, SIGTERM is sent
    // while it is stopped and found when it resumes: work is in flight when
    // the signal comes. A call it sent before it stopped may still run, so
    // the outputs are counted before the entries it holds: an entry held
    // then was not answered before.
    let (held, answered) = loop {
        signal(&w, "-STOP");
        let answered = xlen(&mut conn, &keys.output_stream());
        let held = consumer_pending(&mut conn, &keys, "t");
        if held > 0 {
            break (held, answered);
        }
        signal(&w, "-CONT");
        assert!(
            answered < total,
            "the worker finished before it could be caught holding entries"
        );
    };
    signal(&w, "-TERM");
    signal(&w, "-CONT");
    let status = w.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        pending(&mut conn, &keys, "simdedup"),
        0,
        "in-flight entries were acked"
    );
    let outputs = read_stream(&mut conn, &keys.output_stream());
    assert!(
        outputs.len() >= answered + held as usize,
        "the {held} entries held at SIGTERM were answered: {} outputs, {answered} before",
        outputs.len()
    );
    let sources: HashSet<_> = outputs.iter().map(|(_, f)| f["source"].clone()).collect();
    assert_eq!(sources.len(), outputs.len());
}

/// Run `simdedup ARGS --redis-url URL`, which must succeed.
fn run_simdedup(server: &RedisServer, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(args)
        .args(["--redis-url", &server.url()])
        .env_remove("SIMDEDUP_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run a tool that prints JSON and parse it.
fn simdedup(server: &RedisServer, args: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&run_simdedup(server, args).stdout).unwrap()
}

#[test]
fn worker_processes_race_on_the_redis_index() {
    let server = RedisServer::start();
    let keys = Keys::new("shared");
    let mut conn = server.connection();
    let (groups, copies) = (40u64, 4u64);
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("in.jsonl");
    let mut lines = String::new();
    for v in 0..copies {
        for g in 0..groups {
            let line = serde_json::json!({"id": format!("g{g}-v{v}"), "text": article_text(g, v)});
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
    }
    lines.push_str("not json\n");
    std::fs::write(&jsonl, lines).unwrap();
    let total = (groups * copies) as usize;
    // Both workers start before the articles arrive, so they really race.
    let (pa, pb) = (free_port(), free_port());
    let mut a = spawn_worker_with(&server, "shared", "a", pa, "redis");
    let mut b = spawn_worker_with(&server, "shared", "b", pb, "redis");
    wait_until("both ready", LIMIT, || {
        http_get(pa, "/readyz").map(|r| r.0) == Some(200)
            && http_get(pb, "/readyz").map(|r| r.0) == Some(200)
    });
    let out = run_simdedup(
        &server,
        &[
            "produce",
            jsonl.to_str().unwrap(),
            "--namespace",
            "shared",
            "--pipeline",
            "7",
        ],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 lines skipped"));
    wait_until("all outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= total
    });
    signal(&a, "-TERM");
    signal(&b, "-TERM");
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());

    let outputs = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(outputs.len(), total);
    let fields: Vec<_> = outputs.iter().map(|(_, f)| f.clone()).collect();
    assert_one_kept_per_group(&fields, groups as usize);
    assert_eq!(pending(&mut conn, &keys, "simdedup"), 0);

    // The tools see the same state.
    let stats = simdedup(&server, &["stats", "--namespace", "shared"]);
    assert_eq!(stats["output_length"], total as u64);
    assert_eq!(stats["group"]["pending"], 0);
    let indexed: i64 = stats["index_buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["articles"].as_i64().unwrap())
        .sum();
    assert_eq!(indexed, total as i64);
    let kept = outputs
        .iter()
        .find(|(_, f)| f["id"] == "g5-v2")
        .map(|(_, f)| f.clone())
        .unwrap();
    let inspected = simdedup(&server, &["inspect", "g5-v2", "--namespace", "shared"]);
    assert_eq!(inspected["id"], "g5-v2");
    assert_eq!(
        inspected["fingerprint"]["simhash"],
        kept["simhash"].as_str()
    );
    assert_eq!(inspected["verdict"]["verdict"], kept["verdict"].as_str());
    // A duplicate shows why, weighed again from the two stored fingerprints:
    // the signal, distance and overlap its verdict carries.
    let why = &inspected["evidence"];
    if kept["verdict"] == "duplicate" {
        assert_eq!(why["signal"], kept["signal"].as_str(), "{inspected}");
        assert_eq!(why["distance"].to_string(), kept["distance"]);
        let overlap = why["overlap"].as_f64().unwrap();
        let carried: f64 = kept["overlap"].parse().unwrap();
        assert_eq!((overlap * 100.0).round(), (carried * 100.0).round());
        // One unit for overlap: the stored verdict's is the share too.
        assert_eq!(inspected["verdict"]["overlap"].as_f64(), Some(carried));
    } else {
        assert!(why.is_null(), "{inspected}");
    }
    let cluster = &inspected["cluster"];
    let root = cluster["root"].as_str().unwrap();
    assert!(root.starts_with("g5-"), "{cluster}");
    assert_eq!(
        cluster["duplicates"].as_array().unwrap().len(),
        copies as usize - 1
    );
}

/// A worker configured with another bucket length than the namespace was
/// written with exits at once with an error that says what to set, instead of
/// filing articles into overlapping buckets (which misses duplicates silently).
#[test]
fn worker_refuses_a_namespace_written_with_another_bucket_length() {
    use simdedup::decision::DecisionConfig;
    use simdedup::index::{Index, IndexEntry, RedisIndex, RedisIndexOptions};
    let server = RedisServer::start();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let idx = RedisIndex::connect(
            &server.url(),
            "buckets",
            DecisionConfig::default(),
            RedisIndexOptions::default(),
        )
        .await
        .unwrap();
        let fingerprint = simdedup::fingerprint::Fingerprint {
            simhash: 0x0123_4567_89ab_cdef,
            content: 1,
            signatures: vec![1, 2, 3],
            words: 40,
            numbers: Vec::new(),
            ..Default::default()
        };
        idx.check_and_insert(&IndexEntry {
            id: "a".into(),
            ts_ms: now_ms,
            fingerprint,
        })
        .await
        .unwrap();
    });
    let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args([
            "worker",
            "--redis-url",
            &server.url(),
            "--namespace",
            "buckets",
        ])
        .args(["--http-addr", ""])
        .env_remove("SIMDEDUP_CONFIG")
        .env("SIMDEDUP_BUCKET_HOURS", "48")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("bucket_hours") && stderr.contains("72 h") && stderr.contains("96 h"),
        "{stderr}"
    );
    // With the namespace's bucket length, the same tools work.
    let shown = simdedup(&server, &["inspect", "a", "--namespace", "buckets"]);
    assert_eq!(shown["id"], "a", "{shown}");
}

/// `produce --rate`: a steady feed, round trips of 10 ms' worth each sent when
/// due, so the entries' stream ids (Redis' clock) spread over the time the rate
/// gives; a rate that is not a positive number is refused, naming the flag.
#[test]
fn produce_at_a_rate_spreads_the_entries_over_time() {
    let server = RedisServer::start();
    let keys = Keys::new("paced");
    let mut conn = server.connection();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("in.jsonl");
    let lines: String = (0..30)
        .map(|i| format!("{{\"id\":\"a{i}\",\"text\":\"article {i}\"}}\n"))
        .collect();
    std::fs::write(&jsonl, lines).unwrap();
    let path = jsonl.to_str().unwrap();
    // 200 per second: 2 entries per round trip, the last two sent 140 ms or
    // more after the first two were stored.
    let out = run_simdedup(&server, &["produce", path, "-n", "paced", "--rate", "200"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("30 entries added"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entries = read_stream(&mut conn, &keys.input_stream());
    assert_eq!(entries.len(), 30);
    let ms = |id: &str| id.split('-').next().unwrap().parse::<u64>().unwrap();
    let spread = ms(&entries[29].0) - ms(&entries[0].0);
    // The feed's clock starts when the first round trip is answered, and a
    // sleep never wakes early: the spread is 140 ms or more, whatever the
    // load (1 ms of slack for Redis' wall clock against the monotonic one).
    assert!(spread >= 139, "30 entries at 200/s spread over {spread} ms");

    for bad in ["0", "-5", "fast", "inf"] {
        let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args([
                "produce",
                path,
                &format!("--rate={bad}"),
                "--redis-url",
                &server.url(),
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--rate {bad} accepted");
        assert!(
            stderr.contains("--rate") && stderr.contains("articles per second"),
            "{stderr}"
        );
    }
    assert_eq!(
        xlen(&mut conn, &keys.input_stream()),
        30,
        "nothing added by refused runs"
    );
}

/// Partial copies through the streams: two workers sharing the Redis index
/// give every article of a generated set the verdict `simdedup scan` gives
/// it — excerpts and abridgments duplicates of their story (`excerpt`), a
/// full story after its flash unique and naming the flash (`expands`).
#[test]
fn scan_and_two_workers_agree_on_partial_copies() {
    let server = RedisServer::start();
    let keys = Keys::new("partial");
    let mut conn = server.connection();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // (id, text) in arrival order: per story, its variants in turn.
    let mut articles: Vec<(String, String)> = Vec::new();
    for g in 0..12u64 {
        let s = story(g, 24);
        let text = |range: std::ops::Range<usize>| s[range].join(" ");
        match g % 3 {
            0 => {
                articles.push((format!("s{g}-flash"), text(0..5)));
                articles.push((format!("s{g}-story"), text(0..24)));
            }
            1 => {
                articles.push((format!("s{g}-story"), text(0..24)));
                articles.push((format!("s{g}-excerpt"), text(8..16)));
                // Three runs of four paragraphs kept, three cut.
                let abridged = [text(0..4), text(8..12), text(16..20)].join(" ");
                articles.push((format!("s{g}-abridged"), abridged));
            }
            _ => {
                articles.push((format!("s{g}-story"), text(0..24)));
                let lead = story(1000 + g, 1).concat();
                articles.push((format!("s{g}-excerpt"), format!("{lead} {}", text(2..14))));
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("in.jsonl");
    let lines: String = articles
        .iter()
        .enumerate()
        .map(|(i, (id, text))| {
            let ts = now - 3_600_000 + 60_000 * i as u64;
            serde_json::json!({"id": id, "text": text, "ts": ts}).to_string() + "\n"
        })
        .collect();
    std::fs::write(&jsonl, lines).unwrap();

    let scanned = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args(["scan", jsonl.to_str().unwrap()])
        .env_remove("SIMDEDUP_CONFIG")
        .output()
        .unwrap();
    assert!(scanned.status.success());
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    let by_scan: Vec<[String; 4]> = String::from_utf8(scanned.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            [
                field(&v, "id"),
                field(&v, "verdict"),
                format!("{}{}", field(&v, "dup_of"), field(&v, "signal")),
                field(&v, "expands"),
            ]
        })
        .collect();
    // What the set is built to hold, as scan finds it.
    let of = |id: &str| by_scan.iter().find(|r| r[0] == id).unwrap().clone();
    for g in 0..12u64 {
        match g % 3 {
            0 => {
                let story = of(&format!("s{g}-story"));
                assert_eq!(
                    story[1..],
                    ["unique", "", &format!("s{g}-flash")],
                    "{story:?}"
                );
            }
            1 => {
                let r = of(&format!("s{g}-excerpt"));
                assert_eq!(
                    r[1..3],
                    ["duplicate", &format!("s{g}-storyexcerpt")],
                    "{r:?}"
                );
                // An abridgment keeps whole clauses too: any signal may find it.
                let r = of(&format!("s{g}-abridged"));
                assert_eq!(r[1], "duplicate", "{r:?}");
                assert!(r[2].starts_with(&format!("s{g}-story")), "{r:?}");
            }
            _ => {
                let r = of(&format!("s{g}-excerpt"));
                assert_eq!(
                    r[1..3],
                    ["duplicate", &format!("s{g}-storyexcerpt")],
                    "{r:?}"
                );
            }
        }
    }

    let (pa, pb) = (free_port(), free_port());
    let _a = spawn_worker_with(&server, "partial", "a", pa, "redis");
    let _b = spawn_worker_with(&server, "partial", "b", pb, "redis");
    wait_until("both ready", LIMIT, || {
        http_get(pa, "/readyz").map(|r| r.0) == Some(200)
            && http_get(pb, "/readyz").map(|r| r.0) == Some(200)
    });
    run_simdedup(
        &server,
        &["produce", jsonl.to_str().unwrap(), "--namespace", "partial"],
    );
    wait_until("all outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= articles.len()
    });
    let mut by_workers: Vec<[String; 4]> = read_stream(&mut conn, &keys.output_stream())
        .into_iter()
        .map(|(_, f)| {
            let get = |k: &str| f.get(k).cloned().unwrap_or_default();
            [
                get("id"),
                get("verdict"),
                format!("{}{}", get("dup_of"), get("signal")),
                get("expands"),
            ]
        })
        .collect();
    let mut by_scan = by_scan;
    by_scan.sort();
    by_workers.sort();
    assert_eq!(by_workers, by_scan);
}

/// The HTTP listener cannot be held by its clients: a connection whose
/// request headers never end is closed by the worker, and SIGINT ends the
/// worker while another such client is still connected. (The waits are upper
/// bounds against hangs; without the header timeout or with a shutdown that
/// waits for every client, they run out.)
#[test]
fn http_clients_with_partial_headers_neither_stay_nor_delay_shutdown() {
    use std::io::{Read, Write};
    let server = RedisServer::start();
    let port = free_port();
    let mut w = spawn_worker(&server, "http", "h", port);
    wait_until("ready", LIMIT, || {
        http_get(port, "/readyz").map(|r| r.0) == Some(200)
    });
    let partial = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        s
    };
    // The worker closes it (an error reply, or none): the read ends.
    let mut slow = partial();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reply = Vec::new();
    let read = slow.read_to_end(&mut reply);
    assert!(
        read.is_ok(),
        "a connection with partial headers stayed open 30 s: {read:?}"
    );
    // SIGINT with a partial request open: the worker exits all the same.
    let _held = partial();
    std::thread::sleep(Duration::from_millis(200));
    signal(&w, "-INT");
    wait_until(
        "exit after SIGINT with a client connected",
        Duration::from_secs(20),
        || matches!(w.try_wait(), Ok(Some(_))),
    );
    let status = w.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
}

/// One entry added with an explicit id far in the future
/// (`32503680000000-0`, year 3000) makes Redis number every later entry
/// after it. Entries without `ts` then take the worker's clock, not their
/// implausible stream time: none is rejected `ts_in_future`, and the worker
/// warns once for the stream, not once per entry.
#[test]
fn a_future_entry_id_does_not_reject_later_articles() {
    let server = RedisServer::start();
    let keys = Keys::new("future");
    let mut conn = server.connection();
    let log = tempfile::NamedTempFile::new().unwrap();
    let port = free_port();
    let mut w = spawn_worker_logging_to(
        &server,
        "future",
        "f",
        port,
        "embedded",
        Stdio::from(log.reopen().unwrap()),
        &[],
    );
    wait_until("ready", LIMIT, || {
        http_get(port, "/readyz").map(|r| r.0) == Some(200)
    });
    let first = article_text(0, 0);
    let _: String = redis::cmd("XADD")
        .arg(keys.input_stream())
        .arg("32503680000000-0")
        .arg("id")
        .arg("f0")
        .arg("text")
        .arg(&first)
        .query(&mut conn)
        .unwrap();
    for i in 1..6u64 {
        let text = article_text(i, 0);
        xadd(
            &mut conn,
            &keys,
            &[
                ("id", format!("f{i}").as_bytes()),
                ("text", text.as_bytes()),
            ],
        );
    }
    wait_until("6 outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= 6
    });
    let outputs = read_stream(&mut conn, &keys.output_stream());
    for (_, f) in &outputs {
        assert_eq!(f["verdict"], "unique", "{f:?}");
    }
    signal(&w, "-TERM");
    assert!(w.wait().unwrap().success());
    let logged = std::fs::read_to_string(log.path()).unwrap();
    let warnings = logged.matches("ahead of this worker's clock").count();
    assert_eq!(warnings, 1, "one warning for the stream:\n{logged}");
}

/// The name and nice value of a `/proc/.../stat` record (field 19).
fn name_and_nice(stat: &str) -> Option<(String, i64)> {
    let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
    Some((name.to_owned(), rest.split(' ').nth(16)?.parse().ok()?))
}

/// The nice values of the threads of process `pid` named `prefix`….
fn thread_nices(pid: u32, prefix: &str) -> Vec<i64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter_map(|stat| name_and_nice(&stat))
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, nice)| nice)
        .collect()
}

/// `--fingerprint-nice N`: the fingerprinting threads run N nice steps below
/// the process; the process itself keeps its priority.
#[cfg(target_os = "linux")]
#[test]
fn fingerprint_nice_lowers_the_fingerprinting_threads() {
    let server = RedisServer::start();
    let w = spawn_worker_logging_to(
        &server,
        "nice",
        "n",
        free_port(),
        "embedded",
        Stdio::inherit(),
        &["--fingerprint-nice", "13"],
    );
    let main_thread = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", w.id())).unwrap();
        name_and_nice(&stat).unwrap().1
    };
    let process = main_thread();
    let want = (process + 13).min(19);
    wait_until("fingerprinting threads reniced", LIMIT, || {
        let nices = thread_nices(w.id(), "simdedup-fp");
        !nices.is_empty() && nices.iter().all(|&n| n == want)
    });
    assert_eq!(main_thread(), process);
}

/// `--max-deliveries N`: an entry delivered more than N times is
/// dead-lettered as `too_many_deliveries` once a worker takes it over; an
/// entry delivered fewer times is decided.
#[test]
fn max_deliveries_dead_letters_an_entry_delivered_too_often() {
    let server = RedisServer::start();
    let keys = Keys::new("deliveries");
    let mut conn = server.connection();
    create_group(&mut conn, &keys);
    // Both entries read by a consumer that died (it has no liveness key); the
    // first read twice more (each XREADGROUP of its pending entries counts a
    // delivery): 3 deliveries, and 1.
    for id in ["often", "once"] {
        let text = article_text(if id == "often" { 1 } else { 2 }, 0);
        xadd_article(&mut conn, &keys, id, &text);
    }
    let read = |conn: &mut redis::Connection, count: usize, from: &str| {
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("simdedup")
            .arg("ghost")
            .arg("COUNT")
            .arg(count)
            .arg("STREAMS")
            .arg(keys.input_stream())
            .arg(from)
            .query(conn)
            .unwrap();
    };
    read(&mut conn, 2, ">");
    read(&mut conn, 1, "0");
    read(&mut conn, 1, "0");
    let _w = spawn_worker_logging_to(
        &server,
        "deliveries",
        "d",
        free_port(),
        "embedded",
        Stdio::inherit(),
        &["--max-deliveries", "2"],
    );
    wait_until("both answered", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= 2
    });
    let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
    let verdict = |id: &str| outputs.iter().find(|f| f["id"] == id).unwrap().clone();
    assert_eq!(verdict("once")["verdict"], "unique");
    assert_eq!(verdict("often")["verdict"], "rejected");
    assert_eq!(verdict("often")["code"], "too_many_deliveries");
    let dead = read_stream(&mut conn, &keys.dead_stream());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].1["code"], "too_many_deliveries");
}

/// `--shutdown-timeout-ms`: on SIGTERM with Redis stopped while both
/// workers hold entries, the worker with a short bound leaves its entries
/// pending and exits; the one with a long bound is still waiting two
/// seconds later, and answers its entries once Redis is back.
#[test]
fn shutdown_timeout_bounds_the_wait_for_entries_in_flight() {
    let server = RedisServer::start();
    let keys = Keys::new("bound");
    let mut conn = server.connection();
    let (ps, pl) = (free_port(), free_port());
    let spawn = |name: &str, port: u16, bound: &str| {
        spawn_worker_logging_to(
            &server,
            "bound",
            name,
            port,
            "embedded",
            Stdio::inherit(),
            &["--shutdown-timeout-ms", bound],
        )
    };
    let mut short = spawn("short", ps, "300");
    let mut long = spawn("long", pl, "600000");
    wait_until("both ready", LIMIT, || {
        [ps, pl]
            .iter()
            .all(|&p| http_get(p, "/readyz").map(|r| r.0) == Some(200))
    });
    let mut pipe = redis::pipe();
    for i in 0..6_000u64 {
        pipe.cmd("XADD")
            .arg(keys.input_stream())
            .arg("*")
            .arg("id")
            .arg(format!("b{i}"))
            .arg("text")
            .arg(article_text(i, 0))
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    // Redis stopped at a moment both workers hold entries.
    wait_until("both workers holding entries", LIMIT, || {
        server.signal("-STOP");
        let holding = |port| metric(port, "simdedup_in_flight").is_some_and(|n| n > 0);
        let held = holding(ps) && holding(pl);
        if !held {
            server.signal("-CONT");
        }
        held
    });
    signal(&short, "-TERM");
    signal(&long, "-TERM");
    wait_until("the short bound's worker exited", LIMIT, || {
        short.try_wait().unwrap().is_some()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        long.try_wait().unwrap().is_none(),
        "the long bound's worker still waits for its entries"
    );
    server.signal("-CONT");
    assert!(long.wait().unwrap().success());
    let mut conn = server.connection();
    assert!(
        consumer_pending(&mut conn, &keys, "short") > 0,
        "the short bound's entries stay pending for other workers"
    );
    assert_eq!(consumer_pending(&mut conn, &keys, "long"), 0);
}

/// `--wait-replicas 1` on a server without a replica: the commit is written
/// but its entries stay held in the worker (sent again until a replica has
/// them) and /readyz says why; once a replica attaches, they are done, each
/// answered once.
#[test]
fn wait_replicas_holds_entries_until_a_replica_has_them() {
    let server = RedisServer::start();
    let keys = Keys::new("replicas");
    let mut conn = server.connection();
    for i in 0..3u64 {
        let text = article_text(i, 0);
        let id = format!("r{i}");
        xadd_article(&mut conn, &keys, &id, &text);
    }
    let port = free_port();
    let _w = spawn_worker_logging_to(
        &server,
        "replicas",
        "r",
        port,
        "redis",
        Stdio::null(),
        &["--wait-replicas", "1"],
    );
    wait_until(
        "/readyz 503 NOREPLICAS",
        LIMIT,
        || matches!(http_get(port, "/readyz"), Some((503, b)) if b.contains("NOREPLICAS")),
    );
    assert_eq!(metric(port, "simdedup_in_flight"), Some(3), "held");
    let _replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &server.port.to_string()]);
    wait_until("the held entries done", LIMIT, || {
        metric(port, "simdedup_in_flight") == Some(0)
            && http_get(port, "/readyz").map(|r| r.0) == Some(200)
    });
    let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
    assert_eq!(outputs.len(), 3);
    assert!(metric(port, "simdedup_replica_waits_timed_out_total").is_some_and(|n| n > 0));
}

/// `--ordered-index-concurrency`: 1 (one index call at a time) and 256
/// decide the same as `scan`; 0 is refused with the range.
#[test]
fn ordered_index_concurrencies_decide_alike_and_zero_is_refused() {
    let server = RedisServer::start();
    let refused = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args([
            "worker",
            "--redis-url",
            &server.url(),
            "--ordered-index-concurrency",
            "0",
        ])
        .env_remove("SIMDEDUP_CONFIG")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("worker.ordered_index_concurrency") && err.contains("256"),
        "{err}"
    );
    let mut conn = server.connection();
    for depth in ["1", "256"] {
        let ns = format!("depth{depth}");
        let keys = Keys::new(&ns);
        let port = free_port();
        let mut w = spawn_worker_logging_to(
            &server,
            &ns,
            "p",
            port,
            "redis",
            Stdio::inherit(),
            &["--ordered-index-concurrency", depth],
        );
        for v in 0..4u64 {
            for g in 0..10u64 {
                let text = article_text(g, v);
                let id = format!("g{g}-v{v}");
                xadd_article(&mut conn, &keys, &id, &text);
            }
        }
        wait_until("40 outputs", LIMIT, || {
            xlen(&mut conn, &keys.output_stream()) >= 40
        });
        signal(&w, "-TERM");
        assert!(w.wait().unwrap().success());
        let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
        for f in &outputs {
            let want = if f["id"].ends_with("-v0") {
                "unique"
            } else {
                "duplicate"
            };
            assert_eq!(
                f["verdict"], want,
                "--ordered-index-concurrency {depth}: {f:?}"
            );
        }
    }
}

/// Redis emptied under running workers (`FLUSHALL`; as after a failover to a
/// replica that had not synced yet): they create the consumer group again,
/// load their views again, and answer what comes next, one kept per group.
#[test]
fn running_workers_carry_on_after_redis_is_emptied() {
    let server = RedisServer::start();
    let keys = Keys::new("emptied");
    let mut conn = server.connection();
    let (pa, pb) = (free_port(), free_port());
    let _a = spawn_worker_with(&server, "emptied", "a", pa, "redis");
    let _b = spawn_worker_with(&server, "emptied", "b", pb, "redis");
    let ready = || {
        [pa, pb]
            .iter()
            .all(|&p| http_get(p, "/readyz").map(|r| r.0) == Some(200))
    };
    wait_until("both ready", LIMIT, ready);
    let feed = |conn: &mut redis::Connection, variants: std::ops::Range<u64>| {
        for v in variants {
            for g in 0..5u64 {
                let (id, text) = (format!("g{g}-v{v}"), article_text(g, v));
                xadd_article(conn, &keys, &id, &text);
            }
        }
    };
    feed(&mut conn, 0..1);
    wait_until("5 outputs", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= 5
    });
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    feed(&mut conn, 1..4);
    wait_until("15 outputs after the flush", LIMIT, || {
        xlen(&mut conn, &keys.output_stream()) >= 15 && pending(&mut conn, &keys, "simdedup") == 0
    });
    let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
    assert_eq!(outputs.len(), 15);
    assert_one_kept_per_group(&outputs, 5);
    wait_until("both ready after the flush", LIMIT, ready);
}
