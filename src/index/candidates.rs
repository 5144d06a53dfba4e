//! The candidate index: which held articles a new one can meet, by the keys
//! of [`super::meet`], held compactly. The embedded index keeps one for its
//! window; a worker's view keeps one per live Redis bucket (`redis_index/view.rs`).
//!
//! It holds keys, not articles: an article is a *slot* (a `u32`) with its
//! SimHash, and the entries it is filed under. What a slot's article is —
//! its whole fingerprint, id and verdict — its holder knows: the embedded
//! index keeps it beside this index, a worker reads the few candidates a
//! search finds from Redis. The entries live in lists, each entry a slot and
//! the bits of its key that its list does not say:
//! - per SimHash block position, 65,536 lists, one per block value, the
//!   slots with that block, each with the SimHash's block at the next
//!   position: a search reads a slot's SimHash only when that block is within
//!   the distance, about 1 % of the listed articles, so it scans arrays
//!   instead of visiting articles;
//! - by content hash, and by lookup sketch hash wherever the hash stands in a
//!   sketch ([`Keyed`]: lists by the hash's top bits, more lists as they
//!   fill, so that a list holds 8-16 entries at any size).
//!
//! A list and its entries hold their key whole, so a search compares no
//! article. At most [`LISTED_PER_HASH`] slots are filed per content or sketch
//! hash, and per block with the next one (32 bits of the SimHash): the copies
//! of a story republished thousands of times share all their keys, and a
//! check reads the first few of them, not every earlier copy. An entry costs 6 bytes (10 for the content hash) and its share of a
//! list's spare capacity; a table costs 0.5 MB while empty.
//!
//! A removed article is unfiled when its keys are given (the embedded index);
//! otherwise (a worker's view, which keeps no keys) its entries stay and
//! searches skip its slot, which is then never given to another article.
//! Dropping a whole `Candidates` (an expired bucket) frees it at once.

use thin_vec::ThinVec;

use super::meet::CandidateKeys;
use super::LISTED_PER_HASH;
use crate::decision::DecisionConfig;
use crate::fingerprint::Fingerprint;
use crate::simhash::hamming;

/// The lists of one block table: one per block value.
const LISTS: usize = 1 << 16;

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Nothing: never given, or its article removed.
    Gone,
    /// An article that is not filed (its fingerprint is empty), or whose
    /// entries were removed with it.
    Unfiled,
    /// An article filed under its keys.
    Filed,
}

/// Tables of lists of `W`-wide entries: `[slot low, slot high, key bits…]`,
/// [`LISTS`] a table.
/// `ThinVec`: an empty list is one pointer, so a table costs 0.5 MB before
/// its first entry.
#[derive(Debug, Default)]
struct Lists<const W: usize> {
    lists: Vec<ThinVec<[u16; W]>>,
}

impl<const W: usize> Lists<W> {
    /// List `i` of `table`, created with `tables` tables on the first filing.
    fn push(&mut self, tables: usize, i: usize, entry: [u16; W]) {
        if self.lists.is_empty() {
            self.lists = vec![ThinVec::new(); tables * LISTS];
        }
        self.lists[i].push(entry);
    }

    fn get(&self, i: usize) -> &[[u16; W]] {
        self.lists.get(i).map_or(&[], |l| &l[..])
    }

    /// Remove `slot`'s entry from list `i`.
    fn unfile(&mut self, i: usize, slot: u32) {
        if let Some(list) = self.lists.get_mut(i) {
            remove_slot(list, slot);
        }
    }
}

/// Lists of entries by a key of `K` bits (32 or 64), mixed by a bijection
/// (murmur3's finalizers, [`content_key`], [`sketch_key`]) so that keys of
/// any distribution spread evenly. A key's list is its top `bits` bits, 16
/// at first and one more whenever the lists hold 16 entries each on
/// average, so a list stays short at any size; an entry holds the key's low
/// `K - 16` bits, so list and entry hold the key whole whatever `bits` is.
#[derive(Debug)]
struct Keyed<const W: usize, const K: u32> {
    lists: Vec<ThinVec<[u16; W]>>,
    bits: u32,
    entries: usize,
}

/// At most 2^22 lists (32 MB of list heads) per table.
const MAX_LIST_BITS: u32 = 22;
const GROW_AT: usize = 16;

impl<const W: usize, const K: u32> Keyed<W, K> {
    fn new() -> Self {
        Keyed {
            lists: Vec::new(),
            bits: 16,
            entries: 0,
        }
    }

    /// The entry of `slot` under key `m`: the slot, then the key's low bits.
    fn entry(slot: u32, m: u64) -> [u16; W] {
        let mut e = [0; W];
        e[0] = slot as u16;
        e[1] = (slot >> 16) as u16;
        for (j, part) in e.iter_mut().enumerate().skip(2) {
            *part = (m >> (16 * (W - 1 - j))) as u16;
        }
        e
    }

    fn list(&self, m: u64) -> &[[u16; W]] {
        let i = (m >> (K - self.bits)) as usize;
        self.lists.get(i).map_or(&[], |l| &l[..])
    }

    /// The slots filed under key `m`, live or not.
    fn filed(&self, m: u64) -> impl Iterator<Item = u32> + '_ {
        let key = Self::entry(0, m);
        self.list(m)
            .iter()
            .filter(move |e| e[2..] == key[2..])
            .map(slot_of)
    }

    fn push(&mut self, slot: u32, m: u64) {
        if self.lists.is_empty() {
            self.lists = vec![ThinVec::new(); 1 << self.bits];
        }
        if self.entries >= GROW_AT << self.bits && self.bits < MAX_LIST_BITS {
            self.grow();
        }
        let i = (m >> (K - self.bits)) as usize;
        self.lists[i].push(Self::entry(slot, m));
        self.entries += 1;
    }

    /// Twice the lists: each splits by the key's next bit, read from the
    /// entry's low bits.
    fn grow(&mut self) {
        let next = K - self.bits - 1;
        let mut lists = vec![ThinVec::new(); 2 << self.bits];
        for (i, list) in std::mem::take(&mut self.lists).into_iter().enumerate() {
            for e in list {
                let low = e[2..].iter().fold(0u64, |v, &x| v << 16 | u64::from(x));
                lists[2 * i + ((low >> next) & 1) as usize].push(e);
            }
        }
        self.lists = lists;
        self.bits += 1;
    }

    fn unfile(&mut self, slot: u32, m: u64) {
        let i = (m >> (K - self.bits)) as usize;
        if let Some(list) = self.lists.get_mut(i) {
            if remove_slot(list, slot) {
                self.entries -= 1;
            }
        }
    }
}

/// Remove `slot`'s entry from `list`, freeing the list when it empties;
/// whether there was one.
fn remove_slot<const W: usize>(list: &mut ThinVec<[u16; W]>, slot: u32) -> bool {
    let found = list.iter().position(|e| slot_of(e) == slot);
    if let Some(at) = found {
        list.remove(at);
    }
    if list.is_empty() {
        *list = ThinVec::new();
    }
    found.is_some()
}

fn slot_of<const W: usize>(e: &[u16; W]) -> u32 {
    u32::from(e[0]) | u32::from(e[1]) << 16
}

/// The content hash mixed (murmur3's 64-bit finalizer, a bijection).
fn content_key(hash: u64) -> u64 {
    let mut m = (hash ^ (hash >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    m = (m ^ (m >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    m ^ (m >> 33)
}

/// A sketch hash mixed (murmur3's 32-bit finalizer, a bijection).
fn sketch_key(hash: u32) -> u64 {
    let mut m = (hash ^ (hash >> 16)).wrapping_mul(0x85eb_ca6b);
    m = (m ^ (m >> 13)).wrapping_mul(0xc2b2_ae35);
    u64::from(m ^ (m >> 16))
}

/// The SimHash whose blocks are `blocks`, most significant first.
fn simhash_of(blocks: [u16; 4]) -> u64 {
    blocks.iter().fold(0, |h, &b| h << 16 | u64::from(b))
}

/// How far, in SimHash bits, the articles listed under a check's lookup
/// hashes are its candidates ([`Candidates::find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reach {
    /// Within this, every article listed under a lookup hash.
    pub(crate) near: u32,
    /// Beyond `near` and within this, an article listed under two lookup
    /// hashes, or alone under one.
    pub(crate) far: u32,
}

impl Reach {
    /// The reach of a check of `fp`: as far as the sentence signal reaches,
    /// and as far as any match but an exact one can be
    /// ([`DecisionConfig::farthest_match`]).
    pub(crate) fn of(cfg: &DecisionConfig, fp: &Fingerprint) -> Reach {
        Reach {
            near: cfg.sentence_reach(),
            far: cfg.farthest_match(fp),
        }
    }
}

/// What a search found.
#[derive(Debug, Default)]
pub(crate) struct FoundSlots {
    /// Slots, ascending: the SimHashes within the distance among the block
    /// lists, every slot listed under the content hash, and those listed
    /// under a lookup hash as the [`Reach`] says, but for `lone` ones.
    pub(crate) slots: Vec<u32>,
    /// The slots beyond the near reach listed under one lookup hash only,
    /// with the hash's position among the lookup hashes: candidates when
    /// they are alone under it ([`FoundSlots::alone`]).
    pub(crate) lone: Vec<(usize, u32)>,
    /// Live articles listed under the content hash.
    pub(crate) content_listed: usize,
    /// Live articles listed under each lookup hash.
    pub(crate) listed: Vec<usize>,
    /// Slots examined: block list entries plus content and sketch listings.
    pub(crate) examined: usize,
}

impl FoundSlots {
    /// Per list searched (the content hash's, then each lookup hash's):
    /// whether it holds [`LISTED_PER_HASH`] articles already.
    pub(crate) fn full(&self) -> impl Iterator<Item = bool> + '_ {
        std::iter::once(self.content_listed)
            .chain(self.listed.iter().copied())
            .map(|n| n >= LISTED_PER_HASH)
    }

    /// The `lone` slots alone under their lookup hash, given how many
    /// articles each lookup hash lists in every index the check searched
    /// (`listed`: this one's, or summed over a view's buckets by
    /// [`listed_over`]), so that one index and many find the same.
    pub(crate) fn alone<'a>(&'a self, listed: &'a [usize]) -> impl Iterator<Item = u32> + 'a {
        self.lone
            .iter()
            .filter(|&&(i, _)| listed[i] == 1)
            .map(|&(_, slot)| slot)
    }
}

/// The articles each lookup hash lists over several searches with the same
/// keys ([`FoundSlots::listed`]).
pub(crate) fn listed_over<'a>(found: impl IntoIterator<Item = &'a FoundSlots>) -> Vec<usize> {
    let mut sum: Vec<usize> = Vec::new();
    for f in found {
        sum.resize(f.listed.len(), 0);
        sum.iter_mut().zip(&f.listed).for_each(|(s, n)| *s += n);
    }
    sum
}

/// Why a candidate index cannot hold another article: its slots, numbered
/// by a `u32`, are all given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("2^32 slots in one candidate index")]
pub struct CandidatesFull;

/// The keys of the articles held. See the module documentation.
#[derive(Debug)]
pub(crate) struct Candidates {
    /// Slots of removed (and unfiled) articles are given to new ones (the
    /// embedded index); otherwise slots are positions (a bucket's handles).
    reuse_slots: bool,
    simhashes: Vec<u64>,
    held: Vec<Held>,
    free: Vec<u32>,
    live: usize,
    /// Four tables, position-major: `[slot, block at the next position]`.
    blocks: Lists<3>,
    content: Keyed<5, 64>,
    sketch: Keyed<3, 32>,
}

impl Candidates {
    pub(crate) fn new(reuse_slots: bool) -> Candidates {
        Candidates {
            reuse_slots,
            simhashes: Vec::new(),
            held: Vec::new(),
            free: Vec::new(),
            live: 0,
            blocks: Lists::default(),
            content: Keyed::new(),
            sketch: Keyed::new(),
        }
    }

    /// Make room for `more` slots at once.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.simhashes.reserve(more);
        self.held.reserve(more);
    }

    /// Articles held.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn is_live(&self, slot: u32) -> bool {
        self.held
            .get(slot as usize)
            .is_some_and(|&h| h != Held::Gone)
    }

    /// The next slot is empty (a bucket's handle of a deleted article).
    pub(crate) fn skip(&mut self) {
        self.simhashes.push(0);
        self.held.push(Held::Gone);
    }

    /// Hold an article found through `keys` (`None`: an empty fingerprint,
    /// held but never found). Returns its slot, or why it cannot be held.
    pub(crate) fn insert(&mut self, keys: Option<&CandidateKeys>) -> Result<u32, CandidatesFull> {
        let held = if keys.is_some() {
            Held::Filed
        } else {
            Held::Unfiled
        };
        let simhash = keys.map_or(0, |k| simhash_of(k.blocks));
        let slot = match self.free.pop().filter(|_| self.reuse_slots) {
            Some(s) => {
                self.simhashes[s as usize] = simhash;
                self.held[s as usize] = held;
                s
            }
            None => {
                let s = u32::try_from(self.held.len()).map_err(|_| CandidatesFull)?;
                self.simhashes.push(simhash);
                self.held.push(held);
                s
            }
        };
        self.live += 1;
        let Some(keys) = keys else {
            return Ok(slot);
        };
        // The first LISTED_PER_HASH articles of a key only: of a block with
        // the next one, as of a content or sketch hash.
        for (p, &b) in keys.blocks.iter().enumerate() {
            let next = keys.blocks[(p + 1) % 4];
            let i = p * LISTS + usize::from(b);
            if self.listed_with(i, next) < LISTED_PER_HASH {
                self.blocks
                    .push(4, i, [slot as u16, (slot >> 16) as u16, next]);
            }
        }
        let m = content_key(keys.content);
        if self.live_of(self.content.filed(m)).count() < LISTED_PER_HASH {
            self.content.push(slot, m);
        }
        for &s in keys.lookup {
            let m = sketch_key(s);
            if self.live_of(self.sketch.filed(m)).count() < LISTED_PER_HASH {
                self.sketch.push(slot, m);
            }
        }
        Ok(slot)
    }

    /// Remove the article in `slot`; whether there was one. `keys`: those it
    /// was filed under, to unfile it; without them its entries stay (skipped
    /// by searches) and its slot is not given again.
    pub(crate) fn remove(&mut self, slot: u32, keys: Option<&CandidateKeys>) -> bool {
        let Some(held) = self.held.get_mut(slot as usize) else {
            return false;
        };
        let was = std::mem::replace(held, Held::Gone);
        if was == Held::Gone {
            return false;
        }
        self.live -= 1;
        match (was, keys) {
            (Held::Filed, None) => return true,
            (Held::Filed, Some(keys)) => {
                for (p, &b) in keys.blocks.iter().enumerate() {
                    self.blocks.unfile(p * LISTS + usize::from(b), slot);
                }
                self.content.unfile(slot, content_key(keys.content));
                for &s in keys.lookup {
                    self.sketch.unfile(slot, sketch_key(s));
                }
            }
            _ => {}
        }
        if self.reuse_slots {
            self.free.push(slot);
        }
        true
    }

    /// The live articles of block list `i` whose next block is `next`, up to
    /// [`LISTED_PER_HASH`].
    fn listed_with(&self, i: usize, next: u16) -> usize {
        let same = self.blocks.get(i).iter().filter(|e| e[2] == next);
        self.live_of(same.map(slot_of))
            .take(LISTED_PER_HASH)
            .count()
    }

    /// The live slots among `slots`.
    fn live_of<'a>(
        &'a self,
        slots: impl Iterator<Item = u32> + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        slots.filter(|&s| self.is_live(s))
    }

    /// Read the ends of the lists an article found through `keys` would be
    /// filed in; the value only makes the reads happen. At millions of
    /// articles nearly every such read misses the CPU's caches: a holder that
    /// files many articles at once touches all their lists first, so that the
    /// misses are waited for together instead of one after the other. Worth:
    /// a cold view of 10 M articles (`View::apply`, a chunk of 100 touched
    /// before it is filed) loaded in 0.71 of the time of filing them one by
    /// one, 18.1–22.0 s against 26.1–30.2 s (median ratio of 6 alternated
    /// pairs, wall time of
    /// `simdedup-bench/examples/commit_profile.rs check URL 10000000 NOW 1 1`;
    /// db96e38 against 2b8cdd5).
    pub(crate) fn touch(&self, keys: &CandidateKeys) -> usize {
        fn end<const W: usize>(list: &[[u16; W]]) -> usize {
            list.last().map_or(0, |e| usize::from(e[0]))
        }
        let blocks = keys.blocks.iter().enumerate();
        let by_block: usize = blocks
            .map(|(p, &b)| end(self.blocks.get(p * LISTS + usize::from(b))))
            .sum();
        let by_sketch: usize = keys
            .lookup
            .iter()
            .map(|&s| end(self.sketch.list(sketch_key(s))))
            .sum();
        by_block + by_sketch + end(self.content.list(content_key(keys.content)))
    }

    /// Whether a held article has SimHash block `value` at position `p`.
    pub(crate) fn has_block(&self, p: usize, value: u16) -> bool {
        self.blocks
            .get(p * LISTS + usize::from(value))
            .iter()
            .any(|e| self.is_live(slot_of(e)))
    }

    /// The candidates of an article found through `keys`: the articles whose
    /// SimHash shares a block with its and is within `max_distance` bits,
    /// those listed under its content hash, and those listed under a lookup
    /// hash whose SimHash is within the [`Reach`]: within `near`, any; within
    /// `far`, those listed under two lookup hashes, or alone under one
    /// ([`FoundSlots::lone`]). Beyond `near` only an article judged by its
    /// share of text can match (an excerpt is far from its source in
    /// SimHash), and one clause in common is what unrelated reports of one
    /// outlet share (a dateline, an agency's credit, listed under many
    /// articles), where an excerpt shares several of its source's, or one
    /// that no other article has. Worth: 0.22 instead of 3.2 `LINDEX` per
    /// check at 1 M (fingerprint v2: 0.20), 0.7 instead of 8.4 µs of Redis
    /// time (`simdedup-bench --sizes 1000000`, `INFO commandstats`), and a
    /// third of the candidates weighed by `scan`, with the same verdicts on
    /// the dev and held-out sets but one `expands`.
    pub(crate) fn find(&self, keys: &CandidateKeys, max_distance: u32, reach: Reach) -> FoundSlots {
        let mut found = FoundSlots::default();
        let simhash = simhash_of(keys.blocks);
        for (p, &b) in keys.blocks.iter().enumerate() {
            let list = self.blocks.get(p * LISTS + usize::from(b));
            let next = keys.blocks[(p + 1) % 4];
            found.examined += list.len();
            for e in list {
                let s = slot_of(e);
                if (e[2] ^ next).count_ones() <= max_distance
                    && self.is_live(s)
                    && hamming(self.simhashes[s as usize], simhash) <= max_distance
                {
                    found.slots.push(s);
                }
            }
        }
        let near = found.slots.len();
        let content = self.content.filed(content_key(keys.content));
        found.slots.extend(self.live_of(content));
        found.content_listed = found.slots.len() - near;
        found.examined += found.content_listed;
        let mut far: Vec<(usize, u32)> = Vec::new();
        for (i, &s) in keys.lookup.iter().enumerate() {
            let mut listed = 0;
            for slot in self.live_of(self.sketch.filed(sketch_key(s))) {
                listed += 1;
                let distance = hamming(self.simhashes[slot as usize], simhash);
                if distance <= reach.near {
                    found.slots.push(slot);
                } else if distance <= reach.far {
                    far.push((i, slot));
                }
            }
            found.examined += listed;
            found.listed.push(listed);
        }
        far.sort_unstable_by_key(|&(_, slot)| slot);
        for listings in far.chunk_by(|a, b| a.1 == b.1) {
            if let [one] = listings {
                found.lone.push(*one);
            } else {
                found.slots.push(listings[0].1);
            }
        }
        found.slots.sort_unstable();
        found.slots.dedup();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(simhash: u64, content: u64, sketch: &[u32]) -> Fingerprint {
        Fingerprint {
            simhash,
            content,
            signatures: sketch.to_vec(),
            words: 1,
            numbers: Vec::new(),
            ..Default::default()
        }
    }

    fn insert(c: &mut Candidates, f: &Fingerprint, lookup: usize) -> u32 {
        c.insert(CandidateKeys::of(f, lookup).as_ref()).unwrap()
    }

    fn find(c: &Candidates, f: &Fingerprint, lookup: usize, distance: u32) -> FoundSlots {
        let reach = Reach { near: 64, far: 64 };
        c.find(&CandidateKeys::of(f, lookup).unwrap(), distance, reach)
    }

    #[test]
    fn finds_by_near_simhash_content_and_lookup_hash_within_the_bound() {
        let mut c = Candidates::new(true);
        assert_eq!(insert(&mut c, &fp(0xffff, 1, &[5, 6, 7]), 2), 0);
        // Bits 48+ differ by 4 from a's: shares blocks, too far.
        insert(&mut c, &fp(0x000f_ffff, 2, &[8]), 2);
        let f = find(&c, &fp(0xfffe, 9, &[1]), 2, 3);
        assert_eq!(
            (f.full().collect::<Vec<_>>(), f.slots, f.examined),
            (vec![false, false], vec![0], 5)
        );
        assert_eq!(find(&c, &fp(0, 2, &[6, 9]), 2, 0).slots, [0, 1]);
        // The third sketch hash is not a lookup hash.
        assert!(find(&c, &fp(1 << 40, 3, &[7]), 2, 0).slots.is_empty());
        assert!(find(&c, &fp(1 << 40, 1 << 20 | 1, &[4]), 2, 0)
            .slots
            .is_empty());
        // The first LISTED_PER_HASH of a hash only; a removal frees a place.
        let listed = |c: &Candidates| find(c, &fp(0, 42, &[]), 2, 0);
        let many = fp(u64::MAX, 42, &[]);
        for _ in 0..=LISTED_PER_HASH {
            insert(&mut c, &many, 2);
        }
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH);
        assert!(listed(&c).full().next().unwrap());
        let keys = CandidateKeys::of(&many, 2).unwrap();
        assert!(c.remove(2, Some(&keys)) && !c.remove(2, Some(&keys)));
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH - 1);
        // The freed slot is given again.
        assert_eq!(insert(&mut c, &fp(7, 42, &[]), 2), 2);
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH);
        assert!(!c.has_block(0, 0x1234) && c.has_block(3, 0xffff));
    }

    #[test]
    fn a_lookup_hash_is_listed_once_wherever_it_stands_in_a_sketch() {
        let mut c = Candidates::new(true);
        // Hash 9 at positions 0, 1 and 2 of three articles; 8 elsewhere.
        let b = fp(2 << 20, 2, &[5, 9]);
        insert(&mut c, &fp(1 << 20, 1, &[9, 10]), 3);
        insert(&mut c, &b, 3);
        insert(&mut c, &fp(3 << 20, 3, &[4, 8, 9]), 3);
        assert_eq!(find(&c, &fp(0, 0, &[9]), 3, 0).slots, [0, 1, 2]);
        assert_eq!(find(&c, &fp(0, 0, &[8]), 3, 0).slots, [2]);
        // Removing one unfiles it everywhere.
        assert!(c.remove(1, CandidateKeys::of(&b, 3).as_ref()));
        assert_eq!(find(&c, &fp(0, 0, &[9]), 3, 0).slots, [0, 2]);
        assert!(find(&c, &fp(0, 0, &[5]), 3, 0).slots.is_empty());
        // The bound counts the listings at every position together.
        for i in 0..LISTED_PER_HASH {
            let sketch = [1, 2, 9];
            insert(&mut c, &fp((i as u64) << 40, 7, &sketch[i % 3..]), 3);
        }
        let f = find(&c, &fp(0, 0, &[9]), 3, 0);
        assert_eq!(
            (f.slots.len(), f.full().collect::<Vec<_>>()),
            (LISTED_PER_HASH, vec![false, true])
        );
    }

    #[test]
    fn a_lookup_hash_finds_only_articles_within_the_farthest_match() {
        let mut c = Candidates::new(true);
        // Both share lookup hash 9 with the probe (SimHash 0): one 17 bits
        // from it, one 18.
        insert(&mut c, &fp((1 << 17) - 1, 1, &[9]), 1);
        insert(&mut c, &fp((1 << 18) - 1, 2, &[9]), 1);
        let reach = Reach { near: 17, far: 17 };
        let f = c.find(&CandidateKeys::of(&fp(0, 3, &[9]), 1).unwrap(), 3, reach);
        // The far one is examined (in the block lists of its two zero
        // blocks too) and counts towards a full list, but is not found.
        assert_eq!((f.slots, f.examined), (vec![0], 6));
        // Listed under the content hash, it is found at any distance.
        let f = c.find(&CandidateKeys::of(&fp(0, 2, &[9]), 1).unwrap(), 3, reach);
        assert_eq!(f.slots, [0, 1]);
    }

    #[test]
    fn a_far_article_is_found_through_two_lookup_hashes_or_one_it_is_alone_under() {
        let mut c = Candidates::new(true);
        // 24 bits from the probe's SimHash 0: one shares two lookup hashes
        // with the probe, one shares a hash another article (near) is listed
        // under too, one shares a hash alone.
        let far = u64::MAX >> 40;
        let two = insert(&mut c, &fp(far, 1, &[1, 2]), 2);
        let crowded = insert(&mut c, &fp(far << 1, 2, &[3]), 1);
        let near = insert(&mut c, &fp(1, 3, &[3]), 1);
        let alone = insert(&mut c, &fp(far << 2, 4, &[4]), 1);
        let probe = fp(0, 9, &[1, 2, 3, 4]);
        let reach = Reach { near: 17, far: 64 };
        let f = c.find(&CandidateKeys::of(&probe, 4).unwrap(), 3, reach);
        assert_eq!(f.slots, [two, near]);
        assert_eq!(f.lone, [(2, crowded), (3, alone)]);
        assert_eq!(f.listed, [1, 1, 2, 1]);
        assert!(f.alone(&f.listed).eq([alone]));
        // Over several indexes (a view's buckets), alone in all of them.
        assert_eq!(f.alone(&listed_over([&f, &f])).count(), 0);
        // Within the near reach, one shared hash is enough.
        let reach = Reach { near: 64, far: 64 };
        let f = c.find(&CandidateKeys::of(&probe, 4).unwrap(), 3, reach);
        assert_eq!(f.slots, [two, crowded, near, alone]);
    }

    #[test]
    fn copies_of_one_story_are_listed_a_bounded_number_of_times() {
        let mut c = Candidates::new(false);
        let copy = fp(0x0123_4567_89ab_cdef, 7, &[1, 2, 3]);
        for _ in 0..1000 {
            insert(&mut c, &copy, 3);
        }
        // A copy meets the first LISTED_PER_HASH, whichever key it tries.
        let f = find(&c, &copy, 3, 3);
        assert_eq!(f.slots, (0..LISTED_PER_HASH as u32).collect::<Vec<_>>());
        assert_eq!(f.examined, 8 * LISTED_PER_HASH);
        // A variant one bit off in its second block is listed where its
        // pair of blocks is new (positions 0 and 1), and nowhere else.
        let variant = fp(0x0123_4567_89ab_cdef ^ 1 << 32, 8, &[9]);
        let s = insert(&mut c, &variant, 1);
        assert!((0..4)
            .map(|p| c
                .blocks
                .get(p * LISTS + usize::from(CandidateKeys::of(&variant, 1).unwrap().blocks[p])))
            .map(|l| l.iter().any(|e| slot_of(e) == s))
            .eq([true, true, false, false]));
        // Copies removed make room for later ones.
        for slot in 0..4 {
            assert!(c.remove(slot, None));
        }
        let later = insert(&mut c, &copy, 3);
        assert!(find(&c, &copy, 3, 3).slots.contains(&later));
    }

    #[test]
    fn keyed_lists_grow_and_keep_every_key() {
        let mut k = Keyed::<3, 32>::new();
        let n = (GROW_AT << 16) as u32 + 1;
        for slot in 0..n {
            k.push(slot, sketch_key(slot));
        }
        assert_eq!(k.bits, 17);
        assert!((0..n).step_by(997).all(|s| k.filed(sketch_key(s)).eq([s])));
        k.unfile(5, sketch_key(5));
        assert_eq!(
            (k.filed(sketch_key(5)).count(), k.entries),
            (0, n as usize - 1)
        );
    }

    #[test]
    fn a_slot_removed_without_its_keys_is_skipped_and_never_given_again() {
        let mut c = Candidates::new(true);
        let a = fp(0xabcd, 5, &[3]);
        insert(&mut c, &a, 1);
        c.skip();
        // Not filed: held, never found.
        assert_eq!(c.insert(None), Ok(2));
        assert_eq!(c.len(), 2);
        assert!(c.remove(0, None) && !c.remove(1, None));
        assert_eq!(c.len(), 1);
        assert!(find(&c, &a, 1, 3).slots.is_empty());
        assert!(!c.has_block(3, 0xabcd));
        // Its entries are still listed: slot 0 stays retired.
        assert_eq!(insert(&mut c, &a, 1), 3);
        assert_eq!(find(&c, &a, 1, 0).slots, [3]);
        // An unfiled article leaves nothing behind: its slot is reused.
        assert!(c.remove(2, None));
        assert_eq!(insert(&mut c, &fp(1, 1, &[]), 1), 2);
    }
}
