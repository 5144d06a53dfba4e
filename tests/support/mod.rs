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
    /// Its ports, bound once the server is killed
    /// ([`RedisServer::kill_holding_ports`]).
    held_ports: Vec<std::net::TcpListener>,
    /// Killed by the test ([`RedisServer::kill`]): probes skip it.
    killed: bool,
}

/// A child process killed (SIGKILL) and reaped when dropped, unless it has
/// exited: a failing assertion must not leave it running (it would hold the
/// test's output open and keep working).
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A gauge or counter without labels of the worker whose HTTP listener is
/// on 127.0.0.1:`port`, read from its /metrics; `None` when it does not
/// answer or shows no such series.
pub fn metric(port: u16, name: &str) -> Option<u64> {
    let (_, body) = http_get(port, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    simdedup::redis_server::free_port().expect("bind an ephemeral port")
}

/// `GET path` from a worker's HTTP listener on 127.0.0.1:`port`: the status
/// and the whole reply, or `None` while nothing answers. The worker keeps
/// HTTP/1.1 connections open, so the request asks it to close this one: the
/// reply is read to its end.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, reply))
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
        RedisServer::of(inner)
    }

    /// The test's handle on a server the library started.
    fn of(inner: simdedup::redis_server::RedisServer) -> RedisServer {
        RedisServer {
            port: inner.port(),
            inner,
            held_ports: Vec::new(),
            killed: false,
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

    /// Kill the server at once (SIGKILL), as a crashed machine would.
    pub fn kill(&mut self) {
        self.inner.kill();
        self.killed = true;
    }

    /// A connection to ask the server of its state, `None` once the test
    /// killed it (its held port would take the connection and never answer).
    fn probe(&self) -> Option<redis::Connection> {
        if self.killed {
            return None;
        }
        self.inner.connection().ok()
    }

    /// [`kill`](Self::kill), then keep its ports bound (listeners that
    /// accept nothing) until drop: the port, and the cluster bus port (the
    /// port + 10000) of a cluster node. A replica of this server still
    /// tries its address, and clients and cluster peers theirs: none may
    /// meet another test's server started on a freed port, whose data a
    /// replica would sync in place of its own and which a client would take
    /// for this one.
    pub fn kill_holding_ports(&mut self) {
        self.kill();
        let bus = self.port.checked_add(10_000);
        self.held_ports = [Some(self.port), bus]
            .into_iter()
            .flatten()
            .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
    }

    /// Send the server `signal` (`STOP` or `-STOP`: it freezes, as a
    /// stalled machine does, answering nothing with its connections open;
    /// `CONT`: it runs on; drop still kills it).
    pub fn signal(&self, signal: &str) {
        let signal = signal.trim_start_matches('-');
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.inner.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.inner.pid());
    }
}

/// `INFO replication` of `server`, or "" when it does not answer.
fn replication_info(server: &RedisServer) -> String {
    server
        .probe()
        .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c).ok())
        .unwrap_or_default()
}

/// Is `server` a replica with a live link to its primary?
fn replica_in_sync(server: &RedisServer) -> bool {
    let info = replication_info(server);
    info.contains("role:slave") && info.contains("master_link_status:up")
}

/// A Redis Cluster of `primaries` primaries with `replicas` replicas each, all
/// private `redis-server`s with `--cluster-enabled yes` on free ports; slots
/// split evenly with `CLUSTER ADDSLOTSRANGE`, nodes joined with `CLUSTER MEET`,
/// replicas attached with `CLUSTER REPLICATE`. A node stops being reachable
/// within `NODE_TIMEOUT_MS`, so a replica takes over a killed primary within a
/// few seconds. Killed on drop.
pub struct RedisCluster {
    /// The primaries first (in slot order), then the replicas.
    pub nodes: Vec<RedisServer>,
    primaries: usize,
}

impl RedisCluster {
    /// Cluster node timeout: how long before a silent node is failed over.
    pub const NODE_TIMEOUT_MS: u64 = 1_000;

    /// `n` primaries, no replicas.
    pub fn start(n: usize) -> RedisCluster {
        Self::start_with_replicas(n, 0)
    }

    pub fn start_with_replicas(primaries: usize, replicas: usize) -> RedisCluster {
        let total = primaries * (1 + replicas);
        let timeout = Self::NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &timeout,
                    // A replica may take over however long it lost touch.
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let per = 16384 / primaries;
        for (i, node) in nodes[..primaries].iter().enumerate() {
            let lo = i * per;
            let hi = if i + 1 == primaries {
                16383
            } else {
                lo + per - 1
            };
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
        let cluster = RedisCluster { nodes, primaries };
        cluster.wait("every node to know every other", |info, _| {
            info.contains(&format!("cluster_known_nodes:{total}"))
        });
        for (r, replica) in cluster.nodes[primaries..].iter().enumerate() {
            let primary = &cluster.nodes[r % primaries];
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut primary.connection())
                .expect("CLUSTER MYID");
            redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(id)
                .query::<()>(&mut replica.connection())
                .expect("CLUSTER REPLICATE");
        }
        cluster.wait(
            "every slot served and every replica in sync",
            |info, node| {
                info.contains("cluster_state:ok")
                    && (node < primaries || replica_in_sync(&cluster.nodes[node]))
            },
        );
        cluster
    }

    /// Wait until `ok(CLUSTER INFO, node index)` holds on every node.
    fn wait(&self, what: &str, ok: impl Fn(&str, usize) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let all = self.nodes.iter().enumerate().all(|(i, node)| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.connection())
                    .unwrap_or_default();
                ok(&info, i)
            });
            if all {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster: gave up waiting for {what} (30 s)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Seed URLs, comma-separated (the form `--redis-url` accepts).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The primary serving `key`'s slot when the cluster formed.
    pub fn node_for(&self, key: &str) -> &RedisServer {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connection())
            .expect("CLUSTER KEYSLOT");
        let per = 16384 / self.primaries;
        &self.nodes[(slot as usize / per).min(self.primaries - 1)]
    }

    /// The node serving `key`'s slot now, as the nodes still running see it
    /// (after a failover: the promoted replica).
    pub fn primary_for(&self, key: &str) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for node in &self.nodes {
                let Some(mut c) = node.probe() else {
                    continue;
                };
                let role: redis::RedisResult<String> =
                    redis::cmd("INFO").arg("replication").query(&mut c);
                if !role.is_ok_and(|r| r.contains("role:master")) {
                    continue;
                }
                let slot: u16 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query(&mut c)
                    .expect("CLUSTER KEYSLOT");
                // The owner's own `CLUSTER NODES` line lists the slot.
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut c)
                    .unwrap_or_default();
                let mine = nodes.lines().find(|l| l.contains("myself"));
                if mine.is_some_and(|l| line_serves(l, slot)) {
                    return self.nodes.iter().position(|n| n.port == node.port).unwrap();
                }
            }
            assert!(Instant::now() < deadline, "no node serves {key} (30 s)");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The replica of the node at index `primary`.
    pub fn replica_of(&self, primary: usize) -> usize {
        let id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[primary].connection())
            .expect("CLUSTER MYID");
        (0..self.nodes.len())
            .find(|&i| {
                i != primary
                    && replication_info(&self.nodes[i]).contains("role:slave")
                    && redis::cmd("CLUSTER")
                        .arg("NODES")
                        .query::<String>(&mut self.nodes[i].connection())
                        .unwrap_or_default()
                        .lines()
                        .any(|l| l.contains("myself") && l.contains(&id))
            })
            .expect("a replica of that primary")
    }
}

/// Does a `CLUSTER NODES` line list `slot` among its ranges?
fn line_serves(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
    })
}

/// A Redis Sentinel deployment on loopback: a primary, one replica and three
/// sentinels monitoring them as [`SentinelGroup::MASTER`], with timeouts tuned
/// down so that a failover completes within seconds (a primary silent for
/// `down-after-milliseconds` 1 s is failed over by a quorum of 2). Killed on
/// drop.
pub struct SentinelGroup {
    /// The primary when started, then its replica.
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    pub const MASTER: &'static str = "simdedup";

    pub fn start() -> SentinelGroup {
        let primary = RedisServer::start();
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let config = format!(
            "sentinel monitor {m} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {m} 1000\n\
             sentinel failover-timeout {m} 5000\n\
             sentinel parallel-syncs {m} 1",
            m = Self::MASTER
        );
        let sentinels = (0..3)
            .map(|_| {
                let inner = simdedup::redis_server::RedisServer::start_sentinel(&config)
                    .unwrap_or_else(|e| panic!("these tests start their own Redis Sentinel: {e}"));
                RedisServer::of(inner)
            })
            .collect();
        let group = SentinelGroup {
            servers: vec![primary, replica],
            sentinels,
        };
        // Ready when the replica is in sync and every sentinel sees the
        // replica and the other sentinels (needed for a failover).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(replica_in_sync(&group.servers[1])
            && group.sentinels.iter().all(|s| {
                let info: Vec<String> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(Self::MASTER)
                    .query(&mut s.connection())
                    .unwrap_or_default();
                let field = |name: &str| {
                    info.iter()
                        .position(|f| f == name)
                        .and_then(|i| info.get(i + 1))
                        .cloned()
                        .unwrap_or_default()
                };
                field("num-slaves") == "1" && field("num-other-sentinels") == "2"
            }))
        {
            assert!(
                Instant::now() < deadline,
                "sentinels did not see the group within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        group
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/simdedup`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), Self::MASTER)
    }

    /// Index in `servers` of the primary the sentinels name now.
    pub fn primary(&self) -> usize {
        for s in &self.sentinels {
            let Ok(mut c) = s.inner.connection() else {
                continue;
            };
            let addr: redis::RedisResult<(String, String)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(Self::MASTER)
                .query(&mut c);
            if let Ok((_, port)) = addr {
                if let Some(i) = self.servers.iter().position(|s| s.port.to_string() == port) {
                    return i;
                }
            }
        }
        panic!("no sentinel names the primary");
    }

    /// Ask a sentinel to fail over now, and wait until the sentinels name the
    /// other server and it answers as a primary.
    pub fn failover(&self) -> usize {
        let before = self.primary();
        redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(Self::MASTER)
            .query::<()>(&mut self.sentinels[0].connection())
            .expect("SENTINEL FAILOVER");
        self.wait_for_new_primary(before)
    }

    /// Wait until a server other than `old` is named and serves as primary.
    pub fn wait_for_new_primary(&self, old: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.primary();
            if now != old && replication_info(&self.servers[now]).contains("role:master") {
                return now;
            }
            assert!(Instant::now() < deadline, "no failover within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A Redis deployment a test runs against: one node, a cluster or a
/// Sentinel group, so one test body serves all three.
pub trait Deployment: Sync {
    /// The `redis_url` setting that reaches it.
    fn url(&self) -> String;
    /// A synchronous connection to the primary that holds `key` now.
    fn connection_for(&self, key: &str) -> redis::Connection;
}

impl Deployment for RedisServer {
    fn url(&self) -> String {
        RedisServer::url(self)
    }
    fn connection_for(&self, _key: &str) -> redis::Connection {
        self.connection()
    }
}

impl Deployment for RedisCluster {
    /// One node's URL (a replica's): the rest is found from it.
    fn url(&self) -> String {
        self.nodes.last().expect("a cluster has nodes").url()
    }
    fn connection_for(&self, key: &str) -> redis::Connection {
        self.nodes[self.primary_for(key)].connection()
    }
}

impl Deployment for SentinelGroup {
    fn url(&self) -> String {
        SentinelGroup::url(self)
    }
    fn connection_for(&self, _key: &str) -> redis::Connection {
        self.servers[self.primary()].connection()
    }
}

/// Wait up to 30 s (a bound against hangs) until `cond` holds.
pub fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Create on `server` the user `user` exactly as docs/redis-keys.md ("ACL per
/// role") writes it (password `SECRET`), read from the document itself; the
/// URL to connect as that user.
pub fn documented_acl_user(server: &RedisServer, user: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/redis-keys.md"))
        .unwrap();
    let section = &doc[doc.find("## ACL per role").expect("the ACL section")..];
    let block = section
        .split("```")
        .skip(1)
        .step_by(2)
        .find(|b| b.contains(&format!("SETUSER {user} ")))
        .unwrap_or_else(|| panic!("no ACL SETUSER {user} block in docs/redis-keys.md"));
    let rule: Vec<String> = block
        .replace('\\', " ")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(rule[..3], ["ACL", "SETUSER", user]);
    let mut acl = redis::cmd(&rule[0]);
    for arg in &rule[1..] {
        acl.arg(arg);
    }
    let _: () = acl.query(&mut server.connection()).unwrap();
    server
        .url()
        .replacen("redis://", &format!("redis://{user}:SECRET@"), 1)
}
