//! The batch tasks in flight: the reader spawns one per batch it reads
//! ([`batch`](super::batch)), their counts add up to the run's
//! [`RunSummary`], and at shutdown they are drained — or, past
//! `worker.shutdown_timeout_ms`, aborted, their entries left pending for
//! the other workers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::task::{JoinError, JoinSet};

use crate::index::Index;

use super::batch::process_batch;
use super::order::{StreamId, Turn, Turns};
use super::shared::Shared;
use super::stream::RawEntry;
use super::RunSummary;

/// This worker's batch tasks and what the finished ones did.
pub(super) struct BatchTasks<I> {
    shared: Arc<Shared<I>>,
    /// Each returns (emitted, skipped).
    tasks: JoinSet<(u64, u64)>,
    /// Batches take turns at the index by their first entry in the stream:
    /// each waits for those of this worker before it (see
    /// `WorkerConfig::ordered`).
    turns: Arc<Turns>,
    summary: RunSummary,
}

impl<I: Index + 'static> BatchTasks<I> {
    pub(super) fn new(shared: Arc<Shared<I>>) -> BatchTasks<I> {
        BatchTasks {
            shared,
            tasks: JoinSet::new(),
            turns: Arc::new(Turns::default()),
            summary: RunSummary::default(),
        }
    }

    /// A turn before every batch, for entries being taken over
    /// ([`Turns::hold`]).
    pub(super) fn hold(&self) -> Turn {
        self.turns.hold()
    }

    /// Add what the tasks finished since the last look did.
    pub(super) fn collect_finished(&mut self) {
        while let Some(done) = self.tasks.try_join_next() {
            collect(&mut self.summary, done);
        }
    }

    /// Start a task for `entries` (marked in flight already), holding
    /// `permits` until it is done. Its turn is taken before `takeover_hold`
    /// is let go, so that no later batch decides in between.
    pub(super) fn spawn(
        &mut self,
        entries: Vec<RawEntry>,
        permits: OwnedSemaphorePermit,
        takeover_hold: Option<Turn>,
    ) {
        self.shared.metrics.in_flight.inc_by(entries.len() as i64);
        let shared = self.shared.clone();
        let first = StreamId::parse(&entries[0].id).unwrap_or(StreamId::MIN);
        let turn = self.turns.enter(first);
        drop(takeover_hold);
        self.tasks
            .spawn(async move { process_batch(shared, entries, permits, turn).await });
    }

    /// Wait for the tasks in flight, up to `worker.shutdown_timeout_ms`;
    /// past it abort the rest and count what they leave. Returns what the
    /// whole run did.
    pub(super) async fn drain(mut self) -> RunSummary {
        tracing::info!(in_flight = self.tasks.len(), "draining in-flight batches");
        let bound = Duration::from_millis(self.shared.config.shutdown_timeout_ms);
        let tasks = &mut self.tasks;
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
                self.summary.emitted += s.emitted;
                self.summary.skipped += s.skipped;
            }
            Err(_) => self.abandon().await,
        }
        self.summary
    }

    /// The shutdown bound is reached: abort the tasks left, and count the
    /// entries left pending and those whose commit Redis ran anyway.
    async fn abandon(&mut self) {
        // The futures of `drain` were dropped with `tasks` borrowed: abort
        // the rest, and wait until they are gone.
        let in_flight: HashSet<String> = self.shared.in_flight_ids();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        // Commits sent before the bound still run in Redis, answered
        // or not: ask Redis what is left (the same connection, so
        // after them).
        let mut c = self.shared.conn.clone();
        let count = in_flight.len() + self.shared.config.batch_size;
        let summary = &mut self.summary;
        match self.shared.own_pending(&mut c, count).await {
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
        tracing::warn!(
            abandoned = summary.abandoned,
            settled_after_bound = summary.settled_after_bound,
            "shutdown bound reached: unfinished entries stay pending and are taken over by other workers"
        );
    }
}

fn collect(summary: &mut RunSummary, done: Result<(u64, u64), JoinError>) {
    match done {
        Ok((emitted, skipped)) => {
            summary.emitted += emitted;
            summary.skipped += skipped;
        }
        Err(e) => tracing::error!(error = %e, "a batch task failed; its entries stay pending"),
    }
}
