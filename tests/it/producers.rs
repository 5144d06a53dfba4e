//! The example producers (examples/producers/) against a real worker: private
//! Redis servers, the built `simdedup worker` (Redis index), then the producer
//! with the same URL; its printed verdicts are checked, and what it sent
//! against `docs/schema/input.json` (the verdicts are checked against
//! `output.json` as they are read back). Each runs on a standalone server, on a
//! Redis Cluster given a node that does not own the namespace, and behind
//! Sentinel ([`Topology`]). The redis-cli one needs `redis-cli` (installed
//! with redis-server), the Python one `python3` with redis-py, the Node.js one
//! `node` and the example's npm packages: missing any fails the test with the
//! fix. The Go producer is not run here.

use crate::examples_common;
use crate::worker_common;

use std::collections::HashMap;
use std::process::Command;

use examples_common::{
    example, require_node_packages, require_python_redis, Deployed, Topology, Worker,
};
use simdedup::keys::Keys;
use worker_common::contract::{contract, Role};
use worker_common::read_stream;

fn script(rel: &str) -> String {
    example(&format!("producers/{rel}"))
        .to_string_lossy()
        .into_owned()
}

/// Run a producer, return its stdout lines as (id, verdict, dup_of-or-code).
fn run_producer(program: &str, args: &[&str]) -> Vec<(String, String, String)> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "line {l:?}");
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect()
}

/// `original` and `copy` were sent back to back and may be decided
/// concurrently: one is kept, the other is its duplicate.
fn assert_pair(v: &[(String, String, String)], original: &str, copy: &str) {
    let get = |id: &str| {
        v.iter()
            .find(|(i, _, _)| i == id)
            .unwrap_or_else(|| panic!("{id}: {v:?}"))
    };
    let (a, b) = (get(original), get(copy));
    let ok = (a.1 == "unique" && a.2 == "-" && b.1 == "duplicate" && b.2 == original)
        || (b.1 == "unique" && b.2 == "-" && a.1 == "duplicate" && a.2 == copy);
    assert!(
        ok,
        "{original}/{copy} are one kept article and its duplicate: {v:?}"
    );
}

/// Every entry the producer sent keeps `docs/schema/input.json`, and every
/// input entry got one verdict (read back through `read_stream`, which checks
/// the verdicts and the dead letters against their schemas).
fn assert_streams_keep_the_contract(deployed: &Deployed, ns: &str) {
    let keys = Keys::new(ns);
    let mut conn = deployed.connection(ns);
    let inputs = read_stream(&mut conn, &keys.input_stream());
    for (id, fields) in &inputs {
        contract().check(Role::Input, id, fields);
    }
    let outputs = read_stream(&mut conn, &keys.output_stream());
    read_stream(&mut conn, &keys.dead_stream());
    let mut answered: HashMap<&str, usize> = HashMap::new();
    for (_, fields) in &outputs {
        *answered.entry(fields["source"].as_str()).or_default() += 1;
    }
    for (id, _) in &inputs {
        assert_eq!(answered.get(id.as_str()), Some(&1), "verdicts of {id}");
    }
    assert_eq!(outputs.len(), inputs.len());
}

fn redis_cli_producer_gets_its_verdicts_on(topology: Topology) {
    let deployed = topology.start("cli");
    let _worker = Worker::start(&deployed.url, "cli");
    let v = run_producer("sh", &[&script("cli/producer.sh"), &deployed.url, "cli"]);
    let ids: Vec<&str> = v.iter().map(|(i, _, _)| i.as_str()).collect();
    assert_eq!(ids, ["sh-1", "sh-1-copy", "sh-empty"]);
    assert_pair(&v, "sh-1", "sh-1-copy");
    assert_eq!(
        v[2],
        ("sh-empty".into(), "rejected".into(), "no_content".into())
    );
    // Run again on the same namespace: only the new verdicts are read, and the
    // resent ids get their stored verdicts back.
    let again = run_producer("sh", &[&script("cli/producer.sh"), &deployed.url, "cli"]);
    assert_eq!(again, v);
    assert_streams_keep_the_contract(&deployed, "cli");
}

#[test]
fn redis_cli_producer_gets_its_verdicts() {
    redis_cli_producer_gets_its_verdicts_on(Topology::Standalone);
}

#[test]
fn redis_cli_producer_gets_its_verdicts_on_a_cluster() {
    redis_cli_producer_gets_its_verdicts_on(Topology::Cluster);
}

#[test]
fn redis_cli_producer_gets_its_verdicts_behind_sentinel() {
    redis_cli_producer_gets_its_verdicts_on(Topology::Sentinel);
}

/// Run `program SCRIPT URL NS` against a worker on `ns`, both on `topology`,
/// expecting the verdicts of `[original, copy, other]`: one of the first two
/// kept, the other its duplicate, the third unique.
fn producer_gets_its_verdicts(
    topology: Topology,
    program: &str,
    script_rel: &str,
    ns: &str,
    ids: [&str; 3],
) {
    let deployed = topology.start(ns);
    let _worker = Worker::start(&deployed.url, ns);
    let v = run_producer(program, &[&script(script_rel), &deployed.url, ns]);
    let got: Vec<&str> = v.iter().map(|(i, _, _)| i.as_str()).collect();
    assert_eq!(got, ids);
    assert_pair(&v, ids[0], ids[1]);
    assert_eq!(v[2], (ids[2].into(), "unique".into(), "-".into()));
    assert_streams_keep_the_contract(&deployed, ns);
}

fn python_producer_gets_its_verdicts_on(topology: Topology) {
    require_python_redis();
    producer_gets_its_verdicts(
        topology,
        "python3",
        "python/producer.py",
        "py",
        ["py-1", "py-1-repost", "py-2"],
    );
}

#[test]
fn python_producer_gets_its_verdicts() {
    python_producer_gets_its_verdicts_on(Topology::Standalone);
}

#[test]
fn python_producer_gets_its_verdicts_on_a_cluster() {
    python_producer_gets_its_verdicts_on(Topology::Cluster);
}

#[test]
fn python_producer_gets_its_verdicts_behind_sentinel() {
    python_producer_gets_its_verdicts_on(Topology::Sentinel);
}

fn node_producer_gets_its_verdicts_on(topology: Topology) {
    require_node_packages(&example("producers/node"));
    producer_gets_its_verdicts(
        topology,
        "node",
        "node/producer.mjs",
        "js",
        ["js-1", "js-1-copy", "js-2"],
    );
}

#[test]
fn node_producer_gets_its_verdicts() {
    node_producer_gets_its_verdicts_on(Topology::Standalone);
}

#[test]
fn node_producer_gets_its_verdicts_on_a_cluster() {
    node_producer_gets_its_verdicts_on(Topology::Cluster);
}

#[test]
fn node_producer_gets_its_verdicts_behind_sentinel() {
    node_producer_gets_its_verdicts_on(Topology::Sentinel);
}
