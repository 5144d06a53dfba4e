//! What the tests of the example programs (examples/producers/,
//! examples/readers/) share: a `simdedup worker` process, where the examples
//! live, and the runtimes they need. A missing runtime or library fails the
//! test with how to install it; it never skips.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::RedisServer;

/// A `simdedup worker` process (the built binary, Redis index) on `ns`; killed on drop.
pub struct Worker(Child);

impl Worker {
    pub fn start(server: &RedisServer, ns: &str) -> Worker {
        let child = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args(["worker", "--redis-url", &server.url(), "--namespace", ns])
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
