//! A check: decide an article from the view, then commit it (the
//! [`RedisIndex`] methods that do it live here).
//!
//! [`RedisIndex::check`] catches the view up as needed, finds the candidates
//! there ([`View::candidates`]), reads those few from Redis, decides
//! as the embedded index does, and sends the commit ([`CommitArgs`]). When
//! the commit finds something inserted since the view that the article could
//! meet, the check catches up and decides again.
//!
//! [`View::candidates`]: super::view::View::candidates

use super::codec::{decode_stored, encode_article, encode_fingerprint, encode_meta};
use super::commit::{self, CommitArgs, Committed, Validate};
use super::view::{Candidate, Place};
use super::{backend, RedisIndex, COMMIT};
use crate::connect::Conn;
use crate::decision::{decide, CandidateView, DecisionConfig};
use crate::index::{IndexEntry, IndexError, Outcome, Verdict};
use crate::keys::{bucket_label, slot};

/// What a check does with the article it decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckKind {
    /// [`Index::check_and_insert`]: the commit stores the article, and
    /// validates the decision against what was stored since the view.
    ///
    /// [`Index::check_and_insert`]: crate::index::Index::check_and_insert
    Insert,
    /// [`Index::query`]: the verdict only; nothing is stored, and no commit
    /// validates the decision.
    ///
    /// [`Index::query`]: crate::index::Index::query
    Query,
}

/// What a check's first decision is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FirstDecision {
    /// The view, caught up first when it is stale.
    CatchUpIfStale,
    /// The view as it is, however far behind Redis (tests only).
    OnTheViewAsIs,
}

impl RedisIndex {
    /// **Tests only**: [`Index::check_and_insert`], deciding first from the
    /// view as it is, however far behind Redis it is (another process' inserts
    /// since are not read before the decision): what a check does when it
    /// races a writer. The commit validates it like any other.
    #[doc(hidden)]
    pub async fn check_and_insert_on_the_view_as_is(
        &self,
        entry: &IndexEntry,
    ) -> Result<Outcome, IndexError> {
        crate::index::require_id(&entry.id)?;
        self.check(entry, CheckKind::Insert, FirstDecision::OnTheViewAsIs)
            .await
    }

    /// Check `entry` (and record it for [`CheckKind::Insert`]): catch the
    /// view up as needed (before the first decision too, unless
    /// [`FirstDecision::OnTheViewAsIs`]), decide from it, commit; after a
    /// conflict, catch up and decide again (at most `max_attempts` times).
    pub(super) async fn check(
        &self,
        entry: &IndexEntry,
        kind: CheckKind,
        first: FirstDecision,
    ) -> Result<Outcome, IndexError> {
        let inner = &self.inner;
        let cfg = &inner.config;
        let place = self.placement(entry);
        let mut conn = inner.conn.clone();
        let mut examined = 0u32;
        let mut must = false;
        // Roots found no longer stored (deleted, or expired): a verdict
        // names none of them.
        let mut gone: Vec<String> = Vec::new();
        if kind == CheckKind::Query {
            // A query has no commit to find the id stored: look first.
            if let Some(stored) = self.lookup(&mut conn, &entry.id).await? {
                return Ok(Outcome {
                    verdict: stored.verdict,
                    replayed: true,
                    examined: 0,
                    receipt: None,
                });
            }
        }
        for _ in 0..inner.max_attempts {
            // A query has no commit to validate it: always up to date. After a
            // conflict, read what caused it before deciding again.
            if first == FirstDecision::CatchUpIfStale || must {
                self.catch_up_if_stale(&mut conn, must, kind).await?;
            }
            must = true;
            let (probe, forgets) = {
                let copy = self.view();
                let probe = copy.candidates(
                    Some(&entry.id),
                    &entry.fingerprint,
                    cfg,
                    (place.lo, place.hi),
                    &place.label,
                );
                examined = examined.saturating_add(probe.examined);
                (probe, copy.forgets)
            };
            let cands = self.fetch(&mut conn, &probe.found).await?;
            let verdict = verdict_among(entry, cands.iter().collect(), cfg, &gone);
            if kind == CheckKind::Query {
                // A query has no commit to find its root gone: look.
                if let Some(d) = verdict.duplicate().filter(|d| d.dup_of != d.matched) {
                    if self.lookup(&mut conn, &d.dup_of).await?.is_none() {
                        gone.push(d.dup_of.clone());
                        continue;
                    }
                }
                return Ok(Outcome {
                    verdict,
                    replayed: false,
                    examined,
                    receipt: None,
                });
            }
            let text = place.meta(entry, &verdict);
            let args = CommitArgs {
                root: verdict.duplicate().map(|d| d.dup_of.as_str()),
                empty_sets: &probe.empty_sets,
                token: &probe.token,
                ..self.commit_args(entry, &place, &text, Validate::Since(probe.buckets))
            };
            match self.commit(&mut conn, &args).await? {
                Committed::Ok(handle) => {
                    // File it now: the checks after it find it at once.
                    let article = (entry.id.as_str(), &entry.fingerprint);
                    self.view()
                        .stored(&place.label, handle, article, forgets)
                        .map_err(|source| IndexError::Corrupt {
                            id: entry.id.clone(),
                            source,
                        })?;
                    let receipt = Some(self.receipt(&place.label, handle, args.article));
                    return Ok(Outcome {
                        verdict,
                        replayed: false,
                        examined,
                        receipt,
                    });
                }
                Committed::Expired => {
                    return Ok(Outcome {
                        verdict,
                        replayed: false,
                        examined,
                        receipt: None,
                    })
                }
                Committed::Replay => {
                    // Stored by a racing copy; deleted since: check again.
                    if let Some(stored) = self.lookup(&mut conn, &entry.id).await? {
                        return Ok(Outcome {
                            verdict: stored.verdict,
                            replayed: true,
                            examined: 0,
                            receipt: Some(self.receipt(
                                &stored.label,
                                stored.handle,
                                stored.record,
                            )),
                        });
                    }
                }
                Committed::RootGone => {
                    let root = args.root.unwrap_or_default();
                    tracing::debug!(id = %entry.id, %root, "root no longer stored: deciding again");
                    gone.push(root.to_owned());
                }
                Committed::Retry(why) => {
                    tracing::trace!(id = %entry.id, %why, "commit conflict: catching up");
                    tokio::task::yield_now().await;
                }
            }
        }
        Err(IndexError::Contention {
            attempts: inner.max_attempts,
        })
    }

    /// The articles at `found` (candidates found in the view, or a
    /// cluster's duplicates), read from their `a:` elements: one
    /// pipeline. One deleted since is left out, as it would be from the view,
    /// and so is one that cannot be read.
    pub(super) async fn fetch(
        &self,
        conn: &mut Conn,
        found: &[Place],
    ) -> Result<Vec<Candidate>, IndexError> {
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for place in found {
            pipe.cmd("LINDEX")
                .arg(self.inner.keys.articles(&place.label, place.handle))
                .arg(slot(place.handle));
        }
        let records: Vec<Option<Vec<u8>>> = pipe.query_async(conn).await.map_err(backend)?;
        let mut cands = Vec::with_capacity(found.len());
        for (place, record) in found.iter().zip(records) {
            let Place {
                label,
                start,
                handle,
            } = place;
            let (meta, fp) = match decode_stored(record.as_deref().unwrap_or_default()) {
                Ok(Some(article)) => article,
                Ok(None) => continue,
                Err(reason) => {
                    // As the view holds it: deleted (`View::apply`).
                    tracing::warn!(bucket = %label, handle, %reason, "unreadable article record: skipped");
                    continue;
                }
            };
            cands.push(Candidate {
                label: label.clone(),
                handle: *handle,
                ts_ms: start + i64::from(meta.ts_offset),
                fp,
                meta,
            });
        }
        Ok(cands)
    }

    /// Run the commit of `args`.
    async fn commit(
        &self,
        conn: &mut Conn,
        args: &CommitArgs<'_>,
    ) -> Result<Committed, IndexError> {
        let mut inv = COMMIT.prepare_invoke();
        inv.key(self.inner.keys.buckets());
        for a in args.argv() {
            inv.arg(a);
        }
        let reply = inv.invoke_async(conn).await.map_err(backend)?;
        commit::parse_reply(reply, self.inner.keys.prefix())
    }

    /// The [`CommitArgs`] of `entry`, placed at `place`, with meta `meta`
    /// ([`Placement::meta`]): no root, no empty-set flags.
    fn commit_args<'a>(
        &'a self,
        entry: &'a IndexEntry,
        place: &'a Placement,
        meta: &str,
        validate: Validate,
    ) -> CommitArgs<'a> {
        let inner = &self.inner;
        CommitArgs {
            prefix: inner.keys.prefix(),
            id: &entry.id,
            label: &place.label,
            start: place.start,
            retention_ms: self.retention_ms(),
            fingerprint: &entry.fingerprint,
            article: encode_article(&encode_fingerprint(&entry.fingerprint), meta),
            lookup_signatures: inner.config.lookup_signatures,
            root: None,
            default_shape: inner.default_shape,
            empty_sets: "",
            validate,
            token: "",
        }
    }

    /// **Benchmarks only**: store `entries` as unique articles without checking
    /// them (no view, no decision, no concurrency control), pipelined. Fills an
    /// index to a size quickly so that real checks can be measured against it;
    /// never use it on an index that serves verdicts.
    #[doc(hidden)]
    pub async fn preload(&self, entries: &[IndexEntry]) -> Result<(), IndexError> {
        let mut conn = self.inner.conn.clone();
        COMMIT.load_async(&mut conn).await.map_err(backend)?;
        let placed: Vec<(Placement, String)> = entries
            .iter()
            .map(|entry| {
                let place = self.placement(entry);
                let meta = place.meta(entry, &Verdict::UNIQUE);
                (place, meta)
            })
            .collect();
        let invocations: Vec<redis::ScriptInvocation<'_>> = entries
            .iter()
            .zip(&placed)
            .map(|(entry, (place, meta))| {
                let mut inv = COMMIT.prepare_invoke();
                inv.key(self.inner.keys.buckets());
                for a in self
                    .commit_args(entry, place, meta, Validate::Nothing)
                    .argv()
                {
                    inv.arg(a);
                }
                inv
            })
            .collect();
        let mut pipe = redis::pipe();
        for inv in &invocations {
            pipe.invoke_script(inv).ignore();
        }
        pipe.query_async::<()>(&mut conn).await.map_err(backend)
    }

    /// Where `entry` is stored and which buckets can hold its candidates.
    fn placement(&self, entry: &IndexEntry) -> Placement {
        let bucket_ms = self.inner.bucket_ms;
        let floor = |t: i64| t.div_euclid(bucket_ms) * bucket_ms;
        let window = i64::try_from(self.inner.config.window_ms).unwrap_or(i64::MAX);
        let start = floor(entry.ts_ms);
        Placement {
            label: bucket_label(start),
            start,
            lo: floor(entry.ts_ms.saturating_sub(window)),
            hi: floor(entry.ts_ms.saturating_add(window)),
        }
    }
}

/// The verdict on `entry` among `cands` (any order, repeats allowed), as the
/// embedded index gives it: [`decide`] over them in (bucket, handle) order,
/// and a duplicate linked to its match's root. `gone`: articles found no
/// longer stored, neither candidates nor roots (a duplicate whose match's
/// root is gone names its match).
fn verdict_among(
    entry: &IndexEntry,
    mut cands: Vec<&Candidate>,
    cfg: &DecisionConfig,
    gone: &[String],
) -> Verdict {
    if entry.fingerprint.is_empty() {
        return Verdict::UNIQUE;
    }
    cands.retain(|c| !gone.contains(&c.meta.id));
    cands.sort_unstable_by(|a, b| (&a.label, a.handle).cmp(&(&b.label, b.handle)));
    cands.dedup_by(|a, b| a.label == b.label && a.handle == b.handle);
    let views = cands
        .iter()
        .map(|c| CandidateView::of(&c.meta.id, &c.fp, c.ts_ms));
    let decision = decide(&entry.fingerprint, entry.ts_ms, views, cfg);
    let root = decision.matched.as_ref().and_then(|m| {
        let c = cands.iter().find(|c| c.meta.id == m.id)?;
        let root = &c.meta.verdict.duplicate()?.dup_of;
        (!gone.contains(root)).then(|| root.clone())
    });
    Verdict::from_decision(decision, root.as_deref())
}

/// Where an article is stored and looked for.
struct Placement {
    label: String,
    start: i64,
    /// Starts of the first and last bucket that can hold an article in the window.
    lo: i64,
    hi: i64,
}

impl Placement {
    /// Milliseconds from the bucket start to `ts_ms` (the meta's offset).
    fn offset(&self, ts_ms: i64) -> u32 {
        u32::try_from(ts_ms - self.start)
            .expect("a bucket is shorter than 2^32 ms (checked at connect)")
    }

    /// The meta text `entry` is stored with ([`encode_meta`]), placed here,
    /// with `verdict`.
    fn meta(&self, entry: &IndexEntry, verdict: &Verdict) -> String {
        let offset = self.offset(entry.ts_ms);
        encode_meta(&entry.id, verdict, offset, entry.fingerprint.words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::HOUR_MS;

    #[test]
    fn placement_covers_the_window_in_buckets() {
        let day = 24 * HOUR_MS as i64;
        let floor = |t: i64| t.div_euclid(day) * day;
        let window = DecisionConfig::default().window_ms as i64;
        let ts = 10 * day + 5;
        let p = Placement {
            label: bucket_label(floor(ts)),
            start: floor(ts),
            lo: floor(ts - window),
            hi: floor(ts + window),
        };
        assert_eq!((p.start, p.lo, p.hi), (10 * day, 8 * day, 12 * day));
        assert_eq!(p.label, "1970011100");
        assert_eq!(p.offset(ts), 5);
    }
}
