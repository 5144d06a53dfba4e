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
//!   the entries of dead consumers ([`liveness`]) and any of its own no task
//!   holds, otherwise new entries — and spawns a task for it;
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
//! in the same script. A transient Redis error ([`crate::transient`]) is
//! retried where it happened, the entries kept (the worker reports not ready
//! meanwhile, [`health`]); an entry a task gave up on for any other reason
//! stays pending, is taken up again by this worker's next scan (or, if it
//! died, by a peer's), and is dead-lettered after `max_deliveries`.
//!
//! The worker is generic over the index, so its stream logic is tested with the
//! embedded index and deployed with the Redis one.

pub mod commit;
pub mod config;
pub mod fingerprint_pool;
pub mod health;
pub mod http;
pub mod liveness;
pub mod metrics;
pub mod order;
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
use redis::{RedisError, Value};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::article::{EventTimeBounds, Rejection};
use crate::connect::{Conn, ConnectOptions};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::index::{meet, Index, IndexEntry, IndexError};
use crate::keys::Keys;
use crate::transient::{self, Backoff};
use crate::version_stamp::StampError;

use commit::{CommitOptions, Committer, Emit};
pub use config::WorkerConfig;
pub use health::Health;
use health::Trouble;
use liveness::{Liveness, Reclaimed};
use metrics::Metrics;
use order::ReadLog;
use output::{emit_for, Resolution};
use shutdown::Shutdown;
use stream::{parse_entry, parse_xpending_range, parse_xreadgroup, RawEntry, Request};

/// How often a reader held by `order_slack` looks again, milliseconds (at
/// most: the claim interval if shorter).
const ORDER_POLL_MS: u64 = 20;

/// Errors that stop a worker (everything transient is retried inside).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The namespace holds fingerprints of another version.
    #[error(transparent)]
    Version(#[from] StampError),
    #[error("Redis: {0}")]
    Redis(#[from] RedisError),
    /// Redis refused a command by the user's ACL: it stays refused until an
    /// operator changes the ACL, so the worker stops and says which.
    #[error("Redis refused a command the worker needs ({0}): {ACL_ADVICE}", ACL_ADVICE = transient::ACL_ADVICE)]
    Permission(RedisError),
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
    /// Entries in flight at the shutdown bound whose commit, sent before it,
    /// Redis ran after it (no longer pending when the worker asked Redis).
    pub settled_after_bound: u64,
    /// Entries left pending for others at the shutdown bound (as Redis
    /// counts them; if Redis could not be asked, those in flight then).
    pub abandoned: u64,
}

/// A stream worker over index `I`.
pub struct Worker<I> {
    /// The `redis_url` setting: one node, cluster seeds or sentinels.
    redis_url: String,
    index: Arc<I>,
    fingerprinter: Fingerprinter,
    config: Arc<WorkerConfig>,
    keys: Keys,
    consumer: String,
    max_text_bytes: usize,
    /// `decision.window_ms`: event times older than this are rejected.
    window_ms: u64,
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
    conn: Conn,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    max_text_bytes: usize,
    event_times: EventTimeBounds,
    /// Ids of entries some task of this worker is processing, so a claim or a
    /// history read does not start a second copy of the same work.
    in_flight: Mutex<HashSet<String>>,
    index_permits: Semaphore,
    /// The input stream and this worker's consumer name.
    stream: String,
    consumer: String,
    /// Whether this worker has warned that the input stream's entry ids are
    /// ahead of its clock: once per stream, not once per entry.
    warned_future_ids: AtomicBool,
}

impl<I: Index + 'static> Worker<I> {
    /// A worker for namespace `namespace` on the Redis `redis_url` names
    /// (see [`crate::connect`] for its forms), deciding with `index`.
    pub fn new(
        redis_url: &str,
        namespace: &str,
        index: Arc<I>,
        fingerprinter: Fingerprinter,
        config: WorkerConfig,
        max_text_bytes: usize,
    ) -> Result<Worker<I>, WorkerError> {
        crate::keys::validate_namespace(namespace).map_err(WorkerError::Config)?;
        config.validate().map_err(WorkerError::Config)?;
        crate::connect::validate_url(redis_url).map_err(WorkerError::Config)?;
        Ok(Worker {
            redis_url: redis_url.to_owned(),
            index,
            fingerprinter,
            consumer: config.consumer_name(),
            config: Arc::new(config),
            keys: Keys::new(namespace),
            max_text_bytes,
            window_ms: crate::decision::DecisionConfig::default().window_ms,
            metrics: Arc::new(Metrics::default()),
            health: Arc::new(Health::default()),
        })
    }

    /// Use `window_ms` (`decision.window_ms`) to bound event times: the
    /// default window unless set.
    pub fn event_window(mut self, window_ms: u64) -> Worker<I> {
        self.window_ms = window_ms;
        self
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
    async fn connect(&self, response_timeout: Duration, shutdown: &mut Shutdown) -> Option<Conn> {
        let options = ConnectOptions {
            response_timeout,
            connection_timeout: Duration::from_millis(self.config.command_timeout_ms),
            ..ConnectOptions::default()
        };
        let mut backoff = Backoff::new(Duration::from_millis(self.config.backoff_max_ms));
        loop {
            match Conn::connect(&self.redis_url, &options).await {
                Ok(c) => return Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot connect to Redis; retrying");
                    self.metrics.redis_errors.inc();
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.recv() => return None,
                    }
                }
            }
        }
    }

    /// Run until `shutdown` fires; then finish (or, past the bound, abandon) what
    /// is in flight and return.
    pub async fn run(self, mut shutdown: Shutdown) -> Result<RunSummary, WorkerError> {
        self.health
            .alive
            .store(true, std::sync::atomic::Ordering::Relaxed);
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
                wait_replicas: cfg.wait_replicas,
                wait_timeout_ms: cfg.wait_timeout_ms,
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
            event_times: EventTimeBounds {
                window_ms: self.window_ms,
                max_skew_ms: cfg.max_clock_skew_ms,
            },
            in_flight: Mutex::new(HashSet::new()),
            index_permits: Semaphore::new(cfg.index_concurrency),
            stream: self.keys.input_stream(),
            consumer: self.consumer.clone(),
            warned_future_ids: AtomicBool::new(false),
        });
        let liveness = Liveness::new(&self.keys, &cfg.group, &self.consumer, cfg.liveness_ttl_ms);
        // Liveness key, group and script, retried until they work (Redis may
        // still be starting). The key comes before the first read: a consumer
        // without one is taken for dead.
        let mut backoff = Backoff::new(Duration::from_millis(cfg.backoff_max_ms));
        loop {
            let mut c = shared.conn.clone();
            let r = async {
                match crate::version_stamp::claim(&mut c, &self.keys).await {
                    Err(StampError::Redis(e)) => return Err(e),
                    Err(refused) => return Ok(Err(refused)),
                    Ok(()) => {}
                }
                liveness.beat(&mut c).await?;
                ensure_group(&mut c, &self.keys.input_stream(), &cfg.group).await?;
                shared.committer.load(&mut c).await.map(Ok)
            }
            .await;
            match r {
                Ok(Err(refused)) => return Err(refused.into()),
                Ok(Ok(_)) => break,
                Err(e) if transient::is_refused_by_acl(&e) => {
                    return Err(WorkerError::Permission(e))
                }
                // Anything else but a server that cannot serve yet is a
                // fault no retry mends.
                Err(e) if !transient::is_transient(&e) => return Err(e.into()),
                Err(e) => {
                    self.note_error(&e, "preparing the consumer group");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.recv() => return Ok(RunSummary::default()),
                    }
                }
            }
        }
        let heartbeat = tokio::spawn(heartbeat(shared.clone(), liveness.clone()));
        self.health.started();
        tracing::info!(consumer = %self.consumer, stream = %self.keys.input_stream(), group = %cfg.group, "worker started");

        let permits = Arc::new(Semaphore::new(cfg.max_in_flight));
        // One batch more, for taking over a dead peer's entries while every
        // slot of `permits` is held: batches waiting for an earlier entry a
        // dead peer holds (`order_across_workers`) keep their slots, and the
        // entries they wait for come only through this take-over.
        let takeover_permits = Arc::new(Semaphore::new(cfg.batch_size));
        let mut tasks: JoinSet<(u64, u64)> = JoinSet::new();
        // Batches take turns at the index in read order: each waits for the one
        // read before it (see `WorkerConfig::ordered`).
        let turns = Arc::new(order::Turns::default());
        let mut summary = RunSummary::default();
        // First read our own pending history (a restart under the same name).
        let mut read_history = true;
        // New entries read, for the bound on order across workers.
        let mut read_log = ReadLog::new(cfg.order_slack);
        // A read the user's ACL refuses: the worker winds down and says so.
        let mut refused: Option<RedisError> = None;
        // Since when the reader waits for an entry pending elsewhere.
        let mut waiting_since: Option<Instant> = None;
        let mut next_claim = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(cfg.backoff_max_ms));
        // Held while the reader's calls fail with a transient error.
        let mut trouble: Option<Trouble> = None;
        while !shutdown.is_shutdown() {
            while let Some(done) = tasks.try_join_next() {
                collect(&mut summary, done);
            }
            let batch = cfg.batch_size as u32;
            // A round on `takeover_permits`: it only takes over, never reads new entries.
            let mut takeover_round = false;
            let claim_due = tokio::time::Instant::from_std(next_claim);
            let held = tokio::select! {
                p = permits.clone().acquire_many_owned(batch) => p.expect("semaphore never closed"),
                p = async {
                    tokio::time::sleep_until(claim_due).await;
                    takeover_permits.clone().acquire_many_owned(batch).await
                }, if !read_history => {
                    takeover_round = true;
                    p.expect("semaphore never closed")
                }
                _ = shutdown.recv() => break,
            };
            let seen = self.health.recoveries();
            let now = Instant::now();
            // Whether this round read new entries (or was held from it).
            let mut fresh = false;
            // Held from before a take-over until its batch has its turn.
            let mut takeover_hold: Option<order::Turn> = None;
            let result = if read_history {
                self.read(&mut reader, "0", false).await.map(Some)
            } else if now >= next_claim {
                next_claim = now + Duration::from_millis(cfg.claim_interval_ms);
                self.refresh_gauges(&mut reader).await;
                // Entries taken over are older than those in flight: no batch
                // starts deciding until they have their turn (below), or
                // until none came.
                takeover_hold = Some(turns.hold());
                match self.take_over(&shared, &liveness, &mut reader).await {
                    // A full batch: there may be more, look again at once.
                    Ok(entries) if entries.len() >= cfg.batch_size => {
                        next_claim = now;
                        Ok(Some(entries))
                    }
                    Ok(entries) if entries.is_empty() && takeover_round => Ok(Some(entries)),
                    Ok(entries) if entries.is_empty() => {
                        // Nothing taken over: batches go on while the read
                        // blocks (up to `block_ms`).
                        takeover_hold = None;
                        fresh = true;
                        self.read_new(&mut reader, &mut read_log).await
                    }
                    other => other.map(Some),
                }
            } else {
                fresh = true;
                self.read_new(&mut reader, &mut read_log).await
            };
            let entries = match result {
                Ok(None) => {
                    // Too far past an entry pending elsewhere: wait (the
                    // scans for dead peers' entries go on meanwhile).
                    trouble = None;
                    if waiting_since.is_none() {
                        waiting_since = Some(Instant::now());
                        self.metrics.order_waits.inc();
                        tracing::debug!(
                            slack = cfg.order_slack,
                            "read the slack past an entry pending on another consumer: waiting for it"
                        );
                    }
                    drop((held, takeover_hold));
                    let pause = Duration::from_millis(cfg.claim_interval_ms.min(ORDER_POLL_MS));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = shutdown.recv() => {}
                    }
                    continue;
                }
                Ok(Some(entries)) => {
                    if let Some(since) = waiting_since.take_if(|_| fresh) {
                        self.metrics
                            .order_wait_ms
                            .inc_by(since.elapsed().as_millis() as u64);
                    }
                    trouble = None;
                    backoff = Backoff::new(Duration::from_millis(cfg.backoff_max_ms));
                    entries
                }
                Err(e) if transient::is_refused_by_acl(&e) => {
                    drop((held, takeover_hold));
                    refused = Some(e);
                    break;
                }
                Err(e) => {
                    if transient::is_transient(&e) {
                        let reason = transient::reason(&e);
                        match &trouble {
                            Some(_) => self.health.still(reason),
                            None => {
                                let holding = self.metrics.in_flight.get();
                                trouble = Some(self.health.trouble(reason, &self.metrics, holding));
                            }
                        }
                        self.metrics.redis_errors.inc();
                        count_reconnect(&self.metrics, &e);
                        tracing::debug!(error = %e, "reading the input stream failed; retrying");
                    } else {
                        self.note_error(&e, "reading the input stream");
                    }
                    // A read whose reply was lost may have delivered entries
                    // to us: the next scan finds them (`take_over`).
                    drop((held, takeover_hold));
                    tokio::select! {
                        _ = self.health.pause(seen, backoff.next_delay()) => {}
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
            let first = order::StreamId::parse(&entries[0].id).unwrap_or(order::StreamId::MIN);
            let turn = turns.enter(first);
            drop(takeover_hold);
            tasks.spawn(async move { process_batch(shared, entries, held, turn).await });
        }
        drop(trouble);

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
        let mut holding = 0;
        match drained {
            Ok(s) => {
                summary.emitted += s.emitted;
                summary.skipped += s.skipped;
            }
            Err(_) => {
                // The futures above were dropped with `tasks` borrowed: abort
                // the rest, and wait until they are gone.
                let in_flight: HashSet<String> = shared
                    .in_flight
                    .lock()
                    .map(|s| s.clone())
                    .unwrap_or_default();
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                // Commits sent before the bound still run in Redis, answered
                // or not: ask Redis what is left (the same connection, so
                // after them).
                let mut c = shared.conn.clone();
                match self
                    .own_pending(&mut c, in_flight.len() + cfg.batch_size)
                    .await
                {
                    Ok(left) => {
                        let left: HashSet<String> = left.into_iter().map(|(id, _)| id).collect();
                        summary.abandoned = left.len() as u64;
                        summary.settled_after_bound =
                            in_flight.iter().filter(|id| !left.contains(*id)).count() as u64;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not ask Redis what is left pending");
                        summary.abandoned = in_flight.len() as u64;
                    }
                }
                holding = summary.abandoned as usize;
                tracing::warn!(
                    abandoned = summary.abandoned,
                    settled_after_bound = summary.settled_after_bound,
                    "shutdown bound reached: unfinished entries stay pending and are taken over by other workers"
                );
            }
        }
        heartbeat.abort();
        let mut c = shared.conn.clone();
        if let Err(e) = liveness.end(&mut c, holding).await {
            tracing::warn!(error = %e, "could not remove the liveness key: peers take over after its TTL");
        }
        self.health.alive.store(false, Ordering::Relaxed);
        tracing::info!(
            outputs_written = summary.emitted,
            committed_after_bound = summary.settled_after_bound,
            already_done_elsewhere = summary.skipped,
            left_pending = summary.abandoned,
            "worker stopped"
        );
        match refused {
            Some(e) => Err(WorkerError::Permission(e)),
            None => Ok(summary),
        }
    }

    fn note_error(&self, e: &RedisError, what: &str) {
        self.metrics.redis_errors.inc();
        count_reconnect(&self.metrics, e);
        tracing::warn!(error = %e, "{what} failed; retrying");
    }

    /// XREADGROUP from `id` (`>`: new entries, blocking; `0`: our own pending).
    async fn read(
        &self,
        conn: &mut Conn,
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
        let mut entries = parse_xreadgroup(reply).map_err(reply_error)?;
        if id != ">" && !entries.is_empty() {
            self.fill_deliveries(conn, &mut entries).await?;
        }
        if !entries.is_empty() {
            self.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// New entries (XREADGROUP `>`), unless this worker has read
    /// `order_slack` entries past the oldest entry pending on another
    /// consumer: then `None` ([`order`]).
    async fn read_new(
        &self,
        conn: &mut Conn,
        log: &mut ReadLog,
    ) -> Result<Option<Vec<RawEntry>>, RedisError> {
        if log.may_hold() {
            let stream = self.keys.input_stream();
            let oldest =
                order::oldest_elsewhere(conn, &stream, &self.config.group, &self.consumer).await?;
            if log.must_wait(oldest) {
                return Ok(None);
            }
        }
        let entries = self.read(conn, ">", true).await?;
        log.record(entries.iter().map(|e| e.id.as_str()));
        Ok(Some(entries))
    }

    /// Up to a batch of entries to take up: first our own pending entries no
    /// task holds (a task gave up on them, or a read's reply was lost), then
    /// those of consumers whose liveness key expired ([`liveness`]), once
    /// Redis has served us without a transient error for a whole TTL.
    async fn take_over(
        &self,
        shared: &Shared<I>,
        liveness: &Liveness,
        conn: &mut Conn,
    ) -> Result<Vec<RawEntry>, RedisError> {
        let started = Instant::now();
        let count = self.config.batch_size;
        let orphans: Vec<String> = {
            let ours = self
                .own_pending(conn, count + self.config.max_in_flight)
                .await?;
            let set = shared.in_flight.lock().unwrap_or_else(|p| p.into_inner());
            ours.into_iter()
                .map(|(id, _)| id)
                .filter(|id| !set.contains(id))
                .take(count)
                .collect()
        };
        let mut entries = Vec::new();
        if !orphans.is_empty() {
            // XCLAIM drops an entry deleted from the stream (XDEL, trimming)
            // from the pending list without a word: those are left pending
            // and answered `entry_deleted`, which acks them.
            let stream = self.keys.input_stream();
            let mut pipe = redis::pipe();
            for id in &orphans {
                pipe.cmd("XRANGE").arg(&stream).arg(id).arg(id);
            }
            let found: Vec<Value> = pipe.query_async(conn).await?;
            let (present, gone): (Vec<_>, Vec<_>) = orphans
                .into_iter()
                .zip(found)
                .partition(|(_, v)| matches!(v, Value::Array(a) if !a.is_empty()));
            if !present.is_empty() {
                let reply: Value = redis::cmd("XCLAIM")
                    .arg(&stream)
                    .arg(&self.config.group)
                    .arg(&self.consumer)
                    .arg(0)
                    .arg(present.iter().map(|(id, _)| id).collect::<Vec<_>>())
                    .query_async(conn)
                    .await?;
                entries = stream::parse_entry_list(&reply).map_err(reply_error)?;
            }
            stream::add_deleted(&mut entries, gone.into_iter().map(|(id, _)| id));
            tracing::info!(
                count = entries.len(),
                "taking up own pending entries no task holds"
            );
        } else if self
            .health
            .available_for()
            .is_some_and(|t| t >= liveness.ttl())
        {
            for peer in liveness.suspects(conn).await? {
                match liveness.reclaim(conn, &peer.name, count).await? {
                    Reclaimed::Alive => {}
                    Reclaimed::Removed => {
                        tracing::info!(consumer = %peer.name, "removed a dead consumer from the group")
                    }
                    Reclaimed::Claimed(claimed) => {
                        self.metrics.claimed.inc_by(claimed.len() as u64);
                        tracing::info!(consumer = %peer.name, count = claimed.len(), "took over a dead consumer's pending entries");
                        entries = claimed;
                        break;
                    }
                }
            }
        }
        if !entries.is_empty() {
            self.fill_deliveries(conn, &mut entries).await?;
            self.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// This consumer's pending entries, oldest first: (id, deliveries).
    async fn own_pending<C: redis::aio::ConnectionLike + Send>(
        &self,
        conn: &mut C,
        count: usize,
    ) -> Result<Vec<(String, u64)>, RedisError> {
        let reply: Value = redis::cmd("XPENDING")
            .arg(self.keys.input_stream())
            .arg(&self.config.group)
            .arg("-")
            .arg("+")
            .arg(count)
            .arg(&self.consumer)
            .query_async(conn)
            .await?;
        parse_xpending_range(&reply).map_err(reply_error)
    }

    /// Delivery counts of (re)delivered entries, from XPENDING in one call.
    async fn fill_deliveries(
        &self,
        conn: &mut Conn,
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
    async fn refresh_gauges(&self, conn: &mut Conn) {
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

/// Refresh the liveness key every third of its TTL until aborted. A refresh
/// that fails is not retried: the next beat comes soon, and two may fail
/// before peers take over. A transient failure makes the worker not ready
/// like any other (so `/readyz` shows an outage even with no traffic).
async fn heartbeat<I: Index>(shared: Arc<Shared<I>>, liveness: Liveness) {
    let mut trouble: Option<Trouble> = None;
    let mut tick = tokio::time::interval(liveness.beat_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut c = shared.conn.clone();
        match liveness.beat(&mut c).await {
            Ok(()) => trouble = None,
            Err(e) if transient::is_transient(&e) => {
                shared.metrics.redis_errors.inc();
                let reason = transient::reason(&e);
                match &trouble {
                    Some(_) => shared.health.still(reason),
                    None => trouble = Some(shared.trouble(reason)),
                }
            }
            Err(e) => {
                shared.metrics.redis_errors.inc();
                tracing::warn!(error = %e, "refreshing the liveness key failed");
            }
        }
    }
}

impl<I: Index> Shared<I> {
    /// A call of a batch task failed with a transient error: see [`Health::trouble`].
    fn trouble(&self, reason: &str) -> Trouble {
        let holding = self.metrics.in_flight.get();
        self.health.trouble(reason, &self.metrics, holding)
    }
}

/// A broken connection (the connection manager reconnects), counted apart
/// from other failed calls.
fn count_reconnect(metrics: &Metrics, e: &RedisError) {
    if e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal() {
        metrics.reconnects.inc();
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
    // The cheap checks (sizes above, the event time here) come before the
    // fingerprint, the one step whose cost grows with the text.
    let now = now_ms();
    let ts_ms = article
        .ts_ms
        .unwrap_or_else(|| entry_time(shared, entry, now));
    if let Err(why) = shared.event_times.check(ts_ms, now) {
        return Prepared::Ready(Resolution::Rejected { why });
    }
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
    Prepared::Check(
        IndexEntry {
            id: article.id,
            ts_ms,
            fingerprint,
        },
        insert,
    )
}

/// The event time of an entry without `ts`: its stream time (the `<ms>` of
/// its id) when that is plausible, no later than the worker's clock plus the
/// allowed skew; otherwise the worker's clock.
///
/// Redis numbers each `XADD *` entry after the stream's last id, so one entry
/// added with an explicit id far in the future (`32503680000000-0`) gives every
/// later entry that time: taken as event times, they would all be rejected
/// `ts_in_future` until the stream is deleted. Warned about once per stream.
fn entry_time(shared: &Shared<impl Index>, entry: &RawEntry, now_ms: i64) -> i64 {
    let latest = now_ms.saturating_add(shared.event_times.max_skew_ms as i64);
    match entry.stream_time_ms() {
        Some(t) if t <= latest => t,
        stream_time => {
            if !shared.warned_future_ids.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    stream = %shared.stream,
                    entry = %entry.id,
                    ahead_s = stream_time.map_or(0, |t| (t - now_ms) / 1000),
                    "the input stream's entry ids are ahead of this worker's clock (an entry was \
                     added with an explicit id in the future?): entries without `ts` take the \
                     worker's clock as their event time; warned once per stream"
                );
            }
            now_ms
        }
    }
}

/// The worker's clock, unix milliseconds.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Call the index, retrying while it is unavailable. `None`: give up on this
/// entry for now (it stays pending and comes back).
async fn resolve<I: Index>(shared: &Shared<I>, prepared: Prepared) -> Option<Resolution> {
    let _permit = shared.index_permits.acquire().await.ok()?;
    let mut attempt = 0u32;
    let mut backoff = Backoff::new(Duration::from_millis(shared.config.backoff_max_ms));
    // Held while the index is unavailable: the entry waits here, its place
    // and delivery count kept.
    let mut trouble: Option<Trouble> = None;
    loop {
        let started = Instant::now();
        let seen = shared.health.recoveries();
        let result: Result<Resolution, IndexError> = match &prepared {
            Prepared::Ready(r) => return Some(r.clone()),
            Prepared::Check(entry, insert) => {
                let outcome = if *insert {
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
            Err(IndexError::Unavailable {
                reason: why,
                source,
            }) => {
                shared.metrics.index_retries.inc();
                let reason = source.as_ref().map_or("unreachable", transient::reason);
                match &trouble {
                    Some(_) => shared.health.still(reason),
                    None => trouble = Some(shared.trouble(reason)),
                }
                tracing::debug!(%why, "index unavailable; retrying");
                shared.health.pause(seen, backoff.next_delay()).await;
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
/// ([`may_interact`]); with `pipeline` 1, one after another. A query or a
/// delete is a barrier: nothing after it starts before it is done, since what
/// it does (or, for a query, what it must see) depends on the entries before
/// it.
async fn resolve_in_order<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    out: &mut Vec<Option<Resolution>>,
) {
    if shared.config.pipeline > 1 {
        return resolve_pipelined(shared, prepared, out).await;
    }
    for p in prepared {
        out.push(resolve(shared, p).await);
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
                let call = tokio::spawn(async move { resolve(&s, Prepared::Check(e, true)).await });
                running.push_back((i, entry, call));
            }
            barrier => {
                while let Some((j, _, call)) = running.pop_front() {
                    out[first + j] = finish(call).await;
                }
                out[first + i] = resolve(shared, barrier).await;
            }
        }
    }
    while let Some((j, _, call)) = running.pop_front() {
        out[first + j] = finish(call).await;
    }
}

/// Whether the verdict on one of two articles could depend on whether the
/// other is stored yet ([`meet::may_meet`]): articles that cannot meet are
/// never each other's candidates in any index, and neither changes what the
/// other's commit validates, so their index calls may run in either order.
fn may_interact(a: &IndexEntry, b: &IndexEntry) -> bool {
    meet::may_meet(&a.id, &a.fingerprint, &b.id, &b.fingerprint)
}

/// Wait, before a batch's index calls, until no other consumer of the group
/// holds an entry before its first ([`order::wait_for_earlier`]): batches of
/// different workers decide in stream order too. At most two liveness bounds
/// (TTL + claim interval) of Redis serving this worker: by then an entry held
/// by a dead peer has been taken over, and past it the batch goes on rather
/// than wait for one that never moves. While Redis fails, peers' calls fail
/// too and nobody is judged dead: that time does not count, or the batches
/// held by an outage would decide in whatever order their retries succeed.
async fn wait_for_peers<I: Index>(shared: &Shared<I>, turn: &order::Turn) {
    let cfg = &shared.config;
    if !cfg.order_across_workers {
        return;
    }
    let bound = Duration::from_millis(2 * (cfg.liveness_ttl_ms + cfg.claim_interval_ms));
    let started = Instant::now();
    let give_up = |waited: Duration| {
        waited >= bound && shared.health.available_for().is_some_and(|t| t >= bound)
    };
    let waited = order::wait_for_earlier(turn, give_up, PEER_POLL, || async {
        let mut c = shared.conn.clone();
        // Redis failed: the index call meets that failure and holds the
        // batch itself.
        order::oldest_elsewhere(&mut c, &shared.stream, &cfg.group, &shared.consumer)
            .await
            .unwrap_or(None)
    })
    .await;
    if waited == order::Waited::GaveUp {
        shared.metrics.order_given_up.inc();
        tracing::warn!(
            waited_ms = started.elapsed().as_millis() as u64,
            "another consumer still holds an earlier entry: deciding this batch anyway"
        );
    }
    if waited != order::Waited::No {
        shared.metrics.order_waits.inc();
        shared
            .metrics
            .order_wait_ms
            .inc_by(started.elapsed().as_millis() as u64);
    }
}

/// How often a batch waiting for an earlier entry held by another consumer
/// looks again.
const PEER_POLL: Duration = Duration::from_millis(2);

/// Process one batch: fingerprint, decide, commit. Returns (emitted, skipped).
async fn process_batch<I: Index + 'static>(
    shared: Arc<Shared<I>>,
    entries: Vec<RawEntry>,
    permits: OwnedSemaphorePermit,
    turn: order::Turn,
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
    turn: order::Turn,
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
    turn: order::Turn,
) -> (u64, u64) {
    let mut resolutions: Vec<Option<Resolution>> = Vec::with_capacity(entries.len());
    if shared.config.ordered {
        // Our turn comes when every batch of ours before it in the stream has
        // made its index calls (or failed), and no other consumer holds an
        // entry before it; then ours, one after another, in stream order.
        turn.wait().await;
        wait_for_peers(shared, &turn).await;
        resolve_in_order(shared, prepared, &mut resolutions).await;
        drop(turn);
    } else {
        // Index calls, concurrently (bounded by `index_permits`), started in stream order.
        drop(turn);
        resolutions.resize(entries.len(), None);
        let mut calls = JoinSet::new();
        for (i, p) in prepared.into_iter().enumerate() {
            let shared = shared.clone();
            calls.spawn(async move { (i, resolve(&shared, p).await) });
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

/// One ack-and-emit call, retried with backoff until it succeeds (the
/// script is idempotent). A transient error makes the worker not ready
/// meanwhile; any other is logged at each attempt. With
/// `worker.wait_replicas`, a call that fewer replicas acknowledged in time
/// is sent again (a no-op for what it already wrote, then `WAIT` once more),
/// so the entries stay held until the replicas have them.
async fn commit_retrying<I: Index>(shared: &Shared<I>, chunk: &[Emit]) -> Vec<bool> {
    let mut backoff = Backoff::new(Duration::from_millis(shared.config.backoff_max_ms));
    let mut trouble: Option<Trouble> = None;
    // Entries written by an earlier attempt whose replicas were too few.
    let mut written = vec![false; chunk.len()];
    loop {
        let started = Instant::now();
        let seen = shared.health.recoveries();
        let mut conn = shared.conn.clone();
        match shared.committer.commit(&mut conn, chunk).await {
            Ok(done) => {
                for (w, now) in written.iter_mut().zip(&done.written) {
                    *w |= *now;
                }
                let wanted = shared.config.wait_replicas;
                if done.replicated(wanted) {
                    shared.metrics.commit_latency.observe(started.elapsed());
                    return written;
                }
                shared.metrics.replica_waits_timed_out.inc();
                if trouble.is_none() {
                    trouble = Some(shared.trouble("NOREPLICAS"));
                }
                tracing::warn!(
                    acknowledged = done.replicas.unwrap_or(0),
                    wanted,
                    "too few replicas acknowledged a commit in time; holding it and asking again"
                );
            }
            Err(e) => {
                shared.metrics.redis_errors.inc();
                count_reconnect(&shared.metrics, &e);
                if transient::is_transient(&e) {
                    let reason = transient::reason(&e);
                    match &trouble {
                        Some(_) => shared.health.still(reason),
                        None => trouble = Some(shared.trouble(reason)),
                    }
                    tracing::debug!(error = %e, "commit failed; retrying");
                } else {
                    tracing::warn!(error = %e, "commit failed; retrying");
                }
            }
        }
        shared.health.pause(seen, backoff.next_delay()).await;
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
                numbers: Vec::new(),
                ..Default::default()
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
        // One 16-bit block value at its position; at another it finds nothing.
        assert!(may_interact(&a, &entry("b", 0x5555_2222_7777_8888, 2, &[])));
        assert!(!may_interact(
            &a,
            &entry("b", 0x5555_1111_7777_8888, 2, &[])
        ));
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
}
