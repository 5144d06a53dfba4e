//! The Redis index: the shared memory of every worker.
//!
//! Same behaviour as [`EmbeddedIndex`](super::EmbeddedIndex) (one conformance
//! suite holds both to it), with the state in Redis so any number of workers on
//! any number of machines share it. The key schema is in `docs/redis-keys.md`,
//! the reasoning in `docs/design.md`; in short:
//!
//! - Articles live in **time buckets** (default 24 h, by the article's own
//!   timestamp). Every key of a bucket expires at bucket end + window, so nothing
//!   outlives window + one bucket, and no key is written forever.
//! - Inside a bucket an article gets a small integer **handle**; block sets and
//!   signature fields hold handles (compact intsets/listpacks), `i:` maps id →
//!   SimHash + handle, `f:`/`m:` map handle → packed fingerprint / id + verdict.
//! - A check is **optimistic**: `gather.lua` returns every candidate (and the
//!   versions of what it read) in one atomic read; Rust computes distances and
//!   calls [`decide`]; `commit.lua` records the article only if nothing read has
//!   changed, otherwise the check is redone. Redis never scans or popcounts.
//!
//! Scripts are sent with EVALSHA and reloaded on `NOSCRIPT` by [`redis::Script`].

mod codec;
mod conn;

pub use codec::{
    decode_fingerprint, decode_id_value, decode_meta, encode_fingerprint, encode_id_value,
    encode_meta,
};

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::{Script, Value};

use self::conn::Conn;
use super::{Cluster, Index, IndexEntry, IndexError, Outcome, StoredArticle, Verdict};
use crate::decision::{classify, decide, CandidateView, DecisionConfig};
use crate::fingerprint::Fingerprint;
use crate::keys::{bucket_label, validate_namespace, Keys};
use crate::simhash::blocks;

static GATHER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/gather.lua")));
static COMMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/commit.lua")));
static LOOKUP: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lookup.lua")));
static DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/delete.lua")));

const HOUR_MS: u64 = 3600 * 1000;

/// Single node or Redis Cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Topology {
    /// Ask the server (`INFO cluster`): cluster if `cluster_enabled:1`.
    #[default]
    Auto,
    Standalone,
    Cluster,
}

/// How to reach and use Redis. Every worker of a namespace must use the same
/// `bucket_ms` (and the same [`DecisionConfig::window_ms`]).
#[derive(Debug, Clone)]
pub struct RedisIndexOptions {
    /// Length of a time bucket, a whole number of hours (default: half the window,
    /// at least 1 h, i.e. 24 h for the 48 h window). Keys live until bucket end +
    /// window. Shorter buckets expire data sooner but cost a fixed ~45 MB per
    /// live bucket in block sets (see `docs/design.md`).
    pub bucket_ms: Option<u64>,
    pub topology: Topology,
    /// Accept `maxmemory-policy allkeys-*`, under which Redis may evict index
    /// keys and silently forget articles. Off by default: connecting fails.
    pub allow_eviction: bool,
    /// Per-command response timeout. redis 1.x defaults to 500 ms, which a busy
    /// server can exceed under load; a timed-out check is reported as
    /// [`IndexError::Unavailable`] and may be retried (checks are idempotent).
    pub response_timeout: Duration,
    pub connection_timeout: Duration,
    /// Optimistic rounds before giving up with [`IndexError::Contention`].
    pub max_attempts: u32,
}

impl Default for RedisIndexOptions {
    fn default() -> Self {
        Self {
            bucket_ms: None,
            topology: Topology::Auto,
            allow_eviction: false,
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(5),
            max_attempts: 64,
        }
    }
}

/// An [`Index`] in Redis. Cheap to clone; share one among tasks (it multiplexes
/// one connection per node and reconnects on its own).
#[derive(Clone)]
pub struct RedisIndex {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    keys: Keys,
    config: DecisionConfig,
    bucket_ms: i64,
    max_attempts: u32,
}

impl std::fmt::Debug for RedisIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisIndex")
            .field("prefix", &self.inner.keys.prefix())
            .field("bucket_ms", &self.inner.bucket_ms)
            .field("cluster", &matches!(self.inner.conn, Conn::Cluster(_)))
            .finish()
    }
}

fn backend(e: ::redis::RedisError) -> IndexError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        IndexError::Unavailable(e.to_string())
    } else {
        IndexError::Backend(e.to_string())
    }
}

fn bad_reply(what: &str) -> IndexError {
    IndexError::Backend(format!("unexpected reply from Redis: {what}"))
}

/// What the eviction policy means for the index.
fn judge_policy(policy: &str, allow_eviction: bool) -> Result<(), IndexError> {
    if policy.starts_with("allkeys-") {
        if allow_eviction {
            tracing::warn!(
                policy,
                "maxmemory-policy may evict index keys (allowed by option)"
            );
        } else {
            return Err(IndexError::Config(format!(
                "Redis maxmemory-policy is {policy}: under memory pressure it would evict index keys \
                 and silently forget articles. Set it to noeviction (CONFIG SET maxmemory-policy \
                 noeviction), or pass allow_eviction / --allow-eviction to accept the risk"
            )));
        }
    } else if policy.starts_with("volatile-") {
        tracing::warn!(
            policy,
            "maxmemory-policy can evict keys with a TTL, and every index key has one; prefer noeviction"
        );
    }
    Ok(())
}

impl RedisIndex {
    /// Connect to `url` (`redis://` or `rediss://`, user and password in the URL for
    /// ACL; for a cluster, several seed URLs may be given separated by commas) and
    /// use namespace `namespace`. Refuses an `allkeys-*` eviction policy unless
    /// `options.allow_eviction`.
    pub async fn connect(
        url: &str,
        namespace: &str,
        config: DecisionConfig,
        options: RedisIndexOptions,
    ) -> Result<RedisIndex, IndexError> {
        validate_namespace(namespace).map_err(IndexError::Config)?;
        config.validate().map_err(IndexError::Config)?;
        let bucket_ms = match options.bucket_ms {
            Some(b) => b,
            None => (config.window_ms / 2).div_ceil(HOUR_MS).max(1) * HOUR_MS,
        };
        if bucket_ms == 0 || bucket_ms % HOUR_MS != 0 || bucket_ms > 30 * 24 * HOUR_MS {
            return Err(IndexError::Config(format!(
                "bucket_ms = {bucket_ms}: use a whole number of hours, at most 30 days"
            )));
        }
        let seeds: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if seeds.is_empty() {
            return Err(IndexError::Config("empty Redis URL".into()));
        }
        let keys = Keys::new(namespace);
        let conn = Conn::open(
            &seeds,
            options.topology,
            options.response_timeout,
            options.connection_timeout,
        )
        .await?;
        let mut probe = conn.clone();
        match probe.maxmemory_policy(keys.prefix()).await {
            Ok(policy) => judge_policy(&policy, options.allow_eviction)?,
            Err(e) => tracing::warn!(
                error = %e,
                "cannot read maxmemory-policy (CONFIG disabled or denied?); make sure it is noeviction"
            ),
        }
        Ok(RedisIndex {
            inner: Arc::new(Inner {
                conn,
                keys,
                config,
                bucket_ms: bucket_ms as i64,
                max_attempts: options.max_attempts.max(1),
            }),
        })
    }

    /// The key names of this index's namespace.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    pub fn config(&self) -> &DecisionConfig {
        &self.inner.config
    }

    /// Bucket length in ms.
    pub fn bucket_ms(&self) -> i64 {
        self.inner.bucket_ms
    }

    /// Start (unix ms) of the bucket holding an article at `ts_ms`.
    pub fn bucket_start(&self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.inner.bucket_ms) * self.inner.bucket_ms
    }

    /// Labels of the live buckets with their start (unix ms), oldest first.
    pub async fn buckets(&self) -> Result<Vec<(String, i64)>, IndexError> {
        let mut conn = self.inner.conn.clone();
        let v: Vec<(String, f64)> = ::redis::cmd("ZRANGE")
            .arg(self.inner.keys.buckets())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(backend)?;
        Ok(v.into_iter().map(|(l, s)| (l, s as i64)).collect())
    }

    /// Where `id` is stored: its bucket label and handle (to find its keys, see
    /// `docs/redis-keys.md`).
    pub async fn locate(&self, id: &str) -> Result<Option<(String, u64)>, IndexError> {
        let mut conn = self.inner.conn.clone();
        Ok(self
            .lookup(&mut conn, id)
            .await?
            .map(|s| (s.label, s.handle)))
    }

    async fn check(&self, entry: &IndexEntry, write: bool) -> Result<Outcome, IndexError> {
        let inner = &self.inner;
        let probe = Probe::new(entry, &inner.config, inner.bucket_ms);
        let mut conn = inner.conn.clone();
        for _ in 0..inner.max_attempts {
            let snap = match self.gather(&mut conn, entry, &probe).await? {
                Gathered::Replay(stored) => {
                    return Ok(Outcome {
                        verdict: stored.verdict,
                        replayed: true,
                    })
                }
                Gathered::Snapshot(s) => s,
            };
            let verdict = self.decide(&mut conn, entry, &snap).await?;
            if !write {
                return Ok(Outcome {
                    verdict,
                    replayed: false,
                });
            }
            match self
                .commit(&mut conn, entry, &probe, &snap, &verdict)
                .await?
            {
                Committed::Ok | Committed::Expired => {
                    return Ok(Outcome {
                        verdict,
                        replayed: false,
                    })
                }
                Committed::Replay => {
                    if let Some(stored) = self.lookup(&mut conn, &entry.id).await? {
                        return Ok(Outcome {
                            verdict: stored.verdict,
                            replayed: true,
                        });
                    }
                    // Deleted in between: check again.
                }
                Committed::Retry => tokio::task::yield_now().await,
            }
        }
        Err(IndexError::Contention {
            attempts: inner.max_attempts,
        })
    }

    async fn gather(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        probe: &Probe,
    ) -> Result<Gathered, IndexError> {
        let keys = &self.inner.keys;
        let mut inv = GATHER.key(keys.buckets());
        inv.arg(keys.prefix())
            .arg(&entry.id)
            .arg(probe.lo)
            .arg(probe.hi);
        for b in &probe.blocks {
            inv.arg(b);
        }
        inv.arg(&probe.content);
        for s in &probe.sentences {
            inv.arg(s);
        }
        let reply: Value = inv.invoke_async(conn).await.map_err(backend)?;
        let mut it = array(reply)?.into_iter();
        let kind = string(it.next())?;
        if kind == "replay" {
            let rest: Vec<Value> = it.collect();
            return Ok(Gathered::Replay(parse_stored(&entry.id, rest)?));
        }
        let n = int(it.next())? as usize;
        let mut buckets = Vec::with_capacity(n);
        for _ in 0..n {
            let label = string(it.next())?;
            let start = int(it.next())?;
            let counter = string(it.next())?;
            let mut block_sizes = [0usize; 4];
            for size in &mut block_sizes {
                *size = array(it.next().unwrap_or(Value::Nil))?.len();
            }
            let content_len = bytes(it.next())?.len();
            let sentence_lens = array(it.next().unwrap_or(Value::Nil))?
                .into_iter()
                .map(|v| bytes(Some(v)).map(|b| b.len()))
                .collect::<Result<Vec<_>, _>>()?;
            let mut cands = Vec::new();
            let mut flat = array(it.next().unwrap_or(Value::Nil))?.into_iter();
            while let (Some(h), Some(fp)) = (flat.next(), flat.next()) {
                cands.push((int(Some(h))? as u64, bytes(Some(fp))?));
            }
            buckets.push(BucketSnap {
                label,
                start,
                counter,
                block_sizes,
                content_len,
                sentence_lens,
                cands,
            });
        }
        Ok(Gathered::Snapshot(Snapshot { buckets }))
    }

    /// Compute distances and decide, exactly as the embedded index does. Only the
    /// candidates that match get their ids fetched (ties are broken by id).
    async fn decide(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        snap: &Snapshot,
    ) -> Result<Verdict, IndexError> {
        let cfg = &self.inner.config;
        let fp = &entry.fingerprint;
        if fp.is_empty() {
            return Ok(Verdict::Unique);
        }
        let mut hits: Vec<(&str, u64, Fingerprint, i64)> = Vec::new();
        for b in &snap.buckets {
            for (h, packed) in &b.cands {
                let (cfp, ts) =
                    decode_fingerprint(packed, b.start).map_err(|reason| IndexError::Corrupt {
                        id: format!("{}:{h}", b.label),
                        reason,
                    })?;
                let view = candidate("", &cfp, ts);
                if cfg.in_window(entry.ts_ms, ts) && classify(fp, &view, cfg).is_some() {
                    hits.push((&b.label, *h, cfp, ts));
                }
            }
        }
        if hits.is_empty() {
            return Ok(Verdict::Unique);
        }
        let mut pipe = ::redis::pipe();
        for (label, h, _, _) in &hits {
            pipe.cmd("HGET")
                .arg(self.inner.keys.metas(label, *h))
                .arg(*h);
        }
        let metas: Vec<Option<Vec<u8>>> = pipe.query_async(conn).await.map_err(backend)?;
        let mut known: Vec<(String, Verdict, &Fingerprint, i64)> = Vec::new();
        for ((label, h, cfp, ts), meta) in hits.iter().zip(metas) {
            // Deleted since the gather: as if deleted before it.
            let Some(meta) = meta else { continue };
            let (id, verdict) = decode_meta(&meta).map_err(|reason| IndexError::Corrupt {
                id: format!("{label}:{h}"),
                reason,
            })?;
            known.push((id, verdict, cfp, *ts));
        }
        let views = known.iter().map(|(id, _, cfp, ts)| candidate(id, cfp, *ts));
        Ok(match decide(fp, entry.ts_ms, views, cfg) {
            None => Verdict::Unique,
            Some(m) => {
                let root = known
                    .iter()
                    .find(|(id, ..)| *id == m.id)
                    .and_then(|(_, v, ..)| v.duplicate().map(|d| d.dup_of.clone()));
                Verdict::from_match(m, root.as_deref())
            }
        })
    }

    async fn commit(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        probe: &Probe,
        snap: &Snapshot,
        verdict: &Verdict,
    ) -> Result<Committed, IndexError> {
        let inner = &self.inner;
        let keys = &inner.keys;
        let fp = &entry.fingerprint;
        let mut inv = COMMIT.key(keys.buckets());
        inv.arg(keys.prefix())
            .arg(&entry.id)
            .arg(probe.lo)
            .arg(probe.hi)
            .arg(&probe.label)
            .arg(probe.start)
            .arg(inner.bucket_ms as u64 + inner.config.window_ms)
            .arg(format!("{:016x}", fp.simhash))
            .arg(encode_fingerprint(fp, entry.ts_ms, probe.start))
            .arg(encode_meta(&entry.id, verdict));
        for b in &probe.blocks {
            inv.arg(b);
        }
        inv.arg(&probe.content).arg(probe.sentences.len());
        for s in &probe.sentences {
            inv.arg(s);
        }
        inv.arg(verdict.duplicate().map_or("", |d| d.dup_of.as_str()));
        inv.arg(snap.buckets.len());
        for b in &snap.buckets {
            inv.arg(&b.label).arg(&b.counter);
            for size in b.block_sizes {
                inv.arg(size);
            }
            inv.arg(b.content_len);
            for len in &b.sentence_lens {
                inv.arg(*len);
            }
        }
        let reply: Value = inv.invoke_async(conn).await.map_err(backend)?;
        let mut it = array(reply)?.into_iter();
        Ok(match string(it.next())?.as_str() {
            "ok" => Committed::Ok,
            "expired" => Committed::Expired,
            "replay" => Committed::Replay,
            "retry" => {
                tracing::trace!(id = %entry.id, reason = %string(it.next()).unwrap_or_default(), "commit conflict, retrying");
                Committed::Retry
            }
            other => return Err(bad_reply(other)),
        })
    }

    async fn lookup(&self, conn: &mut Conn, id: &str) -> Result<Option<Stored>, IndexError> {
        let keys = &self.inner.keys;
        let reply: Value = LOOKUP
            .key(keys.buckets())
            .arg(keys.prefix())
            .arg(id)
            .invoke_async(conn)
            .await
            .map_err(backend)?;
        let v = array(reply)?;
        if v.is_empty() {
            return Ok(None);
        }
        parse_stored(id, v).map(Some)
    }
}

/// An article as read back from Redis.
struct Stored {
    label: String,
    handle: u64,
    ts_ms: i64,
    fingerprint: Fingerprint,
    verdict: Verdict,
    /// `<label>:<handle>` of the duplicates linked to it.
    links: Vec<(String, u64)>,
}

/// `[label, start, ids-value, fingerprint, meta, (links)]`.
fn parse_stored(id: &str, v: Vec<Value>) -> Result<Stored, IndexError> {
    let corrupt = |reason: String| IndexError::Corrupt {
        id: id.to_owned(),
        reason,
    };
    let mut it = v.into_iter();
    let label = string(it.next())?;
    let start = int(it.next())?;
    let (_, handle) = decode_id_value(&bytes(it.next())?).map_err(corrupt)?;
    let (fingerprint, ts_ms) = decode_fingerprint(&bytes(it.next())?, start).map_err(corrupt)?;
    let (_, verdict) = decode_meta(&bytes(it.next())?).map_err(corrupt)?;
    let links = match it.next() {
        None => Vec::new(),
        Some(v) => {
            let text = String::from_utf8(bytes(Some(v))?)
                .map_err(|_| corrupt("links are not UTF-8".into()))?;
            text.split_ascii_whitespace()
                .map(|t| {
                    t.split_once(':')
                        .and_then(|(l, h)| Some((l.to_owned(), h.parse().ok()?)))
                        .ok_or_else(|| corrupt(format!("bad link {t:?}")))
                })
                .collect::<Result<_, _>>()?
        }
    };
    Ok(Stored {
        label,
        handle,
        ts_ms,
        fingerprint,
        verdict,
        links,
    })
}

fn candidate<'a>(id: &'a str, fp: &'a Fingerprint, ts_ms: i64) -> CandidateView<'a> {
    CandidateView {
        id,
        simhash: fp.simhash,
        content: fp.content,
        signatures: &fp.signatures,
        ts_ms,
    }
}

/// Where an article is looked up and written.
struct Probe {
    label: String,
    start: i64,
    /// Starts of the first and last bucket that can hold an article in the window.
    lo: i64,
    hi: i64,
    blocks: [String; 4],
    /// 16 hex, or "" for an empty fingerprint (never compared, never indexed).
    content: String,
    sentences: Vec<String>,
}

impl Probe {
    fn new(entry: &IndexEntry, cfg: &DecisionConfig, bucket_ms: i64) -> Probe {
        let floor = |t: i64| t.div_euclid(bucket_ms) * bucket_ms;
        let window = i64::try_from(cfg.window_ms).unwrap_or(i64::MAX);
        let fp = &entry.fingerprint;
        let start = floor(entry.ts_ms);
        let (content, sentences) = if fp.is_empty() {
            (String::new(), Vec::new())
        } else {
            (
                format!("{:016x}", fp.content),
                fp.lookup_signatures(cfg.lookup_signatures)
                    .iter()
                    .map(|s| format!("{s:016x}"))
                    .collect(),
            )
        };
        Probe {
            label: bucket_label(start),
            start,
            lo: floor(entry.ts_ms.saturating_sub(window)),
            hi: floor(entry.ts_ms.saturating_add(window)),
            blocks: blocks(fp.simhash).map(|b| format!("{b:04x}")),
            content,
            sentences,
        }
    }
}

enum Gathered {
    Replay(Stored),
    Snapshot(Snapshot),
}

struct Snapshot {
    buckets: Vec<BucketSnap>,
}

/// What gather.lua read in one bucket, with the versions commit.lua re-checks.
struct BucketSnap {
    label: String,
    start: i64,
    counter: String,
    block_sizes: [usize; 4],
    content_len: usize,
    sentence_lens: Vec<usize>,
    cands: Vec<(u64, Vec<u8>)>,
}

enum Committed {
    Ok,
    Expired,
    Replay,
    Retry,
}

fn array(v: Value) -> Result<Vec<Value>, IndexError> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(bad_reply(&format!("{other:?} where an array was expected"))),
    }
}

fn bytes(v: Option<Value>) -> Result<Vec<u8>, IndexError> {
    match v {
        Some(Value::BulkString(b)) => Ok(b),
        Some(Value::SimpleString(s)) => Ok(s.into_bytes()),
        Some(Value::Int(i)) => Ok(i.to_string().into_bytes()),
        Some(Value::Nil) | None => Ok(Vec::new()),
        Some(other) => Err(bad_reply(&format!("{other:?} where a string was expected"))),
    }
}

fn string(v: Option<Value>) -> Result<String, IndexError> {
    String::from_utf8(bytes(v)?).map_err(|_| bad_reply("non-UTF-8 text"))
}

fn int(v: Option<Value>) -> Result<i64, IndexError> {
    match v {
        Some(Value::Int(i)) => Ok(i),
        v => {
            let s = string(v)?;
            s.parse::<i64>()
                .ok()
                .or_else(|| s.parse::<f64>().ok().map(|f| f as i64))
                .ok_or_else(|| bad_reply(&format!("{s:?} where a number was expected")))
        }
    }
}

impl Index for RedisIndex {
    async fn check_and_insert(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        self.check(entry, true).await
    }

    async fn query(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        self.check(entry, false).await
    }

    async fn delete(&self, id: &str) -> Result<bool, IndexError> {
        let keys = &self.inner.keys;
        let mut conn = self.inner.conn.clone();
        let n: i64 = DELETE
            .key(keys.buckets())
            .arg(keys.prefix())
            .arg(id)
            .invoke_async(&mut conn)
            .await
            .map_err(backend)?;
        Ok(n == 1)
    }

    async fn get(&self, id: &str) -> Result<Option<StoredArticle>, IndexError> {
        let mut conn = self.inner.conn.clone();
        Ok(self.lookup(&mut conn, id).await?.map(|s| StoredArticle {
            id: id.to_owned(),
            ts_ms: s.ts_ms,
            fingerprint: s.fingerprint,
            verdict: s.verdict,
        }))
    }

    async fn cluster(&self, id: &str) -> Result<Option<Cluster>, IndexError> {
        let mut conn = self.inner.conn.clone();
        let Some(me) = self.lookup(&mut conn, id).await? else {
            return Ok(None);
        };
        let root = match &me.verdict {
            Verdict::Unique => id.to_owned(),
            Verdict::Duplicate(d) => d.dup_of.clone(),
        };
        let root_row = if root == id {
            Some(me)
        } else {
            self.lookup(&mut conn, &root).await?
        };
        let Some(root_row) = root_row else {
            // The root was deleted or expired: only this article is at hand.
            return Ok(Some(Cluster {
                root,
                duplicates: vec![id.to_owned()],
            }));
        };
        let mut duplicates = Vec::new();
        if !root_row.links.is_empty() {
            let mut pipe = ::redis::pipe();
            for (label, h) in &root_row.links {
                pipe.cmd("HGET")
                    .arg(self.inner.keys.metas(label, *h))
                    .arg(*h);
            }
            let metas: Vec<Option<Vec<u8>>> = pipe.query_async(&mut conn).await.map_err(backend)?;
            let mut seen: HashMap<String, ()> = HashMap::new();
            for meta in metas.into_iter().flatten() {
                let (dup, verdict) = decode_meta(&meta).map_err(|reason| IndexError::Corrupt {
                    id: root.clone(),
                    reason,
                })?;
                // A deleted duplicate leaves a stale link; a re-used id may now
                // belong elsewhere: keep only live duplicates that name this root.
                if verdict.duplicate().is_some_and(|d| d.dup_of == root)
                    && seen.insert(dup.clone(), ()).is_none()
                {
                    duplicates.push(dup);
                }
            }
        }
        duplicates.sort();
        Ok(Some(Cluster { root, duplicates }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_policies() {
        assert!(judge_policy("noeviction", false).is_ok());
        assert!(judge_policy("volatile-lru", false).is_ok());
        let err = judge_policy("allkeys-lru", false).unwrap_err().to_string();
        assert!(
            err.contains("allkeys-lru") && err.contains("noeviction"),
            "{err}"
        );
        assert!(judge_policy("allkeys-lru", true).is_ok());
    }

    #[test]
    fn probe_covers_the_window_in_buckets() {
        let day = 24 * HOUR_MS as i64;
        let entry = IndexEntry {
            id: "a".into(),
            ts_ms: 10 * day + 5,
            fingerprint: Fingerprint {
                simhash: 0x0001_0002_0003_abcd,
                content: 7,
                signatures: vec![1],
                words: 3,
            },
        };
        let p = Probe::new(&entry, &DecisionConfig::default(), day);
        assert_eq!((p.start, p.lo, p.hi), (10 * day, 8 * day, 12 * day));
        assert_eq!(p.blocks, ["0001", "0002", "0003", "abcd"].map(String::from));
        assert_eq!(p.content, "0000000000000007");
        assert_eq!(p.label, "1970011100");
        let empty = IndexEntry {
            fingerprint: Fingerprint {
                words: 0,
                ..entry.fingerprint.clone()
            },
            ..entry
        };
        let p = Probe::new(&empty, &DecisionConfig::default(), day);
        assert!(p.content.is_empty() && p.sentences.is_empty());
    }
}
