//! `simdedup demo`: the worker pipeline on the bundled sample, with a private
//! redis-server it starts and stops itself, with a given Redis, and with the
//! embedded index when no redis-server is installed. Its verdicts must be the
//! ones `simdedup scan` gives for the same sample.

use crate::support;

use std::collections::HashMap;
use std::process::{Command, Output};

use support::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_simdedup");

/// Run the binary from a directory that is not the repository (the sample is
/// embedded), without `SIMDEDUP_*` settings from the environment.
fn run(args: &[&str], path: Option<&std::path::Path>) -> Output {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd.path());
    for (k, _) in std::env::vars() {
        if k.starts_with("SIMDEDUP_") {
            cmd.env_remove(k);
        }
    }
    if let Some(p) = path {
        // No redis-server to be found: neither on PATH nor named.
        cmd.env("PATH", p).env_remove("REDIS_SERVER_BIN");
    }
    let out = cmd.output().expect("run simdedup");
    assert!(
        out.status.success(),
        "simdedup {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// What `simdedup scan` says about the bundled sample: id → (verdict, dup_of).
fn scan_verdicts() -> HashMap<String, (String, Option<String>)> {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/articles.jsonl");
    let out = run(&["scan", sample, "--no-progress"], None);
    json_lines(&out)
        .into_iter()
        .filter_map(|v| {
            let id = v["id"].as_str()?.to_owned();
            let dup_of = v["dup_of"].as_str().map(str::to_owned);
            Some((id, (v["verdict"].as_str().unwrap().to_owned(), dup_of)))
        })
        .collect()
}

/// Demo output (stream fields, all strings) checked against `scan`: same ids in
/// input order, same verdicts and `dup_of`, each with its `source`.
fn assert_matches_scan(lines: &[serde_json::Value]) {
    let scan = scan_verdicts();
    // The sample's malformed line is not produced (not JSON): 10 of 11 lines.
    assert_eq!(lines.len(), scan.len(), "{lines:?}");
    let ids: Vec<&str> = lines.iter().map(|v| v["id"].as_str().unwrap()).collect();
    let expected: Vec<String> = simdedup::demo::SAMPLE
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, expected, "input order");
    for v in lines {
        let id = v["id"].as_str().unwrap();
        let (verdict, dup_of) = &scan[id];
        assert_eq!(v["verdict"].as_str(), Some(verdict.as_str()), "{id}: {v}");
        assert_eq!(v["dup_of"].as_str(), dup_of.as_deref(), "{id}: {v}");
        assert!(v["source"].as_str().is_some_and(|s| s.contains('-')), "{v}");
    }
    // The sample is built to show every outcome.
    for verdict in ["unique", "duplicate", "rejected"] {
        assert!(
            lines.iter().any(|v| v["verdict"] == verdict),
            "no {verdict}"
        );
    }
}

#[test]
fn demo_starts_and_stops_its_own_redis_server() {
    // Fails with an install hint if redis-server is missing, like every Redis test.
    let _probe = RedisServer::start();
    let out = run(&["demo"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("started a private"), "{stderr}");
    assert!(stderr.contains("Redis index"), "{stderr}");
    assert_matches_scan(&json_lines(&out));
    // The private server is gone.
    let port: u16 = stderr
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|p| p.parse().ok())
        .expect("the port in the log");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "redis-server on {port} still running"
    );
}

#[test]
fn demo_on_a_given_redis_and_again_replays() {
    let server = RedisServer::start();
    let first = run(&["demo", "--redis-url", &server.url(), "-n", "given"], None);
    let lines = json_lines(&first);
    assert_matches_scan(&lines);
    assert!(lines.iter().all(|v| v["replayed"].is_null()));
    let mut conn = server.connection();
    let out_len: usize = redis::cmd("XLEN")
        .arg("simdedup:{given}:out")
        .query(&mut conn)
        .unwrap();
    assert_eq!(out_len, lines.len());
    // Each printed line is its output entry, every field of it (`v`,
    // `overlap` among them).
    let stream = crate::worker_common::read_stream(&mut conn, "simdedup:{given}:out");
    for v in &lines {
        let (_, fields) = stream
            .iter()
            .find(|(_, f)| v["source"] == f["source"].as_str())
            .expect("the printed verdict's entry");
        let printed: HashMap<String, String> = v
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, x)| (k.clone(), x.as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(&printed, fields);
    }
    assert!(lines.iter().any(|v| v["overlap"].is_string()), "{lines:?}");
    // A second run re-sends the same ids: the stored verdicts come back.
    let again = json_lines(&run(
        &["demo", "--redis-url", &server.url(), "-n", "given"],
        None,
    ));
    assert_matches_scan(&again);
    for v in again.iter().filter(|v| v["verdict"] != "rejected") {
        assert_eq!(v["replayed"], "1", "{v}");
    }
}

#[test]
fn demo_without_redis_server_uses_the_embedded_index() {
    let empty = tempfile::tempdir().unwrap();
    let out = run(&["demo"], Some(empty.path()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("EMBEDDED index"), "{stderr}");
    // Exactly what `scan` prints for the sample, malformed line included.
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/articles.jsonl");
    let scan = run(&["scan", sample, "--no-progress"], None);
    let strip = |o: &Output| -> Vec<serde_json::Value> {
        json_lines(o)
            .into_iter()
            .map(|mut v| {
                v.as_object_mut().unwrap().remove("reason");
                v
            })
            .collect()
    };
    assert_eq!(strip(&out), strip(&scan));
    assert_eq!(strip(&out).len(), simdedup::demo::SAMPLE.lines().count());
}
