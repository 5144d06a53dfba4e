//! Helpers shared by the worker tests: test settings, stream readers, texts.
#![allow(dead_code)]

pub mod contract;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use redis::Value;
use simdedup::keys::Keys;
use simdedup::worker::WorkerConfig;

/// Fast timings so crash recovery happens within a test's patience.
pub fn fast_config() -> WorkerConfig {
    WorkerConfig {
        batch_size: 16,
        max_in_flight: 64,
        block_ms: 100,
        liveness_ttl_ms: 600,
        claim_interval_ms: 100,
        command_timeout_ms: 2_000,
        backoff_max_ms: 200,
        shutdown_timeout_ms: 20_000,
        http_addr: String::new(),
        ..WorkerConfig::default()
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every entry of `stream`: (entry id, fields). Entries of an output or a
/// dead-letter stream are checked against the contract's JSON Schemas on the
/// way (`contract`): every test that reads what a worker wrote checks it.
pub fn read_stream(
    conn: &mut redis::Connection,
    stream: &str,
) -> Vec<(String, HashMap<String, String>)> {
    let reply: Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(conn)
        .unwrap();
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    let entries: Vec<(String, HashMap<String, String>)> = entries
        .iter()
        .map(|e| {
            let Value::Array(pair) = e else {
                panic!("entry {e:?}")
            };
            let id = text(&pair[0]);
            let mut map = HashMap::new();
            if let Value::Array(kv) = &pair[1] {
                for c in kv.chunks(2) {
                    map.insert(text(&c[0]), text(&c[1]));
                }
            }
            (id, map)
        })
        .collect();
    if let Some(role @ (contract::Role::Output | contract::Role::Dead)) =
        contract::Role::of_stream(stream)
    {
        for (id, fields) in &entries {
            contract::contract().check(role, id, fields);
        }
    }
    entries
}

pub fn xlen(conn: &mut redis::Connection, stream: &str) -> usize {
    redis::cmd("XLEN").arg(stream).query(conn).unwrap()
}

/// Pending entries of the group (all consumers).
pub fn pending(conn: &mut redis::Connection, keys: &Keys, group: &str) -> i64 {
    let reply: Value = redis::cmd("XPENDING")
        .arg(keys.input_stream())
        .arg(group)
        .query(conn)
        .unwrap();
    match reply {
        Value::Array(parts) => match &parts[0] {
            Value::Int(n) => *n,
            other => text(other).parse().unwrap(),
        },
        other => panic!("XPENDING: {other:?}"),
    }
}

/// Wait (an upper bound against hangs, not a timing assertion) until `cond` holds.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A deterministic word generator, so each group gets its own vocabulary.
fn words(seed: u64, n: usize) -> Vec<String> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            let mut w = String::new();
            for _ in 0..(4 + (x >> 60) as usize % 5) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                w.push((b'a' + ((x >> 33) % 26) as u8) as char);
            }
            w
        })
        .collect()
}

/// Group `g`'s article, variant `v`: five sentences of the group's own words;
/// each variant changes one word of the last sentence, so any two variants
/// differ in at most two words of sixty: near-duplicates of each other whatever
/// order they are compared in, and of nothing in other groups.
pub fn article_text(g: u64, v: u64) -> String {
    let vocab = words(g * 7919 + 1, 60);
    let mut sentences: Vec<String> = (0..5)
        .map(|s| vocab[s * 12..s * 12 + 12].join(" ") + ".")
        .collect();
    if v > 0 {
        // One word of the last sentence changed: a light rewrite.
        let mut last: Vec<String> = vocab[48..60].to_vec();
        let fresh = words(g * 104_729 + v, 1);
        last[v as usize % 12] = fresh[0].clone();
        sentences[4] = last.join(" ") + ".";
    }
    sentences.join(" ")
}

/// Story `g`'s `n` sentences, twelve of its own words each: text of one
/// story that shares no 5-gram with another's.
pub fn story(g: u64, n: usize) -> Vec<String> {
    words(g * 7919 + 3, 12 * n)
        .chunks(12)
        .map(|c| c.join(" ") + ".")
        .collect()
}

/// The workers' consumer group (`simdedup`) of `keys`' input stream,
/// created with the stream, as a worker creates it: from the start.
pub fn create_group(conn: &mut redis::Connection, keys: &Keys) {
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(keys.input_stream())
        .arg("simdedup")
        .arg("0")
        .arg("MKSTREAM")
        .query(conn)
        .unwrap();
}

/// XADD an entry with the given fields; returns its id.
pub fn xadd(conn: &mut redis::Connection, keys: &Keys, fields: &[(&str, &[u8])]) -> String {
    let mut cmd = redis::cmd("XADD");
    cmd.arg(keys.input_stream()).arg("*");
    for (k, v) in fields {
        cmd.arg(*k).arg(*v);
    }
    cmd.query(conn).unwrap()
}

/// XADD an article: fields `id` and `text`; returns the entry's id.
pub fn xadd_article(conn: &mut redis::Connection, keys: &Keys, id: &str, text: &str) -> String {
    xadd(
        conn,
        keys,
        &[("id", id.as_bytes()), ("text", text.as_bytes())],
    )
}

/// Each source at most once, and every input entry has an output.
pub fn assert_exactly_once(
    conn: &mut redis::Connection,
    keys: &Keys,
    group: &str,
) -> Vec<HashMap<String, String>> {
    let inputs: HashSet<String> = read_stream(conn, &keys.input_stream())
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let outputs = read_stream(conn, &keys.output_stream());
    let mut seen = HashSet::new();
    for (_, f) in &outputs {
        let source = f["source"].clone();
        assert!(
            seen.insert(source.clone()),
            "two outputs for input entry {source}"
        );
        assert!(
            inputs.contains(&source),
            "output for unknown source {source}"
        );
    }
    assert_eq!(seen, inputs, "every input entry has an output");
    assert_eq!(pending(conn, keys, group), 0, "nothing left pending");
    outputs.into_iter().map(|(_, f)| f).collect()
}

/// The group of an id `g<G>-v<V>` (or any id `<group>-<rest>`).
pub fn group_of(id: &str) -> &str {
    id.split('-').next().unwrap()
}

/// Exactly one `unique` verdict per group of ids `g<G>-v<V>` (duplicates
/// pointing into their own group): one article kept per near-duplicate group.
pub fn assert_one_kept_per_group(outputs: &[HashMap<String, String>], groups: usize) {
    let mut kept: HashMap<&str, usize> = HashMap::new();
    for f in outputs {
        let group = group_of(&f["id"]);
        let count = kept.entry(group).or_default();
        match f["verdict"].as_str() {
            "unique" => *count += 1,
            "duplicate" => assert_eq!(group_of(&f["dup_of"]), group, "{f:?}"),
            other => panic!("unexpected verdict {other}: {f:?}"),
        }
    }
    assert_eq!(kept.len(), groups, "every group answered");
    let wrong: Vec<String> = outputs
        .iter()
        .filter(|f| kept[group_of(&f["id"])] != 1)
        .map(|f| {
            let of = f
                .get("dup_of")
                .map_or(String::new(), |d| format!(" of {d}"));
            format!("{} {}{of}", f["id"], f["verdict"])
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "exactly one kept per group: {kept:?}; the verdicts of the others: {wrong:?}"
    );
}
