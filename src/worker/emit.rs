//! Committing a batch's verdicts: the output entries of its resolved
//! entries ([`output`](super::output)) go to Redis in script calls of up to
//! [`ENTRIES_PER_CALL`] entries ([`ack`](super::ack)), one after
//! another in stream order, each retried until it succeeds and, with
//! `worker.wait_replicas`, until enough replicas hold it. Entries a call
//! wrote are counted in the metrics; those another consumer had acked first
//! are counted as skipped; those whose index write the server lacks (their
//! receipt) are left pending, and the batch decides them again.

use std::time::{Duration, Instant};

use crate::index::Index;
use crate::transient::{self, Backoff};

use super::ack::{Ack, Emit, ENTRIES_PER_CALL};
use super::health::Trouble;
use super::output::{emit_for, Resolution};
use super::shared::Shared;
use super::stream::RawEntry;

/// What a written entry counts as in the metrics: its verdict, its signal
/// (duplicates) and its rejection code (rejections).
type Counted = (&'static str, Option<&'static str>, Option<&'static str>);

/// What committing a batch's verdicts did.
#[derive(Debug)]
pub(super) struct Emitted {
    /// Outputs written.
    pub written: u64,
    /// Outputs not written: another consumer had acked their entries.
    pub skipped: u64,
    /// The entries whose index write Redis lacked: left pending, to be
    /// decided again.
    pub lost: Vec<RawEntry>,
}

/// Commit the outputs of `entries` that have a resolution (`None`: given up
/// on, left pending).
pub(super) async fn emit_verdicts<I: Index>(
    shared: &Shared<I>,
    entries: &[RawEntry],
    resolutions: &[Option<Resolution>],
) -> Emitted {
    let (emits, counted, positions) = outputs(entries, resolutions);
    // Commit in chunks, each retried until it succeeds (the script is
    // idempotent), so that Redis is never busy with one of them for long.
    let mut acks = Vec::with_capacity(emits.len());
    for chunk in emits.chunks(ENTRIES_PER_CALL) {
        acks.extend(ack_and_emit_retrying(shared, chunk).await);
    }
    let lost = lost_positions(&positions, &acks)
        .into_iter()
        .map(|at| entries[at].clone())
        .collect();
    let (written, skipped) = count(shared, &acks, counted);
    Emitted {
        written,
        skipped,
        lost,
    }
}

/// The output entries of the resolved entries, in stream order, what each
/// counts as, and the position of its entry.
fn outputs(
    entries: &[RawEntry],
    resolutions: &[Option<Resolution>],
) -> (Vec<Emit>, Vec<Counted>, Vec<usize>) {
    let mut emits: Vec<Emit> = Vec::with_capacity(entries.len());
    let mut counted: Vec<Counted> = Vec::new();
    let mut positions: Vec<usize> = Vec::new();
    for (at, (entry, r)) in entries.iter().zip(resolutions).enumerate() {
        if let Some(r) = r {
            emits.push(emit_for(entry, r));
            let code = match r {
                Resolution::Rejected { why } => Some(why.code()),
                _ => None,
            };
            counted.push((r.verdict(), r.signal(), code));
            positions.push(at);
        }
    }
    (emits, counted, positions)
}

/// The positions (`positions`: of each output entry's input entry) of the
/// entries the calls left pending for their lost index writes.
fn lost_positions(positions: &[usize], acks: &[Ack]) -> Vec<usize> {
    debug_assert_eq!(positions.len(), acks.len());
    positions
        .iter()
        .zip(acks)
        .filter(|(_, a)| **a == Ack::Lost)
        .map(|(at, _)| *at)
        .collect()
}

/// Fold what one attempt of a call did (`attempt`) into what the earlier
/// ones did: an entry an attempt wrote stays written (a retry finds it
/// acked, as `Skipped`), unless this attempt finds its index write lost:
/// then it reached another server (a failover), which holds neither.
fn merge(acks: &mut [Ack], attempt: &[Ack]) {
    debug_assert_eq!(acks.len(), attempt.len());
    for (ack, now) in acks.iter_mut().zip(attempt) {
        if *ack != Ack::Written || *now == Ack::Lost {
            *ack = *now;
        }
    }
}

/// Count what the calls did (`acks`, per output entry). Returns (emitted,
/// skipped).
fn count<I: Index>(shared: &Shared<I>, acks: &[Ack], counted: Vec<Counted>) -> (u64, u64) {
    let (mut emitted, mut skipped) = (0, 0);
    for (ack, (verdict, signal, code)) in acks.iter().zip(counted) {
        match ack {
            Ack::Written => {
                emitted += 1;
                shared.metrics.article(verdict, signal);
                if let Some(code) = code {
                    shared.metrics.rejected(code);
                    shared.metrics.dead_letters.inc();
                }
            }
            Ack::Skipped => {
                skipped += 1;
                shared.metrics.commit_skipped.inc();
            }
            Ack::Lost => {}
        }
    }
    (emitted, skipped)
}

/// One ack-and-emit call, retried with backoff until it succeeds (the
/// script is idempotent). A transient error makes the worker not ready
/// meanwhile; any other is logged at each attempt. With
/// `worker.wait_replicas`, a call that fewer replicas acknowledged in time
/// is sent again (a no-op for what it already wrote, then `WAIT` once more),
/// so the entries stay held until the replicas have them. Returns what
/// became of each entry ([`merge`]).
async fn ack_and_emit_retrying<I: Index>(shared: &Shared<I>, chunk: &[Emit]) -> Vec<Ack> {
    let mut backoff = Backoff::new(Duration::from_millis(shared.config.backoff_max_ms));
    let mut trouble: Option<Trouble> = None;
    let mut acks = vec![Ack::Skipped; chunk.len()];
    loop {
        let started = Instant::now();
        let seen = shared.health.recoveries();
        let mut conn = shared.conn.clone();
        match shared.ack_script.ack_and_emit(&mut conn, chunk).await {
            Ok(done) => {
                merge(&mut acks, &done.entries);
                let wanted = shared.config.wait_replicas;
                if done.replicated(wanted) {
                    shared.metrics.commit_latency.observe(started.elapsed());
                    return acks;
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
                shared.count_reconnect(&e);
                if transient::is_transient(&e) {
                    shared.failing(&mut trouble, transient::reason(&e));
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
    use Ack::*;

    #[test]
    fn an_entry_written_stays_written_unless_a_retry_finds_its_write_lost() {
        let mut acks = vec![Skipped; 4];
        merge(&mut acks, &[Written, Written, Skipped, Lost]);
        assert_eq!(acks, [Written, Written, Skipped, Lost]);
        // The retry of a call whose replicas were too few: what it wrote is
        // acked by then; after a failover, a write may be gone.
        merge(&mut acks, &[Skipped, Lost, Skipped, Written]);
        assert_eq!(acks, [Written, Lost, Skipped, Written]);
    }

    #[test]
    fn lost_entries_are_named_by_their_input_position() {
        // Entries 1 and 3 had no resolution (no output entry).
        let positions = [0, 2, 4, 5];
        assert_eq!(
            lost_positions(&positions, &[Written, Lost, Skipped, Lost]),
            [2, 5]
        );
        assert!(lost_positions(&positions, &[Written; 4]).is_empty());
    }
}
