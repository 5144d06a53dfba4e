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
    /// Entries written to the input stream (each counted once, however
    /// often it was sent).
    pub added: u64,
    /// Blank lines are skipped silently; these are lines that are not JSON objects.
    pub skipped: u64,
    /// Entries sent again: after a transient error, or, with
    /// [`Durability::replicas`], because the replicas had not acknowledged
    /// them when the primary stopped answering (a repeated id gets its
    /// stored verdict from the workers).
    pub resent: u64,
    /// Entries written but never acknowledged by [`Durability::replicas`]
    /// replicas within [`Durability::patience`]: a failover may have lost them.
    pub unconfirmed: u64,
}

/// How `produce` makes what it adds survive a failover.
#[derive(Debug, Clone, Copy)]
pub struct Durability {
    /// Replicas that must acknowledge each round trip (`WAIT`); 0: none.
    pub replicas: u32,
    /// How long one `WAIT` waits, in milliseconds (positive: 0 would block).
    pub wait_timeout_ms: u64,
    /// How long a round trip is sent again and waited for before its entries
    /// count as unconfirmed (after one did, later ones are asked once).
    pub patience: Duration,
    /// The longest pause between attempts after an error.
    pub backoff_max: Duration,
}

impl Default for Durability {
    fn default() -> Self {
        Durability {
            replicas: 0,
            wait_timeout_ms: 1000,
            patience: Duration::from_secs(60),
            backoff_max: Duration::from_secs(2),
        }
    }
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
///
/// A round trip that fails with a transient error is sent again on a new
/// connection (`reconnect`), for up to [`Durability::patience`]. With
/// [`Durability::replicas`], each round trip ends with `WAIT`, and one the
/// replicas have not acknowledged is sent again (a failover discards what
/// they had not received; a repeated id gets its stored verdict) until they
/// do.
// Each argument is one thing a caller chooses; grouping them would only
// rename them.
#[allow(clippy::too_many_arguments)]
pub async fn produce<C, R, F>(
    conn: &mut C,
    reconnect: R,
    keys: &Keys,
    input: impl BufRead,
    pipeline: usize,
    rate: Option<f64>,
    durability: Durability,
    bar: &ProgressBar,
) -> Result<ProduceSummary, ProduceError>
where
    C: ConnectionLike + Send,
    R: FnMut() -> F,
    F: std::future::Future<Output = Result<C, RedisError>>,
{
    let per_trip = match rate {
        Some(r) => ((r / 100.0).ceil() as usize).clamp(1, pipeline.max(1)),
        None => pipeline.max(1),
    };
    let mut sender = Sender {
        conn,
        reconnect,
        stream: keys.input_stream(),
        durability,
        started: None,
        gave_up: false,
        summary: ProduceSummary::default(),
    };
    let mut batch: Vec<Vec<(String, String)>> = Vec::with_capacity(per_trip);
    for (n, line) in input.split(b'\n').enumerate() {
        let line = line?;
        bar.inc(line.len() as u64 + 1);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Some(fields) = line_fields(&line) else {
            sender.summary.skipped += 1;
            tracing::warn!(line = n + 1, "not a JSON object; skipped");
            continue;
        };
        batch.push(fields);
        if batch.len() >= per_trip {
            sender.send_when_due(&batch, rate).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        sender.send_when_due(&batch, rate).await?;
    }
    Ok(sender.summary)
}

/// `produce`'s connection and counts.
struct Sender<'c, C, R> {
    conn: &'c mut C,
    reconnect: R,
    stream: String,
    durability: Durability,
    /// When the first round trip was answered: the feed's clock.
    started: Option<tokio::time::Instant>,
    /// A round trip ran out of patience: later ones are asked once.
    gave_up: bool,
    summary: ProduceSummary,
}

impl<C, R, F> Sender<'_, C, R>
where
    C: ConnectionLike + Send,
    R: FnMut() -> F,
    F: std::future::Future<Output = Result<C, RedisError>>,
{
    /// Send `batch` once its first entry is due at `rate` entries per second
    /// (at once without a rate) from when the first round trip was answered:
    /// so entry `n` is never stored earlier than `n / rate` seconds after the
    /// first, however long that first round trip took.
    async fn send_when_due(
        &mut self,
        batch: &[Vec<(String, String)>],
        rate: Option<f64>,
    ) -> Result<(), RedisError> {
        if let (Some(r), Some(t0)) = (rate, self.started) {
            let due = t0 + Duration::from_secs_f64(self.summary.added as f64 / r);
            tokio::time::sleep_until(due).await;
        }
        self.deliver(batch).await?;
        self.started.get_or_insert_with(tokio::time::Instant::now);
        Ok(())
    }

    /// Write `batch`, with replicas asked for followed by `WAIT` in the same
    /// pipeline (so on the connection and node that took the writes); send
    /// it all again after an error (on a new connection) or a `WAIT` short
    /// of the replicas, until [`Durability::patience`] runs out.
    async fn deliver(&mut self, batch: &[Vec<(String, String)>]) -> Result<(), RedisError> {
        let d = self.durability;
        let patience = if self.gave_up {
            Duration::ZERO
        } else {
            d.patience
        };
        let deadline = tokio::time::Instant::now() + patience;
        let mut backoff = crate::transient::Backoff::new(d.backoff_max);
        let mut written = false;
        loop {
            let mut pipe = redis::pipe();
            for fields in batch {
                pipe.cmd("XADD").arg(&self.stream).arg("*");
                for (k, v) in fields {
                    pipe.arg(k).arg(v);
                }
                pipe.ignore();
            }
            if d.replicas > 0 {
                pipe.cmd("WAIT").arg(d.replicas).arg(d.wait_timeout_ms);
            }
            let failed = match pipe.query_async::<Vec<Value>>(self.conn).await {
                Ok(replies) => {
                    if written {
                        self.summary.resent += batch.len() as u64;
                    } else {
                        self.summary.added += batch.len() as u64;
                        written = true;
                    }
                    let acks = replies.first().and_then(int).unwrap_or(0);
                    if d.replicas == 0 || acks >= i64::from(d.replicas) {
                        return Ok(());
                    }
                    if tokio::time::Instant::now() >= deadline {
                        self.unconfirmed(batch.len(), acks);
                        return Ok(());
                    }
                    tracing::debug!(
                        acks,
                        "too few replicas acknowledged a round trip: sending it again"
                    );
                    None
                }
                // `UNBLOCKED`: the server stopped being a primary during WAIT.
                Err(e) if crate::transient::is_transient(&e) || e.code() == Some("UNBLOCKED") => {
                    Some(e)
                }
                Err(e) => return Err(e),
            };
            if tokio::time::Instant::now() >= deadline {
                if written {
                    self.unconfirmed(batch.len(), 0);
                    return Ok(());
                }
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
            if let Some(e) = failed {
                tracing::warn!(error = %e, entries = batch.len(), "sending a round trip again on a new connection");
                match (self.reconnect)().await {
                    Ok(c) => *self.conn = c,
                    Err(e) => tracing::debug!(error = %e, "reconnecting failed"),
                }
            }
        }
    }

    /// `entries` written but not acknowledged in time: counted, and later
    /// round trips are asked once.
    fn unconfirmed(&mut self, entries: usize, acks: i64) {
        tracing::warn!(
            entries,
            acknowledged = acks,
            wanted = self.durability.replicas,
            "too few replicas acknowledged a round trip in time: a failover may lose it"
        );
        self.summary.unconfirmed += entries as u64;
        self.gave_up = true;
    }
}

/// The replicas `INFO replication` reports connected (on a cluster, the most
/// any node reports), or `None` when the reply does not say.
pub fn replicas_connected(info: &Value) -> Option<u64> {
    fn texts(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| texts(i, out)),
            Value::Map(kv) => kv.iter().for_each(|(_, v)| texts(v, out)),
            other => out.extend(text(other)),
        }
    }
    let mut all = Vec::new();
    texts(info, &mut all);
    all.iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.trim().strip_prefix("connected_slaves:")?.parse().ok())
        .max()
}
