//! The in-process index: same behaviour as the Redis one, no server.
//!
//! Time is event time: "now" is the newest timestamp seen, and articles older than
//! the window behind it are dropped in hourly buckets, so a `scan` of years-old
//! articles behaves as the live service did when they arrived.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::candidates::{Candidates, Reach};
use super::meet::CandidateKeys;
use super::{Cluster, Deletion, Index, IndexEntry, IndexError, Outcome, StoredArticle, Verdict};
use crate::decision::{decide, CandidateView, DecisionConfig};
use crate::fingerprint::Fingerprint;

/// Expired articles are dropped a bucket at a time.
const BUCKET_MS: i64 = 3600 * 1000;

#[derive(Debug)]
struct State {
    /// The keys the held articles are found through; slot `s` is `rows[s]`.
    candidates: Candidates,
    rows: Vec<Option<Row>>,
    /// The slot of each id held.
    ids: HashMap<String, u32>,
    /// The duplicates linked to each cluster root that has any, by slot.
    duplicates: HashMap<u32, Vec<u32>>,
    by_bucket: BTreeMap<i64, Vec<u32>>,
    newest_ms: Option<i64>,
}

/// A held article.
#[derive(Debug)]
struct Row {
    id: String,
    ts_ms: i64,
    fingerprint: Fingerprint,
    verdict: Verdict,
}

/// An [`Index`] held in memory.
#[derive(Debug)]
pub struct EmbeddedIndex {
    config: DecisionConfig,
    state: Mutex<State>,
}

impl EmbeddedIndex {
    pub fn new(config: DecisionConfig) -> Self {
        Self {
            state: Mutex::new(State {
                candidates: Candidates::new(true),
                rows: Vec::new(),
                ids: HashMap::new(),
                duplicates: HashMap::new(),
                by_bucket: BTreeMap::new(),
                newest_ms: None,
            }),
            config,
        }
    }

    pub fn config(&self) -> &DecisionConfig {
        &self.config
    }

    /// Number of articles held.
    pub fn len(&self) -> usize {
        self.lock().candidates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a
        // way that matters more than losing the index, so recover the guard.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Synchronous check-and-insert (the async trait method calls this).
    pub fn check_and_insert_now(&self, entry: &IndexEntry) -> Outcome {
        let mut state = self.lock();
        state.advance_clock(entry.ts_ms, &self.config);
        if let Some(outcome) = state.replay(&entry.id, &self.config) {
            return outcome;
        }
        let (verdict, examined) = state.decide(entry, &self.config);
        state.insert(entry, verdict.clone());
        Outcome {
            verdict,
            replayed: false,
            examined,
            receipt: None,
        }
    }

    /// Synchronous query (no writes).
    pub fn query_now(&self, entry: &IndexEntry) -> Outcome {
        let state = self.lock();
        if let Some(outcome) = state.replay(&entry.id, &self.config) {
            return outcome;
        }
        let (verdict, examined) = state.decide(entry, &self.config);
        Outcome {
            verdict,
            replayed: false,
            examined,
            receipt: None,
        }
    }

    pub fn delete_now(&self, id: &str) -> bool {
        let mut state = self.lock();
        match state.ids.get(id) {
            Some(&slot) => state.remove(slot),
            None => false,
        }
    }

    pub fn get_now(&self, id: &str) -> Option<StoredArticle> {
        let state = self.lock();
        let row = state.live_row(id, &self.config)?.1;
        Some(StoredArticle {
            id: row.id.clone(),
            ts_ms: row.ts_ms,
            fingerprint: row.fingerprint.clone(),
            verdict: row.verdict.clone(),
        })
    }

    pub fn cluster_now(&self, id: &str) -> Option<Cluster> {
        let state = self.lock();
        let (_, row) = state.live_row(id, &self.config)?;
        let root = match &row.verdict {
            Verdict::Unique { .. } => row.id.clone(),
            Verdict::Duplicate(d) => d.dup_of.clone(),
        };
        let mut duplicates: Vec<String> = match state.live_row(&root, &self.config) {
            Some((root_slot, _)) => state
                .duplicates
                .get(&root_slot)
                .into_iter()
                .flatten()
                .filter_map(|&s| state.rows[s as usize].as_ref())
                .map(|r| r.id.clone())
                .collect(),
            // The root was deleted or expired: the duplicates still known are those
            // whose verdict names it; only this one is at hand without a scan.
            None => vec![row.id.clone()],
        };
        duplicates.retain(|d| state.live_row(d, &self.config).is_some());
        duplicates.sort();
        Some(Cluster { root, duplicates })
    }
}

impl State {
    fn advance_clock(&mut self, ts_ms: i64, cfg: &DecisionConfig) {
        let newest = self.newest_ms.map_or(ts_ms, |n| n.max(ts_ms));
        self.newest_ms = Some(newest);
        // Drop whole buckets that ended more than a window ago.
        let cutoff = newest.saturating_sub(cfg.window_ms as i64);
        while let Some((&bucket, _)) = self.by_bucket.first_key_value() {
            if bucket.saturating_add(BUCKET_MS) > cutoff {
                break;
            }
            let slots = self.by_bucket.remove(&bucket).unwrap_or_default();
            for slot in slots {
                self.remove(slot);
            }
        }
    }

    /// The slot and row of article `id`, unless it is older than the window.
    fn live_row(&self, id: &str, cfg: &DecisionConfig) -> Option<(u32, &Row)> {
        let slot = *self.ids.get(id)?;
        let row = self.rows[slot as usize].as_ref()?;
        let live = self
            .newest_ms
            .is_none_or(|n| row.ts_ms >= n.saturating_sub(cfg.window_ms as i64));
        live.then_some((slot, row))
    }

    fn replay(&self, id: &str, cfg: &DecisionConfig) -> Option<Outcome> {
        self.live_row(id, cfg).map(|(_, row)| Outcome {
            verdict: row.verdict.clone(),
            replayed: true,
            examined: 0,
            receipt: None,
        })
    }

    /// The verdict on `entry` and how many index slots were examined.
    fn decide(&self, entry: &IndexEntry, cfg: &DecisionConfig) -> (Verdict, u32) {
        let Some(keys) = CandidateKeys::of(&entry.fingerprint, cfg.lookup_signatures) else {
            return (Verdict::UNIQUE, 0);
        };
        // Block neighbours are candidates only within `max_distance`, as in the
        // Redis index: a farther one that shares sketch hashes is found through
        // the sketch lists, within the reach, or not at all, in both.
        let found =
            self.candidates
                .find(&keys, cfg.max_distance, Reach::of(cfg, &entry.fingerprint));
        let examined = u32::try_from(found.examined).unwrap_or(u32::MAX);
        let candidates = found
            .slots
            .iter()
            .copied()
            .chain(found.alone(&found.listed))
            .filter_map(|s| self.rows[s as usize].as_ref())
            .map(|r| CandidateView::of(&r.id, &r.fingerprint, r.ts_ms));
        let decision = decide(&entry.fingerprint, entry.ts_ms, candidates, cfg);
        // The match's root, while it is stored: a verdict never names a
        // deleted (or expired) article; the match stands for its cluster then.
        let root = decision.matched.as_ref().and_then(|m| {
            let row = self.rows[*self.ids.get(&m.id)? as usize].as_ref()?;
            let root = &row.verdict.duplicate()?.dup_of;
            self.ids.contains_key(root).then(|| root.clone())
        });
        (Verdict::from_decision(decision, root.as_deref()), examined)
    }

    fn insert(&mut self, entry: &IndexEntry, verdict: Verdict) {
        let fp = &entry.fingerprint;
        let root = verdict
            .duplicate()
            .and_then(|d| self.ids.get(&d.dup_of).copied());
        let slot = self
            .candidates
            .insert(CandidateKeys::filed(fp).as_ref())
            .expect("fewer than 2^32 articles in a window");
        let row = Row {
            id: entry.id.clone(),
            ts_ms: entry.ts_ms,
            fingerprint: fp.stored(),
            verdict,
        };
        match self.rows.get_mut(slot as usize) {
            Some(r) => *r = Some(row),
            None => self.rows.push(Some(row)),
        }
        self.ids.insert(entry.id.clone(), slot);
        if let Some(root) = root {
            self.duplicates.entry(root).or_default().push(slot);
        }
        self.by_bucket
            .entry(entry.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS)
            .or_default()
            .push(slot);
    }

    fn remove(&mut self, slot: u32) -> bool {
        let Some(row) = self.rows.get_mut(slot as usize).and_then(Option::take) else {
            return false;
        };
        if let Some(v) = self
            .by_bucket
            .get_mut(&(row.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS))
        {
            v.retain(|&s| s != slot);
        }
        self.duplicates.remove(&slot);
        if let Verdict::Duplicate(d) = &row.verdict {
            if let Some(root) = self.ids.get(&d.dup_of) {
                if let Some(dups) = self.duplicates.get_mut(root) {
                    dups.retain(|&s| s != slot);
                }
            }
        }
        if self.ids.get(&row.id) == Some(&slot) {
            self.ids.remove(&row.id);
        }
        let keys = CandidateKeys::filed(&row.fingerprint);
        self.candidates.remove(slot, keys.as_ref())
    }
}

impl Index for EmbeddedIndex {
    async fn check_and_insert(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        Ok(self.check_and_insert_now(entry))
    }

    async fn query(&self, entry: &IndexEntry) -> Result<Outcome, IndexError> {
        super::require_id(&entry.id)?;
        Ok(self.query_now(entry))
    }

    async fn delete(&self, id: &str) -> Result<Deletion, IndexError> {
        Ok(Deletion {
            found: self.delete_now(id),
            receipt: None,
        })
    }

    async fn get(&self, id: &str) -> Result<Option<StoredArticle>, IndexError> {
        Ok(self.get_now(id))
    }

    async fn cluster(&self, id: &str) -> Result<Option<Cluster>, IndexError> {
        Ok(self.cluster_now(id))
    }
}
