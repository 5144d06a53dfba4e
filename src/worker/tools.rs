//! Operator tools on the streams: `produce` (JSONL → input stream), `stats`
//! (lag, pending, consumers), `inspect` (what the index holds about an id).

use std::io::BufRead;
use std::time::Duration;

use indicatif::ProgressBar;
use redis::aio::ConnectionLike;
use redis::{RedisError, Value};
use serde::Serialize;

use crate::decision::{evidence, shared_count, CandidateView, DecisionConfig, Evidence, Signal};
use crate::index::{Cluster, Index, IndexError, StoredArticle};
use crate::keys::Keys;

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

/// `[k, v, k, v, ...]` or a RESP3 map as (name, value) pairs.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(kv) => kv
            .chunks(2)
            .filter_map(|c| Some((text(c.first()?)?, c.get(1)?)))
            .collect(),
        Value::Map(kv) => kv.iter().filter_map(|(k, v)| Some((text(k)?, v))).collect(),
        _ => Vec::new(),
    }
}

fn get<'a>(pairs: &'a [(String, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

/// One consumer group, from `XINFO GROUPS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupInfo {
    pub name: String,
    pub consumers: i64,
    pub pending: i64,
    pub last_delivered_id: String,
    /// Entries not yet delivered to the group (Redis ≥ 7; None when Redis cannot tell).
    pub lag: Option<i64>,
}

/// Find group `name` in an `XINFO GROUPS` reply.
pub fn group_info(reply: &Value, name: &str) -> Option<GroupInfo> {
    let Value::Array(groups) = reply else {
        return None;
    };
    groups.iter().find_map(|g| {
        let p = pairs(g);
        let gname = get(&p, "name").and_then(text)?;
        (gname == name).then(|| GroupInfo {
            name: gname,
            consumers: get(&p, "consumers").and_then(int).unwrap_or(0),
            pending: get(&p, "pending").and_then(int).unwrap_or(0),
            last_delivered_id: get(&p, "last-delivered-id")
                .and_then(text)
                .unwrap_or_default(),
            lag: get(&p, "lag").and_then(int),
        })
    })
}

/// One consumer, from `XINFO CONSUMERS`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumerInfo {
    pub name: String,
    pub pending: i64,
    pub idle_ms: i64,
}

/// What `simdedup stats` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamStats {
    pub input_stream: String,
    pub input_length: i64,
    pub output_length: i64,
    pub dead_letters: i64,
    pub group: Option<GroupInfo>,
    pub consumers: Vec<ConsumerInfo>,
    /// Live time buckets of the Redis index, oldest first (empty for an embedded index).
    pub index_buckets: Vec<BucketStats>,
}

/// One time bucket of the Redis index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketStats {
    pub label: String,
    pub start_ms: i64,
    /// Articles filed in the bucket: its handle counter (field `n` of its `n:`
    /// hash), so deleted articles still count.
    pub articles: i64,
}

/// Lag, pending entries and consumers of namespace `keys`, group `group`.
pub async fn stats<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    group: &str,
) -> Result<StreamStats, RedisError> {
    let (input_length, output_length, dead_letters): (i64, i64, i64) = redis::pipe()
        .cmd("XLEN")
        .arg(keys.input_stream())
        .cmd("XLEN")
        .arg(keys.output_stream())
        .cmd("XLEN")
        .arg(keys.dead_stream())
        .query_async(conn)
        .await?;
    let groups: Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(keys.input_stream())
        .query_async(conn)
        .await
        .unwrap_or(Value::Nil);
    let group_info = group_info(&groups, group);
    let mut consumers = Vec::new();
    if group_info.is_some() {
        let reply: Value = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(keys.input_stream())
            .arg(group)
            .query_async(conn)
            .await?;
        if let Value::Array(list) = reply {
            for c in &list {
                let p = pairs(c);
                consumers.push(ConsumerInfo {
                    name: get(&p, "name").and_then(text).unwrap_or_default(),
                    pending: get(&p, "pending").and_then(int).unwrap_or(0),
                    idle_ms: get(&p, "idle").and_then(int).unwrap_or(0),
                });
            }
        }
    }
    let buckets: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(keys.buckets())
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await?;
    let mut index_buckets = Vec::with_capacity(buckets.len());
    if !buckets.is_empty() {
        let mut pipe = redis::pipe();
        for (label, _) in &buckets {
            pipe.cmd("HGET").arg(keys.counter(label)).arg("n");
        }
        let sizes: Vec<Option<i64>> = pipe.query_async(conn).await?;
        for ((label, start), articles) in buckets.into_iter().zip(sizes) {
            index_buckets.push(BucketStats {
                label,
                start_ms: start as i64,
                articles: articles.unwrap_or(0),
            });
        }
    }
    Ok(StreamStats {
        index_buckets,
        input_stream: keys.input_stream(),
        input_length,
        output_length,
        dead_letters,
        group: group_info,
        consumers,
    })
}

/// What `simdedup inspect ID` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    pub id: String,
    pub stored: Option<StoredArticle>,
    pub cluster: Option<Cluster>,
    /// For a stored duplicate whose matched article is still in the index:
    /// why, as far as the two stored fingerprints tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<StoredEvidence>,
}

/// The evidence `simdedup explain` shows, for a stored duplicate and the
/// article it matched, from what the index keeps of both: their fingerprints,
/// not their texts. Clauses and numbers are compared by their sketch hashes
/// (counts, not words); the verdict is weighed again with the settings
/// `inspect` runs with, which are the worker's when they share a config.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredEvidence {
    /// The article it matched (the stored verdict's `matched`).
    pub matched: String,
    /// The signal the decision gives it against `matched` with the settings
    /// `inspect` runs with, if any.
    pub signal: Option<Signal>,
    #[serde(flatten)]
    pub evidence: Evidence,
    /// Number sketch hashes of both articles, of the matched one only, of
    /// this one only.
    pub numbers_shared: usize,
    pub numbers_only_matched: usize,
    pub numbers_only_this: usize,
}

impl StoredEvidence {
    /// Weigh `this` against the article `matched` it was found a duplicate of.
    pub fn weigh(this: &StoredArticle, matched: &StoredArticle, cfg: &DecisionConfig) -> Self {
        let (a, b) = (&matched.fingerprint, &this.fingerprint);
        let evidence = evidence(b, &CandidateView::of(&matched.id, a, matched.ts_ms), cfg);
        let shared = shared_count(&a.numbers, &b.numbers);
        StoredEvidence {
            matched: matched.id.clone(),
            signal: evidence.signal().filter(|_| !b.is_empty() && !a.is_empty()),
            evidence,
            numbers_shared: shared,
            numbers_only_matched: a.numbers.len() - shared,
            numbers_only_this: b.numbers.len() - shared,
        }
    }
}

/// What the index holds about `id`: fingerprint, verdict, cluster, and for a
/// duplicate the evidence against the article it matched, weighed with `cfg`.
pub async fn inspect<I: Index>(
    index: &I,
    id: &str,
    cfg: &DecisionConfig,
) -> Result<Inspection, IndexError> {
    let stored = index.get(id).await?;
    let matched = match stored.as_ref().and_then(|s| s.verdict.duplicate()) {
        Some(d) => index.get(&d.matched).await?,
        None => None,
    };
    let evidence = stored
        .as_ref()
        .zip(matched.as_ref())
        .map(|(this, matched)| StoredEvidence::weigh(this, matched, cfg));
    Ok(Inspection {
        id: id.to_owned(),
        stored,
        cluster: index.cluster(id).await?,
        evidence,
    })
}

/// Counts of a `produce` run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProduceSummary {
    pub added: u64,
    /// Blank lines are skipped silently; these are lines that are not JSON objects.
    pub skipped: u64,
}

/// Errors of `produce`.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("reading input: {0}")]
    Read(#[from] std::io::Error),
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
}

/// Turn a JSONL line into XADD fields: every top-level member, strings as they
/// are, anything else as its JSON text (so `"id": 42` becomes `42`). Nothing is
/// validated here: the worker does that, and answers bad input with `rejected`.
pub fn line_fields(line: &[u8]) -> Option<Vec<(String, String)>> {
    let value: serde_json::Value = serde_json::from_slice(line).ok()?;
    let obj = value.as_object()?;
    Some(
        obj.iter()
            .map(|(k, v)| {
                let s = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), s)
            })
            .collect(),
    )
}

/// XADD every JSONL line of `input` to the input stream, `pipeline` commands per
/// round trip. With `rate` (entries per second), a steady feed instead: round
/// trips of about 10 ms' worth of entries (at least one, at most `pipeline`),
/// each sent when its first entry is due. `bar` advances by bytes read.
pub async fn produce<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    input: impl BufRead,
    pipeline: usize,
    rate: Option<f64>,
    bar: &ProgressBar,
) -> Result<ProduceSummary, ProduceError> {
    let stream = keys.input_stream();
    let per_trip = match rate {
        Some(r) => ((r / 100.0).ceil() as usize).clamp(1, pipeline.max(1)),
        None => pipeline.max(1),
    };
    // When the first round trip was answered: the feed's clock.
    let mut started = None;
    let mut summary = ProduceSummary::default();
    let mut pipe = redis::pipe();
    let mut queued = 0usize;
    for (n, line) in input.split(b'\n').enumerate() {
        let line = line?;
        bar.inc(line.len() as u64 + 1);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Some(fields) = line_fields(&line) else {
            summary.skipped += 1;
            tracing::warn!(line = n + 1, "not a JSON object; skipped");
            continue;
        };
        pipe.cmd("XADD").arg(&stream).arg("*");
        for (k, v) in &fields {
            pipe.arg(k).arg(v);
        }
        pipe.ignore();
        queued += 1;
        if queued >= per_trip {
            send_when_due(conn, &mut pipe, &mut started, summary.added, rate).await?;
            summary.added += queued as u64;
            queued = 0;
        }
    }
    if queued > 0 {
        send_when_due(conn, &mut pipe, &mut started, summary.added, rate).await?;
        summary.added += queued as u64;
    }
    Ok(summary)
}

/// Send `pipe` (and clear it) once its first entry, the `sent`-th, is due at
/// `rate` entries per second (at once without a rate) from `started`, when
/// the first round trip was answered (set here): so entry `n` is never
/// stored earlier than `n / rate` seconds after the first, however long that
/// first round trip took.
async fn send_when_due<C: ConnectionLike + Send>(
    conn: &mut C,
    pipe: &mut redis::Pipeline,
    started: &mut Option<tokio::time::Instant>,
    sent: u64,
    rate: Option<f64>,
) -> Result<(), RedisError> {
    if let (Some(r), Some(t0)) = (rate, *started) {
        tokio::time::sleep_until(t0 + Duration::from_secs_f64(sent as f64 / r)).await;
    }
    pipe.query_async::<()>(conn).await?;
    pipe.clear();
    started.get_or_insert_with(tokio::time::Instant::now);
    Ok(())
}
