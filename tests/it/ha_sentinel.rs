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
        g.servers[old].kill();
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
