//! The stream worker: reads articles from `simdedup:{NS}:in` through a consumer
//! group, decides on them with an [`Index`], and writes exactly one entry per
//! input entry to `simdedup:{NS}:out` (the protocol is in `docs/protocol.md`).
//!
//! Shape of the loop (one reader, many batch tasks):
//!
//! - the **reader** holds its own connection (an `XREADGROUP ... BLOCK` would
//!   otherwise stall every other command queued behind it on a multiplexed
//!   connection), takes permits from a semaphore (the bound on entries in
//!   flight), reads a batch — first its own pending history, now and then
//!   entries idle in other consumers (`XAUTOCLAIM`), otherwise new entries —
//!   and spawns a task for it;
//! - each **batch task** parses and fingerprints on the worker's own thread
//!   pool ([`fingerprint_pool`], run at a lower priority so that CPU work
//!   never delays the async threads that talk to Redis), calls the index —
//!   by default in stream order, batches taking turns (`WorkerConfig::ordered`),
//!   so verdicts match `scan`, with up to `WorkerConfig::pipeline` calls in
//!   flight among articles that cannot be each other's candidates — then
//!   commits the batch with script calls of up to 16 entries ([`commit`]) and
//!   releases its permits.
//!
//! Failures never lose an entry: nothing is acked before its output is written
//! in the same script, and an entry a task gave up on stays pending, to be
//! claimed again (and dead-lettered after `max_deliveries`).
//!
//! The worker is generic over the index, so its stream logic is tested with the
//! embedded index and deployed with the Redis one.

pub mod commit;
pub mod fingerprint_pool;
pub mod http;
pub mod metrics;
pub mod output;
pub mod service;
pub mod shutdown;
pub mod stream;
pub mod tools;

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Value};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::article::Rejection;
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::index::{Index, IndexEntry, IndexError};
use crate::keys::Keys;

use commit::{CommitOptions, Committer, Emit};
use metrics::Metrics;
use output::{emit_for, Resolution};
use shutdown::Shutdown;
use stream::{
    parse_entry, parse_xautoclaim, parse_xpending_range, parse_xreadgroup, RawEntry, Request,
};

/// Worker settings (`[worker]` in the TOML file, `SIMDEDUP_WORKER__*` in the environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Consumer group name. Every worker of a namespace must use the same one.
    pub group: String,
    /// This worker's consumer name; empty = `<hostname>-<pid>-<random>`. A fixed
    /// name lets a restarted worker resume its own pending entries at once.
    pub consumer: String,
    /// Entries per XREADGROUP / XAUTOCLAIM (COUNT); a batch is committed in
    /// script calls of [`commit::ENTRIES_PER_CALL`] entries.
    pub batch_size: usize,
    /// Entries read and not yet committed, at most.
    pub max_in_flight: usize,
    /// Decide this worker's entries in stream order: batches take turns at the
    /// index and a batch's entries go one after another, so a copy is never
    /// decided before an original this worker read earlier (what `scan` does).
    /// Fingerprinting and commits still overlap. Off: index calls run
    /// concurrently (up to `index_concurrency`), faster against a remote index,
    /// but copies that arrive close together may be decided out of order.
    pub ordered: bool,
    /// Concurrent index calls per batch when `ordered` is off.
    pub index_concurrency: usize,
    /// When `ordered`: index calls of a batch in flight at once. A check waits
    /// for every earlier entry of the batch whose article could be its
    /// candidate (or share its id) to be decided ([`may_interact`]); checks
    /// that cannot meet go together, so verdicts stay those of one after
    /// another while the round trips overlap. A query or a delete waits for
    /// everything before it. 1: one call at a time (then `read_ahead` applies).
    pub pipeline: usize,
    /// When `ordered` and `pipeline` is 1: how many of the next checks of a
    /// batch read the index ahead of their turn ([`Index::read_ahead`]), while the current one
    /// decides and commits. Their reads may be stale by then; the commit
    /// validates them like any read raced by another writer, so verdicts stay
    /// those of one-after-another. 0: off.
    pub read_ahead: usize,
    /// How many steps below the rest of the worker its fingerprinting threads
    /// run (a nice value, 0-19; Linux only; 0: the same priority). The index
    /// calls wait on the threads that talk to Redis, fingerprinting is bulk
    /// work done a batch ahead: on a busy host the former should run first
    /// (`src/worker/fingerprint_pool.rs`).
    pub fingerprint_nice: u8,
    /// XREADGROUP BLOCK, milliseconds. Shutdown may wait this long for a read.
    pub block_ms: u64,
    /// Entries pending in a consumer for this long are claimed (crash recovery).
    /// Keep it well above the time a batch takes, or healthy batches are stolen
    /// (harmless for correctness, wasteful).
    pub claim_min_idle_ms: u64,
    /// How often to look for entries to claim (and refresh the pending/lag gauges).
    pub claim_interval_ms: u64,
    /// An entry delivered more than this many times is dead-lettered.
    pub max_deliveries: u64,
    /// Approximate MAXLEN of the output stream (0: never trimmed).
    pub output_maxlen: u64,
    /// Approximate MAXLEN of the dead-letter stream (0: never trimmed).
    pub dead_maxlen: u64,
    /// XDEL input entries once their output is written (keeps the input stream
    /// small; leave off if other consumer groups read it too).
    pub delete_processed: bool,
    /// Timeout of every Redis command but the blocking read, milliseconds.
    pub command_timeout_ms: u64,
    /// Upper bound of the retry backoff, milliseconds.
    pub backoff_max_ms: u64,
    /// After SIGTERM/SIGINT, wait at most this long for in-flight entries.
    pub shutdown_timeout_ms: u64,
    /// Address of the HTTP listener for /metrics, /healthz, /readyz (empty: none).
    pub http_addr: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            group: "simdedup".into(),
            consumer: String::new(),
            batch_size: 128,
            max_in_flight: 1024,
            ordered: true,
            index_concurrency: 32,
            pipeline: 16,
            read_ahead: 8,
            fingerprint_nice: 10,
            block_ms: 1000,
            claim_min_idle_ms: 60_000,
            claim_interval_ms: 5_000,
            max_deliveries: 5,
            output_maxlen: 1_000_000,
            dead_maxlen: 100_000,
            delete_processed: false,
            command_timeout_ms: 5_000,
            backoff_max_ms: 2_000,
            shutdown_timeout_ms: 10_000,
            http_addr: "127.0.0.1:9464".into(),
        }
    }
}

impl WorkerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.max_in_flight < self.batch_size {
            return Err(
                "worker.batch_size must be positive and at most worker.max_in_flight".into(),
            );
        }
        if self.pipeline == 0 || self.pipeline > 256 {
            return Err(format!(
                "worker.pipeline = {} but it is 1 (one index call at a time) to 256",
                self.pipeline
            ));
        }
        if self.read_ahead > 256 {
            return Err(
                "worker.read_ahead is at most 256 (reads further ahead are all stale)".into(),
            );
        }
        if self.fingerprint_nice > 19 {
            return Err(format!(
                "worker.fingerprint_nice = {} but nice values go up to 19: use 0 (same priority) to 19 (lowest)",
                self.fingerprint_nice
            ));
        }
        if self.index_concurrency == 0 || self.max_deliveries == 0 {
            return Err(
                "worker.index_concurrency and worker.max_deliveries must be positive".into(),
            );
        }
        if self.group.is_empty() {
            return Err("worker.group must not be empty".into());
        }
        if self.max_in_flight > u32::MAX as usize / 2 {
            return Err("worker.max_in_flight is too large".into());
        }
        Ok(())
    }

    /// The consumer name to use: the configured one, or a fresh unique one.
    pub fn consumer_name(&self) -> String {
        if !self.consumer.is_empty() {
            return self.consumer.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "worker".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{host}-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
    }
}

/// Errors that stop a worker (everything transient is retried inside).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker configuration: {0}")]
    Config(String),
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    #[error("HTTP listener: {0}")]
    Http(#[from] std::io::Error),
    #[error("could not start the fingerprinting threads: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// Output entries this worker wrote.
    pub emitted: u64,
    /// Entries it finished that another consumer had already acked.
    pub skipped: u64,
    /// In-flight entries abandoned at the shutdown bound (left pending for others).
    pub abandoned: u64,
}

/// Liveness and readiness, shared with the HTTP listener.
#[derive(Debug, Default)]
pub struct Health {
    /// Connected, group ensured, last Redis call succeeded, not shutting down.
    pub ready: AtomicBool,
    /// The main loop is running.
    pub alive: AtomicBool,
}

/// A stream worker over index `I`.
pub struct Worker<I> {
    client: redis::Client,
    index: Arc<I>,
    fingerprinter: Fingerprinter,
    config: Arc<WorkerConfig>,
    keys: Keys,
    consumer: String,
    max_text_bytes: usize,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// State shared by the reader and the batch tasks.
struct Shared<I> {
    index: Arc<I>,
    fingerprinter: Fingerprinter,
    /// Where `fingerprinter` runs, below the priority of the Redis I/O.
    fingerprint_pool: rayon::ThreadPool,
    config: Arc<WorkerConfig>,
    committer: Committer,
    conn: ConnectionManager,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    max_text_bytes: usize,
    /// Ids of entries some task of this worker is processing, so a claim or a
    /// history read does not start a second copy of the same work.
    in_flight: Mutex<HashSet<String>>,
    index_permits: Semaphore,
}

/// Is this a broken connection (the connection manager reconnects) rather
/// than a command error?
fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

pub(crate) fn backoff(attempt: u32, max_ms: u64) -> Duration {
    let ms = 25u64
        .saturating_mul(1 << attempt.min(10))
        .min(max_ms.max(1));
    Duration::from_millis(ms)
}

impl<I: Index + 'static> Worker<I> {
    /// A worker for namespace `namespace` on `client`'s server, deciding with `index`.
    pub fn new(
        client: redis::Client,
        namespace: &str,
        index: Arc<I>,
        fingerprinter: Fingerprinter,
        config: WorkerConfig,
        max_text_bytes: usize,
    ) -> Result<Worker<I>, WorkerError> {
        crate::keys::validate_namespace(namespace).map_err(WorkerError::Config)?;
        config.validate().map_err(WorkerError::Config)?;
        Ok(Worker {
            client,
            index,
            fingerprinter,
            consumer: config.consumer_name(),
            config: Arc::new(config),
            keys: Keys::new(namespace),
            max_text_bytes,
            metrics: Arc::new(Metrics::default()),
            health: Arc::new(Health::default()),
        })
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Connect with retries until it works or shutdown is requested.
    async fn connect(
        &self,
        response_timeout: Duration,
        shutdown: &mut Shutdown,
    ) -> Option<ConnectionManager> {
        let cfg = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(Duration::from_millis(self.config.command_timeout_ms)))
            .set_max_delay(Duration::from_millis(self.config.backoff_max_ms))
            .set_number_of_retries(6);
        let mut attempt = 0;
        loop {
            match ConnectionManager::new_with_config(self.client.clone(), cfg.clone()).await {
                Ok(c) => return Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot connect to Redis; retrying");
                    self.metrics.redis_errors.inc();
                    attempt += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(attempt, self.config.backoff_max_ms)) => {}
                        _ = shutdown.recv() => return None,
                    }
                }
            }
        }
    }

    /// Run until `shutdown` fires; then finish (or, past the bound, abandon) what
    /// is in flight and return.
    pub async fn run(self, mut shutdown: Shutdown) -> Result<RunSummary, WorkerError> {
        self.health.alive.store(true, Ordering::Relaxed);
        let cfg = self.config.clone();
        let command_timeout = Duration::from_millis(cfg.command_timeout_ms);
        // The blocking read must not time out client-side before Redis answers.
        let read_timeout = Duration::from_millis(cfg.block_ms) + command_timeout;
        let Some(mut reader) = self.connect(read_timeout, &mut shutdown).await else {
            return Ok(RunSummary::default());
        };
        let Some(conn) = self.connect(command_timeout, &mut shutdown).await else {
            return Ok(RunSummary::default());
        };
        let committer = Committer::new(
            &self.keys,
            CommitOptions {
                group: cfg.group.clone(),
                output_maxlen: cfg.output_maxlen,
                dead_maxlen: cfg.dead_maxlen,
                delete_processed: cfg.delete_processed,
            },
        );
        let shared = Arc::new(Shared {
            index: self.index.clone(),
            fingerprinter: self.fingerprinter.clone(),
            fingerprint_pool: fingerprint_pool::build(cfg.fingerprint_nice)?,
            config: cfg.clone(),
            committer,
            conn,
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            max_text_bytes: self.max_text_bytes,
            in_flight: Mutex::new(HashSet::new()),
            index_permits: Semaphore::new(cfg.index_concurrency),
        });
        // Group and script, retried until they work (Redis may still be starting).
        let mut attempt = 0;
        loop {
            let mut c = shared.conn.clone();
            let r = async {
                ensure_group(&mut c, &self.keys.input_stream(), &cfg.group).await?;
                shared.committer.load(&mut c).await.map(|_| ())
            }
            .await;
            match r {
                Ok(()) => break,
                Err(e) => {
                    self.note_error(&e, "preparing the consumer group");
                    attempt += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(attempt, cfg.backoff_max_ms)) => {}
                        _ = shutdown.recv() => return Ok(RunSummary::default()),
                    }
                }
            }
        }
        self.health.ready.store(true, Ordering::Relaxed);
        tracing::info!(consumer = %self.consumer, stream = %self.keys.input_stream(), group = %cfg.group, "worker started");

        let permits = Arc::new(Semaphore::new(cfg.max_in_flight));
        let mut tasks: JoinSet<(u64, u64)> = JoinSet::new();
        // Batches take turns at the index in read order: each waits for the one
        // read before it (see `WorkerConfig::ordered`).
        let mut last_turn: Option<oneshot::Receiver<()>> = None;
        let mut summary = RunSummary::default();
        // First read our own pending history (a restart under the same name).
        let mut read_history = true;
        let mut next_claim = Instant::now();
        let mut attempt = 0u32;
        while !shutdown.is_shutdown() {
            while let Some(done) = tasks.try_join_next() {
                collect(&mut summary, done);
            }
            let batch = cfg.batch_size as u32;
            let held = tokio::select! {
                p = permits.clone().acquire_many_owned(batch) => p.expect("semaphore never closed"),
                _ = shutdown.recv() => break,
            };
            let now = Instant::now();
            let result = if read_history {
                self.read(&mut reader, "0", false).await
            } else if now >= next_claim {
                next_claim = now + Duration::from_millis(cfg.claim_interval_ms);
                self.refresh_gauges(&mut reader).await;
                self.claim(&mut reader).await
            } else {
                self.read(&mut reader, ">", true).await
            };
            let entries = match result {
                Ok(entries) => {
                    attempt = 0;
                    self.health.ready.store(true, Ordering::Relaxed);
                    entries
                }
                Err(e) => {
                    self.note_error(&e, "reading the input stream");
                    // A read whose reply was lost may have delivered entries to
                    // us: read our history again once reconnected.
                    read_history = true;
                    attempt += 1;
                    drop(held);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff(attempt, cfg.backoff_max_ms)) => {}
                        _ = shutdown.recv() => {}
                    }
                    continue;
                }
            };
            if read_history {
                read_history = false;
            }
            // Skip entries a task of ours is already working on.
            let entries: Vec<RawEntry> = {
                let mut set = shared.in_flight.lock().unwrap_or_else(|p| p.into_inner());
                entries
                    .into_iter()
                    .filter(|e| set.insert(e.id.clone()))
                    .collect()
            };
            if entries.is_empty() {
                continue;
            }
            let mut held = held;
            // Return the permits this batch does not need.
            if entries.len() < batch as usize {
                if let Some(p) = held.split(entries.len()) {
                    drop(std::mem::replace(&mut held, p));
                }
            }
            self.metrics.in_flight.inc_by(entries.len() as i64);
            let shared = shared.clone();
            let (turn_done, next_turn) = oneshot::channel();
            let turn = Turn {
                wait: last_turn.replace(next_turn),
                done: turn_done,
            };
            tasks.spawn(async move { process_batch(shared, entries, held, turn).await });
        }

        // Graceful shutdown: stop reading (done), finish what is in flight.
        self.health.ready.store(false, Ordering::Relaxed);
        tracing::info!(in_flight = tasks.len(), "draining in-flight batches");
        let bound = Duration::from_millis(cfg.shutdown_timeout_ms);
        let drained = tokio::time::timeout(bound, async {
            let mut s = RunSummary::default();
            while let Some(done) = tasks.join_next().await {
                collect(&mut s, done);
            }
            s
        })
        .await;
        match drained {
            Ok(s) => {
                summary.emitted += s.emitted;
                summary.skipped += s.skipped;
            }
            Err(_) => {
                // The futures above were dropped with `tasks` borrowed: abort the rest.
                summary.abandoned = shared.in_flight.lock().map(|s| s.len() as u64).unwrap_or(0);
                tasks.abort_all();
                tracing::warn!(
                    abandoned = summary.abandoned,
                    "shutdown bound reached: unfinished entries stay pending and will be claimed by other workers"
                );
            }
        }
        self.health.alive.store(false, Ordering::Relaxed);
        tracing::info!(?summary, "worker stopped");
        Ok(summary)
    }

    fn note_error(&self, e: &RedisError, what: &str) {
        self.metrics.redis_errors.inc();
        if is_connection_error(e) {
            self.metrics.reconnects.inc();
            self.health.ready.store(false, Ordering::Relaxed);
        }
        tracing::warn!(error = %e, "{what} failed; retrying");
    }

    /// XREADGROUP from `id` (`>`: new entries, blocking; `0`: our own pending).
    async fn read(
        &self,
        conn: &mut ConnectionManager,
        id: &str,
        block: bool,
    ) -> Result<Vec<RawEntry>, RedisError> {
        let started = Instant::now();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.config.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.config.batch_size);
        if block {
            cmd.arg("BLOCK").arg(self.config.block_ms);
        }
        cmd.arg("STREAMS").arg(self.keys.input_stream()).arg(id);
        let reply: Value = match cmd.query_async(conn).await {
            Ok(v) => v,
            // The group vanished (stream deleted, FLUSHALL): recreate it and go on.
            Err(e) if e.code() == Some("NOGROUP") => {
                ensure_group(conn, &self.keys.input_stream(), &self.config.group).await?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e),
        };
        let mut entries = parse_xreadgroup(&reply).map_err(reply_error)?;
        if id != ">" && !entries.is_empty() {
            self.fill_deliveries(conn, &mut entries).await?;
        }
        if !entries.is_empty() {
            self.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// XAUTOCLAIM entries idle longer than `claim_min_idle_ms` in any consumer.
    async fn claim(&self, conn: &mut ConnectionManager) -> Result<Vec<RawEntry>, RedisError> {
        let started = Instant::now();
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.input_stream())
            .arg(&self.config.group)
            .arg(&self.consumer)
            .arg(self.config.claim_min_idle_ms)
            .arg("0-0")
            .arg("COUNT")
            .arg(self.config.batch_size)
            .query_async(conn)
            .await?;
        let (_cursor, mut entries, deleted) = parse_xautoclaim(&reply).map_err(reply_error)?;
        if !deleted.is_empty() {
            tracing::warn!(count = deleted.len(), "pending entries were deleted from the input stream before processing; Redis dropped them from the pending list");
        }
        if !entries.is_empty() {
            self.metrics.claimed.inc_by(entries.len() as u64);
            tracing::info!(count = entries.len(), "claimed idle pending entries");
            self.fill_deliveries(conn, &mut entries).await?;
            self.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// Delivery counts of (re)delivered entries, from XPENDING in one call.
    async fn fill_deliveries(
        &self,
        conn: &mut ConnectionManager,
        entries: &mut [RawEntry],
    ) -> Result<(), RedisError> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(());
        };
        let reply: Value = redis::cmd("XPENDING")
            .arg(self.keys.input_stream())
            .arg(&self.config.group)
            .arg(&first.id)
            .arg(&last.id)
            .arg(entries.len().max(self.config.batch_size))
            .arg(&self.consumer)
            .query_async(conn)
            .await?;
        let counts: std::collections::HashMap<String, u64> = parse_xpending_range(&reply)
            .map_err(reply_error)?
            .into_iter()
            .collect();
        for e in entries.iter_mut() {
            e.deliveries = counts.get(&e.id).copied().unwrap_or(1);
        }
        Ok(())
    }

    /// Refresh the pending and lag gauges from XINFO GROUPS (errors only logged).
    async fn refresh_gauges(&self, conn: &mut ConnectionManager) {
        let reply: Result<Value, _> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(self.keys.input_stream())
            .query_async(conn)
            .await;
        if let Ok(v) = reply {
            if let Some(info) = tools::group_info(&v, &self.config.group) {
                self.metrics.pending.set(info.pending);
                self.metrics.lag.set(info.lag.unwrap_or(-1));
            }
        }
    }
}

fn reply_error(e: stream::ReplyError) -> RedisError {
    RedisError::from((redis::ErrorKind::UnexpectedReturnType, "stream reply", e.0))
}

fn collect(summary: &mut RunSummary, done: Result<(u64, u64), tokio::task::JoinError>) {
    match done {
        Ok((emitted, skipped)) => {
            summary.emitted += emitted;
            summary.skipped += skipped;
        }
        Err(e) => tracing::error!(error = %e, "a batch task failed; its entries stay pending"),
    }
}

/// Create the consumer group at `0` (so entries added before any worker are
/// processed too), creating the stream if needed; an existing group is fine.
pub async fn ensure_group<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
    group: &str,
) -> Result<(), RedisError> {
    let r: Result<Value, RedisError> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
        Err(e) => Err(e),
    }
}

/// An entry after parsing and fingerprinting.
enum Prepared {
    Ready(Resolution),
    Check(IndexEntry, bool),
    Delete(String),
}

fn prepare(shared: &Shared<impl Index>, entry: &RawEntry) -> Prepared {
    let cfg = &shared.config;
    if entry.deliveries > cfg.max_deliveries {
        return Prepared::Ready(Resolution::Rejected {
            why: Rejection::TooManyDeliveries {
                deliveries: entry.deliveries,
                limit: cfg.max_deliveries,
            },
        });
    }
    let request = match parse_entry(entry, shared.max_text_bytes) {
        Ok(r) => r,
        Err(why) => return Prepared::Ready(Resolution::Rejected { why }),
    };
    let (article, insert) = match request {
        Request::Delete { id } => return Prepared::Delete(id),
        Request::Check(a) => (a, true),
        Request::Query(a) => (a, false),
    };
    let started = Instant::now();
    let fingerprint: Fingerprint = shared.fingerprinter.fingerprint(&article.text);
    shared
        .metrics
        .fingerprint_latency
        .observe(started.elapsed());
    if fingerprint.is_empty() {
        return Prepared::Ready(Resolution::Rejected {
            why: Rejection::NoContent,
        });
    }
    let ts_ms = article
        .ts_ms
        .or_else(|| entry.stream_time_ms())
        .unwrap_or(0);
    Prepared::Check(
        IndexEntry {
            id: article.id,
            ts_ms,
            fingerprint,
        },
        insert,
    )
}

/// Call the index, retrying while it is unavailable. `None`: give up on this
/// entry for now (it stays pending and comes back). `ahead`: what an
/// insert-check read ahead of its turn, used by its first attempt.
async fn resolve<I: Index>(
    shared: &Shared<I>,
    prepared: Prepared,
    mut ahead: Option<I::ReadAhead>,
) -> Option<Resolution> {
    let _permit = shared.index_permits.acquire().await.ok()?;
    let mut attempt = 0u32;
    loop {
        let started = Instant::now();
        let result: Result<Resolution, IndexError> = match &prepared {
            Prepared::Ready(r) => return Some(r.clone()),
            Prepared::Check(entry, insert) => {
                let outcome = if let (true, Some(read)) = (*insert, ahead.take()) {
                    shared.index.check_and_insert_after(entry, read).await
                } else if *insert {
                    shared.index.check_and_insert(entry).await
                } else {
                    shared.index.query(entry).await
                };
                outcome.map(|o| {
                    shared.metrics.examined.observe_value(f64::from(o.examined));
                    Resolution::Decided {
                        id: entry.id.clone(),
                        op: if *insert { "check" } else { "query" },
                        verdict: o.verdict,
                        simhash: entry.fingerprint.simhash,
                        replayed: o.replayed,
                    }
                })
            }
            Prepared::Delete(id) => {
                shared
                    .index
                    .delete(id)
                    .await
                    .map(|found| Resolution::Deleted {
                        id: id.clone(),
                        found,
                    })
            }
        };
        shared.metrics.index_latency.observe(started.elapsed());
        match result {
            Ok(r) => {
                if matches!(r, Resolution::Decided { replayed: true, .. }) {
                    shared.metrics.replayed.inc();
                }
                return Some(r);
            }
            Err(IndexError::Unavailable(why)) => {
                shared.metrics.index_retries.inc();
                attempt += 1;
                tracing::warn!(%why, attempt, "index unavailable; retrying");
                tokio::time::sleep(backoff(attempt, shared.config.backoff_max_ms)).await;
            }
            Err(IndexError::Contention { attempts }) if attempt < 5 => {
                shared.metrics.index_retries.inc();
                attempt += 1;
                tracing::debug!(attempts, "index contention; retrying");
            }
            Err(e) => {
                tracing::error!(error = %e, "index failed; the entry stays pending and will be redelivered");
                return None;
            }
        }
    }
}

/// An ordered batch's index calls: up to `pipeline` at once, each started
/// in stream order once every earlier entry it could meet is decided
/// ([`may_interact`]); with `pipeline` 1, one after another, the first read of each insert-check done up to `read_ahead` entries early
/// (concurrently, pipelined on the shared connection) while the entries
/// before it decide and commit. A query or a delete is a barrier: nothing
/// after it is read before it is done, since what it does (or, for a query,
/// what it must see) depends on the entries before it.
async fn resolve_in_order<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    out: &mut Vec<Option<Resolution>>,
) {
    if shared.config.pipeline > 1 {
        return resolve_pipelined(shared, prepared, out).await;
    }
    let depth = shared.config.read_ahead;
    if depth == 0 {
        for p in prepared {
            out.push(resolve(shared, p, None).await);
        }
        return;
    }
    type Read<I> = Result<<I as Index>::ReadAhead, IndexError>;
    let mut prepared: Vec<Option<Prepared>> = prepared.into_iter().map(Some).collect();
    let mut reads: VecDeque<(usize, tokio::task::JoinHandle<Read<I>>)> = VecDeque::new();
    let mut next = 0;
    for i in 0..prepared.len() {
        next = next.max(i);
        while next < prepared.len() && next <= i + depth {
            match &prepared[next] {
                Some(Prepared::Check(entry, true)) => {
                    let (shared, entry) = (shared.clone(), entry.clone());
                    let read = tokio::spawn(async move {
                        let started = Instant::now();
                        let read = shared.index.read_ahead(&entry).await;
                        shared.metrics.read_ahead_latency.observe(started.elapsed());
                        read
                    });
                    reads.push_back((next, read));
                }
                Some(Prepared::Ready(_)) | None => {}
                // A query or a delete: nothing past it until it is done (also
                // when it is this turn's entry: it is resolved below, after
                // this loop).
                Some(_) => break,
            }
            next += 1;
        }
        let ahead = match reads.front() {
            Some((at, _)) if *at == i => match reads.pop_front().map(|(_, h)| h) {
                Some(read) => match read.await {
                    Ok(Ok(read)) => Some(read),
                    // Read again on its turn, where failures are retried.
                    Ok(Err(_)) | Err(_) => None,
                },
                None => None,
            },
            _ => None,
        };
        let p = prepared[i].take().expect("each entry is resolved once");
        out.push(resolve(shared, p, ahead).await);
    }
}

/// [`resolve_in_order`] with up to `pipeline` index calls in flight: a check
/// starts once every earlier check of the batch it may meet is decided, a
/// query or a delete once everything before it is.
async fn resolve_pipelined<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    out: &mut Vec<Option<Resolution>>,
) {
    type Call = tokio::task::JoinHandle<Option<Resolution>>;
    async fn finish(call: Call) -> Option<Resolution> {
        call.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "an index call panicked; its entry stays pending");
            None
        })
    }
    let first = out.len();
    out.resize(first + prepared.len(), None);
    // Checks in flight, oldest first: (position, article, call).
    let mut running: VecDeque<(usize, IndexEntry, Call)> = VecDeque::new();
    for (i, p) in prepared.into_iter().enumerate() {
        match p {
            Prepared::Ready(r) => out[first + i] = Some(r),
            Prepared::Check(entry, true) => {
                while let Some(at) = running.iter().position(|(_, e, _)| may_interact(e, &entry)) {
                    let (j, _, call) = running.remove(at).expect("found just now");
                    out[first + j] = finish(call).await;
                }
                while running.len() >= shared.config.pipeline {
                    let (j, _, call) = running.pop_front().expect("not empty");
                    out[first + j] = finish(call).await;
                }
                let (s, e) = (shared.clone(), entry.clone());
                let call =
                    tokio::spawn(async move { resolve(&s, Prepared::Check(e, true), None).await });
                running.push_back((i, entry, call));
            }
            barrier => {
                while let Some((j, _, call)) = running.pop_front() {
                    out[first + j] = finish(call).await;
                }
                out[first + i] = resolve(shared, barrier, None).await;
            }
        }
    }
    while let Some((j, _, call)) = running.pop_front() {
        out[first + j] = finish(call).await;
    }
}

/// Whether the verdict on one of two articles could depend on whether the
/// other is stored yet: the same id (a replay), or a shared 16-bit SimHash
/// block value at any position (every candidate within the distance bound
/// shares one at its own position: the pigeonhole index), the same content
/// hash, or a shared sketch hash (the lookup sketch hashes that candidate
/// lists are kept for are among them). Articles sharing none of these are
/// never each other's candidates in any index, and neither changes what the
/// other's commit validates, so their index calls may run in either order.
fn may_interact(a: &IndexEntry, b: &IndexEntry) -> bool {
    if a.id == b.id {
        return true;
    }
    let (fa, fb) = (&a.fingerprint, &b.fingerprint);
    if fa.is_empty() || fb.is_empty() {
        return false;
    }
    let theirs = crate::simhash::blocks(fb.simhash);
    fa.content == fb.content
        || crate::simhash::blocks(fa.simhash)
            .iter()
            .any(|x| theirs.contains(x))
        || share_any(&fa.signatures, &fb.signatures)
}

/// Whether two ascending lists share a value.
fn share_any(a: &[u32], b: &[u32]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// A batch's turn at the index: wait for the batch read before it to finish its
/// index calls, then let the next one go. A batch that fails drops `done`, which
/// also lets the next one go.
struct Turn {
    wait: Option<oneshot::Receiver<()>>,
    done: oneshot::Sender<()>,
}

/// Process one batch: fingerprint, decide, commit. Returns (emitted, skipped).
async fn process_batch<I: Index + 'static>(
    shared: Arc<Shared<I>>,
    entries: Vec<RawEntry>,
    permits: OwnedSemaphorePermit,
    turn: Turn,
) -> (u64, u64) {
    let n = entries.len();
    let result = run_batch(&shared, entries, turn).await;
    shared.metrics.in_flight.dec_by(n as i64);
    drop(permits);
    result
}

async fn run_batch<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    entries: Vec<RawEntry>,
    turn: Turn,
) -> (u64, u64) {
    // CPU work off the async threads: the fingerprinting pool spreads the
    // batch over the cores, at a lower priority (`fingerprint_pool`).
    let entries = Arc::new(entries);
    let (s, e) = (shared.clone(), entries.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        s.fingerprint_pool
            .install(|| e.par_iter().map(|x| prepare(&s, x)).collect::<Vec<_>>())
    })
    .await;
    let entries = Arc::try_unwrap(entries).unwrap_or_else(|a| (*a).clone());
    match prepared {
        Ok(p) => finish_batch(shared, entries, p, turn).await,
        Err(e) => {
            tracing::error!(error = %e, "fingerprinting panicked; the batch stays pending");
            release(shared, entries.iter());
            (0, 0)
        }
    }
}

fn release<'a>(shared: &Shared<impl Index>, entries: impl Iterator<Item = &'a RawEntry>) {
    let mut set = shared.in_flight.lock().unwrap_or_else(|p| p.into_inner());
    for e in entries {
        set.remove(&e.id);
    }
}

async fn finish_batch<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    entries: Vec<RawEntry>,
    prepared: Vec<Prepared>,
    turn: Turn,
) -> (u64, u64) {
    let mut resolutions: Vec<Option<Resolution>> = Vec::with_capacity(entries.len());
    if shared.config.ordered {
        // Our turn comes when the batch read before ours has made its index calls
        // (or failed); then ours, one after another, in stream order.
        if let Some(wait) = turn.wait {
            let _ = wait.await;
        }
        resolve_in_order(shared, prepared, &mut resolutions).await;
        let _ = turn.done.send(());
    } else {
        // Index calls, concurrently (bounded by `index_permits`), started in stream order.
        drop(turn);
        resolutions.resize(entries.len(), None);
        let mut calls = JoinSet::new();
        for (i, p) in prepared.into_iter().enumerate() {
            let shared = shared.clone();
            calls.spawn(async move { (i, resolve(&shared, p, None).await) });
        }
        while let Some(done) = calls.join_next().await {
            match done {
                Ok((i, r)) => resolutions[i] = r,
                Err(e) => {
                    tracing::error!(error = %e, "an index call panicked; its entry stays pending")
                }
            }
        }
    }
    let mut emits: Vec<Emit> = Vec::with_capacity(entries.len());
    let mut kinds: Vec<(&'static str, Option<&'static str>, Option<&'static str>)> = Vec::new();
    for (entry, r) in entries.iter().zip(&resolutions) {
        if let Some(r) = r {
            emits.push(emit_for(entry, r));
            let code = match r {
                Resolution::Rejected { why } => Some(why.code()),
                _ => None,
            };
            kinds.push((r.verdict(), r.signal(), code));
        }
    }
    // Commit in chunks, each retried until it succeeds (the script is
    // idempotent), so that Redis is never busy with one of them for long.
    let mut flags = Vec::with_capacity(emits.len());
    for chunk in emits.chunks(commit::ENTRIES_PER_CALL) {
        flags.extend(commit_retrying(shared, chunk).await);
    }
    let (mut emitted, mut skipped) = (0, 0);
    for (written, (verdict, signal, code)) in flags.iter().zip(kinds) {
        if *written {
            emitted += 1;
            shared.metrics.article(verdict, signal);
            if let Some(code) = code {
                shared.metrics.rejected(code);
                shared.metrics.dead_letters.inc();
            }
        } else {
            skipped += 1;
            shared.metrics.commit_skipped.inc();
        }
    }
    release(shared, entries.iter());
    tracing::debug!(emitted, skipped, "batch committed");
    (emitted, skipped)
}

/// One ack-and-emit call, retried with backoff until it succeeds.
async fn commit_retrying<I: Index>(shared: &Shared<I>, chunk: &[Emit]) -> Vec<bool> {
    let mut attempt = 0u32;
    loop {
        let started = Instant::now();
        let mut conn = shared.conn.clone();
        match shared.committer.commit(&mut conn, chunk).await {
            Ok(flags) => {
                shared.metrics.commit_latency.observe(started.elapsed());
                return flags;
            }
            Err(e) => {
                shared.metrics.redis_errors.inc();
                if is_connection_error(&e) {
                    shared.metrics.reconnects.inc();
                    shared.health.ready.store(false, Ordering::Relaxed);
                }
                attempt += 1;
                tracing::warn!(error = %e, attempt, "commit failed; retrying");
                tokio::time::sleep(backoff(attempt, shared.config.backoff_max_ms)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, simhash: u64, content: u64, signatures: &[u32]) -> IndexEntry {
        IndexEntry {
            id: id.into(),
            ts_ms: 0,
            fingerprint: Fingerprint {
                simhash,
                content,
                signatures: signatures.to_vec(),
                words: 10,
            },
        }
    }

    #[test]
    fn articles_meet_through_any_signal_a_candidate_is_found_by() {
        let a = entry("a", 0x1111_2222_3333_4444, 1, &[10, 20, 30]);
        let apart = entry("b", 0x5555_6666_7777_8888, 2, &[11, 21, 31]);
        assert!(!may_interact(&a, &apart));
        assert!(!may_interact(&apart, &a));
        // The same id, whatever the content: a replay.
        assert!(may_interact(&a, &entry("a", 0x5555_6666_7777_8888, 2, &[])));
        // One 16-bit block value, here at another position.
        assert!(may_interact(&a, &entry("b", 0x5555_1111_7777_8888, 2, &[])));
        // The content hash.
        assert!(may_interact(&a, &entry("b", 0x5555_6666_7777_8888, 1, &[])));
        // One sketch hash.
        assert!(may_interact(
            &a,
            &entry("b", 0x5555_6666_7777_8888, 2, &[5, 30, 40])
        ));
        // An empty fingerprint (no words) is nobody's candidate.
        let mut empty = entry("b", 0x1111_2222_3333_4444, 1, &[10]);
        empty.fingerprint.words = 0;
        assert!(!may_interact(&a, &empty));
        assert!(!may_interact(&empty, &a));
    }

    #[test]
    fn sorted_lists_share_a_value() {
        assert!(share_any(&[1, 5, 9], &[2, 9]));
        assert!(share_any(&[7], &[1, 3, 7]));
        assert!(!share_any(&[1, 5, 9], &[2, 6, 10]));
        assert!(!share_any(&[], &[1]));
    }
}
