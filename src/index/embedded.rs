//! The in-process index: same behaviour as the Redis one, no server.
//!
//! Time is event time: "now" is the newest timestamp seen, and articles older than
//! the window behind it are dropped in hourly buckets, so a `scan` of years-old
//! articles behaves as the live service did when they arrived.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::{
    Cluster, Index, IndexEntry, IndexError, Outcome, StoredArticle, Verdict, LISTED_PER_HASH,
};
use crate::decision::{decide, CandidateView, DecisionConfig};
use crate::fingerprint::Fingerprint;
use crate::simhash::{blocks, hamming};

/// Expired articles are dropped a bucket at a time.
const BUCKET_MS: i64 = 3600 * 1000;

#[derive(Debug)]
struct Row {
    id: Box<str>,
    ts_ms: i64,
    fingerprint: Fingerprint,
    verdict: Verdict,
    /// Ids of duplicates linked to this article (when it is a cluster root).
    duplicates: Vec<Box<str>>,
}

#[derive(Debug, Default)]
struct State {
    rows: Vec<Option<Row>>,
    free: Vec<u32>,
    by_id: HashMap<Box<str>, u32>,
    blocks: [HashMap<u16, Vec<u32>>; 4],
    content: HashMap<u64, Vec<u32>>,
    signatures: HashMap<u32, Vec<u32>>,
    by_bucket: BTreeMap<i64, Vec<u32>>,
    newest_ms: Option<i64>,
    /// How many of each sketch's smallest hashes are indexed.
    lookup_signatures: usize,
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
                lookup_signatures: config.lookup_signatures,
                ..State::default()
            }),
            config,
        }
    }

    pub fn config(&self) -> &DecisionConfig {
        &self.config
    }

    /// Number of articles held.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
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
        match state.by_id.get(id).copied() {
            Some(slot) => {
                state.remove(slot);
                true
            }
            None => false,
        }
    }

    pub fn get_now(&self, id: &str) -> Option<StoredArticle> {
        let state = self.lock();
        let row = state.live_row(id, &self.config)?;
        Some(StoredArticle {
            id: row.id.to_string(),
            ts_ms: row.ts_ms,
            fingerprint: row.fingerprint.clone(),
            verdict: row.verdict.clone(),
        })
    }

    pub fn cluster_now(&self, id: &str) -> Option<Cluster> {
        let state = self.lock();
        let row = state.live_row(id, &self.config)?;
        let root = match &row.verdict {
            Verdict::Unique => row.id.to_string(),
            Verdict::Duplicate(d) => d.dup_of.clone(),
        };
        let mut duplicates: Vec<String> = match state.live_row(&root, &self.config) {
            Some(root_row) => root_row.duplicates.iter().map(|d| d.to_string()).collect(),
            // The root was deleted or expired: the duplicates still known are those
            // whose verdict names it; only this one is at hand without a scan.
            None => vec![row.id.to_string()],
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

    fn is_live(&self, row: &Row, cfg: &DecisionConfig) -> bool {
        self.newest_ms
            .is_none_or(|n| row.ts_ms >= n.saturating_sub(cfg.window_ms as i64))
    }

    fn live_row(&self, id: &str, cfg: &DecisionConfig) -> Option<&Row> {
        let slot = *self.by_id.get(id)?;
        let row = self.rows[slot as usize].as_ref()?;
        self.is_live(row, cfg).then_some(row)
    }

    fn replay(&self, id: &str, cfg: &DecisionConfig) -> Option<Outcome> {
        self.live_row(id, cfg).map(|row| Outcome {
            verdict: row.verdict.clone(),
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
        let mut slots: Vec<u32> = Vec::new();
        let mut examined = 0usize;
        // Block neighbours are candidates only within `max_distance`, as in the
        // Redis index (which resolves only those members to articles): a
        // farther one that shares sketch hashes is found through the sketch
        // index or not at all, in both.
        for (i, block) in blocks(fp.simhash).into_iter().enumerate() {
            for &slot in self.blocks[i].get(&block).into_iter().flatten() {
                examined += 1;
                let near = self.rows[slot as usize].as_ref().is_some_and(|r| {
                    hamming(r.fingerprint.simhash, fp.simhash) <= cfg.max_distance
                });
                if near {
                    slots.push(slot);
                }
            }
        }
        let listed = slots.len();
        slots.extend(self.content.get(&fp.content).into_iter().flatten());
        for s in fp.lookup_signatures(cfg.lookup_signatures) {
            slots.extend(self.signatures.get(s).into_iter().flatten());
        }
        examined += slots.len() - listed;
        let examined = u32::try_from(examined).unwrap_or(u32::MAX);
        slots.sort_unstable();
        slots.dedup();
        let candidates = slots
            .iter()
            .filter_map(|&s| self.rows[s as usize].as_ref())
            .map(|r| CandidateView {
                id: &r.id,
                simhash: r.fingerprint.simhash,
                content: r.fingerprint.content,
                signatures: &r.fingerprint.signatures,
                numbers: &r.fingerprint.numbers,
                ts_ms: r.ts_ms,
            });
        let verdict = match decide(fp, entry.ts_ms, candidates, cfg) {
            None => Verdict::Unique,
            Some(m) => {
                let root = self
                    .by_id
                    .get(m.id.as_str())
                    .and_then(|&s| self.rows[s as usize].as_ref())
                    .and_then(|r| r.verdict.duplicate().map(|d| d.dup_of.clone()));
                Verdict::from_match(m, root.as_deref())
            }
        };
        (verdict, examined)
    }

    fn insert(&mut self, entry: &IndexEntry, verdict: Verdict) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.rows.push(None);
                (self.rows.len() - 1) as u32
            }
        };
        let fp = &entry.fingerprint;
        if !fp.is_empty() {
            for (i, block) in blocks(fp.simhash).into_iter().enumerate() {
                self.blocks[i].entry(block).or_default().push(slot);
            }
            // The first LISTED_PER_HASH articles of a hash only, as in Redis.
            let list = |v: &mut Vec<u32>| {
                if v.len() < LISTED_PER_HASH {
                    v.push(slot);
                }
            };
            list(self.content.entry(fp.content).or_default());
            for s in fp.lookup_signatures(self.lookup_signatures) {
                list(self.signatures.entry(*s).or_default());
            }
        }
        if let Verdict::Duplicate(d) = &verdict {
            if let Some(&root) = self.by_id.get(d.dup_of.as_str()) {
                if let Some(root_row) = self.rows[root as usize].as_mut() {
                    root_row.duplicates.push(entry.id.as_str().into());
                }
            }
        }
        self.by_bucket
            .entry(entry.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS)
            .or_default()
            .push(slot);
        self.by_id.insert(entry.id.as_str().into(), slot);
        self.rows[slot as usize] = Some(Row {
            id: entry.id.as_str().into(),
            ts_ms: entry.ts_ms,
            fingerprint: entry.fingerprint.clone(),
            verdict,
            duplicates: Vec::new(),
        });
    }

    fn remove(&mut self, slot: u32) {
        let Some(row) = self.rows[slot as usize].take() else {
            return;
        };
        fn unlink<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Vec<u32>>, key: K, slot: u32) {
            if let Some(v) = map.get_mut(&key) {
                v.retain(|&s| s != slot);
                if v.is_empty() {
                    map.remove(&key);
                }
            }
        }
        let fp = &row.fingerprint;
        for (i, block) in blocks(fp.simhash).into_iter().enumerate() {
            unlink(&mut self.blocks[i], block, slot);
        }
        unlink(&mut self.content, fp.content, slot);
        for s in fp.lookup_signatures(self.lookup_signatures) {
            unlink(&mut self.signatures, *s, slot);
        }
        if let Some(v) = self
            .by_bucket
            .get_mut(&(row.ts_ms.div_euclid(BUCKET_MS) * BUCKET_MS))
        {
            v.retain(|&s| s != slot);
        }
        if let Verdict::Duplicate(d) = &row.verdict {
            if let Some(&root) = self.by_id.get(d.dup_of.as_str()) {
                if let Some(root_row) = self.rows[root as usize].as_mut() {
                    root_row.duplicates.retain(|x| **x != *row.id);
                }
            }
        }
        self.by_id.remove(&row.id);
        self.free.push(slot);
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
