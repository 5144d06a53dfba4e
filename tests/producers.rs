//! The example producers (examples/producers/) against a real worker: a private
//! redis-server, the built `simdedup worker` (Redis index), then the producer
//! script with the server's URL; its printed verdicts are checked. The
//! redis-cli one needs `redis-cli` (installed with redis-server), the Python
//! one `python3` with redis-py: missing either fails the test with the fix.

mod support;

use std::process::{Child, Command, Stdio};

use support::RedisServer;

struct Worker(Child);

impl Worker {
    fn start(server: &RedisServer, ns: &str) -> Worker {
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

fn script(rel: &str) -> String {
    format!("{}/examples/producers/{rel}", env!("CARGO_MANIFEST_DIR"))
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

#[test]
fn redis_cli_producer_gets_its_verdicts() {
    let server = RedisServer::start();
    let _worker = Worker::start(&server, "cli");
    let v = run_producer("sh", &[&script("cli/producer.sh"), &server.url(), "cli"]);
    let ids: Vec<&str> = v.iter().map(|(i, _, _)| i.as_str()).collect();
    assert_eq!(ids, ["sh-1", "sh-1-copy", "sh-empty"]);
    assert_pair(&v, "sh-1", "sh-1-copy");
    assert_eq!(
        v[2],
        ("sh-empty".into(), "rejected".into(), "no_content".into())
    );
    // Run again on the same namespace: only the new verdicts are read, and the
    // resent ids get their stored verdicts back.
    let again = run_producer("sh", &[&script("cli/producer.sh"), &server.url(), "cli"]);
    assert_eq!(again, v);
}

#[test]
fn python_producer_gets_its_verdicts() {
    let probe = Command::new("python3")
        .args(["-c", "import redis"])
        .output();
    match probe {
        Err(e) => panic!(
            "python3 is not installed ({e}): install it (apt-get install python3 python3-redis) \
             to run the Python producer test"
        ),
        Ok(o) if !o.status.success() => panic!(
            "the Python producer needs redis-py: `python3 -m pip install redis` \
             (or apt-get install python3-redis). `import redis` said: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
    let server = RedisServer::start();
    let _worker = Worker::start(&server, "py");
    let v = run_producer(
        "python3",
        &[&script("python/producer.py"), &server.url(), "py"],
    );
    let ids: Vec<&str> = v.iter().map(|(i, _, _)| i.as_str()).collect();
    assert_eq!(ids, ["py-1", "py-1-repost", "py-2"]);
    assert_pair(&v, "py-1", "py-1-repost");
    assert_eq!(v[2], ("py-2".into(), "unique".into(), "-".into()));
}
