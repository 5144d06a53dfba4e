//! The reader: the loop that takes permits for a batch, reads it with
//! `XREADGROUP` on a connection of its own and hands it to a batch task
//! ([`tasks`](super::tasks)).
//!
//! What a round reads, in this order of precedence: this consumer's own
//! pending history (once, at start: a restart under the same name); every
//! `worker.claim_interval_ms`, the entries to take over — its own pending
//! entries no task holds, else those of dead consumers
//! ([`liveness`](super::liveness)); otherwise new entries, unless it has
//! read `worker.order_slack` entries past the oldest entry pending on
//! another consumer ([`order`]): then it waits, the scans for
//! dead peers' entries going on meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::connect::Conn;
use crate::index::Index;
use crate::transient::{self, Backoff};

use super::health::Trouble;
use super::liveness::{Liveness, Reclaimed};
use super::order::{self, ReadLog, Turn};
use super::shared::Shared;
use super::shutdown::Shutdown;
use super::stream::{self, parse_xpending_range, parse_xreadgroup, reply_error, RawEntry};
use super::tasks::BatchTasks;
use super::tools;

/// How often a reader held by `order_slack` looks again, milliseconds (at
/// most: the claim interval if shorter).
const ORDER_POLL_MS: u64 = 20;

/// The reading side of a worker.
pub(super) struct Reader<I> {
    shared: Arc<Shared<I>>,
    liveness: Liveness,
    /// The reader's own connection: an `XREADGROUP ... BLOCK` would stall
    /// every other command queued behind it on a multiplexed connection.
    conn: Conn,
    /// The bound on entries in flight, a batch's worth taken per read.
    permits: Arc<Semaphore>,
    /// One batch more, for taking over a dead peer's entries while every
    /// slot of `permits` is held: batches waiting for an earlier entry a
    /// dead peer holds (`order_across_workers`) keep their slots, and the
    /// entries they wait for come only through this take-over.
    takeover_permits: Arc<Semaphore>,
    /// Whether our own pending history is still to read (a restart under the
    /// same name).
    read_history: bool,
    /// New entries read, for the bound on order across workers.
    read_log: ReadLog,
    /// Since when the reader waits for an entry pending elsewhere.
    waiting_since: Option<Instant>,
    next_claim: Instant,
    backoff: Backoff,
    /// Held while the reader's calls fail with a transient error.
    trouble: Option<Trouble>,
}

/// What one round read.
struct Round {
    /// `Ok(None)`: held back by `order_slack`, nothing read.
    result: Result<Option<Vec<RawEntry>>, RedisError>,
    /// Whether this round read new entries (or was held from it).
    fresh: bool,
    /// Held from before a take-over until its batch has its turn.
    takeover_hold: Option<Turn>,
}

impl<I: Index + 'static> Reader<I> {
    pub(super) fn new(shared: Arc<Shared<I>>, liveness: Liveness, conn: Conn) -> Reader<I> {
        let cfg = shared.config.clone();
        Reader {
            shared,
            liveness,
            conn,
            permits: Arc::new(Semaphore::new(cfg.max_in_flight)),
            takeover_permits: Arc::new(Semaphore::new(cfg.batch_size)),
            read_history: true,
            read_log: ReadLog::new(cfg.order_slack),
            waiting_since: None,
            next_claim: Instant::now(),
            backoff: Backoff::new(Duration::from_millis(cfg.backoff_max_ms)),
            trouble: None,
        }
    }

    /// Read batches and start a task for each until `shutdown` fires.
    /// Returns the error of a read the user's ACL refuses, which ends the
    /// loop too: the worker winds down and says so.
    pub(super) async fn run(
        &mut self,
        tasks: &mut BatchTasks<I>,
        shutdown: &mut Shutdown,
    ) -> Option<RedisError> {
        let refused = loop {
            if shutdown.is_shutdown() {
                break None;
            }
            tasks.collect_finished();
            let Some((held, takeover_round)) = self.acquire(shutdown).await else {
                break None;
            };
            let seen = self.shared.health.recoveries();
            let Round {
                result,
                fresh,
                takeover_hold,
            } = self.read_round(tasks, takeover_round).await;
            let entries = match result {
                Ok(Some(entries)) => {
                    self.served(fresh);
                    entries
                }
                Ok(None) => {
                    self.held_by_order();
                    drop((held, takeover_hold));
                    self.pause_for_order(shutdown).await;
                    continue;
                }
                Err(e) if transient::is_refused_by_acl(&e) => {
                    drop((held, takeover_hold));
                    break Some(e);
                }
                Err(e) if e.code() == Some("NOGROUP") => {
                    drop((held, takeover_hold));
                    self.group_gone(seen, shutdown).await;
                    continue;
                }
                Err(e) => {
                    self.read_failed(&e);
                    // A read whose reply was lost may have delivered entries
                    // to us: the next scan finds them (`take_over`).
                    drop((held, takeover_hold));
                    self.pause_after_failure(seen, shutdown).await;
                    continue;
                }
            };
            self.read_history = false;
            // Skip entries a task of ours is already working on.
            let entries = self.shared.hold_new(entries);
            if entries.is_empty() {
                continue;
            }
            let held = self.fit(held, entries.len());
            tasks.spawn(entries, held, takeover_hold);
        };
        self.trouble = None;
        refused
    }

    /// The group is gone with the stream, from whichever call met it first
    /// (a read, a scan of pending entries): deleted, flushed, or lost in a
    /// failover to a replica that never had it. Create it again (entries
    /// added since are read from the start of the stream).
    async fn group_gone(&mut self, seen: u64, shutdown: &mut Shutdown) {
        tracing::warn!(
            "the input stream's consumer group is gone (deleted, flushed, or lost in a failover): creating it again"
        );
        let (stream, group) = (&self.shared.stream, &self.shared.config.group);
        if let Err(e) = ensure_group(&mut self.conn, stream, group).await {
            self.read_failed(&e);
            self.pause_after_failure(seen, shutdown).await;
        }
    }

    /// A batch's permits: from `permits`, or, once a scan is due, from
    /// `takeover_permits` for a round that only takes over (`true`). `None`:
    /// shutdown.
    async fn acquire(&self, shutdown: &mut Shutdown) -> Option<(OwnedSemaphorePermit, bool)> {
        let batch = self.shared.config.batch_size as u32;
        let claim_due = tokio::time::Instant::from_std(self.next_claim);
        tokio::select! {
            p = self.permits.clone().acquire_many_owned(batch) => {
                Some((p.expect("semaphore never closed"), false))
            }
            p = async {
                tokio::time::sleep_until(claim_due).await;
                self.takeover_permits.clone().acquire_many_owned(batch).await
            }, if !self.read_history => {
                Some((p.expect("semaphore never closed"), true))
            }
            _ = shutdown.recv() => None,
        }
    }

    /// Return the permits a batch of `n` entries does not need.
    fn fit(&self, mut held: OwnedSemaphorePermit, n: usize) -> OwnedSemaphorePermit {
        if n < self.shared.config.batch_size {
            if let Some(p) = held.split(n) {
                drop(std::mem::replace(&mut held, p));
            }
        }
        held
    }

    /// Read what this round is for: the history, a take-over when a scan is
    /// due, else new entries.
    async fn read_round(&mut self, tasks: &BatchTasks<I>, takeover_round: bool) -> Round {
        let now = Instant::now();
        if self.read_history {
            return Round {
                result: self.read("0", false).await.map(Some),
                fresh: false,
                takeover_hold: None,
            };
        }
        if now >= self.next_claim {
            return self.claim_round(tasks, now, takeover_round).await;
        }
        Round {
            result: self.read_new().await,
            fresh: true,
            takeover_hold: None,
        }
    }

    /// A scan is due: refresh the gauges and take over what there is; with
    /// nothing to take over (on a round that may read), read new entries.
    async fn claim_round(
        &mut self,
        tasks: &BatchTasks<I>,
        now: Instant,
        takeover_round: bool,
    ) -> Round {
        let batch_size = self.shared.config.batch_size;
        self.next_claim = now + Duration::from_millis(self.shared.config.claim_interval_ms);
        self.refresh_gauges().await;
        // Entries taken over are older than those in flight: no batch
        // starts deciding until they have their turn (in `BatchTasks::spawn`),
        // or until none came.
        let hold = tasks.hold();
        let result = match self.take_over().await {
            // A full batch: there may be more, look again at once.
            Ok(entries) if entries.len() >= batch_size => {
                self.next_claim = now;
                Ok(Some(entries))
            }
            Ok(entries) if entries.is_empty() && takeover_round => Ok(Some(entries)),
            Ok(entries) if entries.is_empty() => {
                // Nothing taken over: batches go on while the read
                // blocks (up to `block_ms`).
                drop(hold);
                return Round {
                    result: self.read_new().await,
                    fresh: true,
                    takeover_hold: None,
                };
            }
            other => other.map(Some),
        };
        Round {
            result,
            fresh: false,
            takeover_hold: Some(hold),
        }
    }

    /// A round read something (or nothing, but without failing).
    fn served(&mut self, fresh: bool) {
        if let Some(since) = self.waiting_since.take_if(|_| fresh) {
            self.shared
                .metrics
                .order_wait_ms
                .inc_by(since.elapsed().as_millis() as u64);
        }
        self.trouble = None;
        self.backoff = Backoff::new(Duration::from_millis(self.shared.config.backoff_max_ms));
    }

    /// Too far past an entry pending elsewhere: wait (the scans for dead
    /// peers' entries go on meanwhile).
    fn held_by_order(&mut self) {
        self.trouble = None;
        if self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
            self.shared.metrics.order_waits.inc();
            tracing::debug!(
                slack = self.shared.config.order_slack,
                "read the slack past an entry pending on another consumer: waiting for it"
            );
        }
    }

    async fn pause_for_order(&self, shutdown: &mut Shutdown) {
        let pause = Duration::from_millis(self.shared.config.claim_interval_ms.min(ORDER_POLL_MS));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.recv() => {}
        }
    }

    /// A read failed: a transient error makes the worker not ready until a
    /// read succeeds; any other is logged.
    fn read_failed(&mut self, e: &RedisError) {
        let shared = &self.shared;
        if transient::is_transient(e) {
            shared.failing(&mut self.trouble, transient::reason(e));
            shared.metrics.redis_errors.inc();
            shared.count_reconnect(e);
            tracing::debug!(error = %e, "reading the input stream failed; retrying");
        } else {
            shared.note_error(e, "reading the input stream");
        }
    }

    async fn pause_after_failure(&mut self, seen: u64, shutdown: &mut Shutdown) {
        tokio::select! {
            _ = self.shared.health.pause(seen, self.backoff.next_delay()) => {}
            _ = shutdown.recv() => {}
        }
    }

    /// XREADGROUP from `id` (`>`: new entries, blocking; `0`: our own pending).
    async fn read(&mut self, id: &str, block: bool) -> Result<Vec<RawEntry>, RedisError> {
        let started = Instant::now();
        let (cfg, stream) = (&self.shared.config, &self.shared.stream);
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&cfg.group)
            .arg(&self.shared.consumer)
            .arg("COUNT")
            .arg(cfg.batch_size);
        if block {
            cmd.arg("BLOCK").arg(cfg.block_ms);
        }
        cmd.arg("STREAMS").arg(stream).arg(id);
        let reply: Value = cmd.query_async(&mut self.conn).await?;
        let mut entries = parse_xreadgroup(reply).map_err(reply_error)?;
        if id != ">" && !entries.is_empty() {
            self.fill_deliveries(&mut entries).await?;
        }
        if !entries.is_empty() {
            self.shared.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// New entries (XREADGROUP `>`), unless this worker has read
    /// `order_slack` entries past the oldest entry pending on another
    /// consumer: then `None` ([`order`]).
    async fn read_new(&mut self) -> Result<Option<Vec<RawEntry>>, RedisError> {
        if self.read_log.may_hold() {
            let s = &self.shared;
            let oldest =
                order::oldest_elsewhere(&mut self.conn, &s.stream, &s.config.group, &s.consumer)
                    .await?;
            if self.read_log.must_wait(oldest) {
                return Ok(None);
            }
        }
        let entries = self.read(">", true).await?;
        self.read_log.record(entries.iter().map(|e| e.id.as_str()));
        Ok(Some(entries))
    }

    /// Up to a batch of entries to take up: first our own pending entries no
    /// task holds (a task gave up on them, or a read's reply was lost), then
    /// those of consumers whose liveness key expired ([`liveness`](super::liveness)),
    /// once Redis has served us without a transient error for a whole TTL.
    async fn take_over(&mut self) -> Result<Vec<RawEntry>, RedisError> {
        let started = Instant::now();
        let count = self.shared.config.batch_size;
        let ours = self
            .shared
            .own_pending(&mut self.conn, count + self.shared.config.max_in_flight)
            .await?;
        let orphans = self
            .shared
            .not_in_flight(ours.into_iter().map(|(id, _)| id), count);
        let mut entries = if !orphans.is_empty() {
            self.take_up_orphans(orphans).await?
        } else if self
            .shared
            .health
            .available_for()
            .is_some_and(|t| t >= self.liveness.ttl())
        {
            self.take_from_dead(count).await?
        } else {
            Vec::new()
        };
        if !entries.is_empty() {
            self.fill_deliveries(&mut entries).await?;
            self.shared.metrics.read_latency.observe(started.elapsed());
        }
        Ok(entries)
    }

    /// Claim our own pending entries `orphans` again, for a new task.
    async fn take_up_orphans(&mut self, orphans: Vec<String>) -> Result<Vec<RawEntry>, RedisError> {
        // XCLAIM drops an entry deleted from the stream (XDEL, trimming)
        // from the pending list without a word: those are left pending
        // and answered `entry_deleted`, which acks them.
        let shared = &self.shared;
        let mut pipe = redis::pipe();
        for id in &orphans {
            pipe.cmd("XRANGE").arg(&shared.stream).arg(id).arg(id);
        }
        let found: Vec<Value> = pipe.query_async(&mut self.conn).await?;
        let (present, gone): (Vec<_>, Vec<_>) = orphans
            .into_iter()
            .zip(found)
            .partition(|(_, v)| matches!(v, Value::Array(a) if !a.is_empty()));
        let mut entries = Vec::new();
        if !present.is_empty() {
            let reply: Value = redis::cmd("XCLAIM")
                .arg(&shared.stream)
                .arg(&shared.config.group)
                .arg(&shared.consumer)
                .arg(0)
                .arg(present.iter().map(|(id, _)| id).collect::<Vec<_>>())
                .query_async(&mut self.conn)
                .await?;
            entries = stream::parse_entry_list(&reply).map_err(reply_error)?;
        }
        stream::add_deleted(&mut entries, gone.into_iter().map(|(id, _)| id));
        tracing::info!(
            count = entries.len(),
            "taking up own pending entries no task holds"
        );
        Ok(entries)
    }

    /// Up to `count` entries of the first dead consumer that holds any;
    /// dead consumers that hold none are removed from the group on the way.
    async fn take_from_dead(&mut self, count: usize) -> Result<Vec<RawEntry>, RedisError> {
        for peer in self.liveness.suspects(&mut self.conn).await? {
            match self
                .liveness
                .reclaim(&mut self.conn, &peer.name, count)
                .await?
            {
                Reclaimed::Alive => {}
                Reclaimed::Removed => {
                    tracing::info!(consumer = %peer.name, "removed a dead consumer from the group")
                }
                Reclaimed::Claimed(claimed) => {
                    self.shared.metrics.claimed.inc_by(claimed.len() as u64);
                    tracing::info!(consumer = %peer.name, count = claimed.len(), "took over a dead consumer's pending entries");
                    return Ok(claimed);
                }
            }
        }
        Ok(Vec::new())
    }

    /// Delivery counts of (re)delivered entries, from XPENDING in one call.
    async fn fill_deliveries(&mut self, entries: &mut [RawEntry]) -> Result<(), RedisError> {
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(());
        };
        let cfg = &self.shared.config;
        let reply: Value = redis::cmd("XPENDING")
            .arg(&self.shared.stream)
            .arg(&cfg.group)
            .arg(&first.id)
            .arg(&last.id)
            .arg(entries.len().max(cfg.batch_size))
            .arg(&self.shared.consumer)
            .query_async(&mut self.conn)
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
    async fn refresh_gauges(&mut self) {
        let reply: Result<Value, _> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.shared.stream)
            .query_async(&mut self.conn)
            .await;
        if let Ok(v) = reply {
            if let Some(info) = tools::group_info(&v, &self.shared.config.group) {
                self.shared.metrics.pending.set(info.pending);
                self.shared.metrics.lag.set(info.lag.unwrap_or(-1));
            }
        }
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
