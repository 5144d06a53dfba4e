//! Test support: a real `redis-server` started by the test itself on a free port.
//!
//! Never uses a server someone else started. If `redis-server` is not installed the
//! test fails (it is not skipped) with a message saying how to install it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process, killed (and its directory removed) on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

const INSTALL_HINT: &str =
    "redis-server was not found on PATH. These tests start their own Redis. \
Install it with `sudo apt-get install redis-server` (Debian/Ubuntu), `brew install redis` (macOS), \
or set REDIS_SERVER_BIN to the binary's path.";

fn redis_server_bin() -> PathBuf {
    if let Ok(p) = std::env::var("REDIS_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").map(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("redis-server"))
            .find(|p| p.is_file())
    });
    match found.flatten() {
        Some(p) => p,
        None => panic!("{INSTALL_HINT}"),
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

impl RedisServer {
    /// Start a standalone server with no persistence.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Start a server with extra `--flag value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let bin = redis_server_bin();
        // Another process may grab the port between our probe and the bind: retry.
        for _ in 0..5 {
            let port = free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            let child = Command::new(&bin)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(dir.path())
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}. {INSTALL_HINT}", bin.display()));
            let mut server = RedisServer { child, port, dir };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            // Dropping `server` kills the child; try another port.
        }
        panic!("redis-server did not start on a free port after 5 tries");
    }

    fn wait_ready(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(client) = redis::Client::open(self.url()) {
                if let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200))
                {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        return true;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A synchronous connection for test assertions.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to the test redis-server")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of `n` masters (no replicas), each a private `redis-server`
/// with `--cluster-enabled yes` on a free port; slots split evenly with
/// `CLUSTER ADDSLOTSRANGE`, nodes joined with `CLUSTER MEET`. Killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(n: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..n)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let per = 16384 / n;
        for (i, node) in nodes.iter().enumerate() {
            let lo = i * per;
            let hi = if i + 1 == n { 16383 } else { lo + per - 1 };
            let mut c = node.connection();
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(lo)
                .arg(hi)
                .query::<()>(&mut c)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = nodes[0].connection();
        for node in &nodes[1..] {
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .query::<()>(&mut first)
                .expect("CLUSTER MEET");
        }
        // Wait until every node sees every slot served.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = nodes.iter().all(|node| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.connection())
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}"))
            });
            if ok {
                return RedisCluster { nodes };
            }
            assert!(
                Instant::now() < deadline,
                "cluster did not form within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Seed URLs, comma-separated (the form `RedisIndex::connect` accepts).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node serving `key`'s slot.
    pub fn node_for(&self, key: &str) -> &RedisServer {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connection())
            .expect("CLUSTER KEYSLOT");
        let per = 16384 / self.nodes.len();
        &self.nodes[(slot as usize / per).min(self.nodes.len() - 1)]
    }
}
