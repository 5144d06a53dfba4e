//! The state the reader and the batch tasks share: the index, the
//! fingerprinter and its threads, the ack-and-emit script, the connection
//! every call but the reader's goes through, metrics and health, and the set
//! of entries some task of this worker is processing.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};
use tokio::sync::Semaphore;

use crate::article::EventTimeBounds;
use crate::connect::Conn;
use crate::fingerprint::Fingerprinter;
use crate::index::Index;

use super::ack::AckScript;
use super::config::WorkerConfig;
use super::health::{Health, Trouble};
use super::metrics::Metrics;
use super::stream::{parse_xpending_range, reply_error, RawEntry};

/// State shared by the reader and the batch tasks.
pub(super) struct Shared<I> {
    pub(super) index: Arc<I>,
    pub(super) fingerprinter: Fingerprinter,
    /// Where `fingerprinter` runs, below the priority of the Redis I/O.
    pub(super) fingerprint_pool: rayon::ThreadPool,
    pub(super) config: Arc<WorkerConfig>,
    pub(super) ack_script: AckScript,
    pub(super) conn: Conn,
    pub(super) metrics: Arc<Metrics>,
    pub(super) health: Arc<Health>,
    pub(super) max_text_bytes: usize,
    pub(super) event_times: EventTimeBounds,
    /// Ids of entries some task of this worker is processing, so a claim or a
    /// history read does not start a second copy of the same work. A std
    /// mutex: it is held for a set operation only, never across an `.await`.
    pub(super) in_flight: Mutex<HashSet<String>>,
    pub(super) index_permits: Semaphore,
    /// The input stream and this worker's consumer name.
    pub(super) stream: String,
    pub(super) consumer: String,
    /// Whether this worker has warned that the input stream's entry ids are
    /// ahead of its clock: once per stream, not once per entry.
    pub(super) warned_future_ids: AtomicBool,
}

impl<I: Index> Shared<I> {
    /// A call of a batch task failed with a transient error: see [`Health::trouble`].
    pub(super) fn trouble(&self, reason: &str) -> Trouble {
        let holding = self.metrics.in_flight.get();
        self.health.trouble(reason, &self.metrics, holding)
    }

    /// A call failed with a transient error for `reason`: the first failure
    /// takes a [`Trouble`] into `trouble` (held until the call succeeds or
    /// is given up), a later one only updates the reason.
    pub(super) fn failing(&self, trouble: &mut Option<Trouble>, reason: &str) {
        match trouble {
            Some(_) => self.health.still(reason),
            None => *trouble = Some(self.trouble(reason)),
        }
    }

    /// A call failed and is retried: counted and logged.
    pub(super) fn note_error(&self, e: &RedisError, what: &str) {
        self.metrics.redis_errors.inc();
        self.count_reconnect(e);
        tracing::warn!(error = %e, "{what} failed; retrying");
    }

    /// A broken connection (the connection manager reconnects), counted apart
    /// from other failed calls.
    pub(super) fn count_reconnect(&self, e: &RedisError) {
        if e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal() {
            self.metrics.reconnects.inc();
        }
    }

    fn in_flight(&self) -> MutexGuard<'_, HashSet<String>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Of `entries`, those no task of ours is working on, now marked in flight.
    pub(super) fn hold_new(&self, entries: Vec<RawEntry>) -> Vec<RawEntry> {
        let mut set = self.in_flight();
        entries
            .into_iter()
            .filter(|e| set.insert(e.id.clone()))
            .collect()
    }

    /// Up to `count` of `ids` that no task of ours is working on, in order.
    pub(super) fn not_in_flight(
        &self,
        ids: impl IntoIterator<Item = String>,
        count: usize,
    ) -> Vec<String> {
        let set = self.in_flight();
        ids.into_iter()
            .filter(|id| !set.contains(id))
            .take(count)
            .collect()
    }

    /// A task is done with `entries` (committed or given up).
    pub(super) fn release<'a>(&self, entries: impl Iterator<Item = &'a RawEntry>) {
        let mut set = self.in_flight();
        for e in entries {
            set.remove(&e.id);
        }
    }

    /// The ids in flight now (none if a task panicked holding the lock).
    pub(super) fn in_flight_ids(&self) -> HashSet<String> {
        self.in_flight.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// This consumer's pending entries, oldest first: (id, deliveries).
    pub(super) async fn own_pending<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        count: usize,
    ) -> Result<Vec<(String, u64)>, RedisError> {
        let reply: Value = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(&self.config.group)
            .arg("-")
            .arg("+")
            .arg(count)
            .arg(&self.consumer)
            .query_async(conn)
            .await?;
        parse_xpending_range(&reply).map_err(reply_error)
    }
}
