//! The in-process index: same behaviour as the Redis one, no server.
//!
//! Time is event time: "now" is the newest timestamp seen, and articles older than
//! the window behind it are dropped in hourly buckets, so a `scan` of years-old
//! articles behaves as the live service did when they arrived.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::candidates::Candidates;
use super::redis::codec::{
    decode_fingerprint, decode_meta, encode_fingerprint, encode_meta, packed_parts, u16s, u32s,
    Meta,
};
use super::{Cluster, Index, IndexEntry, IndexError, Outcome, StoredArticle, Verdict};
use crate::decision::{decide, CandidateView, DecisionConfig};
use crate::fingerprint::Fingerprint;

/// Expired articles are dropped a bucket at a time.
const BUCKET_MS: i64 = 3600 * 1000;

#[derive(Debug)]
struct State {
    /// Rows: the event time (i64 LE), then the meta ([`encode_meta`], its
    /// time offset 0).
    articles: Candidates,
    /// The duplicates linked to each cluster root that has any, by slot.
    duplicates: HashMap<u32, Vec<u32>>,
    by_bucket: BTreeMap<i64, Vec<u32>>,
    newest_ms: Option<i64>,
}

/// An article as its row holds it.
struct Row {
    slot: u32,
    ts_ms: i64,
    meta: Meta,
    fingerprint: Fingerprint,
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
                articles: Candidates::new(config.lookup_signatures, true),
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
        self.lock().articles.len()
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
        }
    }

    pub fn delete_now(&self, id: &str) -> bool {
        let mut state = self.lock();
        match state.articles.find_id(id) {
            Some(slot) => state.remove(slot),
            None => false,
        }
    }

    pub fn get_now(&self, id: &str) -> Option<StoredArticle> {
        let row = self.lock().live_row(id, &self.config)?;
        Some(StoredArticle {
            id: row.meta.id,
            ts_ms: row.ts_ms,
            fingerprint: row.fingerprint,
            verdict: row.meta.verdict,
        })
    }

    pub fn cluster_now(&self, id: &str) -> Option<Cluster> {
        let state = self.lock();
        let row = state.live_row(id, &self.config)?;
        let root = match row.meta.verdict {
            Verdict::Unique => row.meta.id.clone(),
            Verdict::Duplicate(d) => d.dup_of,
        };
        let mut duplicates: Vec<String> = match state.live_row(&root, &self.config) {
            Some(root_row) => state
                .duplicates
                .get(&root_row.slot)
                .into_iter()
                .flatten()
                .filter_map(|&s| state.row(s))
                .map(|r| r.meta.id)
                .collect(),
            // The root was deleted or expired: the duplicates still known are those
            // whose verdict names it; only this one is at hand without a scan.
            None => vec![row.meta.id],
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

    fn row(&self, slot: u32) -> Option<Row> {
        let (packed, tail) = self.articles.row(slot)?;
        let (ts, meta) = tail.split_at(8);
        let meta = decode_meta(meta).ok()?;
        Some(Row {
            slot,
            ts_ms: i64::from_le_bytes(ts.try_into().ok()?),
            fingerprint: decode_fingerprint(packed, meta.words).ok()?,
            meta,
        })
    }

    fn live_row(&self, id: &str, cfg: &DecisionConfig) -> Option<Row> {
        let row = self.row(self.articles.find_id(id)?)?;
        let live = self
            .newest_ms
            .is_none_or(|n| row.ts_ms >= n.saturating_sub(cfg.window_ms as i64));
        live.then_some(row)
    }

    fn replay(&self, id: &str, cfg: &DecisionConfig) -> Option<Outcome> {
        self.live_row(id, cfg).map(|row| Outcome {
            verdict: row.meta.verdict,
            replayed: true,
            examined: 0,
        })
    }

    /// The verdict on `entry` and how many index slots were examined.
    fn decide(&self, entry: &IndexEntry, cfg: &DecisionConfig) -> (Verdict, u32) {
        let fp = &entry.fingerprint;
        if fp.is_empty() {
            return (Verdict::Unique, 0);
        }
        // Block neighbours are candidates only within `max_distance`, as in the
        // Redis index: a farther one that shares sketch hashes is found through
        // the sketch lists or not at all, in both.
        let found = self.articles.find(fp, cfg.max_distance);
        let examined = u32::try_from(found.examined).unwrap_or(u32::MAX);
        // The candidates' sketches side by side in two arrays: no allocation
        // per candidate.
        let (mut signatures, mut numbers) = (Vec::new(), Vec::new());
        let mut parts = Vec::with_capacity(found.slots.len());
        for &slot in &found.slots {
            let Some((packed, tail)) = self.articles.row(slot) else {
                continue;
            };
            let (id, Some((simhash, content, sketch, nums))) =
                (self.articles.id(slot), packed_parts(packed))
            else {
                continue;
            };
            let ts_ms = i64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
            let (s, n) = (signatures.len(), numbers.len());
            signatures.extend(u32s(sketch));
            numbers.extend(u16s(nums));
            parts.push((
                id,
                simhash,
                content,
                s..signatures.len(),
                n..numbers.len(),
                ts_ms,
            ));
        }
        let candidates = parts
            .iter()
            .map(|(id, simhash, content, s, n, ts_ms)| CandidateView {
                id: id.unwrap_or_default(),
                simhash: *simhash,
                content: *content,
                signatures: &signatures[s.clone()],
                numbers: &numbers[n.clone()],
                ts_ms: *ts_ms,
            });
        let verdict = match decide(fp, entry.ts_ms, candidates, cfg) {
            None => Verdict::Unique,
            Some(m) => {
                let root = self
                    .articles
                    .find_id(&m.id)
                    .and_then(|s| self.row(s))
                    .and_then(|r| r.meta.verdict.duplicate().map(|d| d.dup_of.clone()));
                Verdict::from_match(m, root.as_deref())
            }
        };
        (verdict, examined)
    }

    fn insert(&mut self, entry: &IndexEntry, verdict: Verdict) {
        let fp = &entry.fingerprint;
        let mut tail = entry.ts_ms.to_le_bytes().to_vec();
        tail.extend_from_slice(encode_meta(&entry.id, &verdict, 0, fp.words).as_bytes());
        let root = verdict
            .duplicate()
            .and_then(|d| self.articles.find_id(&d.dup_of));
        let slot = self
            .articles
            .insert(
                &encode_fingerprint(fp),
                &tail,
                entry.id.len(),
                !fp.is_empty(),
            )
            .expect("an article of an id of at most MAX_ID_BYTES fits a row");
        if let Some(root) = root {
            self.duplicates.entry(root).or_default().push(slot);
        }
        self.by_bucket
            .entry(entry.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS)
            .or_default()
            .push(slot);
    }

    fn remove(&mut self, slot: u32) -> bool {
        let Some(row) = self.row(slot) else {
            return false;
        };
        if let Some(v) = self
            .by_bucket
            .get_mut(&(row.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS))
        {
            v.retain(|&s| s != slot);
        }
        self.duplicates.remove(&slot);
        if let Verdict::Duplicate(d) = &row.meta.verdict {
            if let Some(root) = self.articles.find_id(&d.dup_of) {
                if let Some(dups) = self.duplicates.get_mut(&root) {
                    dups.retain(|&s| s != slot);
                }
            }
        }
        self.articles.remove(slot)
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

    async fn delete(&self, id: &str) -> Result<bool, IndexError> {
        Ok(self.delete_now(id))
    }

    async fn get(&self, id: &str) -> Result<Option<StoredArticle>, IndexError> {
        Ok(self.get_now(id))
    }

    async fn cluster(&self, id: &str) -> Result<Option<Cluster>, IndexError> {
        Ok(self.cluster_now(id))
    }
}
