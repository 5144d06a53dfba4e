//! The stream worker in-process, against a private redis-server: racing
//! workers, bad input, ops, lost connections, graceful shutdown. The core
//! cases (racing workers, bad input and ops, stream order with pipelining,
//! deletes and queries in their places) run on a Redis Cluster and behind
//! Sentinel too ([`core_cases`]).
//!
//! The index is the embedded one shared by `Arc` (the workers of one process
//! share it); what is under test here is the stream protocol: exactly one
//! output per input entry, nothing left pending, nothing lost.

use crate::support;
use crate::worker_common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use simdedup::article::{MAX_ID_BYTES, MAX_TITLE_BYTES};
use simdedup::decision::DecisionConfig;
use simdedup::fingerprint::Fingerprinter;
use simdedup::index::{EmbeddedIndex, Index, RedisIndex, RedisIndexOptions};
use simdedup::keys::Keys;
use simdedup::settings::Settings;
use simdedup::worker::output::{MAX_COPIED_FIELD_BYTES, MAX_DEAD_LETTER_FIELDS};
use simdedup::worker::shutdown::ShutdownTrigger;
use simdedup::worker::{RunSummary, Worker, WorkerConfig};
use support::{Deployment, RedisCluster, RedisServer, SentinelGroup};
use worker_common::*;

const LIMIT: Duration = Duration::from_secs(120);

fn fingerprinter() -> Fingerprinter {
    Settings::default().fingerprinter().unwrap()
}

type Handle = tokio::task::JoinHandle<RunSummary>;

fn spawn_worker<I: Index + 'static>(
    server: &impl Deployment,
    ns: &str,
    index: Arc<I>,
    fp: &Fingerprinter,
    config: WorkerConfig,
    trigger: &ShutdownTrigger,
    max_text_bytes: usize,
) -> (Handle, Arc<simdedup::worker::metrics::Metrics>) {
    let worker = Worker::new(&server.url(), ns, index, fp.clone(), config, max_text_bytes).unwrap();
    let metrics = worker.metrics();
    let shutdown = trigger.subscribe();
    (
        tokio::spawn(async move { worker.run(shutdown).await.unwrap() }),
        metrics,
    )
}

/// Wait in a blocking thread so the workers keep the runtime.
async fn wait_for_outputs(server: &impl Deployment, keys: &Keys, n: usize) {
    let mut conn = server.connection_for(&keys.output_stream());
    let out = keys.output_stream();
    tokio::task::spawn_blocking(move || {
        wait_until(&format!("{n} outputs"), LIMIT, || {
            xlen(&mut conn, &out) >= n
        });
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_workers_keep_exactly_one_per_group() {
    racing_workers(&RedisServer::start(), "race").await;
}

/// The core cases on a Redis Cluster of 3 primaries with a replica each,
/// reached through one node's URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_on_a_cluster() {
    core_cases(&RedisCluster::start_with_replicas(3, 1)).await;
}

/// The core cases through `redis+sentinel://` (a primary, a replica, three
/// sentinels).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_behind_sentinel() {
    core_cases(&SentinelGroup::start()).await;
}

/// The cases whose bodies say nothing of the topology, each in a namespace
/// of its own.
async fn core_cases(d: &impl Deployment) {
    racing_workers(d, "race").await;
    bad_input(d, "bad").await;
    keeps_the_first_of_each_group(d, "first", redis_index(d, "first").await, 16).await;
    deletes_and_queries_keep_their_places(d, "barrier", 16).await;
}

/// Three workers on one namespace, half the articles there before them.
async fn racing_workers(server: &impl Deployment, ns: &str) {
    let keys = Keys::new(ns);
    let mut conn = server.connection_for(&keys.input_stream());
    // Half the articles exist before any worker (the group starts at 0)...
    let (groups, copies) = (12u64, 5u64);
    let mut all = Vec::new();
    for v in 0..copies {
        for g in 0..groups {
            all.push((format!("g{g}-v{v}"), article_text(g, v)));
        }
    }
    let (before, after) = all.split_at(all.len() / 2);
    for (id, text) in before {
        xadd_article(&mut conn, &keys, id, text);
    }
    let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
    let fp = fingerprinter();
    let (trigger, _) = ShutdownTrigger::new();
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let config = WorkerConfig {
                consumer: format!("w{i}"),
                batch_size: 4,
                ..fast_config()
            };
            spawn_worker(server, ns, index.clone(), &fp, config, &trigger, 1 << 20).0
        })
        .collect();
    // ...and half arrive while they run.
    for (id, text) in after {
        xadd_article(&mut conn, &keys, id, text);
    }
    wait_for_outputs(server, &keys, all.len()).await;
    trigger.fire();
    let mut emitted = 0;
    for h in handles {
        emitted += h.await.unwrap().emitted;
    }
    assert_eq!(emitted, all.len() as u64);
    let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
    assert_one_kept_per_group(&outputs, groups as usize);
    for f in &outputs {
        if f["verdict"] == "duplicate" {
            assert!(f.contains_key("signal") && f.contains_key("distance"));
        }
        assert_eq!(f["simhash"].len(), 16);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_and_dead_lettered_and_ops_work() {
    bad_input(&RedisServer::start(), "bad").await;
}

/// Every rejection, its dead letter, and the query and delete ops.
async fn bad_input(server: &impl Deployment, ns: &str) {
    let keys = Keys::new(ns);
    let mut conn = server.connection_for(&keys.input_stream());
    let good = article_text(1, 0);
    let big = "word ".repeat(300);
    type Fields<'a> = Vec<(&'a str, &'a [u8])>;
    let cases: Vec<(Fields, &str)> = vec![
        (vec![("text", good.as_bytes())], "missing_field"),
        (vec![("id", b"no-text")], "missing_field"),
        (
            vec![("id", b"utf8"), ("text", b"caf\xc3 \xff bad")],
            "invalid_utf8",
        ),
        (
            vec![("id", b"big"), ("text", big.as_bytes())],
            "text_too_large",
        ),
        (
            vec![("id", b"op"), ("text", good.as_bytes()), ("op", b"upsert")],
            "unknown_op",
        ),
        (
            vec![
                ("id", b"ts"),
                ("text", good.as_bytes()),
                ("ts", b"yesterday"),
            ],
            "bad_timestamp",
        ),
        (
            vec![("id", b"empty"), ("text", b"<p> ... </p>")],
            "no_content",
        ),
    ];
    let mut expected = HashMap::new();
    for (fields, code) in &cases {
        expected.insert(xadd(&mut conn, &keys, fields), *code);
    }
    // Oversized fields: a title, an id (only a bounded prefix of it is
    // copied into the verdict and the dead letter).
    let title = "t".repeat(MAX_TITLE_BYTES + 1);
    let long_title = xadd(
        &mut conn,
        &keys,
        &[
            ("id", b"title"),
            ("text", good.as_bytes()),
            ("title", title.as_bytes()),
        ],
    );
    expected.insert(long_title.clone(), "title_too_large");
    let long_id = "i".repeat(100_000);
    let long_id_source = xadd(
        &mut conn,
        &keys,
        &[("id", long_id.as_bytes()), ("text", good.as_bytes())],
    );
    expected.insert(long_id_source.clone(), "id_too_long");
    // An entry with thousands of fields (and no text): its dead letter must
    // still be written, and its output (more values than one Lua call takes).
    let junk: Vec<(String, String)> = (0..5000).map(|i| (format!("f{i}"), "x".into())).collect();
    let many: Fields = std::iter::once(("id", &b"many"[..]))
        .chain(junk.iter().map(|(k, v)| (k.as_str(), v.as_bytes())))
        .collect();
    let many_source = xadd(&mut conn, &keys, &many);
    expected.insert(many_source.clone(), "missing_field");
    // Ops: the good article, a query of a copy (not recorded), deletes.
    // Event times inside the window (older ones are rejected as `ts_too_old`).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let (now_ms, later_ms) = (now.to_string(), (now + 1000).to_string());
    let kept = xadd(
        &mut conn,
        &keys,
        &[
            ("id", b"a1"),
            ("text", good.as_bytes()),
            ("ts", now_ms.as_bytes()),
        ],
    );
    let fp = fingerprinter();
    let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
    let (trigger, _) = ShutdownTrigger::new();
    let (handle, metrics) = spawn_worker(
        server,
        ns,
        index.clone(),
        &fp,
        fast_config(),
        &trigger,
        1000,
    );
    wait_for_outputs(server, &keys, expected.len() + 1).await;
    // A query of a copy once a1 is in (same event time: inside the window).
    let query = xadd(
        &mut conn,
        &keys,
        &[
            ("id", b"q1"),
            ("text", good.as_bytes()),
            ("op", b"query"),
            ("ts", later_ms.as_bytes()),
        ],
    );
    wait_for_outputs(server, &keys, expected.len() + 2).await;
    // Deletes after the check is committed: in stream order they would race it.
    let del = xadd(&mut conn, &keys, &[("id", b"a1"), ("op", b"delete")]);
    wait_for_outputs(server, &keys, expected.len() + 3).await;
    let del_again = xadd(&mut conn, &keys, &[("id", b"a1"), ("op", b"delete")]);
    wait_for_outputs(server, &keys, expected.len() + 4).await;
    trigger.fire();
    handle.await.unwrap();

    let outputs = read_stream(&mut conn, &keys.output_stream());
    let by_source: HashMap<String, HashMap<String, String>> = outputs
        .into_iter()
        .map(|(_, f)| (f["source"].clone(), f))
        .collect();
    for (source, code) in &expected {
        let f = &by_source[source];
        assert_eq!(f["verdict"], "rejected", "{f:?}");
        assert_eq!(f["code"], *code, "{f:?}");
        assert!(!f["reason"].is_empty());
    }
    assert_eq!(
        by_source[&expected_key(&expected, "invalid_utf8")]["id"],
        "utf8"
    );
    assert_eq!(by_source[&kept]["verdict"], "unique");
    assert_eq!(by_source[&query]["verdict"], "duplicate", "{by_source:?}");
    assert_eq!(by_source[&query]["dup_of"], "a1");
    assert_eq!(by_source[&query]["op"], "query");
    assert_eq!(by_source[&del]["verdict"], "deleted");
    assert_eq!(by_source[&del_again]["verdict"], "not_found");
    assert!(
        index.is_empty(),
        "the query recorded nothing, the delete removed a1"
    );

    // One dead letter per bad input, with the original fields and the reason.
    let dead = read_stream(&mut conn, &keys.dead_stream());
    assert_eq!(dead.len(), expected.len());
    for (_, f) in &dead {
        let code = expected[&f["source"]];
        assert_eq!(f["code"], code);
        assert_eq!(f["deliveries"], "1");
        assert!(f.contains_key("reason"));
    }
    let utf8 = dead
        .iter()
        .find(|(_, f)| f.get("id").map(String::as_str) == Some("utf8"))
        .unwrap();
    assert!(utf8.1.contains_key("text"), "original fields kept");
    // Oversized fields: bounded prefixes, with what was cut and its length.
    let of = |source: &str| &dead.iter().find(|(_, f)| f["source"] == source).unwrap().1;
    let big_dead = of(&expected_key(&expected, "text_too_large"));
    assert_eq!(big_dead["text"].len(), MAX_COPIED_FIELD_BYTES);
    assert_eq!(big_dead["truncated"], format!("text:{}", big.len()));
    let title_dead = of(&long_title);
    assert_eq!(title_dead["title"].len(), MAX_TITLE_BYTES);
    assert_eq!(title_dead["truncated"], format!("title:{}", title.len()));
    let id_dead = of(&long_id_source);
    assert_eq!(id_dead["id"].len(), MAX_ID_BYTES);
    assert_eq!(id_dead["truncated"], "id:100000");
    let id_out = &by_source[&long_id_source];
    assert_eq!(id_out["id"].len(), MAX_ID_BYTES);
    assert_eq!(id_out["truncated"], "id:100000");
    let many = &dead
        .iter()
        .find(|(_, f)| f["source"] == many_source)
        .unwrap()
        .1;
    assert_eq!(
        many["fields_dropped"],
        (5001 - MAX_DEAD_LETTER_FIELDS).to_string()
    );
    assert_eq!(many["id"], "many");
    assert_eq!(metrics.dead_letters.get(), expected.len() as u64);
    let text = metrics.render();
    assert!(
        text.contains("simdedup_rejected_total{reason=\"unknown_op\"} 1"),
        "{text}"
    );
    assert_exactly_once(&mut conn, &keys, "simdedup");
}

fn expected_key(expected: &HashMap<String, &str>, code: &str) -> String {
    expected
        .iter()
        .find(|(_, c)| **c == code)
        .unwrap()
        .0
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_killed_connections() {
    let server = RedisServer::start();
    let keys = Keys::new("kill");
    let fp = fingerprinter();
    let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
    let (trigger, _) = ShutdownTrigger::new();
    let (handle, metrics) = spawn_worker(
        &server,
        "kill",
        index,
        &fp,
        fast_config(),
        &trigger,
        1 << 20,
    );
    let total = 300u64;
    let url = server.url();
    let ks = keys.clone();
    // Produce while killing every client connection (the worker's) again and again.
    tokio::task::spawn_blocking(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut killed = 0;
        for i in 0..total {
            let text = article_text(i, 0);
            xadd(
                &mut conn,
                &ks,
                &[
                    ("id", format!("k{i}").as_bytes()),
                    ("text", text.as_bytes()),
                ],
            );
            if i.is_multiple_of(25) {
                killed += redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .query::<i64>(&mut conn)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        assert!(killed > 0, "CLIENT KILL found the worker's connections");
    })
    .await
    .unwrap();
    wait_for_outputs(&server, &keys, total as usize).await;
    trigger.fire();
    let summary = handle.await.unwrap();
    assert_eq!(summary.abandoned, 0);
    let mut conn = server.connection(); // the old one was killed too
    let outputs = assert_exactly_once(&mut conn, &keys, "simdedup");
    assert_eq!(outputs.len(), total as usize);
    assert!(outputs.iter().all(|f| f["verdict"] == "unique"));
    assert!(metrics.reconnects.get() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_acks_everything_in_flight() {
    let server = RedisServer::start();
    let keys = Keys::new("stop");
    let mut conn = server.connection();
    let fp = fingerprinter();
    let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
    let (trigger, _) = ShutdownTrigger::new();
    let config = WorkerConfig {
        batch_size: 32,
        max_in_flight: 256,
        ..fast_config()
    };
    let (handle, metrics) = spawn_worker(&server, "stop", index, &fp, config, &trigger, 1 << 20);
    // Entries keep arriving until the worker is caught holding some.
    let caught = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (caught, keys, mut conn) = (caught.clone(), keys.clone(), server.connection());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !caught.load(std::sync::atomic::Ordering::Relaxed) && i < 200_000 {
                let text = article_text(i, 0);
                let id = format!("s{i}");
                xadd_article(&mut conn, &keys, &id, &text);
                i += 1;
            }
        })
    };
    wait_for_outputs(&server, &keys, 1).await;
    // Redis stopped (SIGSTOP) at a moment the worker holds entries: none of
    // them can finish before the signal, which comes with work in flight.
    let held = loop {
        server.signal("-STOP");
        let held = metrics.in_flight.get();
        if held > 0 {
            break held;
        }
        server.signal("-CONT");
        assert!(
            !producer.is_finished(),
            "never caught the worker holding entries"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    caught.store(true, std::sync::atomic::Ordering::Relaxed);
    trigger.fire();
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.signal("-CONT");
    producer.join().unwrap();
    let summary = handle.await.unwrap();
    assert!(held > 0);
    assert_eq!(summary.abandoned, 0);
    assert_eq!(metrics.in_flight.get(), 0);
    // Whatever was read was finished and acked: no pending entries, and each
    // output is for a distinct input.
    assert_eq!(pending(&mut conn, &keys, "simdedup"), 0);
    let outputs = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(outputs.len() as u64, summary.emitted);
    let sources: HashSet<_> = outputs.iter().map(|(_, f)| f["source"].clone()).collect();
    assert_eq!(sources.len(), outputs.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_entries_are_dead_lettered_after_max_deliveries() {
    // Simulate a consumer that died on an entry again and again: deliver it to
    // throwaway consumers (each delivery counts), then let a worker claim it.
    let server = RedisServer::start();
    let keys = Keys::new("poison");
    let mut conn = server.connection();
    create_group(&mut conn, &keys);
    let text = article_text(3, 0);
    let id = xadd(
        &mut conn,
        &keys,
        &[("id", b"p1"), ("text", text.as_bytes())],
    );
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("simdedup")
        .arg("dead-0")
        .arg("STREAMS")
        .arg(keys.input_stream())
        .arg(">")
        .query(&mut conn)
        .unwrap();
    for i in 1..3 {
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(keys.input_stream())
            .arg("simdedup")
            .arg(format!("dead-{i}"))
            .arg(0)
            .arg(&id)
            .query(&mut conn)
            .unwrap();
    }
    let fp = fingerprinter();
    let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
    let (trigger, _) = ShutdownTrigger::new();
    let config = WorkerConfig {
        max_deliveries: 3,
        ..fast_config()
    };
    let (handle, _) = spawn_worker(
        &server,
        "poison",
        index.clone(),
        &fp,
        config,
        &trigger,
        1 << 20,
    );
    wait_for_outputs(&server, &keys, 1).await;
    trigger.fire();
    handle.await.unwrap();
    let out = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1["code"], "too_many_deliveries", "{:?}", out[0].1);
    let dead = read_stream(&mut conn, &keys.dead_stream());
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1["deliveries"], "4");
    assert_eq!(dead[0].1["text"], text);
    assert!(index.is_empty(), "a dead-lettered entry is not indexed");
    assert_exactly_once(&mut conn, &keys, "simdedup");
}

/// One worker decides in stream order (`WorkerConfig::ordered`, the default): the
/// first of each group is the one kept, every later copy links to it — even with
/// copies in the same batch and several batches in flight. Deciding out of order
/// (the concurrent mode) keeps a later copy now and then, which this catches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_keeps_the_first_of_each_group() {
    let server = RedisServer::start();
    for (ns, ordered_index_concurrency) in [("ordered", 16), ("ordered-one-at-a-time", 1)] {
        let index = Arc::new(EmbeddedIndex::new(DecisionConfig::default()));
        keeps_the_first_of_each_group(&server, ns, index, ordered_index_concurrency).await;
    }
}

/// The same on the Redis index, with the calls pipelined
/// (`WorkerConfig::ordered_index_concurrency`: a copy waits for its original,
/// the fillers between groups do not), and one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_keeps_the_first_of_each_group_on_redis() {
    let server = RedisServer::start();
    for (ns, ordered_index_concurrency) in [("pipelined", 16), ("one-at-a-time", 1)] {
        let index = redis_index(&server, ns).await;
        keeps_the_first_of_each_group(&server, ns, index, ordered_index_concurrency).await;
    }
}

/// One worker on `index` until `outputs` entries are answered, then stopped.
async fn run_until_answered<I: Index + 'static>(
    server: &impl Deployment,
    ns: &str,
    index: Arc<I>,
    config: WorkerConfig,
    outputs: usize,
) {
    let (trigger, _) = ShutdownTrigger::new();
    let (handle, _) = spawn_worker(
        server,
        ns,
        index,
        &fingerprinter(),
        config,
        &trigger,
        1 << 20,
    );
    wait_for_outputs(server, &Keys::new(ns), outputs).await;
    trigger.fire();
    handle.await.unwrap();
}

/// A Redis index of namespace `ns` on `server`, with the default decision.
async fn redis_index(server: &impl Deployment, ns: &str) -> Arc<RedisIndex> {
    let index = RedisIndex::connect(
        &server.url(),
        ns,
        DecisionConfig::default(),
        RedisIndexOptions::default(),
    )
    .await
    .unwrap();
    Arc::new(index)
}

/// 40 groups of 4 copies, each copy right behind its original (a burst of
/// reposts), through one ordered worker with batches of 8.
async fn keeps_the_first_of_each_group<I: Index + 'static>(
    server: &impl Deployment,
    ns: &str,
    index: Arc<I>,
    ordered_index_concurrency: usize,
) {
    let keys = Keys::new(ns);
    let mut conn = server.connection_for(&keys.input_stream());
    let (groups, copies) = (40u64, 4u64);
    for g in 0..groups {
        for v in 0..copies {
            let (id, text) = (format!("g{g}-v{v}"), article_text(g, v));
            xadd_article(&mut conn, &keys, &id, &text);
        }
    }
    let config = WorkerConfig {
        consumer: "solo".into(),
        batch_size: 8,
        ordered_index_concurrency,
        ..fast_config()
    };
    run_until_answered(server, ns, index, config, (groups * copies) as usize).await;
    for f in assert_exactly_once(&mut conn, &keys, "simdedup") {
        let (group, variant) = f["id"].split_once('-').unwrap();
        if variant == "v0" {
            assert_eq!(f["verdict"], "unique", "{ns}: {f:?}");
        } else {
            assert_eq!(f["verdict"], "duplicate", "{ns}: {f:?}");
            assert_eq!(f["dup_of"], format!("{group}-v0"), "{ns}: {f:?}");
        }
    }
}

/// Deletes and queries keep their stream places: each group is `v0, query
/// v2, filler, filler, delete v0, v0 again, v1`. The query sees `v0`. `v0`
/// sent again after its delete is stored afresh — unique, not a replay of the
/// deleted one — and `v1` is a copy of it. One call at a time, and with the
/// calls pipelined (`WorkerConfig::ordered_index_concurrency`), where deletes
/// and queries are barriers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_never_passes_a_delete_or_a_query() {
    let server = RedisServer::start();
    for (ns, ordered_index_concurrency) in [("barrier", 1), ("barrier-pipelined", 16)] {
        deletes_and_queries_keep_their_places(&server, ns, ordered_index_concurrency).await;
    }
}

async fn deletes_and_queries_keep_their_places(
    server: &impl Deployment,
    ns: &str,
    ordered_index_concurrency: usize,
) {
    let keys = Keys::new(ns);
    let mut conn = server.connection_for(&keys.input_stream());
    let groups = 24u64;
    for g in 0..groups {
        // (id suffix, text: article variant or filler number, op)
        let group: [(String, u64, &str); 7] = [
            ("v0".into(), 0, "check"),
            ("v2".into(), 2, "query"),
            ("f0".into(), 1000 + 2 * g, "check"),
            ("f1".into(), 1001 + 2 * g, "check"),
            ("v0".into(), 0, "delete"),
            ("v0".into(), 0, "check"),
            ("v1".into(), 1, "check"),
        ];
        for (v, t, op) in group {
            let id = format!("g{g}-{v}");
            let text = if t >= 1000 {
                article_text(t, 0)
            } else {
                article_text(g, t)
            };
            let mut fields = vec![("id", id.as_bytes()), ("op", op.as_bytes())];
            if op != "delete" {
                fields.push(("text", text.as_bytes()));
            }
            xadd(&mut conn, &keys, &fields);
        }
    }
    let index = redis_index(server, ns).await;
    let config = WorkerConfig {
        consumer: "solo".into(),
        // Two whole groups per batch.
        batch_size: 14,
        ordered_index_concurrency,
        ..fast_config()
    };
    run_until_answered(server, ns, index, config, (groups * 7) as usize).await;
    let out = read_stream(&mut conn, &keys.output_stream());
    assert_eq!(out.len(), (groups * 7) as usize);
    for (_, f) in &out {
        let (group, variant) = f["id"].split_once('-').unwrap();
        match (f["op"].as_str(), variant) {
            ("check", "v0" | "f0" | "f1") => {
                assert_eq!(f["verdict"], "unique", "{f:?}");
                assert!(!f.contains_key("replayed"), "{f:?}");
            }
            ("check", "v1") => {
                assert_eq!(f["verdict"], "duplicate", "{f:?}");
                assert_eq!(f["dup_of"], format!("{group}-v0"), "{f:?}");
            }
            ("query", "v2") => {
                assert_eq!(f["verdict"], "duplicate", "{f:?}");
                assert_eq!(f["dup_of"], format!("{group}-v0"), "{f:?}");
            }
            ("delete", "v0") => assert_eq!(f["verdict"], "deleted", "{f:?}"),
            other => panic!("unexpected output {other:?}: {f:?}"),
        }
    }
}
