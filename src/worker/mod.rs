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
//!   so verdicts match `scan`, with up to
//!   `WorkerConfig::ordered_index_concurrency` calls in flight among
//!   articles that cannot be each other's candidates — then
//!   commits the batch with script calls of up to 16 entries ([`ack`]) and
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
//!
//! Where each part lives:
//!
//! - this file: [`Worker`], the outline of its run (start, read until
//!   shutdown, drain, stop) and the public types;
//! - `shared.rs`: the state the reader and the batch tasks share, and the
//!   set of entries in flight;
//! - `reader.rs`: the read loop — history, take-over of orphaned and dead
//!   consumers' entries, new entries within `order_slack`;
//! - `tasks.rs`: the batch tasks in flight, what they did, and the drain at
//!   shutdown;
//! - `batch.rs`: one batch — preparing its entries, ordering and resolving
//!   its index calls;
//! - `emit.rs`: committing a batch's verdicts, with retries and `WAIT`;
//! - [`ack`], [`output`], [`stream`], [`order`], [`liveness`] (with the
//!   heartbeat), [`health`], [`metrics`]: the pieces those are made of;
//!   [`config`], [`service`], [`http`], [`shutdown`], [`tools`]: settings,
//!   the service around a worker, and the operator tools.

pub mod ack;
mod batch;
pub mod config;
mod emit;
pub mod fingerprint_pool;
pub mod health;
pub mod http;
pub mod liveness;
pub mod metrics;
pub mod order;
pub mod output;
mod reader;
pub mod service;
mod shared;
pub mod shutdown;
pub mod stream;
mod tasks;
pub mod tools;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisError;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::article::EventTimeBounds;
use crate::connect::{Conn, ConnectOptions};
use crate::fingerprint::Fingerprinter;
use crate::index::Index;
use crate::keys::Keys;
use crate::transient::{self, Backoff};
use crate::version_stamp::StampError;

use ack::{AckOptions, AckScript};
pub use config::WorkerConfig;
pub use health::Health;
use liveness::{heartbeat, Liveness};
use metrics::Metrics;
pub use reader::ensure_group;
use reader::Reader;
use shared::Shared;
use shutdown::Shutdown;
use tasks::BatchTasks;

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
    #[error("Redis refused a command the worker needs")]
    Permission(#[source] RedisError),
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
        self.health.alive.store(true, Ordering::Relaxed);
        let Some((shared, reader_conn, liveness)) = self.start(&mut shutdown).await? else {
            return Ok(RunSummary::default());
        };
        let heartbeat = tokio::spawn(heartbeat(shared.clone(), liveness.clone()));
        self.health.started();
        tracing::info!(consumer = %self.consumer, stream = %self.keys.input_stream(), group = %self.config.group, "worker started");

        let mut tasks = BatchTasks::new(shared.clone());
        let mut reader = Reader::new(shared.clone(), liveness.clone(), reader_conn);
        let refused = reader.run(&mut tasks, &mut shutdown).await;

        // Graceful shutdown: stop reading (done), finish what is in flight.
        self.health.ready.store(false, Ordering::Relaxed);
        let summary = tasks.drain().await;
        heartbeat.abort();
        self.stop(&shared, &liveness, &summary).await;
        match refused {
            Some(e) => Err(WorkerError::Permission(e)),
            None => Ok(summary),
        }
    }

    /// Connect (the reader's connection first, then the one every other call
    /// shares) and prepare the namespace: the shared state, the reader's
    /// connection and the liveness key. `None`: shutdown came first.
    async fn start(
        &self,
        shutdown: &mut Shutdown,
    ) -> Result<Option<(Arc<Shared<I>>, Conn, Liveness)>, WorkerError> {
        let command_timeout = Duration::from_millis(self.config.command_timeout_ms);
        // The blocking read must not time out client-side before Redis answers.
        let read_timeout = Duration::from_millis(self.config.block_ms) + command_timeout;
        let Some(reader) = self.connect(read_timeout, shutdown).await else {
            return Ok(None);
        };
        let Some(conn) = self.connect(command_timeout, shutdown).await else {
            return Ok(None);
        };
        let shared = Arc::new(self.shared(conn)?);
        let cfg = &self.config;
        let liveness = Liveness::new(&self.keys, &cfg.group, &self.consumer, cfg.liveness_ttl_ms);
        if !self.prepare(&shared, &liveness, shutdown).await? {
            return Ok(None);
        }
        Ok(Some((shared, reader, liveness)))
    }

    /// The state the reader and the batch tasks share, over `conn`.
    fn shared(&self, conn: Conn) -> Result<Shared<I>, WorkerError> {
        let cfg = &self.config;
        let ack_script = AckScript::new(
            &self.keys,
            AckOptions {
                group: cfg.group.clone(),
                output_maxlen: cfg.output_maxlen,
                dead_maxlen: cfg.dead_maxlen,
                delete_processed: cfg.delete_processed,
                wait_replicas: cfg.wait_replicas,
                wait_timeout_ms: cfg.wait_timeout_ms,
            },
        );
        Ok(Shared {
            index: self.index.clone(),
            fingerprinter: self.fingerprinter.clone(),
            fingerprint_pool: fingerprint_pool::build(cfg.fingerprint_nice)?,
            config: cfg.clone(),
            ack_script,
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
        })
    }

    /// The version stamp, the liveness key, the group and the ack-and-emit
    /// script, retried until they work (Redis may still be starting). The key
    /// comes before the first read: a consumer without one is taken for dead.
    /// `false`: shutdown came first.
    async fn prepare(
        &self,
        shared: &Shared<I>,
        liveness: &Liveness,
        shutdown: &mut Shutdown,
    ) -> Result<bool, WorkerError> {
        let mut backoff = Backoff::new(Duration::from_millis(self.config.backoff_max_ms));
        loop {
            let mut c = shared.conn.clone();
            let r = async {
                match crate::version_stamp::claim(&mut c, &self.keys).await {
                    Err(StampError::Redis(e)) => return Err(e),
                    Err(refused) => return Ok(Err(refused)),
                    Ok(()) => {}
                }
                liveness.beat(&mut c).await?;
                ensure_group(&mut c, &self.keys.input_stream(), &self.config.group).await?;
                shared.ack_script.load(&mut c).await.map(Ok)
            }
            .await;
            match r {
                Ok(Err(refused)) => return Err(refused.into()),
                Ok(Ok(_)) => return Ok(true),
                Err(e) if transient::is_refused_by_acl(&e) => {
                    return Err(WorkerError::Permission(e))
                }
                // Anything else but a server that cannot serve yet is a
                // fault no retry mends.
                Err(e) if !transient::is_transient(&e) => return Err(e.into()),
                Err(e) => {
                    shared.note_error(&e, "preparing the consumer group");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.recv() => return Ok(false),
                    }
                }
            }
        }
    }

    /// Drop the liveness key (and leave the group if nothing is left pending
    /// on this consumer) and say what the run did.
    async fn stop(&self, shared: &Shared<I>, liveness: &Liveness, summary: &RunSummary) {
        let mut c = shared.conn.clone();
        let holding = summary.abandoned as usize;
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
    }
}
