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
