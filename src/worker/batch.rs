//! One batch task: prepare its entries (parse, check the event time,
//! fingerprint) on the fingerprinting threads, make their index calls —
//! with `worker.ordered`, in stream order after the batches before it
//! ([`order`]) — and commit the verdicts ([`emit`](super::emit)).
//!
//! Order guarantees with `ordered`: a batch starts its index calls once
//! every batch of this worker whose first entry is earlier has made its own
//! (its [`Turn`]) and no other consumer holds an entry before its first
//! (`wait_for_peers`, bounded); within the batch a check starts once every
//! earlier check it may meet is decided, a query or a delete once
//! everything before it is.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use crate::article::Rejection;
use crate::fingerprint::Fingerprint;
use crate::index::{meet, Index, IndexEntry, IndexError};
use crate::transient::{self, Backoff};

use super::emit::emit_verdicts;
use super::health::Trouble;
use super::order::{self, Turn};
use super::output::Resolution;
use super::shared::Shared;
use super::stream::{parse_entry, RawEntry, Request};

/// How often a batch waiting for an earlier entry held by another consumer
/// looks again.
const PEER_POLL: Duration = Duration::from_millis(2);

/// An entry after parsing and fingerprinting.
enum Prepared {
    Ready(Resolution),
    Check(IndexEntry, bool),
    Delete(String),
}

/// Process one batch: fingerprint, decide, commit; then give back its
/// `permits`. Returns (emitted, skipped).
pub(super) async fn process_batch<I: Index + 'static>(
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
    let now = now_ms();
    let (entries, prepared) = prepare_all(shared, entries, now).await;
    let result = match prepared {
        Some(p) => finish_batch(shared, &entries, p, turn, now).await,
        None => (0, 0),
    };
    shared.release(entries.iter());
    result
}

/// [`prepare`] `entries` on the fingerprinting threads: CPU work off the
/// async threads, spread over the cores at a lower priority
/// (`fingerprint_pool`). `None` if that panicked (the entries stay pending).
async fn prepare_all<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    entries: Vec<RawEntry>,
    now: i64,
) -> (Vec<RawEntry>, Option<Vec<Prepared>>) {
    let entries = Arc::new(entries);
    let (s, e) = (shared.clone(), entries.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        s.fingerprint_pool.install(|| {
            e.par_iter()
                .map(|x| prepare(&s, x, now))
                .collect::<Vec<_>>()
        })
    })
    .await;
    let entries = Arc::try_unwrap(entries).unwrap_or_else(|a| (*a).clone());
    match prepared {
        Ok(p) => (entries, Some(p)),
        Err(e) => {
            tracing::error!(error = %e, "fingerprinting panicked; the batch stays pending");
            (entries, None)
        }
    }
}

/// Times a batch decides again the entries whose index writes Redis lost
/// before it gives up on them (they stay pending, and come back). With the
/// backoff before each round (from 25 ms, doubling, up to
/// `worker.backoff_max_ms`, jittered; sooner when a failing call of the
/// worker recovers), about 10 to 20 s at the defaults.
const MAX_REDECISIONS: u32 = 10;

/// Decide the batch and commit its verdicts. Entries whose index write
/// Redis lacks when acking them (a failover promoted a replica the write had
/// not reached) are decided again in stream order, as an ordered batch's
/// are, and committed, after a backoff: while a failover is under way the index call may still reach
/// the old primary, and the ack the new one. They are judged as first (the
/// event time against `now`, the batch's clock): an article whose bucket
/// expired meanwhile is decided and stored nowhere, not rejected.
async fn finish_batch<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    entries: &[RawEntry],
    prepared: Vec<Prepared>,
    turn: Turn,
    now: i64,
) -> (u64, u64) {
    let resolutions = decide(shared, prepared, turn).await;
    let mut done = emit_verdicts(shared, entries, &resolutions).await;
    let (mut written, mut skipped) = (done.written, done.skipped);
    let mut backoff = Backoff::new(Duration::from_millis(shared.config.backoff_max_ms));
    for round in 1.. {
        let lost = done.lost;
        let Some(first) = lost.first() else { break };
        shared.metrics.writes_lost.inc_by(lost.len() as u64);
        if round > MAX_REDECISIONS {
            tracing::error!(
                entry = %first.id,
                entries = lost.len(),
                "Redis still lacks the index write of entries decided again; left pending"
            );
            break;
        }
        tracing::warn!(
            entry = %first.id,
            entries = lost.len(),
            "Redis lacks the index write of entries' verdicts (lost in a failover, or \
             expired since?): deciding them again"
        );
        let seen = shared.health.recoveries();
        shared.health.pause(seen, backoff.next_delay()).await;
        let (again, Some(prepared)) = prepare_all(shared, lost, now).await else {
            break;
        };
        let mut redone = Vec::with_capacity(prepared.len());
        resolve_in_order(shared, prepared, &mut redone).await;
        done = emit_verdicts(shared, &again, &redone).await;
        written += done.written;
        skipped += done.skipped;
    }
    tracing::debug!(written, skipped, "batch committed");
    (written, skipped)
}

/// The batch's index calls, one resolution per entry (`None`: given up on).
async fn decide<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    turn: Turn,
) -> Vec<Option<Resolution>> {
    let mut resolutions: Vec<Option<Resolution>> = Vec::with_capacity(prepared.len());
    if shared.config.ordered {
        // Our turn comes when every batch of ours before it in the stream has
        // made its index calls (or failed), and no other consumer holds an
        // entry before it; then ours, one after another, in stream order.
        turn.wait().await;
        wait_for_peers(shared, &turn).await;
        resolve_in_order(shared, prepared, &mut resolutions).await;
        drop(turn);
    } else {
        drop(turn);
        resolve_concurrently(shared, prepared, &mut resolutions).await;
    }
    resolutions
}

/// Parse, check and fingerprint `entry`; its event time is judged against
/// `now` (the worker's clock when the batch was read).
fn prepare(shared: &Shared<impl Index>, entry: &RawEntry, now: i64) -> Prepared {
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
        let result = match &prepared {
            Prepared::Ready(r) => return Some(r.clone()),
            Prepared::Check(entry, insert) => check(shared, entry, *insert).await,
            Prepared::Delete(id) => shared.index.delete(id).await.map(|d| Resolution::Deleted {
                id: id.clone(),
                found: d.found,
                receipt: d.receipt,
            }),
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
                shared.failing(&mut trouble, reason);
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

/// One index call for a check (`insert`: check and insert) or a query.
async fn check<I: Index>(
    shared: &Shared<I>,
    entry: &IndexEntry,
    insert: bool,
) -> Result<Resolution, IndexError> {
    let outcome = if insert {
        shared.index.check_and_insert(entry).await
    } else {
        shared.index.query(entry).await
    };
    outcome.map(|o| {
        shared.metrics.examined.observe_value(f64::from(o.examined));
        Resolution::Decided {
            id: entry.id.clone(),
            op: if insert { "check" } else { "query" },
            verdict: o.verdict,
            simhash: entry.fingerprint.simhash,
            replayed: o.replayed,
            receipt: o.receipt,
        }
    })
}

/// Every index call of the batch at once (bounded by `index_permits`),
/// started in stream order.
async fn resolve_concurrently<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    out: &mut Vec<Option<Resolution>>,
) {
    out.resize(prepared.len(), None);
    let mut calls = JoinSet::new();
    for (i, p) in prepared.into_iter().enumerate() {
        let shared = shared.clone();
        calls.spawn(async move { (i, resolve(&shared, p).await) });
    }
    while let Some(done) = calls.join_next().await {
        match done {
            Ok((i, r)) => out[i] = r,
            Err(e) => {
                tracing::error!(error = %e, "an index call panicked; its entry stays pending")
            }
        }
    }
}

/// An ordered batch's index calls: up to `ordered_index_concurrency` at
/// once, each started in stream order once every earlier entry it could meet
/// is decided ([`may_interact`]); with 1, one after another. A query or a
/// delete is a barrier: nothing after it starts before it is done, since what
/// it does (or, for a query, what it must see) depends on the entries before
/// it.
async fn resolve_in_order<I: Index + 'static>(
    shared: &Arc<Shared<I>>,
    prepared: Vec<Prepared>,
    out: &mut Vec<Option<Resolution>>,
) {
    if shared.config.ordered_index_concurrency > 1 {
        return resolve_pipelined(shared, prepared, out).await;
    }
    for p in prepared {
        out.push(resolve(shared, p).await);
    }
}

/// [`resolve_in_order`] with up to `ordered_index_concurrency` index calls in
/// flight: a check starts once every earlier check of the batch it may meet
/// is decided, a query or a delete once everything before it is.
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
                while running.len() >= shared.config.ordered_index_concurrency {
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
async fn wait_for_peers<I: Index>(shared: &Shared<I>, turn: &Turn) {
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
