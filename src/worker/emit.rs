//! Committing a batch's verdicts: the output entries of its resolved
//! entries ([`output`](super::output)) go to Redis in script calls of up to
//! [`ENTRIES_PER_CALL`] entries ([`ack`](super::ack)), one after
//! another in stream order, each retried until it succeeds and, with
//! `worker.wait_replicas`, until enough replicas hold it. Entries a call
//! wrote are counted in the metrics; those another consumer had acked first
//! are counted as skipped. A call stops at an entry whose index write the
//! server lacks (its receipt): the calls end there, and the batch decides
//! that entry and the ones after it again.

use std::time::{Duration, Instant};

use crate::index::Index;
use crate::transient::{self, Backoff};

use super::ack::{Emit, ENTRIES_PER_CALL};
use super::health::Trouble;
use super::output::{emit_for, Resolution};
use super::shared::Shared;
use super::stream::RawEntry;

/// What a written entry counts as in the metrics: its verdict, its signal
/// (duplicates) and its rejection code (rejections).
type Counted = (&'static str, Option<&'static str>, Option<&'static str>);

/// What committing a batch's verdicts did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Emitted {
    /// Outputs written.
    pub written: u64,
    /// Outputs not written: another consumer had acked their entries.
    pub skipped: u64,
    /// The first entry (its position among those given) whose index write,
    /// or an earlier entry's, Redis lacked: it and every entry after it were
    /// left pending, to be decided again.
    pub lost_from: Option<usize>,
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
    let mut flags = Vec::with_capacity(emits.len());
    for chunk in emits.chunks(ENTRIES_PER_CALL) {
        let done = ack_and_emit_retrying(shared, chunk).await;
        let whole = done.len() == chunk.len();
        flags.extend(done);
        if !whole {
            break;
        }
    }
    let lost_from = positions.get(flags.len()).copied();
    let (written, skipped) = count(shared, &flags, counted);
    Emitted {
        written,
        skipped,
        lost_from,
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

/// Count what the calls wrote (`flags`, per output entry). Returns
/// (emitted, skipped).
fn count<I: Index>(shared: &Shared<I>, flags: &[bool], counted: Vec<Counted>) -> (u64, u64) {
    let (mut emitted, mut skipped) = (0, 0);
    for (written, (verdict, signal, code)) in flags.iter().zip(counted) {
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
    (emitted, skipped)
}

/// One ack-and-emit call, retried with backoff until it succeeds (the
/// script is idempotent). A transient error makes the worker not ready
/// meanwhile; any other is logged at each attempt. With
/// `worker.wait_replicas`, a call that fewer replicas acknowledged in time
/// is sent again (a no-op for what it already wrote, then `WAIT` once more),
/// so the entries stay held until the replicas have them. Returns, per
/// entry up to where the last attempt stopped (at an entry whose index
/// write the server lacks), whether an attempt wrote its output.
async fn ack_and_emit_retrying<I: Index>(shared: &Shared<I>, chunk: &[Emit]) -> Vec<bool> {
    let mut backoff = Backoff::new(Duration::from_millis(shared.config.backoff_max_ms));
    let mut trouble: Option<Trouble> = None;
    // Entries written by an earlier attempt whose replicas were too few.
    let mut written = vec![false; chunk.len()];
    loop {
        let started = Instant::now();
        let seen = shared.health.recoveries();
        let mut conn = shared.conn.clone();
        match shared.ack_script.ack_and_emit(&mut conn, chunk).await {
            Ok(done) => {
                for (w, now) in written.iter_mut().zip(&done.written) {
                    *w |= *now;
                }
                let wanted = shared.config.wait_replicas;
                if done.replicated(wanted) {
                    shared.metrics.commit_latency.observe(started.elapsed());
                    written.truncate(done.written.len());
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
