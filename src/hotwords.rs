//! A small, cache-friendly table of the words fingerprinting meets most often.
//!
//! Every content word costs a stop-word check, an IDF lookup and a SipHash. The
//! IDF table has ~270 k words behind pointers, so a lookup misses the cache more
//! often than not. Most of an article's words, however, are common ones, and the
//! common words are those with the lowest IDF. This table holds the stop words and
//! the words of lowest IDF with their IDF and SipHash precomputed, in one flat
//! open-addressing array (about 1 MB), looked up with a cheap hash.
//!
//! It is only a cache: the IDF and hash it gives for a word are exactly what the
//! IDF table and [`hash_bytes`] give, and a word missing from it is simply looked
//! up the slow way, so which words it holds never changes a fingerprint.

use crate::idf::IdfTable;
use crate::simhash::hash_bytes;

/// How many common (lowest-IDF) words the table holds besides the stop words.
pub const HOT_WORDS: usize = 16_384;

/// What the table knows about a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// A stop word: not a content word.
    Stop,
    /// A content word held in the table, at this slot.
    Hot(u32),
    /// Not in the table: a content word (every stop word is in the table) whose
    /// IDF and hash must be computed.
    Miss,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// SipHash of the word (the fingerprint's feature hash).
    hash: u64,
    /// The word's IDF in the table it was built from.
    idf: f64,
    /// The word is `arena[start..start + len]`.
    start: u32,
    /// High bits of the lookup hash, to skip most comparisons of other words.
    tag: u32,
    /// Length in bytes; 0 marks an empty slot.
    len: u32,
    stop: bool,
}

/// Stop words and common words with their IDF and feature hash.
#[derive(Clone)]
pub struct HotWords {
    slots: Box<[Slot]>,
    mask: usize,
    arena: String,
}

impl std::fmt::Debug for HotWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotWords")
            .field("words", &self.slots.iter().filter(|s| s.len != 0).count())
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl HotWords {
    /// Build the table for `idf` and `stop_words`: all stop words, and the `hot`
    /// words of lowest IDF (words of at least two characters; shorter ones are
    /// never content words).
    pub fn build<'a>(
        idf: &IdfTable,
        stop_words: impl IntoIterator<Item = &'a str>,
        hot: usize,
    ) -> Self {
        let stop: Vec<&str> = stop_words.into_iter().filter(|w| !w.is_empty()).collect();
        let common = idf.lowest(hot, |w| w.chars().nth(1).is_some());
        // Load factor 0.375–0.75: with 16 k words, 32 k slots of 32 bytes (1 MB).
        let capacity = ((stop.len() + common.len()) * 3 / 2)
            .next_power_of_two()
            .max(16);
        let mut table = HotWords {
            slots: vec![Slot::default(); capacity].into_boxed_slice(),
            mask: capacity - 1,
            arena: String::new(),
        };
        for w in stop {
            table.insert(w, idf.get(w), true);
        }
        for (w, v) in common {
            table.insert(w, v, false);
        }
        table
    }

    fn insert(&mut self, word: &str, idf: f64, stop: bool) {
        let (Ok(start), Ok(len)) = (u32::try_from(self.arena.len()), u32::try_from(word.len()))
        else {
            return;
        };
        if self.lookup(word) != Lookup::Miss {
            return; // a stop word that is also in the IDF table: first wins
        }
        let h = lookup_hash(word.as_bytes());
        let mut i = h as usize & self.mask;
        while self.slots[i].len != 0 {
            i = (i + 1) & self.mask;
        }
        self.arena.push_str(word);
        self.slots[i] = Slot {
            hash: hash_bytes(word.as_bytes()),
            idf,
            start,
            tag: (h >> 32) as u32,
            len,
            stop,
        };
    }

    /// Find `word`.
    #[inline]
    pub fn lookup(&self, word: &str) -> Lookup {
        let bytes = word.as_bytes();
        let h = lookup_hash(bytes);
        let tag = (h >> 32) as u32;
        let mut i = h as usize & self.mask;
        loop {
            let slot = &self.slots[i];
            if slot.len == 0 {
                return Lookup::Miss;
            }
            if slot.tag == tag
                && slot.len as usize == bytes.len()
                && same_bytes(
                    &self.arena.as_bytes()[slot.start as usize..][..bytes.len()],
                    bytes,
                )
            {
                return if slot.stop {
                    Lookup::Stop
                } else {
                    Lookup::Hot(i as u32)
                };
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Number of slots: every slot number from [`Lookup::Hot`] is below it.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The word at `slot` (from [`Lookup::Hot`]).
    #[inline]
    pub fn word(&self, slot: u32) -> &str {
        let s = &self.slots[slot as usize];
        &self.arena[s.start as usize..(s.start + s.len) as usize]
    }

    /// The IDF of the word at `slot`.
    #[inline]
    pub fn idf(&self, slot: u32) -> f64 {
        self.slots[slot as usize].idf
    }

    /// The SipHash ([`hash_bytes`]) of the word at `slot`.
    #[inline]
    pub fn hash(&self, slot: u32) -> u64 {
        self.slots[slot as usize].hash
    }
}

/// A cheap hash for the table (not part of any fingerprint): the length and the
/// first and last eight bytes (or four, or three single bytes), mixed.
#[inline]
fn lookup_hash(b: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let n = b.len();
    let (x, y) = if n >= 8 {
        (load8(&b[..8]), load8(&b[n - 8..]))
    } else if n >= 4 {
        (load4(&b[..4]), load4(&b[n - 4..]))
    } else if n > 0 {
        (
            u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
            0,
        )
    } else {
        (0, 0)
    };
    let h = (x ^ (n as u64) << 56).wrapping_mul(K);
    let h = (h ^ y).wrapping_mul(K);
    h ^ (h >> 29)
}

/// `a == b` for slices of equal length, without a `memcmp` call for the short
/// keys nearly all words are (two overlapping loads cover 4–16 bytes).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = b.len();
    debug_assert_eq!(a.len(), n);
    match n {
        8..=16 => load8(&a[..8]) == load8(&b[..8]) && load8(&a[n - 8..]) == load8(&b[n - 8..]),
        4..=7 => load4(&a[..4]) == load4(&b[..4]) && load4(&a[n - 4..]) == load4(&b[n - 4..]),
        _ => a == b,
    }
}

#[inline]
fn load8(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap_or_default())
}

#[inline]
fn load4(b: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(b[..4].try_into().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn table() -> (IdfTable, HotWords) {
        let idf = IdfTable::from_map(HashMap::from([
            ("common".to_owned(), 1.0),
            ("usual".to_owned(), 2.0),
            ("rare".to_owned(), 9.0),
            ("the".to_owned(), 0.5),
            ("x".to_owned(), 0.1),
        ]));
        // The three lowest: "the" (a stop word, stays one), "common", "usual".
        let hot = HotWords::build(&idf, ["the", "a", "of"], 3);
        (idf, hot)
    }

    #[test]
    fn holds_stop_words_and_the_lowest_idf_words() {
        let (idf, hot) = table();
        assert_eq!(hot.lookup("the"), Lookup::Stop);
        assert_eq!(hot.lookup("of"), Lookup::Stop);
        assert_eq!(hot.lookup("rare"), Lookup::Miss);
        assert_eq!(
            hot.lookup("x"),
            Lookup::Miss,
            "one character: never a content word"
        );
        assert_eq!(hot.lookup("unknown"), Lookup::Miss);
        for w in ["common", "usual"] {
            let Lookup::Hot(slot) = hot.lookup(w) else {
                panic!("{w} not hot");
            };
            assert_eq!(hot.word(slot), w);
            assert_eq!(hot.idf(slot), idf.get(w));
            assert_eq!(hot.hash(slot), hash_bytes(w.as_bytes()));
        }
    }

    #[test]
    fn same_bytes_is_equality() {
        let words = [
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "中文",
            "中文字",
            "中华人民",
            "中华人民共和国",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
        ];
        for a in words {
            for b in words {
                if a.len() == b.len() {
                    assert_eq!(same_bytes(a.as_bytes(), b.as_bytes()), a == b, "{a} {b}");
                }
            }
            // One byte changed anywhere.
            for i in 0..a.len() {
                let mut c = a.as_bytes().to_vec();
                c[i] ^= 1;
                assert!(!same_bytes(a.as_bytes(), &c), "{a} {i}");
            }
        }
    }

    #[test]
    fn builtin_table_agrees_with_the_idf_table() {
        let idf = IdfTable::builtin();
        let tokenizer = crate::tokenize::Tokenizer::new(false);
        let hot = HotWords::build(&idf, tokenizer.stop_words(), HOT_WORDS);
        let mut hits = 0;
        for (w, v) in idf.iter() {
            match hot.lookup(w) {
                Lookup::Hot(slot) => {
                    hits += 1;
                    assert_eq!(hot.word(slot), w);
                    assert_eq!(hot.idf(slot), v);
                    assert_eq!(hot.hash(slot), hash_bytes(w.as_bytes()));
                }
                Lookup::Stop => assert!(tokenizer.is_stop_word(w), "{w}"),
                Lookup::Miss => {}
            }
        }
        assert!(hits >= HOT_WORDS - 300, "{hits}");
        for w in tokenizer.stop_words() {
            assert_eq!(hot.lookup(w), Lookup::Stop, "{w}");
        }
    }
}
