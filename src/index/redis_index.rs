//! The Redis index: the shared truth of every worker.
//!
//! Same behaviour as [`EmbeddedIndex`](super::EmbeddedIndex) (one conformance
//! suite holds both to it), with the state in Redis so any number of workers on
//! any number of machines share it. The key schema is in `docs/redis-keys.md`,
//! the reasoning in `docs/design.md`; in short:
//!
//! - Articles live in **time buckets** (default 24 h, by the article's own
//!   timestamp). Every key of a bucket expires at bucket end + window, so nothing
//!   outlives window + one bucket, and no key is written forever.
//! - Inside a bucket an article gets a small integer **handle**; block sets
//!   hold handles (intsets), `i:` maps id → SimHash + handle, the `a:`
//!   lists handle → packed fingerprint, id and verdict.
//! - Every process keeps a **view** of the live articles in memory
//!   (`view.rs`) and finds candidates there; before deciding it catches up
//!   with what was inserted or deleted since (`catch_up.rs`).
//! - A **check** (`check.rs`) decides from the view and commits (`commit.rs`,
//!   `lua/commit.lua`): the commit stores the article only if nothing
//!   inserted since the view could meet it ([`crate::index::meet`]);
//!   otherwise the process catches up and decides again. Redis never scans
//!   candidates.
//! - What is checked at connect (eviction policy, retention, key layout) is
//!   in `safety.rs`.
//!
//! Scripts are sent with EVALSHA and reloaded on `NOSCRIPT` by [`redis::Script`].
//!
//! [`RedisIndex`]'s methods live in three files: here, connecting and what
//! reads by id (the [`Index`] methods but the check, tools' reads); the check
//! and its commit in `check.rs`; the view's catch-up in `catch_up.rs`.

mod catch_up;
mod check;
pub(crate) mod codec;
mod commit;
mod safety;
mod view;

pub use codec::{
    decode_article, decode_fingerprint, decode_id_value, decode_meta, decode_stored,
    encode_article, encode_fingerprint, encode_meta, DecodeError, Meta,
};

use std::sync::{Arc, LazyLock, Mutex};

use redis::Script;

use self::check::{CheckKind, FirstDecision};
use self::view::{Place, View};
use super::{
    Cluster, Deletion, Index, IndexEntry, IndexError, Outcome, Receipt, StoredArticle, StoredError,
    Verdict,
};
use crate::connect::{Conn, ConnectOptions};
use crate::decision::DecisionConfig;
use crate::fingerprint::Fingerprint;
use crate::keys::{bucket_start_of, shape_bits, slot, validate_namespace, Keys};

/// An index script: the constants it shares with Rust
/// ([`crate::keys::lua_constants`]), `lua/prelude.lua` (helpers the scripts
/// share), then the script's own text, loaded as one script.
macro_rules! index_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(&format!(
                "{}{}{}",
                crate::keys::lua_constants(),
                include_str!("../../lua/prelude.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}

static COMMIT: LazyLock<Script> = index_script!("commit.lua");
static LOOKUP: LazyLock<Script> = index_script!("lookup.lua");
static DELETE: LazyLock<Script> = index_script!("delete.lua");
static CATCH_UP: LazyLock<Script> = index_script!("catch_up.lua");

const HOUR_MS: u64 = 3600 * 1000;

/// How to reach and use Redis. Every worker of a namespace must use the same
/// `bucket_ms` (and the same [`DecisionConfig::window_ms`]).
#[derive(Debug, Clone)]
pub struct RedisIndexOptions {
    /// Length of a time bucket, a whole number of hours (default: half the window,
    /// at least 1 h, i.e. 24 h for the 48 h window). Keys live until bucket end +
    /// window. Shorter buckets expire data sooner but cost a fixed ~45 MB per
    /// live bucket in block sets (see `docs/design.md`).
    pub bucket_ms: Option<u64>,
    /// Topology and timeouts. A timed-out check is reported as
    /// [`IndexError::Unavailable`] and may be retried (checks are idempotent).
    pub connect: ConnectOptions,
    /// Accept `maxmemory-policy allkeys-*`, under which Redis may evict index
    /// keys and silently forget articles. Off by default: connecting fails.
    pub allow_eviction: bool,
    /// Optimistic rounds before giving up with [`IndexError::Contention`].
    pub max_attempts: u32,
    /// Articles expected per window, used only to shape a namespace's first
    /// bucket (how finely its `i:` hashes and block sets are split, see
    /// `docs/redis-keys.md`); later buckets are shaped by the size of the bucket
    /// before them. A wrong guess costs memory, never correctness.
    pub expected_articles: u64,
}

impl Default for RedisIndexOptions {
    fn default() -> Self {
        Self {
            bucket_ms: None,
            connect: ConnectOptions::default(),
            allow_eviction: false,
            max_attempts: 64,
            expected_articles: 1_000_000,
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
    /// The view of the live articles, and the lock that lets one task at a
    /// time bring it up to date.
    view: ViewState,
}

/// How up to date the view is ([`ViewState::caught_up`]).
#[derive(Default)]
struct CaughtUp {
    /// When the catch-up that last brought the view up to date started
    /// (`None`: never, or this process deleted an article since, which its
    /// next check must see).
    at: Option<std::time::Instant>,
    /// Deletes this process made: a catch-up that saw the count change while
    /// it ran may have read the deletion log before the delete, so it leaves
    /// `at` as the delete left it.
    deletes: u64,
}

struct ViewState {
    copy: Mutex<View>,
    catching_up: tokio::sync::Mutex<()>,
    caught_up: Mutex<CaughtUp>,
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

fn backend(e: redis::RedisError) -> IndexError {
    if crate::transient::is_refused_by_acl(&e) {
        return IndexError::Refused(e);
    }
    let reason = e.to_string();
    if crate::transient::is_transient(&e) {
        IndexError::Unavailable {
            reason,
            source: Some(e),
        }
    } else {
        IndexError::Backend(reason)
    }
}

/// How long the keys of a bucket of `bucket_ms` live after its start: the
/// bucket, then the window after its last article.
fn retention_ms(bucket_ms: u64, config: &DecisionConfig) -> u64 {
    bucket_ms + config.window_ms
}

/// The bucket length of a window without `bucket_hours`: half the window,
/// in whole hours (at least one).
pub fn default_bucket_ms(window_ms: u64) -> u64 {
    (window_ms / 2).div_ceil(HOUR_MS).max(1) * HOUR_MS
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
        config.validate()?;
        let bucket_ms = match options.bucket_ms {
            Some(b) => b,
            None => default_bucket_ms(config.window_ms),
        };
        if bucket_ms == 0 || !bucket_ms.is_multiple_of(HOUR_MS) || bucket_ms > 30 * 24 * HOUR_MS {
            return Err(IndexError::Config(format!(
                "bucket_ms = {bucket_ms}: use a whole number of hours, at most 30 days"
            )));
        }
        let keys = Keys::new(namespace);
        let conn = Conn::connect(url, &options.connect).await?;
        let mut probe = conn.clone();
        let retention_ms = retention_ms(bucket_ms, &config);
        safety::check_server(
            &mut probe,
            &keys,
            namespace,
            retention_ms,
            options.allow_eviction,
        )
        .await?;
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
                view: ViewState {
                    copy: Mutex::new(View::default()),
                    catching_up: tokio::sync::Mutex::new(()),
                    caught_up: Mutex::new(CaughtUp::default()),
                },
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

    /// How long a bucket's keys live after its start: the bucket and the
    /// window after its last article.
    fn retention_ms(&self) -> u64 {
        retention_ms(self.inner.bucket_ms as u64, &self.inner.config)
    }

    /// Start (unix ms) of the bucket holding an article at `ts_ms`.
    pub fn bucket_start(&self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.inner.bucket_ms) * self.inner.bucket_ms
    }

    /// Labels of the live buckets with their start (unix ms), oldest first.
    pub async fn buckets(&self) -> Result<Vec<(String, i64)>, IndexError> {
        let mut conn = self.inner.conn.clone();
        let v: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.inner.keys.buckets())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .map_err(backend)?;
        Ok(v.into_iter().map(|(l, s)| (l, s as i64)).collect())
    }

    /// The live articles one of whose four SimHash blocks is `value`, by the
    /// block sets (`b:`, [`Keys::block`]): oldest bucket first, in handle
    /// order in each. A deleted article is left out.
    pub async fn block_holders(&self, value: u16) -> Result<Vec<BlockHolder>, IndexError> {
        let keys = &self.inner.keys;
        let mut conn = self.inner.conn.clone();
        let mut places = Vec::new();
        for (label, start) in self.buckets().await? {
            let shape: Option<u32> = redis::cmd("HGET")
                .arg(keys.counter(&label))
                .arg("k")
                .query_async(&mut conn)
                .await
                .map_err(backend)?;
            let Some(shape) = shape else { continue };
            // The four positions' sets, or the one set they share.
            let mut union = redis::cmd("SUNION");
            for position in 0..4 {
                union.arg(keys.block(&label, shape, position, value));
            }
            let mut handles: Vec<u64> = union.query_async(&mut conn).await.map_err(backend)?;
            handles.sort_unstable();
            places.extend(handles.into_iter().map(|handle| Place {
                label: label.clone(),
                start,
                handle,
            }));
        }
        let found = self.fetch(&mut conn, &places).await?;
        Ok(found
            .into_iter()
            .map(|c| BlockHolder {
                bucket: c.label,
                handle: c.handle,
                id: c.meta.id,
                ts_ms: c.ts_ms,
                simhash: c.fp.simhash,
                verdict: c.meta.verdict,
            })
            .collect())
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

    /// What is stored for `id` (`lua/lookup.lua`).
    async fn lookup(&self, conn: &mut Conn, id: &str) -> Result<Option<Stored>, IndexError> {
        let keys = &self.inner.keys;
        let reply: Option<LookupReply> = LOOKUP
            .key(keys.buckets())
            .arg(keys.prefix())
            .arg(id)
            .invoke_async(conn)
            .await
            .map_err(backend)?;
        let Some((label, start, ids_value, record, links)) = reply else {
            return Ok(None);
        };
        let corrupt = |source: StoredError| IndexError::Corrupt {
            id: id.to_owned(),
            source,
        };
        let (_, handle) = decode_id_value(&ids_value).map_err(|e| corrupt(e.into()))?;
        let (meta, fingerprint) = decode_stored(&record)
            .map_err(|e| corrupt(e.into()))?
            .ok_or_else(|| corrupt(StoredError::EmptyRecord))?;
        let links = links
            .split_ascii_whitespace()
            .map(|t| {
                t.split_once(':')
                    .and_then(|(l, h)| {
                        // The start only dates the duplicate, which a cluster
                        // does not read: 0 for a label past the year 9999.
                        let start = bucket_start_of(l).unwrap_or(0);
                        Some(Place {
                            label: l.to_owned(),
                            start,
                            handle: h.parse().ok()?,
                        })
                    })
                    .ok_or_else(|| corrupt(StoredError::Link(t.to_owned())))
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Stored {
            label,
            handle,
            ts_ms: start + i64::from(meta.ts_offset),
            fingerprint,
            verdict: meta.verdict,
            links,
            record,
        }))
    }

    /// The [`Receipt`] of the article stored at `handle` of bucket `label`
    /// as `record` (its `a:` element).
    fn receipt(&self, label: &str, handle: u64, record: Vec<u8>) -> Receipt {
        Receipt {
            key: self.inner.keys.articles(label, handle),
            index: slot(handle),
            element: record,
        }
    }
}

/// An article found by one of its SimHash blocks
/// ([`RedisIndex::block_holders`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockHolder {
    /// Its bucket's label and its handle there.
    pub bucket: String,
    pub handle: u64,
    pub id: String,
    pub ts_ms: i64,
    pub simhash: u64,
    pub verdict: Verdict,
}

/// `lua/lookup.lua`'s answer: label, bucket start, `i:` value, `a:` element
/// and links of a stored article.
type LookupReply = (String, i64, Vec<u8>, Vec<u8>, String);

/// An article as read back from Redis.
struct Stored {
    label: String,
    handle: u64,
    ts_ms: i64,
    fingerprint: Fingerprint,
    verdict: Verdict,
    /// Where the duplicates linked to it are (`<label>:<handle>` in Redis).
    links: Vec<Place>,
    /// Its `a:` element.
    record: Vec<u8>,
}

impl Index for RedisIndex {
    async fn check_and_insert(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        self.check(entry, CheckKind::Insert, FirstDecision::CatchUpIfStale)
            .await
    }

    async fn query(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        self.check(entry, CheckKind::Query, FirstDecision::CatchUpIfStale)
            .await
    }

    async fn delete(&self, id: &str) -> Result<Deletion, IndexError> {
        let keys = &self.inner.keys;
        let mut conn = self.inner.conn.clone();
        let removed: Option<(String, u64)> = DELETE
            .key(keys.buckets())
            .arg(keys.prefix())
            .arg(id)
            .invoke_async(&mut conn)
            .await
            .map_err(backend)?;
        // This process' next check reads the deletion log first, in a
        // catch-up that starts after this point.
        let mut caught_up = self
            .inner
            .view
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        caught_up.at = None;
        caught_up.deletes += 1;
        drop(caught_up);
        Ok(Deletion {
            found: removed.is_some(),
            receipt: removed.map(|(label, handle)| self.receipt(&label, handle, Vec::new())),
        })
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
            Verdict::Unique { .. } => id.to_owned(),
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
        // A deleted duplicate's record is gone or empty (delete.lua) and
        // leaves a stale link; a re-used id may now belong elsewhere: keep
        // only live duplicates that name this root.
        let mut duplicates: Vec<String> = self
            .fetch(&mut conn, &root_row.links)
            .await?
            .iter()
            .filter(|c| c.meta.verdict.duplicate().is_some_and(|d| d.dup_of == root))
            .map(|c| c.meta.id.clone())
            .collect();
        duplicates.sort_unstable();
        duplicates.dedup();
        Ok(Some(Cluster { root, duplicates }))
    }
}
