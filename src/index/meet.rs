//! Which articles can meet: the one definition of the keys a candidate is
//! found through.
//!
//! An article finds its candidates through its four 16-bit SimHash blocks
//! (every SimHash within distance 3 shares one with it at its position: the
//! pigeonhole rule), its content hash and its lookup sketch hashes (the first
//! `lookup_signatures` of its sorted sketch), and is filed under the same
//! blocks and content hash and its whole sketch
//! ([`CandidateKeys::filed`]): an excerpt holds a part of its source's
//! clauses, and the smallest of its own that the source holds are among the
//! source's sketch, seldom among its first few. Two articles that share none of these are never each other's
//! candidates, so:
//! - the candidate index (`index/candidates.rs`) files and finds by them;
//! - a worker may decide two such articles in either order, at once
//!   (`src/worker/batch.rs`);
//! - `lua/commit.lua` counts an article inserted since a worker's view as a
//!   conflict exactly when [`CandidateKeys::meets`] says so for its packed
//!   fingerprint (the script receives the lookup count from
//!   [`CandidateKeys::lookup`]).

use crate::decision::MAX_LOOKUP_SIGNATURES;
use crate::fingerprint::Fingerprint;
use crate::simhash::blocks;

/// The keys an article is found through: a candidate shares one with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandidateKeys<'a> {
    /// The SimHash's blocks, most significant first.
    pub blocks: [u16; 4],
    pub content: u64,
    /// The lookup sketch hashes (a prefix of the sorted sketch).
    pub lookup: &'a [u32],
}

impl<'a> CandidateKeys<'a> {
    /// `None` for an empty fingerprint: it is never compared nor indexed.
    pub fn of(fp: &'a Fingerprint, lookup_signatures: usize) -> Option<CandidateKeys<'a>> {
        if fp.is_empty() {
            return None;
        }
        Some(CandidateKeys {
            blocks: blocks(fp.simhash),
            content: fp.content,
            lookup: fp.lookup_signatures(lookup_signatures),
        })
    }

    /// The keys an article is filed under: its blocks, its content hash and
    /// its whole sketch (up to [`MAX_LOOKUP_SIGNATURES`] hashes).
    pub fn filed(fp: &'a Fingerprint) -> Option<CandidateKeys<'a>> {
        Self::of(fp, MAX_LOOKUP_SIGNATURES)
    }

    /// Whether an article with fingerprint `other` can change what a check
    /// through these keys finds: it has one of the blocks at its position,
    /// the content hash, or one of the lookup hashes anywhere in its sketch.
    /// A superset of "is found through them", never smaller: an extra retry
    /// at worst.
    pub fn meets(&self, other: &Fingerprint) -> bool {
        if other.is_empty() {
            return false;
        }
        let theirs = blocks(other.simhash);
        self.content == other.content
            || self.blocks.iter().zip(&theirs).any(|(a, b)| a == b)
            || self
                .lookup
                .iter()
                .any(|s| other.signatures.binary_search(s).is_ok())
    }
}

/// Whether the verdict on one of two articles can depend on whether the other
/// is stored yet, for any lookup count: the same id, or keys they share
/// ([`CandidateKeys::meets`] with every sketch hash).
pub fn may_meet(a_id: &str, a: &Fingerprint, b_id: &str, b: &Fingerprint) -> bool {
    a_id == b_id || CandidateKeys::of(a, usize::MAX).is_some_and(|k| k.meets(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(simhash: u64, content: u64, signatures: Vec<u32>) -> Fingerprint {
        Fingerprint {
            simhash,
            content,
            signatures,
            words: 10,
            numbers: Vec::new(),
            ..Default::default()
        }
    }

    #[test]
    fn articles_meet_through_a_block_the_content_or_a_lookup_hash() {
        let a = fp(0x1111_2222_3333_4444, 7, vec![1, 5, 9]);
        let keys = CandidateKeys::of(&a, 2).unwrap();
        assert_eq!(keys.lookup, [1, 5]);
        // A block at its position; not at another.
        assert!(keys.meets(&fp(0x0000_0000_0000_4444, 8, vec![])));
        assert!(!keys.meets(&fp(0x4444_0000_0000_0000, 8, vec![])));
        assert!(keys.meets(&fp(0, 7, vec![])));
        assert!(keys.meets(&fp(0, 8, vec![0, 5])));
        // The third sketch hash is not a lookup hash.
        assert!(!keys.meets(&fp(0, 8, vec![9])));
        assert!(may_meet("a", &a, "b", &fp(0, 8, vec![9])));
        assert!(!may_meet("a", &a, "b", &fp(0, 8, vec![10])));
        assert!(may_meet("a", &a, "a", &fp(0, 8, vec![10])));
        // An empty fingerprint meets nothing.
        let empty = fp(0, 7, vec![]);
        let empty = Fingerprint { words: 0, ..empty };
        assert!(CandidateKeys::of(&empty, 2).is_none());
        assert!(!keys.meets(&empty));
    }
}
