//! What the tests of the example programs (examples/producers/,
//! examples/readers/) share: the Redis topologies they run on, a `simdedup
//! worker` process, where the examples live, and the runtimes they need. A
//! missing runtime or library fails the test with how to install it; it never
//! skips.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use simdedup::keys::Keys;

use crate::support::{Deployment, RedisCluster, RedisServer, SentinelGroup};

/// Where an example runs.
#[derive(Clone, Copy, Debug)]
pub enum Topology {
    /// One `redis-server`, reached by its URL.
    Standalone,
    /// A Redis Cluster of 3 primaries, reached by the URL of a primary that
    /// does not own the namespace's slot: a client that is not cluster-aware
    /// gets MOVED for every key of the namespace.
    Cluster,
    /// A primary, its replica and three sentinels, reached by the
    /// `redis+sentinel://` URL.
    Sentinel,
}

/// A started [`Topology`]: the servers (killed on drop), and the URL that the
/// example and its worker are given.
pub struct Deployed {
    pub servers: Box<dyn Deployment>,
    pub url: String,
}

impl Topology {
    /// Start the servers for the namespace `ns`.
    pub fn start(self, ns: &str) -> Deployed {
        match self {
            Topology::Standalone => {
                let server = RedisServer::start();
                Deployed {
                    url: server.url(),
                    servers: Box::new(server),
                }
            }
            Topology::Cluster => {
                let cluster = RedisCluster::start(3);
                let key = Keys::new(ns).input_stream();
                let owner = cluster.node_for(&key).port;
                let other = cluster
                    .nodes
                    .iter()
                    .find(|n| n.port != owner)
                    .expect("a cluster of 3 primaries");
                let reply: redis::RedisResult<usize> =
                    redis::cmd("XLEN").arg(&key).query(&mut other.connection());
                assert_eq!(
                    reply.as_ref().err().and_then(|e| e.code()),
                    Some("MOVED"),
                    "node {} answers {key} with MOVED: {reply:?}",
                    other.port
                );
                Deployed {
                    url: other.url(),
                    servers: Box::new(cluster),
                }
            }
            Topology::Sentinel => {
                let group = SentinelGroup::start();
                Deployed {
                    url: group.url(),
                    servers: Box::new(group),
                }
            }
        }
    }
}

impl Deployed {
    /// A connection to the primary that holds the namespace `ns` (every key
    /// of it shares the hash tag `{ns}`).
    pub fn connection(&self, ns: &str) -> redis::Connection {
        self.servers.connection_for(&Keys::new(ns).input_stream())
    }
}

/// A `simdedup worker` process (the built binary, Redis index) on `ns`,
/// reaching Redis by `url` (any form `--redis-url` takes); killed on drop.
pub struct Worker(Child);

impl Worker {
    pub fn start(url: &str, ns: &str) -> Worker {
        let child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args(["worker", "--redis-url", url, "--namespace", ns])
            .args(["--http-addr", "", "--block-ms", "200"])
            .env_remove("SIMDEDUP_CONFIG")
            .env("SIMDEDUP_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn simdedup worker");
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `examples/REL`.
pub fn example(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(rel)
}

/// `python3` with redis-py, or a panic that says how to get them.
pub fn require_python_redis() {
    match Command::new("python3")
        .args(["-c", "import redis"])
        .output()
    {
        Err(e) => panic!(
            "python3 is not installed ({e}): install it (apt-get install python3 python3-redis) \
             to run the Python examples"
        ),
        Ok(o) if !o.status.success() => panic!(
            "the Python examples need redis-py: `python3 -m pip install redis` \
             (or apt-get install python3-redis). `import redis` said: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
}

/// `node`, and the npm packages of the example folder `dir` (its
/// `package-lock.json`) installed, or a panic that says how to get them.
pub fn require_node_packages(dir: &Path) {
    if let Err(e) = Command::new("node").arg("--version").output() {
        panic!(
            "node is not installed ({e}): install Node.js 18 or newer \
             (apt-get install nodejs npm) to run the Node.js examples"
        );
    }
    assert!(
        dir.join("node_modules/redis/package.json").is_file(),
        "the Node.js example in {} needs its npm packages: run `npm ci` there (.ci/run does)",
        dir.display()
    );
}
