//! Replica mode of [`RedisIndex`]: bring the in-process copy up to date, decide
//! from it, commit through the same `commit.lua`.
//!
//! A check costs Redis one pipeline (the registry, the deletion log, each live
//! bucket's counter; then the `f:`/`m:` entries of the handles inserted since,
//! by whoever) plus the commit, instead of ~40 reads of block sets, lists and
//! candidates. The commit is told the copy's counters as "what was read", so
//! anything inserted after them that could change the decision (a shared
//! block, content hash or lookup sketch hash) makes it retry, exactly as for
//! a gather that is out of date: the verdicts are those of the default mode.

use std::time::Instant;

use ::redis::Value;

use super::codec::{encode_fingerprint, encode_meta};
use super::conn::Conn;
use super::{
    array, backend, bad_reply, bytes, int, own_commits, parse_live, root_label, string,
    verdict_among, BucketSnap, Committed, Probe, RedisIndex, ReplicaState, Snapshot,
};
use crate::index::{IndexEntry, IndexError, Outcome};
use crate::keys::{slot, HANDLES_PER_CHUNK};

/// How long a copy serves checks before it is brought up to date again. A
/// check on a copy up to this old is still right (the commit validates it
/// against everything stored since); it only spares most checks the round
/// trip.
pub(super) const SYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// How old a copy may be and still serve a check while a sync runs in the
/// background: a check that finds the copy older than [`SYNC_EVERY`] starts
/// one and decides at once; only a copy older than this makes it wait. Under
/// load syncs take a round trip, so no check waits for them (every check
/// that began while one was under way used to wait for it: a fifth of them at
/// 14,000 checks/s). What it bounds: another process' deletion reaches this
/// one's checks at most this much later (its own deletions, at once).
pub(super) const MAX_STALENESS: std::time::Duration = std::time::Duration::from_millis(10);

/// Commands per pipeline when fetching new handles (each names up to 100).
const FETCH_COMMANDS: usize = 512;
/// Deletion-log entries read per command.
const DELETIONS_PER_READ: usize = 1000;

/// What a check does about its copy before deciding from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freshen {
    /// Bring it up to date first.
    Now,
    /// Start a sync in the background and decide at once.
    InBackground,
    /// Decide at once.
    No,
}

/// A check's [`Freshen`] for a copy of age `age` (`None`: never synced, or
/// this process deleted an article since), after a conflict (`must`: the
/// copy lacks what caused it), or for a query (`!write`: no commit will
/// validate it).
fn freshen(age: Option<std::time::Duration>, must: bool, write: bool) -> Freshen {
    match age {
        _ if must || !write => Freshen::Now,
        None => Freshen::Now,
        Some(age) if age >= MAX_STALENESS => Freshen::Now,
        Some(age) if age >= SYNC_EVERY => Freshen::InBackground,
        Some(_) => Freshen::No,
    }
}

impl RedisIndex {
    fn replica_state(&self) -> &ReplicaState {
        self.inner
            .replica
            .as_ref()
            .expect("called in replica mode only")
    }

    /// Replica mode: bring this process' copy of the live articles up to date
    /// now (the first call loads the whole window: call it before serving, so
    /// the first check does not wait for it). Does nothing in the default mode.
    pub async fn sync(&self) -> Result<(), IndexError> {
        if self.inner.replica.is_none() {
            return Ok(());
        }
        let mut conn = self.inner.conn.clone();
        let started = Instant::now();
        self.sync_replica(&mut conn, true).await?;
        tracing::info!(
            articles = self.replica_articles().unwrap_or(0),
            seconds = started.elapsed().as_secs_f64(),
            "replica up to date"
        );
        Ok(())
    }

    /// Articles held in this process' copy (replica mode), else `None`.
    pub fn replica_articles(&self) -> Option<usize> {
        let state = self.inner.replica.as_ref()?;
        Some(lock(&state.copy).len())
    }

    /// One task at a time brings the copy up to date; a task that finds
    /// another doing so waits for it and uses its work, unless that sync may
    /// have missed this process' own deletion (`must`: do one anyway). A copy
    /// that is a little behind is safe: the commit validates it.
    async fn sync_replica(&self, conn: &mut Conn, must: bool) -> Result<(), IndexError> {
        let state = self.replica_state();
        let _turn = match state.syncing.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                let turn = state.syncing.lock().await;
                if !must && self.copy_age().is_some() {
                    return Ok(());
                }
                turn
            }
        };
        let keys = &self.inner.keys;
        let began = Instant::now();
        let deletes = state
            .synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deletes;
        let cached = self.cached_shapes();
        let after = lock(&state.copy).deletions_read.clone();
        let mut pipe = ::redis::pipe();
        pipe.cmd("ZRANGE")
            .arg(keys.buckets())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        deletions_after(&mut pipe, &keys.deletions(), &after);
        for (label, _, _) in &cached {
            pipe.cmd("HGET").arg(keys.counter(label)).arg("n");
        }
        let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
        let mut it = replies.into_iter();
        let live = parse_live(it.next())?;
        let mut deletions = parse_deletions(it.next())?;
        let mut counters: Vec<(String, Option<u64>)> = Vec::with_capacity(live.len());
        for (label, _, _) in &cached {
            counters.push((label.clone(), counter(it.next())?));
        }
        // Buckets new to this process: learn their shape and counter.
        let unknown: Vec<&(String, i64)> = live
            .iter()
            .filter(|(l, _)| !cached.iter().any(|(c, _, _)| c == l))
            .collect();
        if !unknown.is_empty() || cached.len() != live.len() {
            self.learn_shapes(conn, &live).await?;
        }
        if !unknown.is_empty() {
            let mut pipe = ::redis::pipe();
            for (label, _) in &unknown {
                pipe.cmd("HGET").arg(keys.counter(label)).arg("n");
            }
            let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
            for ((label, _), v) in unknown.into_iter().zip(replies) {
                counters.push((label.clone(), counter(Some(v))?));
            }
        }
        let live: Vec<(String, i64, u64)> = live
            .into_iter()
            .map(|(label, start)| {
                let n = counters
                    .iter()
                    .find(|(l, _)| *l == label)
                    .and_then(|(_, n)| *n)
                    .unwrap_or(0);
                (label, start, n)
            })
            .collect();
        let wanted = lock(&state.copy).plan(&live);
        self.fetch_handles(conn, &wanted).await?;
        // The deletion log, after the articles: one deleted before they were
        // fetched came without its entries, one deleted after is filed and
        // forgotten here or at the next sync.
        loop {
            let full = deletions.len() == DELETIONS_PER_READ;
            {
                let mut copy = lock(&state.copy);
                for (id, label, handle) in &deletions {
                    copy.forget(label, *handle);
                    copy.deletions_read.clone_from(id);
                }
            }
            if !full {
                break;
            }
            let after = lock(&state.copy).deletions_read.clone();
            let mut pipe = ::redis::pipe();
            deletions_after(&mut pipe, &keys.deletions(), &after);
            let mut replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
            deletions = parse_deletions(replies.pop())?;
        }
        let mut synced = state.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced.deletes == deletes {
            synced.at = Some(began);
        }
        Ok(())
    }

    /// How old the copy is: since the start of the last sync that completed
    /// (`None`: never synced, or this process deleted an article since).
    fn copy_age(&self) -> Option<std::time::Duration> {
        let state = self.replica_state();
        state
            .synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .at
            .map(|at| at.elapsed())
    }

    /// Bring the copy up to date in a task of its own, unless one is under
    /// way. A failure is left for the next check's sync to meet: once the copy
    /// is [`MAX_STALENESS`] old, checks sync themselves and report it.
    fn sync_in_background(&self) {
        let state = self.replica_state();
        if state
            .refreshing
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        /// Clears `refreshing` however the task ends (done, failed, panicked,
        /// or dropped with its runtime).
        struct Refreshing(RedisIndex);
        impl Drop for Refreshing {
            fn drop(&mut self) {
                self.0
                    .replica_state()
                    .refreshing
                    .store(false, std::sync::atomic::Ordering::Release);
            }
        }
        let guard = Refreshing(self.clone());
        tokio::spawn(async move {
            let mut conn = guard.0.inner.conn.clone();
            if let Err(e) = guard.0.sync_replica(&mut conn, false).await {
                tracing::debug!(error = %e, "background sync of the replica failed");
            }
        });
    }

    /// Fetch and file handles `from..=to` of each bucket in `wanted`, a chunk
    /// (`f:` and `m:` `HMGET`) at a time, pipelined.
    async fn fetch_handles(
        &self,
        conn: &mut Conn,
        wanted: &[(String, u64, u64)],
    ) -> Result<(), IndexError> {
        let keys = &self.inner.keys;
        let state = self.replica_state();
        // (label, first handle, last handle) per chunk.
        let mut chunks: Vec<(&str, u64, u64)> = Vec::new();
        for (label, from, to) in wanted {
            let mut h = *from;
            while h <= *to {
                let last = (*to).min((h / HANDLES_PER_CHUNK + 1) * HANDLES_PER_CHUNK - 1);
                chunks.push((label, h, last));
                h = last + 1;
            }
        }
        let total = chunks.len();
        let started = Instant::now();
        for (n, group) in chunks.chunks(FETCH_COMMANDS / 2).enumerate() {
            let mut pipe = ::redis::pipe();
            for &(label, first, last) in group {
                let slots: Vec<u64> = (first..=last).map(slot).collect();
                pipe.cmd("HMGET")
                    .arg(keys.fingerprints(label, first))
                    .arg(&slots);
                pipe.cmd("HMGET").arg(keys.metas(label, first)).arg(&slots);
            }
            let replies: Vec<Value> = pipe.query_async(conn).await.map_err(backend)?;
            let mut it = replies.into_iter();
            for &(label, first, _) in group {
                let packed = array(it.next().unwrap_or(Value::Nil))?;
                let metas = array(it.next().unwrap_or(Value::Nil))?;
                let records = packed
                    .into_iter()
                    .zip(metas)
                    .map(|(p, m)| {
                        let (p, m) = (bytes(Some(p))?, bytes(Some(m))?);
                        // Deleted: no entries left.
                        Ok((!p.is_empty() && !m.is_empty()).then_some((p, m)))
                    })
                    .collect::<Result<Vec<_>, IndexError>>()?;
                lock(&state.copy)
                    .apply(label, first, records)
                    .map_err(|reason| IndexError::Corrupt {
                        id: format!("{label}:{first}"),
                        reason,
                    })?;
            }
            let done = (n + 1) * (FETCH_COMMANDS / 2);
            if total > 10_000 && done % 10_000 < FETCH_COMMANDS / 2 {
                tracing::info!(
                    articles = self.replica_articles().unwrap_or(0),
                    chunks = done.min(total),
                    of = total,
                    seconds = started.elapsed().as_secs_f64(),
                    "loading the replica"
                );
            }
        }
        Ok(())
    }

    /// [`RedisIndex::check`] in replica mode.
    pub(super) async fn check_replica(
        &self,
        entry: &IndexEntry,
        write: bool,
    ) -> Result<Outcome, IndexError> {
        let inner = &self.inner;
        let state = self.replica_state();
        let cfg = &inner.config;
        let fp = &entry.fingerprint;
        let probe = Probe::new(entry, cfg, inner.bucket_ms, inner.default_shape);
        let mut conn = inner.conn.clone();
        let mut examined = 0u32;
        let mut must = false;
        for _ in 0..inner.max_attempts {
            // A query has no commit to validate it: always up to date. After a
            // conflict, read what caused it before deciding again.
            match freshen(self.copy_age(), must, write) {
                Freshen::Now => self.sync_replica(&mut conn, must).await?,
                Freshen::InBackground => self.sync_in_background(),
                Freshen::No => {}
            }
            must = true;
            let (verdict, snap) = {
                let mut copy = lock(&state.copy);
                // Read under the copy's lock: a sync learns a bucket's shape
                // before the copy holds it, so every bucket the copy holds has
                // its shape here (read before the lock, a bucket the copy had
                // just taken in went to the commit as out of range, unvalidated).
                let shapes: std::collections::HashMap<String, u32> = self
                    .cached_shapes()
                    .into_iter()
                    .filter_map(|(label, _, bits)| Some((label, bits?)))
                    .collect();
                if let Some(stored) = copy.find_id(&entry.id) {
                    return Ok(Outcome {
                        verdict: stored.meta.verdict,
                        replayed: true,
                        examined: 0,
                    });
                }
                let (found, n, views) = copy.candidates(fp, cfg, (probe.lo, probe.hi), &shapes);
                let horizon = copy.horizon(&mut own_commits(inner));
                drop(copy);
                examined = examined.saturating_add(n);
                let verdict = verdict_among(entry, found.iter().collect(), cfg);
                // Where the root is: among the candidates, or (a chain: the
                // match is itself a duplicate) anywhere in the copy.
                let root_label = root_label(&verdict, found.iter()).or_else(|| {
                    let root = &verdict.duplicate()?.dup_of;
                    lock(&state.copy).find_id(root).map(|c| c.label)
                });
                let buckets = views
                    .into_iter()
                    .map(|v| BucketSnap {
                        bits: shapes.get(&v.label).copied(),
                        counter: if v.synced == 0 {
                            String::new()
                        } else {
                            v.synced.to_string()
                        },
                        // Probed buckets are validated even when the copy holds none
                        // of their articles yet (another task's sync has listed a new
                        // bucket and not fetched it): the commit then tests every
                        // article in it. Out of range, a check decided at that moment
                        // passed validation unseen and could be stored beside its
                        // near-duplicate (found by the racing tests when decisions
                        // moved into a commit task, which made it frequent).
                        in_range: v.probed && shapes.contains_key(&v.label),
                        label: v.label,
                        start: v.start,
                        members: Vec::new(),
                        empty_sets: v.empty_sets,
                        content_value: Vec::new(),
                        signature_values: Vec::new(),
                        resolved: Vec::new(),
                        cands: Vec::new(),
                        full: Some(v.full),
                    })
                    .collect();
                (
                    verdict,
                    Snapshot {
                        buckets,
                        horizon: Some(horizon),
                        root_label,
                    },
                )
            };
            if !write {
                return Ok(Outcome {
                    verdict,
                    replayed: false,
                    examined,
                });
            }
            let committed = self
                .commit(&mut conn, entry, &probe, &snap, &verdict)
                .await?;
            if let Committed::Ok(handle) = committed {
                // File it now: the next check need not fetch it.
                let offset = u32::try_from(entry.ts_ms - probe.start)
                    .expect("a bucket is shorter than 2^32 ms");
                let record = (
                    encode_fingerprint(fp),
                    encode_meta(&entry.id, &verdict, offset, fp.words).into_bytes(),
                );
                lock(&state.copy)
                    .stored(&probe.label, handle, record)
                    .map_err(|reason| IndexError::Corrupt {
                        id: entry.id.clone(),
                        reason,
                    })?;
            }
            if let Some(outcome) = self
                .settle(&mut conn, entry, committed, verdict, examined)
                .await?
            {
                return Ok(outcome);
            }
        }
        Err(IndexError::Contention {
            attempts: inner.max_attempts,
        })
    }
}

fn lock(m: &std::sync::Mutex<super::Replica>) -> std::sync::MutexGuard<'_, super::Replica> {
    // The copy is only a cache of Redis: a panic while filing cannot leave it
    // worse than stale, which the commit catches.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `XRANGE` of the deletion log after entry `after` ("" = from the start).
fn deletions_after(pipe: &mut ::redis::Pipeline, key: &str, after: &str) {
    let from = if after.is_empty() {
        "-".to_owned()
    } else {
        format!("({after}")
    };
    pipe.cmd("XRANGE")
        .arg(key)
        .arg(from)
        .arg("+")
        .arg("COUNT")
        .arg(DELETIONS_PER_READ);
}

/// (entry id, bucket label, handle) of each deletion-log entry.
fn parse_deletions(v: Option<Value>) -> Result<Vec<(String, String, u64)>, IndexError> {
    let mut out = Vec::new();
    for e in array(v.unwrap_or(Value::Nil))? {
        let mut parts = array(e)?.into_iter();
        let id = string(parts.next())?;
        let fields = array(parts.next().unwrap_or(Value::Nil))?;
        let (mut label, mut handle) = (None, None);
        let mut f = fields.into_iter();
        while let (Some(name), Some(value)) = (f.next(), f.next()) {
            match string(Some(name))?.as_str() {
                "b" => label = Some(string(Some(value))?),
                "h" => handle = Some(int(Some(value))?),
                _ => {}
            }
        }
        match (label, handle.and_then(|h| u64::try_from(h).ok())) {
            (Some(l), Some(h)) => out.push((id, l, h)),
            _ => return Err(bad_reply("a deletion-log entry without b and h")),
        }
    }
    Ok(out)
}

/// A bucket's handle counter (`None`: the bucket's counter hash is gone).
fn counter(v: Option<Value>) -> Result<Option<u64>, IndexError> {
    match v {
        None | Some(Value::Nil) => Ok(None),
        v => u64::try_from(int(v)?)
            .map(Some)
            .map_err(|_| bad_reply("a negative handle counter")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_stale_copy_is_refreshed_in_the_background_until_it_is_too_old() {
        let ms = |m| Some(Duration::from_millis(m));
        // Fresh: decide at once.
        assert_eq!(freshen(ms(1), false, true), Freshen::No);
        // Past the sync interval: decide at once, a sync starts beside it.
        assert_eq!(
            freshen(Some(SYNC_EVERY), false, true),
            Freshen::InBackground
        );
        assert_eq!(freshen(ms(9), false, true), Freshen::InBackground);
        // Too old (another process' deletion must reach checks by then), never
        // synced, or with this process' own deletion since: wait for a sync.
        assert_eq!(freshen(Some(MAX_STALENESS), false, true), Freshen::Now);
        assert_eq!(freshen(None, false, true), Freshen::Now);
        // After a conflict, and for a query (no commit validates it): always.
        assert_eq!(freshen(ms(1), true, true), Freshen::Now);
        assert_eq!(freshen(ms(1), false, false), Freshen::Now);
        assert!(SYNC_EVERY < MAX_STALENESS);
    }
}
