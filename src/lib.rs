//! simdedup: near-duplicate detection for articles, embedded or shared through Redis.
//!
//! The crate is layered so each part can be tested and measured alone:
//!
//! - **Fingerprinting** (pure, no I/O): [`normalize`] strips markup and folds
//!   Unicode; [`tokenize`] cuts words ([`dictionary`]: jieba's dictionary as a
//!   trie built at compile time, for Chinese; UAX #29 for the rest);
//!   [`idf`] weighs them ([`hotwords`] caches the common words' IDF and hash);
//!   [`simhash`] folds them into a 64-bit SimHash;
//!   [`signature`] hashes the longest sentences and the whole content;
//!   [`shingles`] samples its 5-gram shingles, by which the share of an
//!   article found in an earlier one is judged;
//!   [`distinctive`] samples its numbers, what templated reports differ in;
//!   [`fingerprint`] ties these into one [`Fingerprint`](fingerprint::Fingerprint)
//!   (`prefetch` asks for the lines of its large tables before they are read).
//!   The recipe is specified in `docs/fingerprint.md`.
//! - **Deciding**: [`decision`] says whether a fingerprint duplicates any of a set
//!   of candidates, and by which signal (exact, simhash, sentence, excerpt);
//!   [`explain`] shows the evidence behind a verdict on two texts.
//! - **Indexing**: [`index`] defines the [`Index`](index::Index) trait (atomic,
//!   idempotent check-and-insert, query, delete, get, cluster) and the in-process
//!   [`EmbeddedIndex`](index::EmbeddedIndex).
//! - **Redis**: [`connect`] opens one connection to a node, a Redis Cluster or
//!   the primary its sentinels name ([`redact`] keeps the passwords of its
//!   URLs out of everything shown); [`transient`] says which Redis errors are
//!   worth waiting out; [`keys`] names every Redis key of a namespace;
//!   [`version_stamp`] keeps a namespace to one fingerprint version.
//! - **Running**: [`article`] turns input into articles or specific rejections;
//!   [`scan`] is the no-Redis JSONL pipeline; [`eval`] scores verdicts against a
//!   labelled set; [`settings`] loads configuration (file ← env ← flags);
//!   [`demo`] runs the worker pipeline on the bundled sample (`simdedup demo`);
//!   [`redis_server`] starts a private `redis-server` (demo, tests and the
//!   `simdedup-bench` tool);
//!   [`worker`] is the stream worker: it reads the input stream with a
//!   consumer group, fingerprints, checks against the index and writes
//!   verdicts (with its metrics and health endpoints and the operator tools).
//! - **Command line**: [`cli`] holds each `simdedup` subcommand's flags and
//!   body; the binary (`src/main.rs`) only parses arguments, sets up tracing
//!   and calls in there.
//!
//! The measurements at scale live outside the product, in the `simdedup-bench`
//! workspace member.

pub mod article;
pub mod cli;
pub mod connect;
pub mod decision;
pub mod demo;
pub mod dictionary;
pub mod distinctive;
pub mod eval;
pub mod explain;
pub mod fingerprint;
pub mod hotwords;
pub mod idf;
pub mod index;
pub mod keys;
pub mod normalize;
mod prefetch;
#[cfg(test)]
mod random_text;
pub mod redact;
pub mod redis_server;
pub mod scan;
pub mod settings;
pub mod shingles;
pub mod signature;
pub mod simhash;
pub mod tokenize;
pub mod transient;
pub mod version_stamp;
pub mod worker;
