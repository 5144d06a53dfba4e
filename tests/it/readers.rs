//! The example verdict readers (examples/readers/) against a real worker:
//! private Redis servers (a standalone server, a Redis Cluster given a node
//! that does not own the namespace, or Sentinel: [`Topology`]), the built
//! `simdedup worker` on the same URL, articles sent while the readers run.
//! Each language's reader runs under two consumer groups (two downstream
//! services); one of them is SIGKILLed mid-stream and restarted again and
//! again, and starts with verdicts delivered to it but never acknowledged, as
//! a reader that crashed after a read leaves them. Each group must hold every
//! verdict exactly once, joined to the article it answers.

use crate::examples_common;
use crate::worker_common;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use examples_common::{example, require_node_packages, require_python_redis, Topology, Worker};
use simdedup::keys::Keys;
use worker_common::{article_text, read_stream, wait_until, xadd, xlen};

/// Articles sent per round; between rounds the killed reader is restarted.
const ROUND: usize = 60;
const ROUNDS: usize = 4;
/// Verdicts delivered to the killed reader's consumer before it first starts,
/// never acknowledged: its restart must take them up.
const LEFT_PENDING: usize = 7;
const PATIENCE: Duration = Duration::from_secs(60);

/// One reader process (killed with SIGKILL on drop).
struct Reader {
    child: Child,
    stderr: PathBuf,
}

impl Reader {
    fn start(cmd: &[String], group: &str, dir: &Path, n: usize) -> Reader {
        let stderr = dir.join(format!("{group}-{n}.stderr"));
        let child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .arg(group)
            .arg(format!("{group}-consumer"))
            .arg(dir.join("articles.jsonl"))
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("reader stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cmd[0]));
        Reader { child, stderr }
    }

    /// Panic with its error output if it stopped by itself.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().expect("reader status") {
            panic!(
                "the reader exited ({status}): {}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
        }
    }

    fn kill(mut self) {
        // Child::kill sends SIGKILL: no chance to finish what it was doing.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The record list a reader of `group` keeps (the example's own key).
fn records_key(ns: &str, group: &str) -> String {
    format!("reader:{{{ns}}}:{group}")
}

fn records(conn: &mut redis::Connection, ns: &str, group: &str) -> Vec<serde_json::Value> {
    let raw: Vec<String> = redis::cmd("LRANGE")
        .arg(records_key(ns, group))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    raw.iter()
        .map(|r| serde_json::from_str(r).unwrap_or_else(|e| panic!("record {r:?}: {e}")))
        .collect()
}

fn llen(conn: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("LLEN").arg(key).query(conn).unwrap()
}

fn group_pending(conn: &mut redis::Connection, stream: &str, group: &str) -> i64 {
    let reply: (i64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query(conn)
        .unwrap();
    reply.0
}

/// Article `i`: every fourth one a light rewrite of the one before (a
/// duplicate), the rest of their own.
fn article(i: usize) -> (String, String, String) {
    let (group, variant) = if i % 4 == 3 {
        (i as u64 - 1, 1)
    } else {
        (i as u64, 0)
    };
    (
        format!("a{i}"),
        format!("Title of article {i}"),
        article_text(group, variant),
    )
}

/// Run the reader `cmd` (program and script) under two groups on `topology`,
/// one of them killed and restarted every round.
fn readers_handle_every_verdict_exactly_once(topology: Topology, cmd: &[String], ns: &str) {
    let deployed = topology.start(ns);
    let keys = Keys::new(ns);
    let out = keys.output_stream();
    let mut conn = deployed.connection(ns);
    let _worker = Worker::start(&deployed.url, ns);
    let dir = tempfile::tempdir().unwrap();
    let total = ROUND * ROUNDS;
    let jsonl: String = (0..total)
        .map(|i| {
            let (id, title, text) = article(i);
            serde_json::json!({"id": id, "title": title, "text": text}).to_string() + "\n"
        })
        .collect();
    std::fs::write(dir.path().join("articles.jsonl"), jsonl).unwrap();
    let send = |conn: &mut redis::Connection, round: usize| {
        for i in round * ROUND..(round + 1) * ROUND {
            let (id, title, text) = article(i);
            xadd(
                conn,
                &keys,
                &[
                    ("id", id.as_bytes()),
                    ("title", title.as_bytes()),
                    ("text", text.as_bytes()),
                ],
            );
        }
    };
    let mut cmd: Vec<String> = cmd.to_vec();
    cmd.extend([deployed.url.clone(), ns.to_owned()]);

    // A reader that crashed after reading: verdicts delivered to the killed
    // reader's consumer, never acknowledged.
    send(&mut conn, 0);
    wait_until("the first verdicts", PATIENCE, || {
        xlen(&mut conn, &out) >= LEFT_PENDING
    });
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&out)
        .arg("killed")
        .arg("0")
        .query(&mut conn)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("killed")
        .arg("killed-consumer")
        .arg("COUNT")
        .arg(LEFT_PENDING)
        .arg("STREAMS")
        .arg(&out)
        .arg(">")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        group_pending(&mut conn, &out, "killed"),
        LEFT_PENDING as i64
    );

    let steady = Reader::start(&cmd, "steady", dir.path(), 0);
    let mut killed = Reader::start(&cmd, "killed", dir.path(), 0);
    for round in 1..ROUNDS {
        send(&mut conn, round);
        // Kill it once it has handled some of this round, while the worker is
        // still deciding the rest.
        let seen = llen(&mut conn, &records_key(ns, "killed"));
        wait_until("the killed reader's progress", PATIENCE, || {
            killed.assert_running();
            llen(&mut conn, &records_key(ns, "killed")) > seen
        });
        killed.kill();
        killed = Reader::start(&cmd, "killed", dir.path(), round);
    }
    wait_until("every verdict", PATIENCE, || xlen(&mut conn, &out) >= total);
    let outputs = read_stream(&mut conn, &out);
    assert_eq!(outputs.len(), total, "one verdict per article");
    let articles: HashMap<String, String> = (0..total)
        .map(|i| {
            let (id, title, _) = article(i);
            (id, title)
        })
        .collect();
    for (group, reader) in [("steady", steady), ("killed", killed)] {
        let mut reader = reader;
        wait_until(&format!("{group} reads every verdict"), PATIENCE, || {
            reader.assert_running();
            llen(&mut conn, &records_key(ns, group)) >= total
                && group_pending(&mut conn, &out, group) == 0
        });
        reader.kill();
        // Nothing is pending and every verdict was delivered: the records are
        // final. Exactly one per output entry, joined to its article.
        let records = records(&mut conn, ns, group);
        let mut by_entry: HashMap<&str, &serde_json::Value> = HashMap::new();
        for r in &records {
            let entry = r["entry"].as_str().unwrap_or_else(|| panic!("{r}"));
            assert!(
                by_entry.insert(entry, r).is_none(),
                "{group} handled {entry} twice"
            );
        }
        assert_eq!(records.len(), total, "{group}: one record per verdict");
        let mut duplicates = 0;
        for (entry, fields) in &outputs {
            let r = by_entry
                .get(entry.as_str())
                .unwrap_or_else(|| panic!("{group} never handled {entry}"));
            assert_eq!(r["source"], fields["source"].as_str(), "{r}");
            assert_eq!(r["id"], fields["id"].as_str(), "{r}");
            assert_eq!(r["verdict"], fields["verdict"].as_str(), "{r}");
            assert_eq!(r["title"], articles[&fields["id"]].as_str(), "joined: {r}");
            if fields["verdict"] == "duplicate" {
                assert_eq!(r["dup_of"], fields["dup_of"].as_str(), "{r}");
                duplicates += 1;
            }
        }
        assert!(duplicates >= total / 8, "{group}: {duplicates} duplicates");
    }
}

fn python_reader_on(topology: Topology) {
    require_python_redis();
    let script = example("readers/python/reader.py");
    readers_handle_every_verdict_exactly_once(
        topology,
        &["python3".into(), script.to_string_lossy().into_owned()],
        "pyreader",
    );
}

#[test]
fn python_reader_handles_every_verdict_exactly_once_across_kills() {
    python_reader_on(Topology::Standalone);
}

#[test]
fn python_reader_handles_every_verdict_exactly_once_on_a_cluster() {
    python_reader_on(Topology::Cluster);
}

#[test]
fn python_reader_handles_every_verdict_exactly_once_behind_sentinel() {
    python_reader_on(Topology::Sentinel);
}

fn node_reader_on(topology: Topology) {
    let dir = example("readers/node");
    require_node_packages(&dir);
    readers_handle_every_verdict_exactly_once(
        topology,
        &[
            "node".into(),
            dir.join("reader.mjs").to_string_lossy().into_owned(),
        ],
        "jsreader",
    );
}

#[test]
fn node_reader_handles_every_verdict_exactly_once_across_kills() {
    node_reader_on(Topology::Standalone);
}

#[test]
fn node_reader_handles_every_verdict_exactly_once_on_a_cluster() {
    node_reader_on(Topology::Cluster);
}

#[test]
fn node_reader_handles_every_verdict_exactly_once_behind_sentinel() {
    node_reader_on(Topology::Sentinel);
}
