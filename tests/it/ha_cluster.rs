//! Redis Cluster end to end: three primaries with a replica each, started by
//! the test; everything reaches Redis by the URL of **one** node (cluster mode
//! is detected). The index conformance suite and the worker run pass on it,
//! and a worker run survives its namespace's primary being failed over.

use crate::conformance;
use crate::ha_common;
use crate::support;
use crate::worker_common;

use simdedup::index::{RedisIndex, RedisIndexOptions};
use simdedup::keys::Keys;
use support::RedisCluster;

/// The whole conformance suite, reaching the cluster through its last node (a
/// replica), each case in a namespace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_on_a_cluster_with_replicas() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let url = cluster.nodes.last().unwrap().url();
    macro_rules! on_cluster {
        ($case:ident) => {
            let idx = RedisIndex::connect(
                &url,
                concat!("c-", stringify!($case)),
                conformance::config(),
                RedisIndexOptions::default(),
            )
            .await
            .expect("the index connects through any node");
            assert!(format!("{idx:?}").contains("cluster: true"));
            conformance::$case(&idx).await;
        };
    }
    conformance_cases!(on_cluster);
}

/// The workers ask for one replica's acknowledgement of every commit
/// (`worker.wait_replicas`): `WAIT` reaches the primary of the namespace's
/// slot, where the commit ran, whose replica answers, and no other primary
/// (there it would count replicas of nothing this connection wrote).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_on_a_cluster() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let key = Keys::new("clu").input_stream();
    let primary = || cluster.nodes[cluster.primary_for(&key)].connection();
    let config = simdedup::worker::WorkerConfig {
        wait_replicas: 1,
        ..worker_common::fast_config()
    };
    ha_common::run_with(&cluster.nodes[1].url(), "clu", primary, None, config).await;
    let waits = |node: usize| -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut cluster.nodes[node].connection())
            .unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let home = cluster.primary_for(&key);
    assert!(waits(home) > 0, "no WAIT on the namespace's primary");
    for other in (0..3).filter(|&n| n != home) {
        assert_eq!(
            waits(other),
            0,
            "WAIT on primary {other}, not the namespace's"
        );
    }
}

/// `CLUSTER FAILOVER` on the replica of the namespace's primary while two
/// workers are midway: MOVED replies send them to the promoted node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_a_cluster_failover() {
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let key = Keys::new("cfail").input_stream();
    let primary = || cluster.nodes[cluster.primary_for(&key)].connection();
    let failover = Box::new(|| {
        let old = cluster.primary_for(&key);
        let replica = cluster.replica_of(old);
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query::<()>(&mut cluster.nodes[replica].connection())
            .expect("CLUSTER FAILOVER");
        support::wait_for(|| cluster.primary_for(&key) == replica);
    });
    let report = ha_common::run(&cluster.nodes[0].url(), "cfail", primary, Some(failover)).await;
    eprintln!(
        "cluster failover to the first new output: {:?}",
        report.failover_to_output.unwrap()
    );
}

/// The namespace's primary killed (SIGKILL) midway: its replica takes over
/// after the node timeout, and the workers follow it. The dead node's ports
/// stay bound until the end, so that no other test's server starts on them
/// while the replica and the workers still try its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_survive_a_killed_cluster_primary() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let key = Keys::new("ckill").input_stream();
    let old = cluster.primary_for(&key);
    // A seed that stays up.
    let url = cluster.nodes[(old + 1) % 3].url();
    let cluster_ref = std::sync::Mutex::new(&mut cluster);
    let primary = || {
        let c = cluster_ref.lock().unwrap();
        c.nodes[c.primary_for(&key)].connection()
    };
    let failover = Box::new(|| {
        let mut c = cluster_ref.lock().unwrap();
        let replica = c.replica_of(old);
        c.nodes[old].kill_holding_ports();
        support::wait_for(|| c.primary_for(&key) == replica);
    });
    let report = ha_common::run(&url, "ckill", primary, Some(failover)).await;
    eprintln!(
        "killed cluster primary to the first new output: {:?}",
        report.failover_to_output.unwrap()
    );
}
