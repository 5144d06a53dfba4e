//! A worker's view: the keys of a namespace's live articles, where its
//! checks find their candidates.
//!
//! A worker keeps one [`Candidates`] per live bucket, the keys of every
//! article in it (handle `h` in slot `h - 1`), and finds candidates there as
//! the embedded index does; the few it finds are read from Redis to decide
//! (`RedisIndex::check`). Redis only tells it what is new (the bucket
//! counters, then the `a:` elements of the new handles: `catch_up.rs`) and
//! runs the commit, which validates the decision against everything inserted
//! since the view's counters. The view is a cache: it is built from Redis
//! whenever a worker starts, so a worker keeps nothing of its own.
//!
//! A view never outlives the data it describes. Redis may go back in time
//! (a replica promoted without the last writes, a restart without them, a
//! `FLUSHDB`), and then hands out again the handles the view holds, to other
//! articles. So the view remembers the namespace's history token and the
//! server's replication id ([`Origin`]) and loads everything again when
//! either changes, and loads a bucket again when its counter is below the
//! handles the view had confirmed before reading it ([`View::follow`]).
//!
//! Pure data, no I/O: `RedisIndex` fetches, this module files and searches.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use growable_bloom_filter::GrowableBloom;
use rustc_hash::FxBuildHasher;

use super::codec::{decode_article, meta_words_and_id, packed_parts, u32s, DecodeError, Meta};
use super::commit::{self, BucketCheck};
use crate::decision::{DecisionConfig, MAX_LOOKUP_SIGNATURES};
use crate::fingerprint::Fingerprint;
use crate::index::candidates::{listed_over, Candidates, Reach};
use crate::index::meet::CandidateKeys;
use crate::index::StoredError;
use crate::keys::POSITIONAL_BLOCK_BITS;
use crate::simhash::blocks;

/// The share of ids an id filter wrongly says it may hold. Each costs its
/// commit one `HEXISTS` in that bucket.
const ID_FILTER_ERRORS: f64 = 0.01;

/// The smallest id filter, in articles: a filter grows by stages twice the
/// size of the last, and each stage is one more lookup per check.
const ID_FILTER_MIN: usize = 1 << 16;

/// The copies of the live buckets, and how far the deletion log was read.
#[derive(Debug, Default)]
pub(crate) struct View {
    buckets: HashMap<String, BucketCopy>,
    /// Articles forgotten so far: an own insert decided before one was
    /// forgotten is not filed by [`View::stored`] (it may be the one).
    pub(crate) forgets: u64,
    /// Stream id of the last deletion-log entry applied ("" = none read yet).
    pub(crate) deletions_read: String,
    /// This process' own inserts not filed yet, by bucket: each after a
    /// handle the view lacks (another process' insert, which the next
    /// catch-up fetches), filed as soon as the handles before it are.
    own: HashMap<String, BTreeMap<u64, OwnInsert>>,
    /// The history the view was loaded from (`None`: not loaded yet).
    origin: Option<Origin>,
}

/// Which history of the namespace a view describes, as `lua/catch_up.lua`
/// reads it: the namespace's history token (key `history`: gone with the
/// data, written anew by the next catch-up) and the server's replication id
/// (a new one after a failover or a restart). A commit carries the token and
/// is refused under another one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) token: String,
    pub(crate) replid: String,
}

/// An own insert waiting to be filed.
#[derive(Debug)]
struct OwnInsert {
    /// Its id's hash ([`id_key`]).
    id_key: u32,
    /// Its packed fingerprint (`None`: an empty one, held, never found).
    packed: Option<Vec<u8>>,
}

impl OwnInsert {
    /// What filing it needs.
    fn record(&self) -> Record<'_> {
        Record {
            id_key: self.id_key,
            packed: self.packed.as_deref(),
        }
    }
}

/// A live bucket as `lua/catch_up.lua` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveBucket {
    pub(crate) label: String,
    /// Its start, unix ms.
    pub(crate) start: i64,
    /// Its handle counter and shape bits, both `None` once its `n:` hash has
    /// expired.
    pub(crate) counter: Option<u64>,
    pub(crate) shape: Option<u32>,
}

/// A deletion-log entry: its stream id, the bucket label and the handle.
pub(crate) type Deleted = (String, String, u64);

/// One bucket's articles, handles `1..=filed`.
#[derive(Debug)]
pub(crate) struct BucketCopy {
    pub(crate) start: i64,
    pub(crate) filed: u64,
    /// Handles Redis is known to hold: those fetched, and this process' own
    /// inserts filed before the counters were last read ([`View::confirm`]).
    /// A counter read below it means Redis lost inserts the view holds.
    confirmed: u64,
    /// Its shape bits (`docs/redis-keys.md`), `None` once its `n:` hash has
    /// expired; a bucket's shape never changes.
    shape: Option<u32>,
    articles: Candidates,
    /// A Bloom filter of the id of every article filed ([`id_key`],
    /// [`ID_FILTER_ERRORS`]): a check whose id it does not hold was never
    /// stored in the handles held, so its commit need not look the id up in
    /// this bucket. Deleted ids stay; a false positive costs one lookup.
    /// Worth: a commit without it looks the id up (`HEXISTS`) in every live
    /// bucket: 56 against 44 µs of `EVALSHA` per check at 1 M, the difference
    /// put down to those lookups (`simdedup-bench --sizes 1000000 --no-e2e
    /// --no-paced`, 57eccae, whose view held no ids, against cf8c138, whose
    /// view held them). A Bloom filter and not a set of 32-bit id hashes:
    /// about 1.2 bytes an article instead of 5–9, a view of 124 instead of
    /// 147 B/article at 1 M (`simdedup-bench --sizes 1000000,10000000
    /// --no-e2e --no-paced`, 09e3df0 against a14e37d).
    ids: GrowableBloom,
}

/// Where the view found a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// Its bucket's label and start (unix ms).
    pub(crate) label: String,
    pub(crate) start: i64,
    /// Its handle in that bucket.
    pub(crate) handle: u64,
}

/// A candidate article found in the view and read from Redis (its `a:`
/// element): what a check decides with.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub(crate) label: String,
    pub(crate) handle: u64,
    pub(crate) ts_ms: i64,
    pub(crate) fp: Fingerprint,
    pub(crate) meta: Meta,
}

/// What a search of the view found for a check.
pub(crate) struct Probe {
    /// The candidates, where they are.
    pub(crate) found: Vec<Place>,
    /// Slots examined ([`crate::index::Outcome::examined`]).
    pub(crate) examined: u32,
    /// Every live bucket, as the commit validates it, oldest first.
    pub(crate) buckets: Vec<BucketCheck>,
    /// '1' per block position whose Redis set may be empty in the article's
    /// own bucket (the commit then gives the set it creates an expiry; erring
    /// towards '1' only costs a redundant `EXPIREAT`); "" when the view does
    /// not hold that bucket and its shape. A '0' spares the commit that
    /// set's `EXPIREAT`: an insert whose four sets exist sends none for them.
    /// Worth about 3 µs of Redis time a check at 1 M articles: with every
    /// set's `EXPIREAT` sent, 89 against 86 µs (commandstats) and Redis CPU
    /// 91 against 85 µs, medians of 3 alternated pairs of `simdedup-bench
    /// --sizes 1000000 --checks 50000 --no-e2e --no-paced`.
    pub(crate) empty_sets: String,
    /// The history token of the view searched ([`View::token`]).
    pub(crate) token: String,
}

/// The hash of an article id a view's filter holds. Not the id's SHA-1
/// (`keys::id_hash`), which names its `i:` key and its recent record,
/// because the filter hashes every id of the window at load (10 M at 10 M
/// articles), where FxHash costs a few nanoseconds and SHA-1 a few hundred;
/// the two never meet, so they need not agree.
fn id_key(id: &str) -> u32 {
    FxBuildHasher.hash_one(id) as u32
}

/// The keys a packed fingerprint is filed under
/// ([`CandidateKeys::filed`]), its sketch hashes copied to `sketch`.
fn keys_of_packed<'a>(
    packed: &[u8],
    sketch: &'a mut [u32; MAX_LOOKUP_SIGNATURES],
) -> Result<CandidateKeys<'a>, DecodeError> {
    let p = packed_parts(packed).ok_or(DecodeError::FingerprintCounts { len: packed.len() })?;
    let mut len = 0;
    for (slot, s) in sketch.iter_mut().zip(u32s(p.sketch)) {
        *slot = s;
        len += 1;
    }
    Ok(CandidateKeys {
        blocks: blocks(p.simhash),
        content: p.content,
        lookup: &sketch[..len],
    })
}

impl View {
    /// The history this view describes ("" before the first catch-up): what a
    /// commit carries.
    pub(crate) fn token(&self) -> &str {
        self.origin.as_ref().map_or("", |o| o.token.as_str())
    }

    /// The counters are about to be read: every handle filed so far is in
    /// Redis (this process' own inserts were answered before), so a counter
    /// read below it is a rollback.
    pub(crate) fn confirm(&mut self) {
        for copy in self.buckets.values_mut() {
            copy.confirmed = copy.filed;
        }
    }

    /// Follow Redis as `lua/catch_up.lua` read it from `origin`: under another
    /// history token or replication id, drop everything (returns `true`: the
    /// deletion log is read again from its start), then [`View::plan`].
    pub(crate) fn follow(
        &mut self,
        origin: Origin,
        live: &[LiveBucket],
    ) -> (Vec<(String, u64, u64)>, bool) {
        let reset = self.origin.as_ref().is_some_and(|o| *o != origin);
        if reset {
            tracing::warn!(
                token = %origin.token,
                replid = %origin.replid,
                "Redis holds another history (a failover, a restart or a flush): loading the view again"
            );
            self.buckets.clear();
            self.own.clear();
            self.deletions_read.clear();
            // A check decided before is not filed (`stored`): its commit
            // may have gone to the old history.
            self.forgets += 1;
        }
        self.origin = Some(origin);
        (self.plan(live), reset)
    }

    /// Keep the copies of the `live` buckets only (a bucket gone from the
    /// registry has expired), creating empty ones for new buckets, and load
    /// again a bucket whose counter is below the handles the view confirmed
    /// (Redis lost inserts the view holds, and hands their handles out
    /// again). Returns, per live bucket, the handles to fetch:
    /// `filed + 1 ..= counter`.
    pub(crate) fn plan(&mut self, live: &[LiveBucket]) -> Vec<(String, u64, u64)> {
        self.buckets
            .retain(|label, _| live.iter().any(|b| b.label == *label));
        self.own
            .retain(|label, _| live.iter().any(|b| b.label == *label));
        let mut wanted = Vec::new();
        for LiveBucket {
            label,
            start,
            counter: n,
            shape,
        } in live
        {
            let copy = self
                .buckets
                .entry(label.clone())
                .or_insert_with(|| BucketCopy::new(*start));
            // A counter behind the copy's confirmed handles is a rollback
            // (below its own inserts filed since the counters were read, it is
            // not: it was read before them). A counter gone is a bucket past
            // its retention, its articles gone with it; the registry lists it
            // until a commit opens a new bucket, which the commit allows once
            // the view holds none of its articles.
            let rolled_back = n.is_some_and(|n| n < copy.confirmed);
            if rolled_back {
                tracing::warn!(
                    bucket = %label,
                    counter = n.unwrap_or(0),
                    held = copy.confirmed,
                    "Redis lost inserts the view holds: loading the bucket again"
                );
                // An own insert decided before is not filed (`stored`).
                self.forgets += 1;
            }
            if copy.start != *start || (n.is_none() && copy.filed > 0) || rolled_back {
                *copy = BucketCopy::new(*start);
                self.own.remove(label);
            }
            copy.shape = *shape;
            let n = n.unwrap_or(0);
            if n > copy.filed {
                copy.reserve((n - copy.filed) as usize);
                wanted.push((label.clone(), copy.filed + 1, n));
            }
        }
        wanted
    }

    /// File the `a:` elements fetched for handles `from, from + 1, …` of
    /// bucket `label` (an empty one is a deleted article). Handles already
    /// filed (this process' own inserts) are skipped; own inserts that
    /// follow are filed after them. An element that cannot be read (written
    /// by hand, or by a bug) is held as deleted and logged: its article is
    /// never a candidate, and every other article flows on.
    pub(crate) fn apply<E: AsRef<[u8]>>(
        &mut self,
        label: &str,
        from: u64,
        elements: &[E],
    ) -> Result<(), StoredError> {
        let Some(copy) = self.buckets.get_mut(label) else {
            return Ok(());
        };
        // Each element is read once; then every list its article goes into
        // is read (`Candidates::touch`), for a cold load is bound by those
        // reads; then the articles are filed.
        let records: Vec<Result<Option<Record<'_>>, DecodeError>> =
            elements.iter().map(|e| read_element(e.as_ref())).collect();
        let mut buf = [0; MAX_LOOKUP_SIGNATURES];
        let touched: usize = records
            .iter()
            .filter_map(|r| match r {
                Ok(Some(Record {
                    packed: Some(packed),
                    ..
                })) => keys_of_packed(packed, &mut buf)
                    .ok()
                    .map(|k| copy.articles.touch(&k)),
                _ => None,
            })
            .sum();
        std::hint::black_box(touched);
        for (handle, record) in (from..).zip(records) {
            if handle != copy.filed + 1 {
                continue;
            }
            let filing = record
                .map_err(StoredError::from)
                .and_then(|record| copy.file(handle, record));
            if let Err(reason) = filing {
                tracing::warn!(bucket = label, handle, %reason, "unreadable article record: held as deleted");
                copy.file(handle, None)?;
            }
            copy.confirmed = copy.filed;
        }
        self.file_own(label)
    }

    /// This process has just stored `fp` of article `id` under `handle` of
    /// bucket `label`, decided from the view as it was when
    /// [`forgets`](View::forgets) read `forgets`: file it now if it is the
    /// bucket's next handle (no round trip to learn it), else once the
    /// handles before it are. An article forgotten since may have been this
    /// one: then it is left to the next catch-up, which fetches it as it is.
    /// Worth: with every own insert left to the next catch-up instead (which
    /// fetches back what the process has just written), 20,000 zh articles
    /// through 2 workers took 4× the `LRANGE` calls and 7 % more script
    /// calls, and the rate fell to 0.90 (median of 5 alternated pairs,
    /// `simdedup-bench --corpus ../shared/data/cctv-news-2022-2025.jsonl
    /// --no-index-sizes --workers 2 --no-paced --e2e-articles 20000`, 5d9f2de
    /// against itself with the filing switched off); with only an insert that
    /// is next filed and the others left to the catch-up, the same 20,000
    /// took 907 catch-ups instead of 314 and ran about 12 % slower (ccb9d45).
    pub(crate) fn stored(
        &mut self,
        label: &str,
        handle: u64,
        (id, fp): (&str, &Fingerprint),
        forgets: u64,
    ) -> Result<(), StoredError> {
        match self.buckets.get(label) {
            Some(copy) if handle > copy.filed && forgets == self.forgets => {
                let packed = (!fp.is_empty()).then(|| super::codec::encode_fingerprint(fp));
                let own = self.own.entry(label.to_owned()).or_default();
                own.insert(
                    handle,
                    OwnInsert {
                        id_key: id_key(id),
                        packed,
                    },
                );
                self.file_own(label)
            }
            // Already filed (fetched), or a bucket this copy has not seen yet
            // (the next catch-up fetches it).
            _ => Ok(()),
        }
    }

    /// File the own inserts of `label` that are next, drop those filed since.
    fn file_own(&mut self, label: &str) -> Result<(), StoredError> {
        let (Some(copy), Some(own)) = (self.buckets.get_mut(label), self.own.get_mut(label)) else {
            return Ok(());
        };
        while let Some(entry) = own.first_entry() {
            let handle = *entry.key();
            if handle > copy.filed + 1 {
                break;
            }
            let own = entry.remove();
            if handle == copy.filed + 1 {
                copy.file(handle, Some(own.record()))?;
            }
        }
        if own.is_empty() {
            self.own.remove(label);
        }
        Ok(())
    }

    /// The article deleted from bucket `label` under `handle` is gone. One
    /// not filed yet is dropped if it is an own insert waiting; otherwise its
    /// `a:` element was emptied with the deletion, so it is fetched as
    /// deleted.
    pub(crate) fn forget(&mut self, label: &str, handle: u64) {
        self.forgets += 1;
        if let Some(copy) = self.buckets.get_mut(label) {
            match u32::try_from(handle) {
                Ok(h) if handle <= copy.filed => {
                    copy.articles.remove(h - 1, None);
                }
                _ => {
                    if let Some(own) = self.own.get_mut(label) {
                        own.remove(&handle);
                    }
                }
            }
        }
    }

    /// Candidates for `fp` of article `id` (`None`: any id) in the buckets
    /// whose start is in `lo..=hi`, as the embedded index finds them (block
    /// neighbours within `max_distance`, the content list, the lookup sketch
    /// lists), and every live bucket as the commit validates it; `own` is
    /// the label of the article's bucket.
    pub(crate) fn candidates(
        &self,
        id: Option<&str>,
        fp: &Fingerprint,
        cfg: &DecisionConfig,
        (lo, hi): (i64, i64),
        own: &str,
    ) -> Probe {
        let mut probe = Probe {
            found: Vec::new(),
            examined: 0,
            buckets: Vec::with_capacity(self.buckets.len()),
            empty_sets: String::new(),
            token: self.token().to_owned(),
        };
        let mut labels: Vec<&String> = self.buckets.keys().collect();
        labels.sort_unstable_by_key(|l| self.buckets[*l].start);
        let keys = CandidateKeys::of(fp, cfg.lookup_signatures);
        let id = id.map(id_key);
        let reach = Reach::of(cfg, fp);
        let place = |label: &String, copy: &BucketCopy, slot: u32| Place {
            label: label.clone(),
            start: copy.start,
            handle: u64::from(slot) + 1,
        };
        let mut searched = Vec::new();
        for label in labels {
            let copy = &self.buckets[label];
            let probed = keys.filter(|_| (lo..=hi).contains(&copy.start));
            let mut full = String::new();
            if let Some(keys) = probed {
                let f = copy.articles.find(&keys, cfg.max_distance, reach);
                probe.examined = probe
                    .examined
                    .saturating_add(u32::try_from(f.examined).unwrap_or(u32::MAX));
                probe
                    .found
                    .extend(f.slots.iter().map(|&s| place(label, copy, s)));
                full = commit::flags(f.full());
                if let Some(bits) = copy.shape.filter(|_| label == own) {
                    probe.empty_sets = copy.empty_sets(&keys, bits);
                }
                searched.push((label, copy, f));
            }
            probe.buckets.push(BucketCheck {
                label: label.clone(),
                counter: copy.filed,
                // Probed buckets are validated even when the view holds none
                // of their articles yet (another task's catch-up has listed a
                // new bucket and not fetched it): the commit then tests every
                // article in it. Out of range, a check decided then would pass
                // unseen and could be stored beside its near-duplicate.
                in_range: probed.is_some() && copy.shape.is_some(),
                full,
                may_hold_id: id.is_none_or(|id| copy.ids.contains(id)),
            });
        }
        // A far article alone under a lookup hash in its bucket is a
        // candidate when it is alone there in every bucket, as in the one
        // candidate index of `scan`.
        let listed = listed_over(searched.iter().map(|(_, _, f)| f));
        for (label, copy, f) in &searched {
            probe
                .found
                .extend(f.alone(&listed).map(|s| place(label, copy, s)));
        }
        probe
    }

    /// Articles held, over all live buckets.
    pub(crate) fn len(&self) -> usize {
        self.buckets.values().map(|c| c.articles.len()).sum()
    }
}

impl BucketCopy {
    /// Make room for `more` articles at once.
    fn reserve(&mut self, more: usize) {
        self.articles.reserve(more);
        if self.ids.is_empty() {
            // A cold load knows the bucket's size: one stage holds it.
            self.ids = GrowableBloom::new(ID_FILTER_ERRORS, more.max(ID_FILTER_MIN));
        }
    }

    fn new(start: i64) -> BucketCopy {
        BucketCopy {
            start,
            filed: 0,
            confirmed: 0,
            shape: None,
            articles: Candidates::new(false),
            ids: GrowableBloom::new(ID_FILTER_ERRORS, ID_FILTER_MIN),
        }
    }

    /// '1' per block position of `keys` whose Redis set may be empty: no
    /// article held has the block at a position that shares the set (all
    /// four below [`POSITIONAL_BLOCK_BITS`] shape bits, else its own).
    fn empty_sets(&self, keys: &CandidateKeys, bits: u32) -> String {
        commit::flags((0..4).map(|p| {
            let mut shared = if bits >= POSITIONAL_BLOCK_BITS {
                p..p + 1
            } else {
                0..4
            };
            !shared.any(|m| self.articles.has_block(m, keys.blocks[p]))
        }))
    }

    /// File handle `handle`: its [`Record`], `None` for a deleted article.
    fn file(&mut self, handle: u64, record: Option<Record<'_>>) -> Result<(), StoredError> {
        u32::try_from(handle).map_err(|_| StoredError::HandleTooLarge(handle))?;
        // Whatever can fail comes first: `filed` counts the slots held, and
        // `apply` files a record that fails again, as deleted.
        let mut buf = [0; MAX_LOOKUP_SIGNATURES];
        let keys = match record {
            Some(Record {
                packed: Some(packed),
                ..
            }) => Some(keys_of_packed(packed, &mut buf)?),
            _ => None,
        };
        self.filed = handle;
        match record {
            None => self.articles.skip(),
            Some(Record { id_key, .. }) => {
                self.ids.insert(id_key);
                self.articles.insert(keys.as_ref())?;
            }
        }
        Ok(())
    }
}

/// What filing needs of an article's `a:` element.
#[derive(Debug, Clone, Copy)]
struct Record<'a> {
    /// Its id's hash ([`id_key`]).
    id_key: u32,
    /// Its packed fingerprint (`None`: an empty one).
    packed: Option<&'a [u8]>,
}

/// The [`Record`] of an `a:` element, `None` for a deleted article.
fn read_element(element: &[u8]) -> Result<Option<Record<'_>>, DecodeError> {
    let Some((packed, meta)) = decode_article(element)? else {
        return Ok(None);
    };
    let (words, id) = meta_words_and_id(meta)?;
    Ok(Some(Record {
        id_key: id_key(id),
        packed: (words > 0).then_some(packed),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::redis_index::codec::{encode_article, encode_fingerprint, encode_meta};
    use crate::index::Verdict;
    use crate::index::LISTED_PER_HASH;

    fn fp(simhash: u64, content: u64, sigs: &[u32]) -> Fingerprint {
        Fingerprint {
            simhash,
            content,
            signatures: sigs.to_vec(),
            words: 100,
            numbers: Vec::new(),
            ..Default::default()
        }
    }

    /// The `a:` element of an article.
    fn record(id: &str, simhash: u64, content: u64, sigs: &[u32]) -> Vec<u8> {
        let meta = encode_meta(id, &Verdict::UNIQUE, 5, 100);
        encode_article(&encode_fingerprint(&fp(simhash, content, sigs)), &meta)
    }

    /// The `a:` element of a deleted article.
    fn deleted() -> Vec<u8> {
        Vec::new()
    }

    /// The handles of the candidates of `probe` in bucket range `range`.
    fn handles(r: &View, probe: &Fingerprint, range: (i64, i64)) -> Vec<u64> {
        let found = r.candidates(None, probe, &cfg(), range, "").found;
        found.into_iter().map(|p| p.handle).collect()
    }

    /// Bucket `label` live with `n` handles, shaped by 10 bits.
    fn live(label: &str, start: i64, n: u64) -> LiveBucket {
        LiveBucket {
            label: label.to_owned(),
            start,
            counter: Some(n),
            shape: Some(10),
        }
    }

    fn cfg() -> DecisionConfig {
        DecisionConfig::default()
    }

    /// The history a view follows: `token` written on `replid`.
    fn origin(token: &str, replid: &str) -> Origin {
        Origin {
            token: token.into(),
            replid: replid.into(),
        }
    }

    #[test]
    fn files_in_handle_order_and_finds_by_block_content_and_sketch() {
        let mut r = View::default();
        let live = vec![live("b1", 0, 3)];
        assert_eq!(r.plan(&live), vec![("b1".to_owned(), 1, 3)]);
        // Handle 2 arrives first from a second fetch: not filed (a gap).
        r.apply("b1", 2, &[record("x", 0xffff, 9, &[1, 2, 3, 4])])
            .unwrap();
        assert_eq!(r.len(), 0);
        r.apply(
            "b1",
            1,
            &[
                record("a", 0x1234_5678_9abc_def0, 1, &[10, 20, 30, 40]),
                record("b", 0xffff_0000_ffff_0000, 2, &[50, 60, 70, 80]),
                deleted(),
            ],
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.plan(&live), vec![]);
        // A SimHash one bit from a's.
        let near = Fingerprint {
            simhash: 0x1234_5678_9abc_def1,
            content: 77,
            signatures: vec![100, 200, 300, 400],
            words: 100,
            numbers: Vec::new(),
            ..Default::default()
        };
        let probe = r.candidates(None, &near, &cfg(), (0, 0), "b1");
        assert_eq!(
            probe.found,
            [Place {
                label: "b1".to_owned(),
                start: 0,
                handle: 1
            }]
        );
        assert_eq!(probe.buckets[0].counter, 3);
        assert!(probe.buckets[0].in_range);
        // Its filter of ids: "b" may be held, "c" is not.
        let held = |id| r.candidates(Some(id), &near, &cfg(), (0, 0), "b1").buckets[0].may_hold_id;
        assert!(held("b") && !held("c"));
        assert_eq!(probe.buckets[0].full, "00000");
        // Through the content hash, and a sketch hash of an article within
        // the farthest match (8 bits from a's).
        let by_lists = Fingerprint {
            simhash: 0x1234_5678_9abc_de0f,
            content: 2,
            signatures: vec![10, 11, 12, 13],
            words: 100,
            numbers: Vec::new(),
            ..Default::default()
        };
        assert_eq!(handles(&r, &by_lists, (0, 0)), [1, 2]);
        // Outside the probed range: nothing.
        assert!(handles(&r, &by_lists, (1, 1)).is_empty());
        r.forget("b1", 2);
        assert_eq!(handles(&r, &by_lists, (0, 0)), [1]);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn the_id_filter_holds_every_id_filed_and_few_others() {
        let mut b = BucketCopy::new(0);
        b.reserve(1000);
        // Past the filter's first size: it grows.
        let n = 3 * ID_FILTER_MIN as u64;
        for h in 1..=n {
            let record = Record {
                id_key: id_key(&format!("in-{h}")),
                packed: None,
            };
            b.file(h, Some(record)).unwrap();
        }
        assert!((1..=n).all(|h| b.ids.contains(id_key(&format!("in-{h}")))));
        let wrong = (1..=n)
            .filter(|h| b.ids.contains(id_key(&format!("out-{h}"))))
            .count();
        assert!(wrong as f64 <= 2.0 * ID_FILTER_ERRORS * n as f64, "{wrong}");
    }

    #[test]
    fn lists_hold_the_first_articles_of_a_hash_only() {
        let mut r = View::default();
        let n = LISTED_PER_HASH as u64 + 3;
        r.plan(&[live("b", 0, n)]);
        let records: Vec<_> = (0..n)
            .map(|i| {
                record(
                    &format!("a{i}"),
                    i * 0x1111_0000_0001,
                    42,
                    &[7, 1000 + i as u32],
                )
            })
            .collect();
        r.apply("b", 1, &records).unwrap();
        let probe = Fingerprint {
            simhash: u64::MAX,
            content: 42,
            signatures: vec![7],
            words: 100,
            numbers: Vec::new(),
            ..Default::default()
        };
        let found = r.candidates(None, &probe, &cfg(), (0, 0), "b");
        assert_eq!(found.found.len(), LISTED_PER_HASH);
        assert_eq!(found.buckets[0].full, "11");
        // Deleting one frees a place, as in the embedded index.
        r.forget("b", 1);
        let found = r.candidates(None, &probe, &cfg(), (0, 0), "b");
        assert_eq!(found.buckets[0].full, "00");
    }

    #[test]
    fn a_bucket_gone_from_the_registry_is_dropped_and_one_from_another_start_copied_anew() {
        let mut r = View::default();
        r.plan(&[live("b", 0, 1)]);
        r.apply("b", 1, &[record("a", 1, 1, &[1])]).unwrap();
        assert_eq!(r.plan(&[live("c", 10, 0)]), vec![]);
        assert_eq!(r.len(), 0);
        r.plan(&[live("c", 10, 2)]);
        r.apply("c", 1, &[record("a", 1, 1, &[1]), record("b", 1, 1, &[1])])
            .unwrap();
        // Another bucket under the label (another start): copied anew.
        assert_eq!(r.plan(&[live("c", 20, 1)]), vec![("c".to_owned(), 1, 1)]);
        assert_eq!(r.len(), 0);
        r.apply("c", 1, &[record("a", 1, 1, &[1])]).unwrap();
        // Its counter gone (past its retention, still listed): held empty,
        // so the commit is told it holds nothing there.
        let expired = LiveBucket {
            label: "c".to_owned(),
            start: 20,
            counter: None,
            shape: None,
        };
        assert!(r.plan(&[expired]).is_empty());
        assert_eq!(r.len(), 0);
        let probe = r.candidates(None, &fp(1, 1, &[1]), &cfg(), (20, 20), "c");
        assert_eq!(probe.buckets[0].counter, 0);
    }

    /// A far article listed alone under a lookup hash in its bucket is a
    /// candidate only when no article in another bucket searched is listed
    /// under it too, as in `scan`'s one index.
    #[test]
    fn a_far_article_alone_under_a_hash_is_alone_in_every_bucket_searched() {
        let mut r = View::default();
        r.plan(&[live("b", 0, 1), live("c", 10, 1)]);
        let far = u64::MAX >> 40; // 24 bits from the probe's SimHash 0
        r.apply("b", 1, &[record("a", far, 1, &[5, 6])]).unwrap();
        r.apply("c", 1, &[record("x", far << 8, 2, &[5])]).unwrap();
        // Judged by its share: candidates at any distance.
        let judged = |sigs: &[u32]| Fingerprint {
            size: cfg().judged_size,
            ..fp(0, 9, sigs)
        };
        assert_eq!(handles(&r, &judged(&[5]), (0, 0)), [1]);
        assert!(handles(&r, &judged(&[5]), (0, 10)).is_empty());
        // Two lookup hashes shared: a candidate however crowded they are.
        assert_eq!(handles(&r, &judged(&[5, 6]), (0, 10)), [1]);
    }

    /// Redis lost inserts the view holds (a replica promoted without them, a
    /// restart without them): their handles are handed out again, to other
    /// articles, which a view that kept its copy would never fetch.
    #[test]
    fn a_counter_below_the_handles_confirmed_loads_the_bucket_again() {
        let mut r = View::default();
        let origin = origin("t", "r1");
        r.follow(origin.clone(), &[live("b", 0, 3)]);
        let far = |c: u64| c.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        r.apply(
            "b",
            1,
            &[
                record("a", far(1), 1, &[1]),
                record("b", far(2), 2, &[2]),
                record("c", far(3), 3, &[3]),
            ],
        )
        .unwrap();
        r.confirm();
        // The new primary holds handle 1 only: 2 and 3 go again to others.
        let (wanted, reset) = r.follow(origin.clone(), &[live("b", 0, 1)]);
        assert!(!reset);
        assert_eq!(wanted, vec![("b".to_owned(), 1, 1)]);
        assert_eq!(r.len(), 0);
        r.apply("b", 1, &[record("a", far(1), 1, &[1])]).unwrap();
        r.confirm();
        let (wanted, _) = r.follow(origin, &[live("b", 0, 3)]);
        assert_eq!(wanted, vec![("b".to_owned(), 2, 3)]);
        r.apply(
            "b",
            2,
            &[record("x", far(7), 7, &[7]), record("y", far(8), 8, &[8])],
        )
        .unwrap();
        assert_eq!(handles(&r, &fp(far(7), 7, &[7]), (0, 0)), [2]);
        assert!(handles(&r, &fp(far(2), 2, &[2]), (0, 0)).is_empty());
    }

    #[test]
    fn a_counter_read_before_own_inserts_were_filed_is_no_rollback() {
        let mut r = View::default();
        r.plan(&[live("b", 0, 1)]);
        r.apply("b", 1, &[record("a", 1, 1, &[1])]).unwrap();
        r.confirm();
        // The counters are read (1), then an own insert is filed (2).
        r.stored("b", 2, ("two", &fp(2, 2, &[2])), r.forgets)
            .unwrap();
        assert_eq!(r.plan(&[live("b", 0, 1)]), vec![]);
        assert_eq!(r.len(), 2);
        // Read after it was filed, a counter of 1 has lost it.
        r.confirm();
        assert_eq!(r.plan(&[live("b", 0, 1)]), vec![("b".to_owned(), 1, 1)]);
        assert_eq!(r.len(), 0);
    }

    /// After a failover (another replication id) or a flush (another history
    /// token) the view is loaded again whole, even where a counter has passed
    /// the view's since: the handles in between may hold other articles.
    #[test]
    fn another_history_or_primary_loads_everything_again() {
        let mut r = View::default();
        let first = origin("t", "r1");
        r.follow(first.clone(), &[live("b", 0, 2)]);
        r.apply("b", 1, &[record("a", 1, 1, &[1]), record("b", 2, 2, &[2])])
            .unwrap();
        r.deletions_read = "5-0".into();
        let read_at = r.forgets;
        assert_eq!(r.token(), "t");
        for next in [origin("t", "r2"), origin("u", "r2")] {
            r.confirm();
            let (wanted, reset) = r.follow(next.clone(), &[live("b", 0, 4)]);
            assert!(reset);
            assert_eq!(wanted, vec![("b".to_owned(), 1, 4)]);
            assert_eq!((r.len(), r.deletions_read.as_str()), (0, ""));
            assert_eq!(r.token(), next.token);
            r.apply("b", 1, &[record("a", 1, 1, &[1])]).unwrap();
        }
        // A check decided from the old view is not filed.
        r.stored("b", 2, ("z", &fp(9, 9, &[9])), read_at).unwrap();
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn an_unreadable_record_is_held_as_deleted_and_the_rest_are_filed() {
        let mut r = View::default();
        r.plan(&[live("b", 0, 5)]);
        let good = record("a", 0x1111_2222_3333_4444, 1, &[1]);
        let packed = encode_fingerprint(&fp(2, 2, &[2]));
        let unreadable = [
            good[..3].to_vec(),
            encode_article(&packed, "no meta"),
            encode_article(&packed[..3], &encode_meta("x", &Verdict::UNIQUE, 0, 9)),
        ];
        let mut elements = vec![good];
        elements.extend(unreadable);
        let e = fp(0x5555_6666_7777_8888, 5, &[5]);
        elements.push(record("e", e.simhash, 5, &[5]));
        r.apply("b", 1, &elements).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(handles(&r, &e, (0, 0)), [5]);
        assert!(r.plan(&[live("b", 0, 5)]).is_empty());
        // A record of this process' own that cannot be filed is not counted.
        let mut b = BucketCopy::new(0);
        let record = Record {
            id_key: 7,
            packed: Some(&packed[..3]),
        };
        assert!(matches!(
            b.file(1, Some(record)),
            Err(StoredError::Decode(DecodeError::FingerprintCounts {
                len: 3
            }))
        ));
        assert_eq!((b.filed, b.articles.len()), (0, 0));
    }

    #[test]
    fn own_inserts_are_filed_in_handle_order_and_deletions_before_filing_hold() {
        let mut r = View::default();
        r.plan(&[live("b", 0, 0)]);
        // SimHashes far apart.
        let simhash = |c: u64| c.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let rec = |c: u64| fp(simhash(c), c, &[c as u32]);
        let read_at = r.forgets;
        // Handle 2 is stored first (another task's commit ran later): it waits.
        r.stored("b", 2, ("two", &rec(2)), read_at).unwrap();
        assert_eq!(r.len(), 0);
        r.stored("b", 1, ("one", &rec(1)), read_at).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(handles(&r, &rec(2), (0, 0)), [2]);
        // Handle 3 is another process' (fetched by the next catch-up); 4 is
        // ours and deleted before its turn: dropped, and fetched as deleted.
        r.stored("b", 4, ("four", &rec(4)), read_at).unwrap();
        r.forget("b", 4);
        assert_eq!(r.plan(&[live("b", 0, 4)]), vec![("b".to_owned(), 3, 4)]);
        r.apply("b", 3, &[record("three", simhash(3), 3, &[3]), deleted()])
            .unwrap();
        assert_eq!(r.len(), 3);
        assert!(handles(&r, &rec(4), (0, 0)).is_empty());
        assert_eq!(handles(&r, &rec(3), (0, 0)), [3]);
        // An article forgotten after the check read the view may be the one
        // it stored: not filed, left to the next catch-up.
        r.stored("b", 5, ("five", &rec(5)), read_at).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r.plan(&[live("b", 0, 5)]), vec![("b".to_owned(), 5, 5)]);
        // Stored into a bucket the copy has not seen: left to the next catch-up.
        r.stored("new", 1, ("x", &rec(9)), r.forgets).unwrap();
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn the_own_bucket_s_shape_sets_its_empty_set_flags_and_its_validation() {
        let mut r = View::default();
        let shaped = |bits| {
            vec![LiveBucket {
                label: "b".to_owned(),
                start: 0,
                counter: Some(1),
                shape: bits,
            }]
        };
        r.plan(&shaped(Some(10)));
        // Blocks (most significant first): 0001 0002 0003 0004.
        r.apply("b", 1, &[record("a", 0x0001_0002_0003_0004, 1, &[1])])
            .unwrap();
        // Blocks 0004 0002 9999 9999: 0004 is taken at another position.
        let fp = Fingerprint {
            simhash: 0x0004_0002_9999_9999,
            content: 5,
            signatures: vec![3],
            words: 9,
            numbers: Vec::new(),
            ..Default::default()
        };
        let probe = |r: &View, own| r.candidates(None, &fp, &cfg(), (0, 0), own);
        assert_eq!(probe(&r, "b").empty_sets, "0011");
        assert_eq!(probe(&r, "c").empty_sets, "");
        r.plan(&shaped(Some(POSITIONAL_BLOCK_BITS)));
        let positional = probe(&r, "b");
        assert_eq!(positional.empty_sets, "1011");
        assert!(positional.buckets[0].in_range);
        // A bucket whose n: hash has expired: no shape, no inserts to test.
        r.plan(&shaped(None));
        let expired = probe(&r, "b");
        assert_eq!(expired.empty_sets, "");
        assert!(!expired.buckets[0].in_range);
    }
}
