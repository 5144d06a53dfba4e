//! The index: where fingerprints of recent articles live, and the one place a
//! verdict is made and recorded.
//!
//! [`Index`] is implemented twice, held to the same behaviour by one conformance
//! suite (`tests/conformance/`):
//! - [`EmbeddedIndex`]: in-process, for `simdedup scan`, tests and single-node use;
//! - the Redis index (Lua check-and-insert), shared by any number of workers.
//!
//! Both find candidates in the same compact in-memory index (`candidates.rs`),
//! through the keys of [`meet`] (the four 16-bit SimHash blocks, the content
//! hash, the lookup sketch hashes), keep only those inside the retention
//! window, and let
//! [`decide`](crate::decision::decide) choose.

mod candidates;
mod embedded;
pub mod meet;
pub mod redis_index;

pub use candidates::CandidatesFull;
pub use embedded::EmbeddedIndex;
pub use redis_index::{BlockHolder, DecodeError, RedisIndex, RedisIndexOptions};

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::connect::ConnectError;
use crate::decision::{Decision, DecisionConfigError, Match, Signal};
use crate::fingerprint::Fingerprint;

/// How many articles one content hash, sketch hash, or SimHash block with
/// the block after it lists (per bucket in a worker's view, per window in the
/// embedded index): the first 8 to arrive.
///
/// Real feeds have keys that thousands of articles share: a boilerplate
/// clause ("…新闻客户端讯") in the sampled sketch, a press release copied
/// verbatim thousands of times in a day. Unbounded, each check through such a
/// key would fetch every article listed under it, so that a check would cost
/// more the more often its story was copied before. The first 8 are enough to
/// find a copy: a later article is still matched through them (and through
/// its other keys), it is only not listed itself.
pub const LISTED_PER_HASH: usize = 8;

/// An article as the index sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub id: String,
    /// Event time, unix milliseconds. Articles are compared only with articles
    /// whose time is within the window of this one.
    pub ts_ms: i64,
    pub fingerprint: Fingerprint,
}

/// The verdict on an article.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// No earlier article in the window is a near-duplicate: this one is kept.
    Unique {
        /// The earlier article this one is a fuller story of (it holds
        /// most of that one's text, and much more of its own), if any: a
        /// feed may replace that one with this.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expands: Option<String>,
    },
    /// A near-duplicate of an earlier article.
    Duplicate(Duplicate),
}

/// Where a duplicate links to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// The kept article of the cluster (the root of the chain of matches).
    pub dup_of: String,
    /// The article that matched (equal to `dup_of` unless it was itself a duplicate).
    pub matched: String,
    /// SimHash Hamming distance to `matched`.
    pub distance: u32,
    /// The signal that decided.
    pub signal: Signal,
    /// The estimated share of text the article and `matched` have in common,
    /// in hundredths ([`crate::decision::hundredths`]): the larger of their
    /// sketches' resemblance and either containment. `None` only for a verdict
    /// read from a meta that carries no overlap (see `index::redis_index::codec`).
    pub overlap: Option<u8>,
}

impl Verdict {
    /// Unique, expanding nothing.
    pub const UNIQUE: Verdict = Verdict::Unique { expands: None };

    /// The verdict [`decide`](crate::decision::decide) reached, a duplicate
    /// linked to `matched_root`: the root of the article it matched, when that
    /// one is itself a duplicate.
    pub fn from_decision(d: Decision, matched_root: Option<&str>) -> Verdict {
        match d.matched {
            Some(m) => Verdict::from_match(m, matched_root),
            None => Verdict::Unique { expands: d.expands },
        }
    }

    /// The earlier article a unique verdict names as expanded.
    pub fn expands(&self) -> Option<&str> {
        match self {
            Verdict::Unique { expands } => expands.as_deref(),
            Verdict::Duplicate(_) => None,
        }
    }

    pub fn is_duplicate(&self) -> bool {
        matches!(self, Verdict::Duplicate(_))
    }

    pub fn duplicate(&self) -> Option<&Duplicate> {
        match self {
            Verdict::Duplicate(d) => Some(d),
            Verdict::Unique { .. } => None,
        }
    }

    /// Build a verdict from the decision's match and the matched article's own verdict.
    pub fn from_match(m: Match, matched_root: Option<&str>) -> Verdict {
        Verdict::Duplicate(Duplicate {
            dup_of: matched_root.unwrap_or(&m.id).to_owned(),
            matched: m.id,
            distance: m.distance,
            signal: m.signal,
            overlap: Some(m.overlap),
        })
    }
}

/// The answer to a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    /// The id was already in the index: `verdict` is the one stored for it then,
    /// and nothing was written (idempotency).
    pub replayed: bool,
    /// Index entries this check examined in the candidate index (both
    /// indexes search the same one, `candidates.rs`): block-list entries read,
    /// plus the articles listed under its content and sketch hashes; 0 for a
    /// replay. The work a check costs (the `simdedup_candidates_per_check`
    /// metric): it grows with the index, not with how often a story was
    /// copied.
    pub examined: u32,
    /// Where the article this check stored (or, for a replay, found stored)
    /// can be read back, on the server that holds the index; `None` where
    /// nothing was stored, and in an index without a server (the embedded one).
    pub receipt: Option<Receipt>,
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// The article was stored (and is no longer).
    pub found: bool,
    /// Where the delete can be read back: the emptied element of the
    /// article it removed. `None` where nothing was removed, and in an index
    /// without a server.
    pub receipt: Option<Receipt>,
}

/// Where an index write can be read back: the element `index` of the list
/// `key` holds `element` (the stored article; empty for a delete), or is
/// empty (it was deleted since). Redis replicates to its replicas after it
/// answers, so a primary that fails over may lose a write it answered; a
/// worker writes the output of an entry only on a server where its receipt
/// holds (`lua/ack_and_emit.lua`), and decides the entry again on one where
/// it does not, rather than answer with a verdict the index no longer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub key: String,
    pub index: u64,
    pub element: Vec<u8>,
}

/// What the index holds about one article.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredArticle {
    pub id: String,
    pub ts_ms: i64,
    pub fingerprint: Fingerprint,
    pub verdict: Verdict,
}

/// A kept article and the duplicates linked to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub root: String,
    /// Duplicates linked to `root`, sorted by id.
    pub duplicates: Vec<String>,
}

/// Errors an index can return. Callers branch on them: `Unavailable` is worth a
/// retry with backoff, the others are not.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Redis cannot be reached now (refused, dropped, timed out): never the
    /// article's fault.
    #[error("index backend unavailable: {reason}")]
    Unavailable {
        reason: String,
        #[source]
        source: Option<redis::RedisError>,
    },
    #[error("index backend error: {0}")]
    Backend(String),
    #[error("stored data for article {id:?} is corrupt: {source}")]
    Corrupt {
        id: String,
        #[source]
        source: StoredError,
    },
    #[error("gave up after {attempts} attempts: the candidate sets kept changing under concurrent writers")]
    Contention { attempts: u32 },
    /// The index cannot be used as configured (bad option, unsafe server setting).
    #[error("index misconfigured: {0}")]
    Config(String),
    /// The decision settings contradict each other.
    #[error("index misconfigured: {0}")]
    Decision(#[from] DecisionConfigError),
    /// The Redis URL setting cannot work however long one waits (malformed,
    /// or a connection the server refuses, such as a wrong password).
    #[error("index misconfigured: {0}")]
    Connect(#[source] ConnectError),
    /// Redis refused a command by the user's ACL: it stays refused until an
    /// operator changes the ACL.
    #[error("index misconfigured: Redis refused a command ({0})")]
    Refused(#[source] redis::RedisError),
    /// An article with an empty id: articles are stored, replayed and deleted by
    /// id (the Redis index also reserves the empty field name in its hashes).
    #[error("article id is empty")]
    EmptyId,
}

/// What is wrong with the data the Redis index stored for an article: it
/// cannot be read back, or a worker's view cannot hold it.
#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A handle past what a view numbers its articles with (`u32`).
    #[error("handle {0} is too large")]
    HandleTooLarge(u64),
    #[error(transparent)]
    Full(#[from] CandidatesFull),
    /// An article found by its id whose `a:` element is empty.
    #[error("its article record is empty")]
    EmptyRecord,
    /// A link to a duplicate that is not `<label>:<handle>`.
    #[error("bad link {0:?}")]
    Link(String),
}

/// A connection that cannot work however long one waits is a configuration
/// error; one Redis did not answer is [`IndexError::Unavailable`], with the
/// Redis error as its source.
impl From<ConnectError> for IndexError {
    fn from(e: ConnectError) -> IndexError {
        let reason = e.to_string();
        match e {
            ConnectError::Unavailable { source, .. } => IndexError::Unavailable {
                reason,
                source: Some(source),
            },
            e => IndexError::Connect(e),
        }
    }
}

/// `Err(IndexError::EmptyId)` for an empty id: what both indexes check first.
pub(crate) fn require_id(id: &str) -> Result<(), IndexError> {
    if id.is_empty() {
        return Err(IndexError::EmptyId);
    }
    Ok(())
}

/// A store of recent fingerprints that makes and records verdicts.
///
/// `check_and_insert` is atomic: however many callers race on copies of one
/// article, exactly one is `Unique`. It is idempotent per id.
pub trait Index: Send + Sync {
    /// Decide on `entry` and record it (with its verdict). If its id is already
    /// stored, return the stored verdict with `replayed = true` and write nothing.
    fn check_and_insert(
        &self,
        entry: &IndexEntry,
    ) -> impl Future<Output = Result<Outcome, IndexError>> + Send;

    /// Decide on `entry` without recording anything. A stored id gets its stored verdict.
    fn query(&self, entry: &IndexEntry)
        -> impl Future<Output = Result<Outcome, IndexError>> + Send;

    /// Remove an article (`found`: it was there). Duplicates linked to it
    /// keep their `dup_of`.
    fn delete(&self, id: &str) -> impl Future<Output = Result<Deletion, IndexError>> + Send;

    /// What is stored for `id`, if it is inside the window.
    fn get(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<StoredArticle>, IndexError>> + Send;

    /// The cluster `id` belongs to: its kept article and that article's duplicates.
    fn cluster(&self, id: &str)
        -> impl Future<Output = Result<Option<Cluster>, IndexError>> + Send;
}
