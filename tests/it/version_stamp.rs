//! A worker stamps its namespace with its fingerprint version and refuses a
//! namespace stamped with another: fingerprints of two versions must never be
//! compared.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::Commands;
use simdedup::fingerprint::FINGERPRINT_VERSION;
use simdedup::keys::Keys;
use support::RedisServer;

fn worker(server: &RedisServer, ns: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_simdedup"));
    cmd.args(["worker", "--redis-url", &server.url(), "--namespace", ns])
        .args(["--http-addr", ""])
        .env_remove("SIMDEDUP_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_worker_refuses_a_namespace_of_another_fingerprint_version() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let key = Keys::new("old").fingerprint_version();
    let older = FINGERPRINT_VERSION - 1;
    let _: () = conn.set(&key, older).unwrap();
    let mut child = support::KillOnDrop(worker(&server, "old").spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            panic!("the worker kept running on a namespace of version {older}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!("version {older}")) && stderr.contains("new namespace"),
        "{stderr}"
    );
    // It read nothing: no consumer group was created.
    let groups: redis::RedisResult<redis::Value> =
        conn.xinfo_groups(Keys::new("old").input_stream());
    assert!(groups.is_err(), "{groups:?}");
}

#[test]
fn the_first_worker_stamps_a_new_namespace() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let key = Keys::new("fresh").fingerprint_version();
    let mut child = support::KillOnDrop(worker(&server, "fresh").spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let stamp = loop {
        let stamp: Option<u32> = conn.get(&key).unwrap();
        if stamp.is_some() || Instant::now() > deadline {
            break stamp;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(stamp, Some(FINGERPRINT_VERSION));
}
