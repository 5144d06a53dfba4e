//! Test support: a real `redis-server` started by the test itself on a free port.
//!
//! Never uses a server someone else started. If `redis-server` is not installed the
//! test fails (it is not skipped) with a message saying how to install it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// A private `redis-server` ([`simdedup::redis_server::RedisServer`]) that panics
/// instead of returning errors, as tests want; killed on drop.
pub struct RedisServer {
    inner: simdedup::redis_server::RedisServer,
    pub port: u16,
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    simdedup::redis_server::free_port().expect("bind an ephemeral port")
}

impl RedisServer {
    /// Start a standalone server with no persistence.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Start a server with extra `--flag value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let inner = simdedup::redis_server::RedisServer::start_with(extra)
            .unwrap_or_else(|e| panic!("these tests start their own Redis: {e}"));
        RedisServer {
            port: inner.port(),
            inner,
        }
    }

    pub fn url(&self) -> String {
        self.inner.url()
    }

    /// A synchronous connection for test assertions.
    pub fn connection(&self) -> redis::Connection {
        self.inner
            .connection()
            .expect("connect to the test redis-server")
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
