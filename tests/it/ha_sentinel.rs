//! Redis Sentinel end to end: a primary, a replica and three sentinels started
//! by the test; everything reaches Redis by one `redis+sentinel://` URL. The
//! index conformance suite and the worker run pass through it, and a worker
//! run survives `SENTINEL FAILOVER` midway with the stream contract intact.

use crate::conformance;
use crate::ha_common;
use crate::support;

use simdedup::index::{RedisIndex, RedisIndexOptions};
use support::SentinelGroup;

/// The whole conformance suite on the primary the sentinels name, each case in
/// a namespace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_sentinel() {
    let group = SentinelGroup::start();
    macro_rules! through_sentinel {
        ($case:ident) => {
            let idx = RedisIndex::connect(
                &group.url(),
                concat!("s-", stringify!($case)),
                conformance::config(),
                RedisIndexOptions::default(),
            )
            .await
            .expect("the index connects through the sentinels");
            conformance::$case(&idx).await;
        };
    }
    conformance_cases!(through_sentinel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_through_sentinel() {
    let group = SentinelGroup::start();
    let primary = || group.servers[group.primary()].connection();
    ha_common::run(&group.url(), "sent", primary, None).await;
}

/// `SENTINEL FAILOVER` while two workers are midway: they follow the new
/// primary without a restart, and every entry it holds is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_a_sentinel_failover() {
    let group = SentinelGroup::start();
    let primary = || group.servers[group.primary()].connection();
    let failover = Box::new(|| {
        group.failover();
    });
    let report = ha_common::run(&group.url(), "sfail", primary, Some(failover)).await;
    eprintln!(
        "sentinel failover to the first new output: {:?}",
        report.failover_to_output.unwrap()
    );
}

/// The connection follows a primary that was killed (no goodbye): the
/// sentinels promote the replica after `down-after-milliseconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_a_killed_primary_behind_sentinel() {
    let mut group = SentinelGroup::start();
    let url = group.url();
    let old = group.primary();
    let group_ref = std::sync::Mutex::new(&mut group);
    let primary = || {
        let g = group_ref.lock().unwrap();
        g.servers[g.primary()].connection()
    };
    let failover = Box::new(|| {
        let mut g = group_ref.lock().unwrap();
        g.servers[old].kill_holding_ports();
        g.wait_for_new_primary(old);
    });
    let report = ha_common::run(&url, "skill", primary, Some(failover)).await;
    eprintln!(
        "killed primary behind sentinel to the first new output: {:?}",
        report.failover_to_output.unwrap()
    );
}

/// `worker.wait_replicas`: with the replica stopped (SIGSTOP), a commit
/// runs on the primary but the worker holds its entry, asking `WAIT` again,
/// until the replica has acknowledged it; then every entry is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_wait_for_the_replicas_asked() {
    use crate::support::RedisServer;
    use crate::worker_common::*;
    use simdedup::keys::Keys;
    use simdedup::settings::Settings;
    use simdedup::worker::shutdown::ShutdownTrigger;
    use simdedup::worker::{Worker, WorkerConfig};

    let primary = RedisServer::start();
    let port = primary.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    support::wait_for(|| {
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut replica.connection())
            .is_ok_and(|i| i.contains("master_link_status:up"))
    });
    let ns = "wait";
    let keys = Keys::new(ns);
    let index = RedisIndex::connect(
        &primary.url(),
        ns,
        simdedup::decision::DecisionConfig::default(),
        RedisIndexOptions::default(),
    )
    .await
    .unwrap();
    let config = WorkerConfig {
        wait_replicas: 1,
        wait_timeout_ms: 100,
        ..fast_config()
    };
    let worker = Worker::new(
        &primary.url(),
        ns,
        std::sync::Arc::new(index),
        Settings::default().fingerprinter().unwrap(),
        config,
        1 << 20,
    )
    .unwrap();
    let metrics = worker.metrics();
    let (trigger, _) = ShutdownTrigger::new();
    let handle = tokio::spawn(worker.run(trigger.subscribe()));
    let out = keys.output_stream();
    let mut conn = primary.connection();
    tokio::task::block_in_place(|| {
        xadd(
            &mut conn,
            &keys,
            &[("id", b"a0"), ("text", article_text(0, 0).as_bytes())],
        );
        wait_until("the first output", ha_common::LIMIT, || {
            xlen(&mut conn, &out) == 1
        });
        // Its entry is released only after its own WAIT: before the replica
        // stops, or that one would be held too.
        wait_until("the first entry released", ha_common::LIMIT, || {
            metrics.in_flight.get() == 0
        });
        assert_eq!(metrics.replica_waits_timed_out.get(), 0);
        // The replica stops (SIGSTOP): it acknowledges nothing until resumed.
        replica.signal("-STOP");
        xadd(
            &mut conn,
            &keys,
            &[("id", b"a1"), ("text", article_text(1, 0).as_bytes())],
        );
        wait_until("the commit on the primary", ha_common::LIMIT, || {
            xlen(&mut conn, &out) == 2
        });
        wait_until("a WAIT that timed out", ha_common::LIMIT, || {
            metrics.replica_waits_timed_out.get() > 0
        });
        assert_eq!(
            metrics.in_flight.get(),
            1,
            "the entry is held while the replica has not acknowledged it"
        );
        replica.signal("-CONT");
        wait_until("the entry released", ha_common::LIMIT, || {
            metrics.in_flight.get() == 0
        });
    });
    trigger.fire();
    handle.await.unwrap().unwrap();
    tokio::task::block_in_place(|| assert_exactly_once(&mut conn, &keys, "simdedup"));
}

/// A failover that loses writes: the replica is frozen (SIGSTOP) while the
/// running workers commit a first copy of every group, the primary is killed,
/// and the replica, resumed (SIGCONT), is promoted without those commits.
/// The new primary hands their handles out again, to other articles. New
/// copies of every group, fed to the same workers, must still keep one per
/// group, and link every duplicate to an article the new primary holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_workers_follow_a_failover_that_lost_writes() {
    use crate::worker_common::*;
    use simdedup::decision::DecisionConfig;
    use simdedup::index::Index;
    use simdedup::keys::Keys;
    use simdedup::settings::Settings;
    use simdedup::worker::shutdown::ShutdownTrigger;
    use simdedup::worker::{Worker, WorkerConfig};

    const GROUPS: u64 = 30;
    let mut group = SentinelGroup::start();
    let url = group.url();
    let ns = "lost";
    let keys = Keys::new(ns);
    let old = group.primary();
    let replica = 1 - old;
    let (trigger, _) = ShutdownTrigger::new();
    let mut workers = Vec::new();
    for i in 0..2 {
        let index = RedisIndex::connect(
            &url,
            ns,
            DecisionConfig::default(),
            RedisIndexOptions::default(),
        )
        .await
        .unwrap();
        let config = WorkerConfig {
            consumer: format!("w{i}"),
            batch_size: 4,
            ..fast_config()
        };
        let fingerprinter = Settings::default().fingerprinter().unwrap();
        let worker = Worker::new(
            &url,
            ns,
            std::sync::Arc::new(index),
            fingerprinter,
            config,
            1 << 20,
        )
        .unwrap();
        let shutdown = trigger.subscribe();
        workers.push(tokio::spawn(async move { worker.run(shutdown).await }));
    }
    let out = keys.output_stream();
    let feed = |conn: &mut redis::Connection, groups: &mut dyn Iterator<Item = u64>, v: u64| {
        for g in groups {
            let id = format!("g{g}-v{v}");
            xadd(
                conn,
                &keys,
                &[
                    ("id", id.as_bytes()),
                    ("text", article_text(g, v).as_bytes()),
                ],
            );
        }
    };
    let counter = |conn: &mut redis::Connection| -> u64 {
        let labels: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.buckets())
            .arg(0)
            .arg(-1)
            .query(conn)
            .unwrap();
        assert_eq!(labels.len(), 1, "one bucket: {labels:?}");
        redis::cmd("HGET")
            .arg(keys.counter(&labels[0]))
            .arg("n")
            .query(conn)
            .unwrap()
    };
    let (before, filed) = tokio::task::block_in_place(|| {
        let mut conn = group.servers[old].connection();
        // Other articles first, on both servers.
        feed(&mut conn, &mut (100..100 + GROUPS), 0);
        wait_until("the first outputs", ha_common::LIMIT, || {
            xlen(&mut conn, &out) == GROUPS as usize
        });
        let acked: u32 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut conn)
            .unwrap();
        assert_eq!(acked, 1, "the replica holds the first articles");
        let before = counter(&mut conn);
        // The replica freezes, its link cut; the workers commit the first
        // copy of every group on the primary alone.
        group.servers[replica].signal("STOP");
        // What the primary sent before lies in the frozen replica's socket
        // buffer, and would reach it on SIGCONT: the link is cut instead.
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut conn)
            .unwrap();
        feed(&mut conn, &mut (0..GROUPS), 0);
        wait_until("the first copies decided", ha_common::LIMIT, || {
            xlen(&mut conn, &out) == 2 * GROUPS as usize
        });
        (before, counter(&mut conn))
    });
    assert_eq!(filed, before + GROUPS);
    tokio::task::block_in_place(|| {
        group.servers[old].kill_holding_ports();
        group.servers[replica].signal("CONT");
        group.wait_for_new_primary(old);
    });
    let new = group.primary();
    assert_eq!(new, replica);
    let outputs = tokio::task::block_in_place(|| {
        let mut conn = group.servers[new].connection();
        let kept = counter(&mut conn);
        assert!(
            kept < filed,
            "writes were lost: the new primary's counter {kept} is below {filed}"
        );
        // New copies, in another order than the lost ones: their handles
        // are the lost ones, holding other groups now.
        for v in 1..=3 {
            let seen = xlen(&mut conn, &out);
            feed(&mut conn, &mut (0..GROUPS).rev(), v);
            wait_until("the new copies decided", ha_common::LIMIT, || {
                xlen(&mut conn, &out) == seen + GROUPS as usize
            });
        }
        wait_until("nothing pending", ha_common::LIMIT, || {
            pending(&mut conn, &keys, "simdedup") == 0
        });
        assert_exactly_once(&mut conn, &keys, "simdedup")
    });
    trigger.fire();
    for w in workers {
        w.await.unwrap().expect("the worker ran to its end");
    }
    let copies: Vec<_> = outputs
        .into_iter()
        .filter(|f| f.get("id").is_some_and(|id| !id.ends_with("-v0")))
        .collect();
    assert_eq!(copies.len(), 3 * GROUPS as usize);
    assert_one_kept_per_group(&copies, GROUPS as usize);
    let index = RedisIndex::connect(
        &url,
        ns,
        DecisionConfig::default(),
        RedisIndexOptions::default(),
    )
    .await
    .unwrap();
    for f in &copies {
        if let Some(dup_of) = f.get("dup_of") {
            assert!(
                index.get(dup_of).await.unwrap().is_some(),
                "{} is a duplicate of {dup_of}, which the new primary does not hold",
                f["id"]
            );
        }
    }
}

/// `simdedup produce` through a failover that loses writes: midway the
/// replica freezes (SIGSTOP, its link cut) while the primary takes writes for
/// a second, then the primary is killed and the replica, resumed, promoted
/// without them; a new replica follows it. `produce` (here with
/// `--wait-replicas 1`) must not report an entry as added that the new
/// primary lacks.
fn produce_through_a_failover(args: &[&str]) -> (std::process::Output, usize, Vec<String>) {
    use simdedup::keys::Keys;
    use std::collections::HashSet;
    use std::io::Write;

    const ENTRIES: usize = 1200;
    let mut group = SentinelGroup::start();
    let ns = "prod";
    let keys = Keys::new(ns);
    let dir = std::env::temp_dir().join(format!("simdedup-produce-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("feed-{}.jsonl", args.len()));
    let mut f = std::fs::File::create(&file).unwrap();
    for i in 0..ENTRIES {
        writeln!(f, r#"{{"id":"p{i}","text":"entry {i}"}}"#).unwrap();
    }
    drop(f);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .arg("produce")
        .arg(&file)
        .args(["--rate", "400", "--pipeline", "50", "--no-progress"])
        .args(["--redis-url", &group.url(), "--namespace", ns])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run simdedup produce");
    let old = group.primary();
    let replica = 1 - old;
    let mut primary = group.servers[old].connection();
    crate::worker_common::wait_until("produce midway", ha_common::LIMIT, || {
        crate::worker_common::xlen(&mut primary, &keys.input_stream()) >= ENTRIES / 3
    });
    group.servers[replica].signal("STOP");
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut primary)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    group.servers[old].kill_holding_ports();
    group.servers[replica].signal("CONT");
    group.wait_for_new_primary(old);
    let port = group.servers[replica].port.to_string();
    let _follower = support::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let out = child.wait_with_output().unwrap();
    let mut conn = group.servers[replica].connection();
    let held: HashSet<String> = crate::worker_common::read_stream(&mut conn, &keys.input_stream())
        .into_iter()
        .map(|(_, f)| f["id"].clone())
        .collect();
    let missing: Vec<String> = (0..ENTRIES)
        .map(|i| format!("p{i}"))
        .filter(|id| !held.contains(id))
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    (out, ENTRIES, missing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_waiting_for_replicas_loses_nothing_it_reports() {
    // Without the flag the same run loses entries it reported as added: the
    // failover below does lose writes.
    let (out, entries, missing) = tokio::task::block_in_place(|| produce_through_a_failover(&[]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "produce failed: {stderr}");
    assert!(
        stderr.contains(&format!("{entries} entries added")),
        "{stderr}"
    );
    assert!(!missing.is_empty(), "the failover lost no entry: {stderr}");
    let (out, entries, missing) =
        tokio::task::block_in_place(|| produce_through_a_failover(&["--wait-replicas", "1"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "produce failed: {stderr}");
    assert!(
        stderr.contains(&format!("{entries} entries added")),
        "{stderr}"
    );
    assert!(
        missing.is_empty(),
        "{} entries reported as added are not on the new primary: {:?}\n{stderr}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Without `--wait-replicas`, on a server with replicas, `produce` says once
/// that a failover can lose what it adds, and how to prevent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_without_waiting_says_what_a_failover_can_lose() {
    let group = SentinelGroup::start();
    let dir = std::env::temp_dir().join(format!("simdedup-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("one.jsonl");
    std::fs::write(&file, "{\"id\":\"a\",\"text\":\"x\"}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .arg("produce")
        .arg(&file)
        .args([
            "--no-progress",
            "--redis-url",
            &group.url(),
            "--namespace",
            "warn",
        ])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("a failover can lose").count(), 1, "{stderr}");
    assert!(stderr.contains("--wait-replicas 1"), "{stderr}");
}
