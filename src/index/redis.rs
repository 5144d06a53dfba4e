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
//! - Inside a bucket an article gets a small integer **handle**; block sets hold
//!   SimHashes (intsets), the `h:`/`c:`/`s:` lists handles (listpacks), `i:`
//!   maps id → SimHash + handle, `f:`/`m:` map handle → packed fingerprint /
//!   id + verdict.
//! - A check is **optimistic**: plain pipelined reads (the counters first, then
//!   the id, lists and block sets; then the articles they name) give every
//!   candidate; Rust computes distances and calls [`decide`]; `commit.lua`
//!   records the article only if nothing inserted since the counters were read
//!   changes what was read, otherwise the check is redone. Redis never scans
//!   or popcounts, and runs a script only to commit.
//! - What the process' own checks inserted meanwhile the commit does not read
//!   back: the process tests those itself and vouches for them
//!   ([`own_commits`]).
//! - In replica mode ([`RedisIndexOptions::replica`]) a process keeps a copy
//!   of the live articles and decides from it (`replica.rs`, `replicated.rs`).
//!
//! Scripts are sent with EVALSHA and reloaded on `NOSCRIPT` by [`redis::Script`].

mod codec;
mod conn;
mod own_commits;
mod replica;
mod replicated;

pub use codec::{
    decode_fingerprint, decode_id_value, decode_meta, encode_fingerprint, encode_id_value,
    encode_meta, parse_handles, parse_simhash_member, simhash_member, Meta,
};

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use ::redis::{Script, Value};

use self::conn::Conn;
use self::own_commits::{Horizon, OwnCommits, Scope, Ticket, Tokens};
use self::replica::Replica;
use super::{Cluster, Index, IndexEntry, IndexError, Outcome, StoredArticle, Verdict};
use crate::decision::{decide, CandidateView, DecisionConfig};
use crate::fingerprint::Fingerprint;
use crate::keys::{
    bucket_label, id_hash_hex, list_field, shape_bits, slot, validate_namespace, Keys,
};
use crate::simhash::hamming;

/// An index script: `lua/prelude.lua` (helpers the scripts share) followed by
/// the script's own text, loaded as one script.
macro_rules! index_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/prelude.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}

static COMMIT: LazyLock<Script> = index_script!("commit.lua");
static LOOKUP: LazyLock<Script> = index_script!("lookup.lua");
static DELETE: LazyLock<Script> = index_script!("delete.lua");

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
    /// Articles expected per window, used only to shape a namespace's first
    /// bucket (how finely its `h:`/`c:`/`s:` hashes are split, see
    /// `docs/redis-keys.md`); later buckets are shaped by the size of the bucket
    /// before them. A wrong guess costs memory, never correctness.
    pub expected_articles: u64,
    /// Keep a copy of every live article in this process and find candidates
    /// in it (`src/index/redis/replica.rs`): Redis then only reports what is
    /// new and runs the commit, a fraction of a check's Redis time, for about
    /// 350 bytes of this process' memory per live article and a load of the
    /// whole window when it starts. Buckets written this way keep no lookup
    /// lists, so every worker of a namespace must use the same setting (a
    /// worker of the other kind is refused with [`IndexError::Config`]).
    pub replica: bool,
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
            expected_articles: 1_000_000,
            replica: false,
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
    /// Shape bits of a bucket with no older bucket to size it by.
    default_shape: u32,
    /// Shapes of the live buckets (label → (start, bits; `None` for a bucket
    /// still listed whose counter hash has expired)); a bucket's shape never
    /// changes, so key names are computed here, not in Lua.
    shapes: Mutex<HashMap<String, (i64, Option<u32>)>>,
    /// Replica mode: the copy of the live articles, and the lock that lets one
    /// task at a time bring it up to date.
    replica: Option<ReplicaState>,
    /// This process' recent commits, which a check tests itself so that its
    /// commit need not read them back ([`own_commits`]).
    own: Mutex<OwnCommits>,
    /// Held from a commit's ticket until the command is queued on the
    /// connection, so commits reach Redis in ticket order as far as the
    /// connection keeps order: a commit that runs ahead of one with a lower
    /// ticket makes that one read the run back.
    sending: tokio::sync::Mutex<()>,
}

/// How fresh a replica is ([`ReplicaState::synced`]).
#[derive(Default)]
struct Synced {
    /// When the sync that last brought the copy up to date started (`None`:
    /// never, or this process deleted an article since, which its next check
    /// must see).
    at: Option<std::time::Instant>,
    /// Deletes this process made: a sync that saw the count change while it
    /// ran may have read the deletion log before the delete, so it leaves
    /// `at` as the delete left it.
    deletes: u64,
}

struct ReplicaState {
    copy: Mutex<Replica>,
    syncing: tokio::sync::Mutex<()>,
    /// When the copy was last brought up to date, and this process' deletes.
    synced: Mutex<Synced>,
    /// A sync runs in the background (`replicated.rs`, `sync_in_background`).
    refreshing: std::sync::atomic::AtomicBool,
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

/// This process' commits ([`own_commits`]). A panic while one was held
/// cannot leave them unsafe: at worst a check vouches for nothing.
fn own_commits(inner: &Inner) -> std::sync::MutexGuard<'_, OwnCommits> {
    inner.own.lock().unwrap_or_else(|e| e.into_inner())
}

/// A commit sent and not answered yet: if its answer never comes (an error,
/// or the check's future dropped), it may have run or not, and this process'
/// runs of inserts can no longer be vouched for ([`OwnCommits::lost`]).
struct Unanswered<'a> {
    inner: &'a Inner,
    ticket: Option<&'a Ticket>,
}

impl Unanswered<'_> {
    fn answered(mut self) {
        self.ticket = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            own_commits(self.inner).lost(ticket);
        }
    }
}

fn backend(e: ::redis::RedisError) -> IndexError {
    let text = crate::settings::with_connection_advice(&e);
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        IndexError::Unavailable(text)
    } else {
        IndexError::Backend(text)
    }
}

fn bad_reply(what: &str) -> IndexError {
    IndexError::Backend(format!("unexpected reply from Redis: {what}"))
}

/// Refuse to index into a namespace whose buckets were written with another
/// bucket length or window: its articles would be filed into overlapping
/// buckets and compared over the wrong span, which misses duplicates without
/// any error. The newest live bucket's `r` field (bucket length + window, ms,
/// written when the bucket opened) must equal ours; buckets written before
/// that field existed are not checked.
async fn check_retention(
    conn: &mut Conn,
    keys: &Keys,
    namespace: &str,
    retention_ms: u64,
) -> Result<(), IndexError> {
    let newest: Vec<String> = ::redis::cmd("ZRANGE")
        .arg(keys.buckets())
        .arg(-1)
        .arg(-1)
        .query_async(conn)
        .await
        .map_err(backend)?;
    let Some(label) = newest.first() else {
        return Ok(());
    };
    let stored: Option<u64> = ::redis::cmd("HGET")
        .arg(keys.counter(label))
        .arg("r")
        .query_async(conn)
        .await
        .map_err(backend)?;
    match stored {
        Some(r) if r != retention_ms => Err(IndexError::Config(format!(
            "namespace {:?} keeps its buckets for {} h after they start (bucket length + window; \
             `HGET {} r`), this process {} h: every process of a namespace needs the same \
             bucket_hours and decision.window_ms",
            namespace,
            r as f64 / HOUR_MS as f64,
            keys.counter(label),
            retention_ms as f64 / HOUR_MS as f64
        ))),
        _ => Ok(()),
    }
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
        match probe.config_get(keys.prefix(), "maxmemory-policy").await {
            Ok(policy) => judge_policy(&policy, options.allow_eviction)?,
            Err(e) => tracing::warn!(
                error = %e,
                "cannot read maxmemory-policy (CONFIG disabled or denied?); make sure it is noeviction"
            ),
        }
        // Index hashes hold up to 2 × ARTICLES_PER_KEY fields; above
        // hash-max-listpack-entries Redis turns them into hash tables (~3× the
        // memory). Not an error: verdicts are unaffected.
        if let Ok(Ok(entries)) = probe
            .config_get(keys.prefix(), "hash-max-listpack-entries")
            .await
            .map(|v| v.parse::<u64>())
        {
            if entries < 2 * crate::keys::ARTICLES_PER_KEY + crate::keys::ARTICLES_PER_KEY / 2 {
                tracing::warn!(
                    entries,
                    "hash-max-listpack-entries is low: index hashes of up to {} fields will become \
                     hash tables and take about 3x the memory; the default, 512, is right",
                    2 * crate::keys::ARTICLES_PER_KEY
                );
            }
        }
        let index_retention_ms = bucket_ms + config.window_ms;
        check_retention(&mut probe, &keys, namespace, index_retention_ms).await?;
        let default_shape = shape_bits(
            (u128::from(options.expected_articles) * u128::from(bucket_ms)
                / u128::from(config.window_ms.max(1)))
            .min(u128::from(u64::MAX)) as u64,
        );
        Ok(RedisIndex {
            inner: Arc::new(Inner {
                conn,
                keys,
                bucket_ms: bucket_ms as i64,
                max_attempts: options.max_attempts.max(1),
                default_shape,
                shapes: Mutex::new(HashMap::new()),
                replica: options.replica.then(|| ReplicaState {
                    copy: Mutex::new(Replica::new(config.lookup_signatures)),
                    syncing: tokio::sync::Mutex::new(()),
                    synced: Mutex::new(Synced::default()),
                    refreshing: std::sync::atomic::AtomicBool::new(false),
                }),
                own: Mutex::new(OwnCommits::default()),
                sending: tokio::sync::Mutex::new(()),
                config,
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

    /// Check `entry` (and record it when `write`), starting from `ahead`, a
    /// gather done earlier ([`Index::read_ahead`]), if given: its snapshot is
    /// validated by the commit like any other, however old.
    async fn check(
        &self,
        entry: &IndexEntry,
        write: bool,
        mut ahead: Option<Gathered>,
    ) -> Result<Outcome, IndexError> {
        if self.inner.replica.is_some() {
            return self.check_replica(entry, write).await;
        }
        let inner = &self.inner;
        let probe = Probe::new(entry, &inner.config, inner.bucket_ms, inner.default_shape);
        let mut conn = inner.conn.clone();
        // Work over all attempts (a retry reads everything again).
        let mut examined = 0u32;
        for _ in 0..inner.max_attempts {
            let gathered = match ahead.take() {
                Some(Gathered::Snapshot(s)) => Gathered::Snapshot(s),
                // A stored verdict read ahead may be stale (the id deleted
                // since, by anyone) and no commit would validate it: read again.
                Some(Gathered::Replay(_) | Gathered::Later) | None => {
                    self.gather(&mut conn, entry, &probe).await?
                }
            };
            let mut snap = match gathered {
                Gathered::Replay(stored) => {
                    return Ok(Outcome {
                        verdict: stored.verdict,
                        replayed: true,
                        examined: 0,
                    })
                }
                Gathered::Snapshot(s) => s,
                Gathered::Later => unreachable!("gathered above"),
            };
            let verdict = self.decide(&mut conn, entry, &mut snap).await?;
            examined = examined.saturating_add(snap.examined());
            if !write {
                return Ok(Outcome {
                    verdict,
                    replayed: false,
                    examined,
                });
            }
            let committed = self
                .commit(&mut conn, entry, &probe, &snap, &verdict)
                .await?;
            match self
                .settle(&mut conn, entry, committed, verdict, examined)
                .await?
            {
                Some(outcome) => return Ok(outcome),
                // A conflict, or a replay deleted in between: check again.
                None => tokio::task::yield_now().await,
            }
        }
        Err(IndexError::Contention {
            attempts: inner.max_attempts,
        })
    }

    /// The shapes of the buckets last seen live: (label, start, bits), `bits`
    /// `None` for a bucket still listed whose counter hash has expired.
    fn cached_shapes(&self) -> Vec<(String, i64, Option<u32>)> {
        let shapes = self.inner.shapes.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = shapes
            .iter()
            .map(|(label, (start, bits))| (label.clone(), *start, *bits))
            .collect();
        v.sort_unstable_by_key(|(_, start, _)| *start);
        v
    }

    /// Keep the shapes of the `live` buckets only, and learn those of live
    /// buckets not seen before (`n:L` field `k`; a bucket's shape never changes).
    async fn learn_shapes(
        &self,
        conn: &mut Conn,
        live: &[(String, i64)],
    ) -> Result<(), IndexError> {
        let unknown: Vec<&(String, i64)> = {
            let shapes = self.inner.shapes.lock().unwrap_or_else(|e| e.into_inner());
            live.iter()
                .filter(|(label, _)| !shapes.contains_key(label))
                .collect()
        };
        let mut learned = Vec::with_capacity(unknown.len());
        if !unknown.is_empty() {
            let mut pipe = ::redis::pipe();
            for (label, _) in &unknown {
                pipe.cmd("HGET")
                    .arg(self.inner.keys.counter(label))
                    .arg("k");
            }
            let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
            for ((label, start), bits) in unknown.into_iter().zip(replies) {
                let bits = match bits {
                    Value::Nil => None,
                    v => Some(
                        u32::try_from(int(Some(v))?)
                            .map_err(|_| bad_reply(&format!("shape of bucket {label}")))?,
                    ),
                };
                learned.push((label.clone(), (*start, bits)));
            }
        }
        let mut shapes = self.inner.shapes.lock().unwrap_or_else(|e| e.into_inner());
        // Forget the buckets gone from the registry, but not one newer than
        // `live` knows of, which another task may just have learned.
        let newest = live
            .iter()
            .map(|(_, start)| *start)
            .max()
            .unwrap_or(i64::MIN);
        shapes.retain(|label, (start, _)| *start > newest || live.iter().any(|(l, _)| l == label));
        shapes.extend(learned);
        Ok(())
    }

    /// The first round trip of a check, plain pipelined commands (the same
    /// reads in a Lua script cost Redis ≈ 20 % more CPU: `docs/design.md`):
    /// the live buckets, each one's counter and the id in it, then, in each
    /// bucket that can hold a match, the content list, the sketch lists and the
    /// block sets. The counters come first, so every list and set read reflects
    /// at least the inserts they count; commit.lua validates the rest. Key names
    /// come from the cached bucket shapes; a live bucket not cached yet costs
    /// one more round trip to learn its shape, then the gather is redone.
    async fn gather(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        probe: &Probe,
    ) -> Result<Gathered, IndexError> {
        let keys = &self.inner.keys;
        let fp = &entry.fingerprint;
        for _ in 0..3 {
            let cached = self.cached_shapes();
            // The shape of a bucket to probe, None when it cannot hold a match.
            let probed = |start: i64, bits: Option<u32>| {
                bits.filter(|_| !fp.is_empty() && (probe.lo..=probe.hi).contains(&start))
            };
            let mut pipe = ::redis::pipe();
            pipe.cmd("ZRANGE")
                .arg(keys.buckets())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
            for (label, _, _) in &cached {
                pipe.cmd("HGET").arg(keys.counter(label)).arg("n");
            }
            for (label, _, bits) in &cached {
                if let Some(bits) = bits {
                    pipe.cmd("HGET")
                        .arg(keys.ids(label, *bits, &entry.id))
                        .arg(&entry.id);
                }
            }
            for (label, start, bits) in &cached {
                let Some(bits) = probed(*start, *bits) else {
                    continue;
                };
                let (key, field) = keys.content(label, bits, probe.content);
                pipe.cmd("HGET").arg(key).arg(field);
                if *label == probe.label {
                    // The own SimHash's h: list, which the commit appends to.
                    let (key, field) = keys.simhashes(label, bits, fp.simhash);
                    pipe.cmd("HGET").arg(key).arg(field);
                }
                for s in &probe.signatures {
                    let (key, field) = keys.signature(label, bits, *s);
                    pipe.cmd("HGET").arg(key).arg(field);
                }
                for name in BlockSets::new(probe, bits).names(keys, label, probe) {
                    pipe.cmd("SMEMBERS").arg(name);
                }
            }
            // This process' commits answered by now ran before these reads:
            // the counters read count them.
            let horizon = own_commits(&self.inner).horizon(|_| Some(u64::MAX));
            let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
            let mut it = replies.into_iter();
            let live = parse_live(it.next())?;
            if live
                .iter()
                .any(|(label, _)| !cached.iter().any(|(l, _, _)| l == label))
            {
                self.learn_shapes(conn, &live).await?;
                continue;
            }
            if cached.len() != live.len() {
                self.learn_shapes(conn, &live).await?;
            }

            let mut read: HashMap<&str, BucketSnap> = HashMap::with_capacity(cached.len());
            for (label, start, _) in &cached {
                read.insert(
                    label,
                    BucketSnap {
                        label: label.clone(),
                        start: *start,
                        counter: string(it.next())?,
                        bits: None,
                        in_range: false,
                        members: Vec::new(),
                        empty_sets: String::new(),
                        content_value: Vec::new(),
                        signature_values: Vec::new(),
                        resolved: Vec::new(),
                        cands: Vec::new(),
                        full: None,
                    },
                );
            }
            let mut stored: HashMap<&str, Vec<u8>> = HashMap::new();
            for (label, _, bits) in &cached {
                if bits.is_some() {
                    let v = bytes(it.next())?;
                    if !v.is_empty() {
                        stored.insert(label, v);
                    }
                }
            }
            for (label, start, bits) in &cached {
                let Some(bits) = probed(*start, *bits) else {
                    continue;
                };
                let b = read.get_mut(label.as_str()).expect("every cached bucket");
                b.content_value = bytes(it.next())?;
                if *label == probe.label {
                    let (key, field) = keys.simhashes(label, bits, fp.simhash);
                    b.resolved.push((key, field, bytes(it.next())?));
                }
                for _ in &probe.signatures {
                    b.signature_values.push(bytes(it.next())?);
                }
                let sets = BlockSets::new(probe, bits);
                for _ in 0..sets.count {
                    b.members.push(
                        array(it.next().unwrap_or(Value::Nil))?
                            .into_iter()
                            .map(|m| {
                                parse_simhash_member(&bytes(Some(m))?).ok_or_else(|| {
                                    bad_reply("a block set member is not an integer")
                                })
                            })
                            .collect::<Result<Vec<u64>, _>>()?,
                    );
                }
                b.empty_sets = sets.empty_flags(probe, &b.members);
                b.in_range = !b.counter.is_empty();
                b.bits = Some(bits);
            }
            // Already stored (a redelivery): its verdict, from the first live
            // bucket that has it.
            // (Deleted between the two reads: checked as a new article.)
            if let Some((label, start, value)) = live
                .iter()
                .find_map(|(l, s)| stored.remove(l.as_str()).map(|v| (l, *s, v)))
            {
                if let Some(stored) = self
                    .fetch_stored(conn, &entry.id, label, start, value)
                    .await?
                {
                    return Ok(Gathered::Replay(stored));
                }
            }
            let buckets = live
                .iter()
                .map(|(label, _)| {
                    read.remove(label.as_str())
                        .expect("every live bucket is cached")
                })
                .collect();
            return Ok(Gathered::Snapshot(Snapshot {
                buckets,
                horizon: Some(horizon),
                root_label: None,
            }));
        }
        Err(bad_reply("bucket shapes keep changing"))
    }

    /// The stored article behind `i:` value `value` of bucket `label`.
    async fn fetch_stored(
        &self,
        conn: &mut Conn,
        id: &str,
        label: &str,
        start: i64,
        value: Vec<u8>,
    ) -> Result<Option<Stored>, IndexError> {
        let keys = &self.inner.keys;
        let (_, handle) = decode_id_value(&value).map_err(|reason| IndexError::Corrupt {
            id: id.to_owned(),
            reason,
        })?;
        let mut pipe = ::redis::pipe();
        pipe.cmd("HGET")
            .arg(keys.fingerprints(label, handle))
            .arg(slot(handle));
        pipe.cmd("HGET")
            .arg(keys.metas(label, handle))
            .arg(slot(handle));
        let mut v: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
        // Deleted in between (no entries, or emptied ones: delete.lua).
        if v.iter()
            .any(|r| matches!(r, Value::Nil) || matches!(r, Value::BulkString(b) if b.is_empty()))
        {
            return Ok(None);
        }
        v.splice(
            0..0,
            [
                Value::BulkString(label.as_bytes().to_vec()),
                Value::Int(start),
                Value::BulkString(value),
            ],
        );
        parse_stored(id, v).map(Some)
    }

    /// The articles behind what the gather read, by plain pipelined `HGET`s:
    /// the handles listed under the content and sketch hashes, and the block
    /// set members within `max_distance` (their `h:` lists, then the articles
    /// those name: one more round trip, only when there are such members).
    /// A handle with no fingerprint is a deleted article's tombstone: skipped.
    async fn fetch_candidates(
        &self,
        conn: &mut Conn,
        fp: &Fingerprint,
        snap: &mut Snapshot,
    ) -> Result<(), IndexError> {
        let keys = &self.inner.keys;
        let max = self.inner.config.max_distance;
        // Per bucket: h: (key, field) of the near SimHashes, handles to fetch.
        let mut near: Vec<Vec<(String, String)>> = Vec::with_capacity(snap.buckets.len());
        let mut wanted: Vec<Vec<u64>> = Vec::with_capacity(snap.buckets.len());
        for b in &snap.buckets {
            let (mut fields, mut handles) = (Vec::new(), Vec::new());
            if let (Some(bits), true) = (b.bits, b.in_range) {
                let mut seen: Vec<u64> = Vec::new();
                for &m in b.members.iter().flatten() {
                    if hamming(fp.simhash, m) <= max && !seen.contains(&m) {
                        seen.push(m);
                        fields.push(keys.simhashes(&b.label, bits, m));
                    }
                }
                for list in std::iter::once(&b.content_value).chain(&b.signature_values) {
                    for h in parse_handles(list) {
                        if !handles.contains(&h) {
                            handles.push(h);
                        }
                    }
                }
            }
            near.push(fields);
            wanted.push(handles);
        }
        if near.iter().all(Vec::is_empty) && wanted.iter().all(Vec::is_empty) {
            return Ok(());
        }
        let mut pipe = ::redis::pipe();
        for (key, field) in near.iter().flatten() {
            pipe.cmd("HGET").arg(key).arg(field);
        }
        ask_articles(&mut pipe, keys, snap, &wanted);
        let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
        let mut it = replies.into_iter();
        // Handles named by the h: lists and not fetched yet.
        let mut more: Vec<Vec<u64>> = vec![Vec::new(); snap.buckets.len()];
        for (n, fields) in near.into_iter().enumerate() {
            for (key, field) in fields {
                let value = bytes(it.next())?;
                for h in parse_handles(&value) {
                    if !wanted[n].contains(&h) && !more[n].contains(&h) {
                        more[n].push(h);
                    }
                }
                snap.buckets[n].resolved.push((key, field, value));
            }
        }
        take_articles(&mut it, snap, &wanted)?;
        if more.iter().all(Vec::is_empty) {
            return Ok(());
        }
        let mut pipe = ::redis::pipe();
        ask_articles(&mut pipe, keys, snap, &more);
        let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
        take_articles(&mut replies.into_iter(), snap, &more)
    }

    /// Compute distances and decide, exactly as the embedded index does: the
    /// candidates are fetched first ([`RedisIndex::fetch_candidates`]).
    async fn decide(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        snap: &mut Snapshot,
    ) -> Result<Verdict, IndexError> {
        let cfg = &self.inner.config;
        let fp = &entry.fingerprint;
        if fp.is_empty() {
            return Ok(Verdict::Unique);
        }
        self.fetch_candidates(conn, fp, snap).await?;
        let all: Vec<&Cand> = snap.buckets.iter().flat_map(|b| &b.cands).collect();
        let verdict = verdict_among(entry, all, cfg);
        snap.root_label = root_label(&verdict, snap.buckets.iter().flat_map(|b| &b.cands));
        Ok(verdict)
    }

    /// What a commit's answer means for the check: its outcome, or `None` to
    /// check again (a conflict, or a replay whose article was deleted since).
    async fn settle(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        committed: Committed,
        verdict: Verdict,
        examined: u32,
    ) -> Result<Option<Outcome>, IndexError> {
        Ok(match committed {
            Committed::Ok(_) | Committed::Expired => Some(Outcome {
                verdict,
                replayed: false,
                examined,
            }),
            Committed::Replay => self.lookup(conn, &entry.id).await?.map(|stored| Outcome {
                verdict: stored.verdict,
                replayed: true,
                examined: 0,
            }),
            Committed::Retry => None,
        })
    }

    /// Commit the check of `entry` that read `snap` and decided `verdict`,
    /// with a ticket among this process' commits, vouching for those sent
    /// since the check's horizon when none of them can change its decision
    /// ([`own_commits`]).
    async fn commit(
        &self,
        conn: &mut Conn,
        entry: &IndexEntry,
        probe: &Probe,
        snap: &Snapshot,
        verdict: &Verdict,
    ) -> Result<Committed, IndexError> {
        let Some(horizon) = snap.horizon else {
            let inv = self.commit_invocation(entry, probe, Some(snap), verdict, None);
            return self.invoke_commit(conn, &entry.id, inv).await;
        };
        let scopes = snap
            .buckets
            .iter()
            .map(|b| {
                let scope = if b.in_range {
                    Scope::Probed {
                        full: b.full_lists(),
                    }
                } else {
                    Scope::IdOnly
                };
                (b.label.clone(), scope)
            })
            .collect();
        let tokens = Tokens::of(
            &entry.id,
            &entry.fingerprint,
            self.inner.config.lookup_signatures,
        );
        let sending = self.inner.sending.lock().await;
        let ticket = own_commits(&self.inner).send(horizon, &probe.label, tokens, &scopes);
        let unanswered = Unanswered {
            inner: &self.inner,
            ticket: Some(&ticket),
        };
        let committed = {
            let inv = self.commit_invocation(entry, probe, Some(snap), verdict, Some(&ticket));
            let mut commit = std::pin::pin!(self.invoke_commit(conn, &entry.id, inv));
            // The first poll queues the command on the connection (the
            // connection future is ready, the queue has room): the next
            // ticket waits until then, not for the answer.
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(commit.as_mut(), cx))
            })
            .await;
            drop(sending);
            match first {
                std::task::Poll::Ready(answer) => answer,
                std::task::Poll::Pending => commit.await,
            }?
        };
        unanswered.answered();
        let mut own = own_commits(&self.inner);
        match committed {
            Committed::Ok(handle) => own.answered(&ticket, Some(handle)),
            Committed::Expired | Committed::Retry => own.answered(&ticket, None),
            // The id is stored: by another check, or by this very commit run
            // twice (a connection that sends a request again after an error),
            // whose handle this process would then never file. Rare: forget.
            Committed::Replay => own.lost(&ticket),
        }
        drop(own);
        Ok(committed)
    }

    /// Run commit.lua for the article `id` and read its answer.
    async fn invoke_commit(
        &self,
        conn: &mut Conn,
        id: &str,
        inv: ::redis::ScriptInvocation<'_>,
    ) -> Result<Committed, IndexError> {
        let reply: Value = inv.invoke_async(conn).await.map_err(backend)?;
        let mut it = array(reply)?.into_iter();
        Ok(match string(it.next())?.as_str() {
            "ok" => Committed::Ok(
                u64::try_from(int(it.next())?).map_err(|_| bad_reply("a negative handle"))?,
            ),
            "expired" => Committed::Expired,
            "replay" => Committed::Replay,
            "mode" => {
                let label = string(it.next()).unwrap_or_default();
                let (theirs, ours) = if self.inner.replica.is_some() {
                    ("keeping lookup lists (replica off)", "replica on")
                } else {
                    ("in replica mode (no lookup lists)", "replica off")
                };
                return Err(IndexError::Config(format!(
                    "bucket {label} ({}n:{label}) was written by workers {theirs}, and this \
                     one runs with {ours}: every worker of a namespace must use the same \
                     `replica` setting (or use a new namespace)",
                    self.inner.keys.prefix()
                )));
            }
            "retry" => {
                tracing::trace!(id = %id, reason = %string(it.next()).unwrap_or_default(), "commit conflict, retrying");
                Committed::Retry
            }
            other => return Err(bad_reply(other)),
        })
    }

    /// The commit.lua call for `entry`; `snap: None` is a bulk preload (no
    /// validation at all: see [`RedisIndex::preload`]); `ticket`: replica
    /// mode's place among this process' commits ([`own_commits`]).
    fn commit_invocation<'a>(
        &'a self,
        entry: &IndexEntry,
        probe: &Probe,
        snap: Option<&Snapshot>,
        verdict: &Verdict,
        ticket: Option<&Ticket>,
    ) -> ::redis::ScriptInvocation<'a> {
        let inner = &self.inner;
        let keys = &inner.keys;
        let fp = &entry.fingerprint;
        let offset = u32::try_from(entry.ts_ms - probe.start)
            .expect("a bucket is shorter than 2^32 ms (checked at connect)");
        let mut inv = COMMIT.key(keys.buckets());
        let retention = inner.bucket_ms as u64 + inner.config.window_ms;
        let expire_at = (probe.start as u64 + retention).div_ceil(1000);
        let root = verdict.duplicate().map_or("", |d| d.dup_of.as_str());
        let root_hash = if root.is_empty() {
            String::new()
        } else {
            id_hash_hex(root)
        };
        let lists = inner.replica.is_none();
        inv.arg(keys.prefix())
            .arg(&entry.id)
            .arg(id_hash_hex(&entry.id))
            .arg(&probe.label)
            .arg(probe.start)
            .arg(retention)
            .arg(expire_at)
            .arg(&probe.simhash_hex)
            .arg(simhash_member(fp.simhash))
            .arg(encode_fingerprint(fp))
            .arg(encode_meta(&entry.id, verdict, offset, fp.words))
            .arg(&probe.content_hex)
            .arg(root)
            .arg(root_hash)
            .arg(snap.and_then(|s| s.root_label.as_deref()).unwrap_or(""))
            .arg(probe.default_shape)
            .arg(probe.signatures.len())
            .arg(if lists { "1" } else { "0" });
        // The own bucket as the gather read it (its values are appended to).
        let own = snap.and_then(|snap| {
            snap.buckets
                .iter()
                .find(|b| b.label == probe.label && b.in_range)
        });
        // With lists: the h: list read for this SimHash there.
        let own_list = own.filter(|_| lists).map(|b| self.simhash_list(b, fp));
        match own {
            Some(b) => {
                // An h: field names SimHashes by some of their bits only
                // (list_field): a full list may name none with this SimHash,
                // and then this article must be listed anyway, or a later
                // near-duplicate of it would find it through no list.
                let force = own_list.as_ref().is_some_and(|(_, _, hval)| {
                    parse_handles(hval).count() >= super::LISTED_PER_HASH
                        && !b.cands.iter().any(|c| c.fp.simhash == fp.simhash)
                });
                inv.arg(b.bits.expect("in range buckets have a shape"))
                    .arg(format!("{}{}", b.empty_sets, u8::from(force)))
            }
            None => inv.arg("").arg(""),
        };
        if lists {
            inv.arg(&probe.content_field);
            for s in &probe.signatures {
                inv.arg(format!("{s:08x}"));
            }
            if let (Some(b), Some((hkey, hfield, hval))) = (own, own_list) {
                let bits = b.bits.expect("in range buckets have a shape");
                inv.arg(hkey)
                    .arg(hfield)
                    .arg(hval)
                    .arg(keys.content(&b.label, bits, probe.content).0)
                    .arg(&b.content_value);
                for (s, value) in probe.signatures.iter().zip(&b.signature_values) {
                    let (key, field) = keys.signature(&b.label, bits, *s);
                    inv.arg(key).arg(field).arg(value);
                }
            }
        }
        match snap {
            None => {
                inv.arg(-1);
            }
            Some(snap) => {
                for b in &snap.buckets {
                    inv.arg(&b.label)
                        .arg(&b.counter)
                        .arg(u8::from(b.in_range))
                        .arg(b.full_lists());
                }
            }
        }
        match ticket {
            Some(t) => inv.arg(&t.token).arg(t.seq).arg(u8::from(t.vouch)),
            None => inv.arg("").arg("").arg("0"),
        };
        inv
    }

    /// The `h:` key and field of `fp`'s SimHash in bucket `b`, and the value
    /// the gather read there.
    fn simhash_list<'b>(&self, b: &'b BucketSnap, fp: &Fingerprint) -> (String, String, &'b [u8]) {
        let bits = b.bits.expect("in range buckets have a shape");
        let (hkey, hfield) = self.inner.keys.simhashes(&b.label, bits, fp.simhash);
        let hval = b
            .resolved
            .iter()
            .find(|(k, f, _)| *k == hkey && *f == hfield)
            .map_or(&[][..], |(_, _, v)| v.as_slice());
        (hkey, hfield, hval)
    }

    /// **Benchmarks only**: store `entries` as unique articles without checking
    /// them (no gather, no decision, no concurrency control), pipelined. Fills an
    /// index to a size quickly so that real checks can be measured against it;
    /// never use it on an index that serves verdicts.
    #[doc(hidden)]
    pub async fn preload(&self, entries: &[IndexEntry]) -> Result<(), IndexError> {
        let mut conn = self.inner.conn.clone();
        COMMIT.load_async(&mut conn).await.map_err(backend)?;
        let mut pipe = ::redis::pipe();
        for entry in entries {
            let probe = Probe::new(
                entry,
                &self.inner.config,
                self.inner.bucket_ms,
                self.inner.default_shape,
            );
            pipe.invoke_script(&self.commit_invocation(
                entry,
                &probe,
                None,
                &Verdict::Unique,
                None,
            ))
            .ignore();
        }
        pipe.query_async::<()>(&mut conn).await.map_err(backend)
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
    let packed = bytes(it.next())?;
    let meta = decode_meta(&bytes(it.next())?).map_err(corrupt)?;
    let fingerprint = decode_fingerprint(&packed, meta.words).map_err(corrupt)?;
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
        ts_ms: start + i64::from(meta.ts_offset),
        fingerprint,
        verdict: meta.verdict,
        links,
    })
}

/// The verdict on `entry` among `cands` (any order, repeats allowed), as the
/// embedded index gives it: [`decide`] over them in (bucket, handle) order,
/// and a duplicate linked to its match's root.
fn verdict_among(entry: &IndexEntry, mut cands: Vec<&Cand>, cfg: &DecisionConfig) -> Verdict {
    if entry.fingerprint.is_empty() {
        return Verdict::Unique;
    }
    cands.sort_unstable_by(|a, b| (&a.label, a.handle).cmp(&(&b.label, b.handle)));
    cands.dedup_by(|a, b| a.label == b.label && a.handle == b.handle);
    let views = cands.iter().map(|c| CandidateView {
        id: &c.meta.id,
        simhash: c.fp.simhash,
        content: c.fp.content,
        signatures: &c.fp.signatures,
        ts_ms: c.ts_ms,
    });
    match decide(&entry.fingerprint, entry.ts_ms, views, cfg) {
        None => Verdict::Unique,
        Some(m) => {
            let root = cands
                .iter()
                .find(|c| c.meta.id == m.id)
                .and_then(|c| c.meta.verdict.duplicate().map(|d| d.dup_of.clone()));
            Verdict::from_match(m, root.as_deref())
        }
    }
}

/// The bucket of a duplicate's root when it is among `cands` (usually: the
/// match is its own root), so commit.lua looks for the root there first.
fn root_label<'a>(verdict: &Verdict, mut cands: impl Iterator<Item = &'a Cand>) -> Option<String> {
    let root = &verdict.duplicate()?.dup_of;
    cands.find(|c| &c.meta.id == root).map(|c| c.label.clone())
}

/// A candidate article: read from Redis, or found in a replica.
pub(crate) struct Cand {
    label: String,
    handle: u64,
    fp: Fingerprint,
    ts_ms: i64,
    meta: Meta,
}

/// `HGET` the packed fingerprint and the meta of `handles[n]` of bucket `n`.
fn ask_articles(pipe: &mut ::redis::Pipeline, keys: &Keys, snap: &Snapshot, handles: &[Vec<u64>]) {
    for (b, handles) in snap.buckets.iter().zip(handles) {
        for &h in handles {
            pipe.cmd("HGET")
                .arg(keys.fingerprints(&b.label, h))
                .arg(slot(h));
            pipe.cmd("HGET").arg(keys.metas(&b.label, h)).arg(slot(h));
        }
    }
}

/// The candidates [`ask_articles`] asked for, from its replies.
fn take_articles(
    replies: &mut impl Iterator<Item = Value>,
    snap: &mut Snapshot,
    handles: &[Vec<u64>],
) -> Result<(), IndexError> {
    for (b, handles) in snap.buckets.iter_mut().zip(handles) {
        for &h in handles {
            push_cand(b, h, replies.next(), replies.next())?;
        }
    }
    Ok(())
}

/// The candidate behind `handle` of bucket `b`, from its `HGET f:` and `HGET
/// m:` replies; nothing for a deleted article (no fingerprint left).
fn push_cand(
    b: &mut BucketSnap,
    handle: u64,
    packed: Option<Value>,
    meta: Option<Value>,
) -> Result<(), IndexError> {
    let packed = bytes(packed)?;
    let meta = bytes(meta)?;
    // Deleted (before or between the two reads): a tombstone, skipped.
    if packed.is_empty() || meta.is_empty() {
        return Ok(());
    }
    let corrupt = |reason: String| IndexError::Corrupt {
        id: format!("{}:{handle}", b.label),
        reason,
    };
    let meta = decode_meta(&meta).map_err(corrupt)?;
    let fp = decode_fingerprint(&packed, meta.words).map_err(corrupt)?;
    b.cands.push(Cand {
        label: b.label.clone(),
        handle,
        fp,
        ts_ms: b.start + i64::from(meta.ts_offset),
        meta,
    });
    Ok(())
}

/// The bucket registry (`ZRANGE … WITHSCORES`): (label, start), oldest first.
fn parse_live(v: Option<Value>) -> Result<Vec<(String, i64)>, IndexError> {
    let mut out = Vec::new();
    let mut it = array(v.unwrap_or(Value::Nil))?.into_iter();
    while let Some(label) = it.next() {
        out.push((string(Some(label))?, int(it.next())?));
    }
    Ok(out)
}

/// Where an article is looked up and written.
struct Probe {
    label: String,
    start: i64,
    /// Starts of the first and last bucket that can hold an article in the window.
    lo: i64,
    hi: i64,
    /// The distinct 16-bit blocks of the SimHash.
    block_values: Vec<u16>,
    /// The four blocks by position (most significant first), and as 16 hex.
    positional: [u16; 4],
    simhash_hex: String,
    /// 16 hex and the `c:` field ([`list_field`]), or "" for an empty
    /// fingerprint (never compared, never indexed).
    content_hex: String,
    content_field: String,
    content: u64,
    /// The lookup signatures.
    signatures: Vec<u32>,
    /// Shape of a new bucket when no older bucket tells its size.
    default_shape: u32,
}

impl Probe {
    fn new(entry: &IndexEntry, cfg: &DecisionConfig, bucket_ms: i64, default_shape: u32) -> Probe {
        let floor = |t: i64| t.div_euclid(bucket_ms) * bucket_ms;
        let window = i64::try_from(cfg.window_ms).unwrap_or(i64::MAX);
        let fp = &entry.fingerprint;
        let start = floor(entry.ts_ms);
        let (content_hex, content_field, signatures) = if fp.is_empty() {
            (String::new(), String::new(), Vec::new())
        } else {
            (
                format!("{:016x}", fp.content),
                list_field(fp.content),
                fp.lookup_signatures(cfg.lookup_signatures).to_vec(),
            )
        };
        let mut block_values: Vec<u16> = Vec::with_capacity(4);
        for b in crate::simhash::blocks(fp.simhash) {
            if !block_values.contains(&b) {
                block_values.push(b);
            }
        }
        let positional = crate::simhash::blocks(fp.simhash);
        Probe {
            positional,
            simhash_hex: format!("{:016x}", fp.simhash),
            label: bucket_label(start),
            start,
            lo: floor(entry.ts_ms.saturating_sub(window)),
            hi: floor(entry.ts_ms.saturating_add(window)),
            block_values,
            content_hex,
            content_field,
            content: fp.content,
            signatures,
            default_shape,
        }
    }
}

/// Which block sets a check reads in one bucket: one per distinct block value
/// when the bucket's four positions share sets, one per position otherwise
/// ([`Keys::block`]).
#[derive(Default)]
struct BlockSets {
    positional: bool,
    count: usize,
}

impl BlockSets {
    fn new(probe: &Probe, bits: u32) -> BlockSets {
        let positional = bits >= crate::keys::POSITIONAL_BLOCK_BITS;
        BlockSets {
            positional,
            count: if positional {
                4
            } else {
                probe.block_values.len()
            },
        }
    }

    fn names(&self, keys: &Keys, label: &str, probe: &Probe) -> Vec<String> {
        let bits = if self.positional {
            crate::keys::POSITIONAL_BLOCK_BITS
        } else {
            0
        };
        if self.positional {
            (0..4)
                .map(|p| keys.block(label, bits, p, probe.positional[p]))
                .collect()
        } else {
            probe
                .block_values
                .iter()
                .map(|&v| keys.block(label, bits, 0, v))
                .collect()
        }
    }

    /// '1' per block position whose set was read empty.
    fn empty_flags(&self, probe: &Probe, members: &[Vec<u64>]) -> String {
        (0..4)
            .map(|p| {
                let set = if self.positional {
                    Some(p)
                } else {
                    probe
                        .block_values
                        .iter()
                        .position(|&v| v == probe.positional[p])
                };
                let empty = set.and_then(|s| members.get(s)).is_none_or(Vec::is_empty);
                if empty {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    }
}

enum Gathered {
    Replay(Stored),
    Snapshot(Snapshot),
    /// Nothing read ahead (replica mode: the copy is brought up to date at the
    /// check's turn, one round trip for all the checks then waiting).
    Later,
}

/// A check's first round trip, read ahead of its turn ([`Index::read_ahead`]).
pub struct ReadAhead(Gathered);

struct Snapshot {
    buckets: Vec<BucketSnap>,
    /// Which of this process' commits the check must test to vouch for them
    /// ([`own_commits`]); `None`: no vouching.
    horizon: Option<Horizon>,
    /// The bucket holding the root of the duplicate decided, when known
    /// ([`root_label`]).
    root_label: Option<String>,
}

impl Snapshot {
    /// Block set members read plus stored articles fetched (`Outcome::examined`).
    fn examined(&self) -> u32 {
        let n: usize = self
            .buckets
            .iter()
            .map(|b| b.members.iter().map(Vec::len).sum::<usize>() + b.cands.len())
            .sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// What a check read in one live bucket ([`RedisIndex::gather`],
/// [`RedisIndex::fetch_candidates`]), with the versions
/// commit.lua re-checks.
struct BucketSnap {
    label: String,
    start: i64,
    counter: String,
    bits: Option<u32>,
    /// Probed (inside the window, non-empty fingerprint); else only the counter
    /// matters (to re-check the id).
    in_range: bool,
    /// Members of each block set read ([`BlockSets`]).
    members: Vec<Vec<u64>>,
    /// Per block position, '1' if its set was empty (commit.lua then gives the
    /// set created by the insert its expiry).
    empty_sets: String,
    content_value: Vec<u8>,
    signature_values: Vec<Vec<u8>>,
    /// `h:` (key, field, value) of the SimHashes resolved.
    resolved: Vec<(String, String, Vec<u8>)>,
    cands: Vec<Cand>,
    /// Which lists were full, when known otherwise than from the values read
    /// (replica mode: from the copy's lists); see [`BucketSnap::full_lists`].
    full: Option<String>,
}

impl BucketSnap {
    /// Which lists read in this bucket were full ('1'): the content list, then
    /// each sketch list. A full list is never appended to, so an insert that
    /// shares only its hash changes nothing this check read: commit.lua does
    /// not count it as a conflict (a boilerplate line shared by thousands of
    /// articles would otherwise make checks retry for nothing).
    fn full_lists(&self) -> String {
        if !self.in_range {
            return String::new();
        }
        if let Some(full) = &self.full {
            return full.clone();
        }
        std::iter::once(&self.content_value)
            .chain(&self.signature_values)
            .map(|v| {
                if parse_handles(v).count() >= super::LISTED_PER_HASH {
                    '1'
                } else {
                    '0'
                }
            })
            .collect()
    }
}

enum Committed {
    /// Stored, under this handle of the article's bucket.
    Ok(u64),
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
        super::require_id(&entry.id)?;
        self.check(entry, true, None).await
    }

    type ReadAhead = ReadAhead;

    async fn read_ahead(&self, entry: &IndexEntry) -> Result<ReadAhead, IndexError> {
        super::require_id(&entry.id)?;
        let inner = &self.inner;
        if inner.replica.is_some() {
            return Ok(ReadAhead(Gathered::Later));
        }
        let probe = Probe::new(entry, &inner.config, inner.bucket_ms, inner.default_shape);
        let mut conn = inner.conn.clone();
        Ok(ReadAhead(self.gather(&mut conn, entry, &probe).await?))
    }

    async fn check_and_insert_after(
        &self,
        entry: &IndexEntry,
        ahead: ReadAhead,
    ) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        self.check(entry, true, Some(ahead.0)).await
    }

    async fn query(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        self.check(entry, false, None).await
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
        if let Some(state) = &self.inner.replica {
            // This process' next check reads the deletion log first, in a sync
            // that starts after this point.
            let mut synced = state.synced.lock().unwrap_or_else(|e| e.into_inner());
            synced.at = None;
            synced.deletes += 1;
        }
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
                    .arg(slot(*h));
            }
            let metas: Vec<Option<Vec<u8>>> = pipe.query_async(&mut conn).await.map_err(backend)?;
            let mut seen: HashMap<String, ()> = HashMap::new();
            // A deleted duplicate's meta is gone or empty (delete.lua).
            for meta in metas.into_iter().flatten().filter(|m| !m.is_empty()) {
                let Meta {
                    id: dup, verdict, ..
                } = decode_meta(&meta).map_err(|reason| IndexError::Corrupt {
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
        let p = Probe::new(&entry, &DecisionConfig::default(), day, 3);
        assert_eq!((p.start, p.lo, p.hi), (10 * day, 8 * day, 12 * day));
        assert_eq!(p.block_values, [0x0001, 0x0002, 0x0003, 0xabcd]);
        assert_eq!(
            (p.content_hex.as_str(), p.content_field.as_str()),
            ("0000000000000007", "7")
        );
        assert_eq!(p.signatures, [1]);
        assert_eq!(p.label, "1970011100");
        // Repeated blocks are probed once.
        let same = IndexEntry {
            fingerprint: Fingerprint {
                simhash: 0xabcd_abcd_0001_abcd,
                ..entry.fingerprint.clone()
            },
            ..entry.clone()
        };
        let p = Probe::new(&same, &DecisionConfig::default(), day, 3);
        assert_eq!(p.block_values, [0xabcd, 0x0001]);
        let empty = IndexEntry {
            fingerprint: Fingerprint {
                words: 0,
                ..entry.fingerprint.clone()
            },
            ..entry
        };
        let p = Probe::new(&empty, &DecisionConfig::default(), day, 3);
        assert!(p.content_hex.is_empty() && p.signatures.is_empty());
    }
}
