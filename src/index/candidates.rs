//! The candidate index: articles and the keys they are found through, held
//! compactly. The embedded index keeps one for its window; a worker's view
//! keeps one per live Redis bucket (`redis/view.rs`).
//!
//! An article is a *slot* (a `u32`). Its row — the packed fingerprint (the
//! bytes an `a:` element holds, [`encode_fingerprint`]), then the caller's tail, which
//! ends with the article's id — lives in one byte arena at a `u32` offset: no
//! allocation per article. The article is filed under the keys of
//! [`super::meet`]:
//! - each of its four 16-bit SimHash blocks, in a dense table per position
//!   (65,536 lists of slots, each slot with the SimHash's next block): a
//!   check reads a row's SimHash only when that block is within the distance,
//!   about 1 % of the listed articles, so a search scans arrays instead of
//!   visiting rows;
//! - its content hash and each lookup sketch hash, at most
//!   [`LISTED_PER_HASH`] slots per hash, and its id, in hash tables of bare
//!   slots: a slot's key is read back from its row, so a table entry costs
//!   4 bytes and a control byte. The lookup hashes of every position share
//!   one table, an entry naming the slot and the position whose hash it is
//!   filed under, so a hash is one probe wherever it stands in a sketch.
//!
//! A removed article's row becomes garbage, reclaimed when it is half the
//! arena; dropping a whole `Candidates` (an expired bucket) frees its articles
//! at once.
//!
//! [`encode_fingerprint`]: super::redis::codec::encode_fingerprint

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::redis::codec::{packed_parts, u32s};
use super::LISTED_PER_HASH;
use crate::decision::MAX_LOOKUP_SIGNATURES;
use crate::fingerprint::Fingerprint;
use crate::simhash::{blocks, hamming};

/// `starts` of an empty slot.
const GONE: u32 = u32::MAX;
/// A row's head: the lengths of the packed fingerprint, the tail and the id
/// (u16 LE each; article ids are at most [`MAX_ID_BYTES`]).
///
/// [`MAX_ID_BYTES`]: crate::article::MAX_ID_BYTES
const HEAD: usize = 6;
const BLOCK_VALUES: usize = 1 << 16;
/// A sketch table entry: the slot in the low bits, the position of the
/// lookup hash it is filed under above them.
const SLOT_BITS: u32 = 28;
const _: () = assert!(MAX_LOOKUP_SIGNATURES <= 1 << (32 - SLOT_BITS));

/// The articles and their keys. See the module documentation.
#[derive(Debug)]
pub(crate) struct Candidates {
    /// How many of each sketch's smallest hashes an article is filed under.
    lookup: usize,
    /// Slots of removed articles are given to new ones (the embedded index);
    /// otherwise slots are positions (a bucket's handles).
    reuse_slots: bool,
    rows: Rows,
    free: Vec<u32>,
    live: usize,
    /// `4 × 65,536` lists, position-major; empty until an article is filed.
    blocks: Vec<BlockList>,
    content: HashTable<u32>,
    /// The lookup hashes: an entry `slot | i << SLOT_BITS` is filed under
    /// the slot's `i`-th sketch hash.
    sketch: HashTable<u32>,
    ids: HashTable<u32>,
}

/// The slots of one block value at one position, each with its SimHash's
/// block at the next position (cyclically): `[slot low, slot high, block]`,
/// 6 bytes an entry and one allocation a list.
type BlockList = Vec<[u16; 3]>;

fn entry_slot(e: &[u16; 3]) -> u32 {
    u32::from(e[0]) | u32::from(e[1]) << 16
}

/// The block at the position after `p`.
fn next_block(simhash: u64, p: usize) -> u16 {
    blocks(simhash)[(p + 1) % 4]
}

#[derive(Debug, Default)]
struct Rows {
    arena: Vec<u8>,
    /// Where each slot's row starts in `arena`, [`GONE`] for an empty slot.
    starts: Vec<u32>,
    /// Bytes of `arena` no row uses.
    garbage: usize,
}

/// Which table a slot is filed in.
#[derive(Clone, Copy)]
enum Key {
    Content,
    Sketch,
    Id,
}

/// The sketch table entry of `slot` filed under its `i`-th lookup hash.
fn sketch_entry(slot: u32, i: usize) -> u32 {
    slot | (i as u32) << SLOT_BITS
}

/// The slot and the lookup position of a table entry (position 0 outside
/// the sketch table).
fn entry_parts(e: u32) -> (u32, usize) {
    (e & ((1 << SLOT_BITS) - 1), (e >> SLOT_BITS) as usize)
}

/// What a search found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Slots, ascending: the SimHashes within the distance among the block
    /// lists, and every slot listed under the content or a lookup hash.
    pub(crate) slots: Vec<u32>,
    /// Slots examined: block list entries plus content and sketch listings.
    pub(crate) examined: usize,
    /// Per list searched (the content hash's, then each lookup hash's):
    /// whether it holds [`LISTED_PER_HASH`] articles already.
    pub(crate) full: Vec<bool>,
}

fn mix(key: u64) -> u64 {
    // The murmur3 finalizer: hashbrown takes the table position from the low
    // bits and a tag from the top 7.
    let k = (key ^ (key >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    let k = (k ^ (k >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

fn id_key(id: &[u8]) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(id)
}

impl Rows {
    fn row(&self, slot: u32) -> Option<(&[u8], &[u8], usize)> {
        let start = *self.starts.get(slot as usize)? as usize;
        if start == GONE as usize {
            return None;
        }
        let (packed_len, tail_len, id_len) = Rows::head(&self.arena, start);
        let packed = &self.arena[start + HEAD..start + HEAD + packed_len];
        let tail = &self.arena[start + HEAD + packed_len..start + HEAD + packed_len + tail_len];
        Some((packed, tail, id_len))
    }

    fn head(arena: &[u8], start: usize) -> (usize, usize, usize) {
        let h = &arena[start..start + HEAD];
        let u16_at = |i: usize| usize::from(u16::from_le_bytes([h[i], h[i + 1]]));
        (u16_at(0), u16_at(2), u16_at(4))
    }

    fn simhash(&self, slot: u32) -> u64 {
        let start = self.starts[slot as usize] as usize + HEAD;
        u64::from_le_bytes(self.arena[start..start + 8].try_into().expect("8 bytes"))
    }

    fn id(&self, slot: u32) -> Option<&[u8]> {
        let (_, tail, id_len) = self.row(slot)?;
        Some(&tail[tail.len() - id_len..])
    }

    /// The key table `key`'s entry `e` is filed under.
    fn key(&self, e: u32, key: Key) -> Option<u64> {
        let (slot, i) = entry_parts(e);
        match key {
            Key::Id => self.id(slot).map(id_key),
            Key::Content => packed_parts(self.row(slot)?.0).map(|k| k.1),
            Key::Sketch => u32s(packed_parts(self.row(slot)?.0)?.2)
                .nth(i)
                .map(u64::from),
        }
    }

    /// Copy the live rows to a new arena, in slot order.
    fn compact(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.garbage);
        for start in &mut self.starts {
            if *start == GONE {
                continue;
            }
            let from = *start as usize;
            let (packed_len, tail_len, _) = Rows::head(&self.arena, from);
            *start = arena.len() as u32;
            arena.extend_from_slice(&self.arena[from..from + HEAD + packed_len + tail_len]);
        }
        self.arena = arena;
        self.garbage = 0;
    }
}

/// The slots of `table` filed under `key`.
fn listed<'a>(
    table: &'a HashTable<u32>,
    rows: &'a Rows,
    which: Key,
    key: u64,
) -> impl Iterator<Item = u32> + 'a {
    table
        .iter_hash(mix(key))
        .copied()
        .filter(move |&e| rows.key(e, which) == Some(key))
        .map(|e| entry_parts(e).0)
}

/// The hash of the key table `which`'s entries are filed under, read back
/// from their rows: what a table needs to move its entries when it grows.
fn rehash(rows: &Rows, which: Key) -> impl Fn(&u32) -> u64 + '_ {
    move |&e| mix(rows.key(e, which).unwrap_or(0))
}

fn file(table: &mut HashTable<u32>, rows: &Rows, which: Key, key: u64, entry: u32) {
    table.insert_unique(mix(key), entry, rehash(rows, which));
}

fn unfile(table: &mut HashTable<u32>, key: u64, entry: u32) {
    if let Ok(found) = table.find_entry(mix(key), |&e| e == entry) {
        found.remove();
    }
}

impl Candidates {
    pub(crate) fn new(lookup: usize, reuse_slots: bool) -> Candidates {
        Candidates {
            lookup,
            reuse_slots,
            rows: Rows::default(),
            free: Vec::new(),
            live: 0,
            blocks: Vec::new(),
            content: HashTable::new(),
            sketch: HashTable::new(),
            ids: HashTable::new(),
        }
    }

    /// Make room for `more` articles in the hash tables, so that filing them
    /// does not grow a table one doubling at a time: each growth reads back
    /// the key of every entry from its row.
    pub(crate) fn reserve(&mut self, more: usize) {
        let rows = &self.rows;
        self.ids.reserve(more, rehash(rows, Key::Id));
        self.content.reserve(more, rehash(rows, Key::Content));
        self.sketch
            .reserve(more * self.lookup, rehash(rows, Key::Sketch));
        self.rows.starts.reserve(more);
    }

    /// Articles held.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The next slot is empty (a bucket's handle of a deleted article).
    pub(crate) fn skip(&mut self) {
        self.rows.starts.push(GONE);
    }

    /// Store an article: `packed` as [`encode_fingerprint`] packs it, `tail`
    /// ending with its id of `id_len` bytes; `filed`: whether it is found
    /// through its keys (not when its fingerprint is empty). Another article
    /// of the same id is no longer found by [`Self::find_id`]. Returns its
    /// slot, or why it cannot be held.
    ///
    /// [`encode_fingerprint`]: super::redis::codec::encode_fingerprint
    pub(crate) fn insert(
        &mut self,
        packed: &[u8],
        tail: &[u8],
        id_len: usize,
        filed: bool,
    ) -> Result<u32, String> {
        let (simhash, content, sketch, _) = packed_parts(packed)
            .ok_or_else(|| format!("packed fingerprint of {} bytes", packed.len()))?;
        let packed_len = u16::try_from(packed.len())
            .map_err(|_| format!("packed fingerprint of {} bytes", packed.len()))?;
        let tail_len =
            u16::try_from(tail.len()).map_err(|_| format!("{} bytes of meta", tail.len()))?;
        let id_len16 = u16::try_from(id_len)
            .ok()
            .filter(|_| id_len <= tail.len())
            .ok_or_else(|| format!("id of {id_len} bytes"))?;
        let start = u32::try_from(self.rows.arena.len())
            .ok()
            .filter(|&s| s != GONE)
            .ok_or("4 GiB of articles in one candidate index")?;
        let arena = &mut self.rows.arena;
        arena.extend_from_slice(&packed_len.to_le_bytes());
        arena.extend_from_slice(&tail_len.to_le_bytes());
        arena.extend_from_slice(&id_len16.to_le_bytes());
        arena.extend_from_slice(packed);
        arena.extend_from_slice(tail);
        let slot = match self.free.pop().filter(|_| self.reuse_slots) {
            Some(s) => {
                self.rows.starts[s as usize] = start;
                s
            }
            None => {
                if self.rows.starts.len() >= 1 << SLOT_BITS {
                    return Err(format!(
                        "{} slots in one candidate index",
                        1u32 << SLOT_BITS
                    ));
                }
                self.rows.starts.push(start);
                (self.rows.starts.len() - 1) as u32
            }
        };
        self.live += 1;
        let id = &tail[tail.len() - id_len..];
        if let Some(other) = self.find_id_bytes(id) {
            unfile(&mut self.ids, id_key(id), other);
        }
        file(&mut self.ids, &self.rows, Key::Id, id_key(id), slot);
        if !filed {
            return Ok(slot);
        }
        if self.blocks.is_empty() {
            self.blocks = vec![BlockList::new(); 4 * BLOCK_VALUES];
        }
        for (p, b) in blocks(simhash).into_iter().enumerate() {
            let list = &mut self.blocks[p * BLOCK_VALUES + usize::from(b)];
            list.push([slot as u16, (slot >> 16) as u16, next_block(simhash, p)]);
        }
        // The first LISTED_PER_HASH articles of a hash only.
        if listed(&self.content, &self.rows, Key::Content, content).count() < LISTED_PER_HASH {
            file(&mut self.content, &self.rows, Key::Content, content, slot);
        }
        for (i, s) in u32s(sketch).take(self.lookup).enumerate() {
            let key = u64::from(s);
            if listed(&self.sketch, &self.rows, Key::Sketch, key).count() < LISTED_PER_HASH {
                let entry = sketch_entry(slot, i);
                file(&mut self.sketch, &self.rows, Key::Sketch, key, entry);
            }
        }
        Ok(slot)
    }

    /// Remove the article in `slot`; whether there was one.
    pub(crate) fn remove(&mut self, slot: u32) -> bool {
        let Some((packed, tail, id_len)) = self.rows.row(slot) else {
            return false;
        };
        let len = HEAD + packed.len() + tail.len();
        let id = id_key(&tail[tail.len() - id_len..]);
        if let Some((simhash, content, sketch, _)) = packed_parts(packed) {
            for (p, b) in blocks(simhash).into_iter().enumerate() {
                if let Some(list) = self.blocks.get_mut(p * BLOCK_VALUES + usize::from(b)) {
                    if let Some(at) = list.iter().position(|e| entry_slot(e) == slot) {
                        list.remove(at);
                    }
                    if list.is_empty() {
                        *list = BlockList::new();
                    }
                }
            }
            unfile(&mut self.content, content, slot);
            for (i, s) in u32s(sketch).take(self.lookup).enumerate() {
                unfile(&mut self.sketch, u64::from(s), sketch_entry(slot, i));
            }
        }
        unfile(&mut self.ids, id, slot);
        self.rows.starts[slot as usize] = GONE;
        self.rows.garbage += len;
        self.live -= 1;
        if self.reuse_slots {
            self.free.push(slot);
        }
        if self.rows.garbage > 1 << 16 && self.rows.garbage * 2 > self.rows.arena.len() {
            self.rows.compact();
        }
        true
    }

    /// The article in `slot`: its packed fingerprint and the tail stored
    /// with it.
    pub(crate) fn row(&self, slot: u32) -> Option<(&[u8], &[u8])> {
        self.rows.row(slot).map(|(packed, tail, _)| (packed, tail))
    }

    /// The id of the article in `slot`.
    pub(crate) fn id(&self, slot: u32) -> Option<&str> {
        std::str::from_utf8(self.rows.id(slot)?).ok()
    }

    /// The slot of the article with id `id`.
    pub(crate) fn find_id(&self, id: &str) -> Option<u32> {
        self.find_id_bytes(id.as_bytes())
    }

    fn find_id_bytes(&self, id: &[u8]) -> Option<u32> {
        self.ids
            .find(mix(id_key(id)), |&s| self.rows.id(s) == Some(id))
            .copied()
    }

    /// Whether an article has SimHash block `value` at position `p`.
    pub(crate) fn has_block(&self, p: usize, value: u16) -> bool {
        self.blocks
            .get(p * BLOCK_VALUES + usize::from(value))
            .is_some_and(|l| !l.is_empty())
    }

    /// The candidates of `fp` (not empty): the articles whose SimHash shares
    /// a block with its and is within `max_distance` bits, and those listed
    /// under its content hash or a lookup sketch hash.
    pub(crate) fn find(&self, fp: &Fingerprint, max_distance: u32) -> Found {
        let mut found = Found::default();
        if !self.blocks.is_empty() {
            for (p, b) in blocks(fp.simhash).into_iter().enumerate() {
                let list = &self.blocks[p * BLOCK_VALUES + usize::from(b)];
                let next = next_block(fp.simhash, p);
                found.examined += list.len();
                for e in list {
                    if (e[2] ^ next).count_ones() <= max_distance
                        && hamming(self.rows.simhash(entry_slot(e)), fp.simhash) <= max_distance
                    {
                        found.slots.push(entry_slot(e));
                    }
                }
            }
        }
        let near = found.slots.len();
        let before = found.slots.len();
        found
            .slots
            .extend(listed(&self.content, &self.rows, Key::Content, fp.content));
        found
            .full
            .push(found.slots.len() - before >= LISTED_PER_HASH);
        for &s in fp.lookup_signatures(self.lookup) {
            let before = found.slots.len();
            found
                .slots
                .extend(listed(&self.sketch, &self.rows, Key::Sketch, u64::from(s)));
            found
                .full
                .push(found.slots.len() - before >= LISTED_PER_HASH);
        }
        found.examined += found.slots.len() - near;
        found.slots.sort_unstable();
        found.slots.dedup();
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::redis::codec::encode_fingerprint;

    fn packed(simhash: u64, content: u64, sketch: &[u32]) -> Vec<u8> {
        encode_fingerprint(&Fingerprint {
            simhash,
            content,
            signatures: sketch.to_vec(),
            words: 1,
            numbers: vec![3],
        })
    }

    fn probe(simhash: u64, content: u64, sketch: &[u32]) -> Fingerprint {
        Fingerprint {
            simhash,
            content,
            signatures: sketch.to_vec(),
            words: 1,
            numbers: Vec::new(),
        }
    }

    #[test]
    fn finds_by_near_simhash_content_and_lookup_hash_within_the_bound() {
        let mut c = Candidates::new(2, true);
        let a = c.insert(&packed(0xffff, 1, &[5, 6, 7]), b"meta a", 1, true);
        assert_eq!(a, Ok(0));
        // Bits 48+ differ by 4 from a's: shares blocks, too far.
        c.insert(&packed(0x000f_ffff, 2, &[8]), b"b", 1, true)
            .unwrap();
        let f = c.find(&probe(0xfffe, 9, &[1]), 3);
        assert_eq!(
            (f.slots, f.examined, f.full),
            (vec![0], 5, vec![false, false])
        );
        assert_eq!(c.find(&probe(0, 2, &[6, 9]), 0).slots, [0, 1]);
        // The third sketch hash is not a lookup hash.
        assert!(c.find(&probe(1 << 40, 3, &[7]), 0).slots.is_empty());
        // The first LISTED_PER_HASH of a hash only; a removal frees a place.
        let listed = |c: &Candidates| c.find(&probe(0, 42, &[]), 0);
        for i in 0..=LISTED_PER_HASH {
            let id = format!("x{i}");
            c.insert(&packed(u64::MAX, 42, &[]), id.as_bytes(), 2, true)
                .unwrap();
        }
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH);
        assert!(listed(&c).full[0]);
        assert!(c.remove(2) && !c.remove(2));
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH - 1);
        assert_eq!(c.find_id("x8"), Some(LISTED_PER_HASH as u32 + 2));
        assert_eq!(c.insert(&packed(7, 42, &[]), b"x9", 2, true), Ok(2));
        assert_eq!(listed(&c).slots.len(), LISTED_PER_HASH);
        assert!(!c.has_block(0, 0x1234) && c.has_block(3, 0xffff));
    }

    #[test]
    fn a_lookup_hash_is_listed_once_wherever_it_stands_in_a_sketch() {
        let mut c = Candidates::new(3, true);
        // Hash 9 at positions 0, 1 and 2 of three articles; 8 elsewhere.
        c.insert(&packed(1 << 20, 1, &[9, 10]), b"a", 1, true)
            .unwrap();
        c.insert(&packed(2 << 20, 2, &[5, 9]), b"b", 1, true)
            .unwrap();
        c.insert(&packed(3 << 20, 3, &[4, 8, 9]), b"c", 1, true)
            .unwrap();
        assert_eq!(c.find(&probe(0, 0, &[9]), 0).slots, [0, 1, 2]);
        assert_eq!(c.find(&probe(0, 0, &[8]), 0).slots, [2]);
        // Removing one unfiles it at its own position only.
        assert!(c.remove(1));
        assert_eq!(c.find(&probe(0, 0, &[9]), 0).slots, [0, 2]);
        assert_eq!(c.find(&probe(0, 0, &[5]), 0).slots, Vec::<u32>::new());
        // The bound counts the listings at every position together.
        for i in 0..LISTED_PER_HASH {
            let sketch = [1, 2, 9];
            let id = format!("x{i}");
            c.insert(
                &packed(u64::from(i as u32) << 40, 7, &sketch[i % 3..]),
                id.as_bytes(),
                2,
                true,
            )
            .unwrap();
        }
        let f = c.find(&probe(0, 0, &[9]), 0);
        assert_eq!(
            (f.slots.len(), f.full),
            (LISTED_PER_HASH, vec![false, true])
        );
    }

    #[test]
    fn ids_find_the_newest_and_rows_survive_compaction() {
        let mut c = Candidates::new(4, false);
        let big = vec![b'm'; 40_000];
        c.insert(&packed(1, 1, &[1]), &big, 3, true).unwrap();
        c.skip();
        c.insert(&packed(2, 2, &[2]), b"idx", 3, false).unwrap();
        assert_eq!(c.find_id("mmm"), Some(0));
        c.insert(&packed(3, 3, &[3]), &big, 3, true).unwrap();
        assert_eq!((c.find_id("mmm"), c.len()), (Some(3), 3));
        // Removing both big rows leaves most of the arena unused: compacted.
        assert!(c.remove(0) && c.remove(3));
        assert!(c.rows.arena.len() < 100);
        assert_eq!(c.row(2).map(|r| r.1), Some(&b"idx"[..]));
        assert_eq!(c.find_id("mmm"), None);
        assert_eq!(c.insert(&packed(3, 3, &[3]), b"mmm", 3, true), Ok(4));
        assert_eq!(c.find_id("mmm"), Some(4));
        // Not filed: found by id only.
        assert!(c.find(&probe(2, 2, &[2]), 0).slots.is_empty());
        assert_eq!(c.find(&probe(3, 3, &[]), 0).slots, [4]);
    }
}
