//! Builds the fingerprint's word tables at compile time, so that no process
//! parses a dictionary at start-up.
//!
//! Inputs (`src/jieba/`, zstd-compressed): jieba's dictionary `dict.txt`
//! (`word freq tag` lines) and IDF table `idf.txt` (`word idf` lines), the files
//! that ship with jieba and jieba-rs (MIT). Outputs in `OUT_DIR`, embedded by
//! `src/dictionary.rs` and `src/idf.rs` with `include_bytes!`:
//!
//! - `dictionary.bin`: `0 - ln(total frequency)`; the distinct log-probabilities
//!   `ln(freq) - ln(total frequency)` of the words (the term jieba's route adds),
//!   with their count in front and a placeholder at index 0 (their index is a
//!   word's *class*); then a character-wise double-array trie of the words
//!   whose characters are all Han (the only words a Han block can contain): the
//!   code of every character of the BMP (`u16`; `NO_CODE`, `NOT_HAN`), and the
//!   node count, zeros up to a multiple of 16 bytes and the nodes, 16 bytes
//!   each (base, check, class, word index: [`repack_node`]); then
//!   the word count and, per word in index order, its feature hash
//!   (`hash_bytes` of `src/simhash.rs`, SipHash-1-3 under the same keys) and
//!   its IDF in `idf.txt` (the median if it has none). The trie is crawdad's,
//!   laid out so that one cache line holds what a step of the walk reads, and
//!   `src/dictionary.rs` reads every table in place.
//! - `idf.bin`: the median IDF, the word count, the IDF of each word in rising
//!   order (ties by word), the words' end offsets and bytes in that order, a
//!   bit per byte value that starts a word (256 bits), then an open-addressing
//!   table from a word to its index (`src/jieba/word_hash.rs`): its size as a
//!   power of two and its `u32` slots. `src/idf.rs` reads it all in place.
//!
//! Both tables are read exactly as jieba-rs reads them (later duplicates win; the
//! total frequency and the median count every line), which the tests of
//! `src/dictionary.rs` and `src/idf.rs` check against jieba-rs itself. Numbers are
//! little-endian; every section is a multiple of 4 bytes.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

#[path = "src/jieba/han.rs"]
mod han;
use han::{is_jieba_han, NOT_HAN, NO_CODE};
#[path = "src/jieba/word_hash.rs"]
mod word_hash;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/jieba/dict.txt.zst");
    println!("cargo:rerun-if-changed=src/jieba/idf.txt.zst");
    println!("cargo:rerun-if-changed=src/jieba/han.rs");
    println!("cargo:rerun-if-changed=src/jieba/word_hash.rs");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    let idf_text = unpack("src/jieba/idf.txt.zst");
    let (idf_map, median) = read_idf(&idf_text);
    std::fs::write(
        out.join("dictionary.bin"),
        dictionary(&unpack("src/jieba/dict.txt.zst"), &idf_map, median),
    )
    .expect("write dictionary.bin");
    std::fs::write(out.join("idf.bin"), idf(idf_map, median)).expect("write idf.bin");
}

/// A node's size in `dictionary.bin` (four `u32`), and a divisor of the
/// nodes' offset in it.
const NODE_BYTES: usize = 16;

fn unpack(path: &str) -> String {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut text = String::new();
    ruzstd::decoding::StreamingDecoder::new(file)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    text
}

fn dictionary(text: &str, idf: &HashMap<&str, f64>, median: f64) -> Vec<u8> {
    // jieba-rs: one record per line, the total sums every line, a word repeated
    // later takes the later frequency.
    let mut total: usize = 0;
    let mut freq: HashMap<&str, usize> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.split_ascii_whitespace();
        let Some(word) = parts.next() else { continue };
        let f = parts.next().map_or(0, |x| {
            x.parse::<usize>()
                .unwrap_or_else(|e| panic!("dict.txt: {line:?}: {e}"))
        });
        total += f;
        freq.insert(word, f);
    }
    let mut words: Vec<(&str, usize)> = freq
        .into_iter()
        .filter(|(w, _)| w.chars().all(is_jieba_han))
        .collect();
    words.sort_unstable();
    let log_total = (total as f64).ln();
    let log_prob = |f: usize| (f as f64).ln() - log_total;
    // Distinct log-probabilities, by bits; index 0 is "no word".
    let mut classes: Vec<u64> = words.iter().map(|&(_, f)| log_prob(f).to_bits()).collect();
    classes.sort_unstable();
    classes.dedup();
    classes.insert(0, 0);
    let class_of: HashMap<u64, u32> = classes
        .iter()
        .enumerate()
        .map(|(i, &bits)| (bits, len_u32(i)))
        .collect();
    let mut out = Vec::new();
    out.extend_from_slice(&(0.0 - log_total).to_le_bytes());
    out.extend_from_slice(&len_u32(classes.len()).to_le_bytes());
    for &bits in &classes {
        out.extend_from_slice(&bits.to_le_bytes());
    }
    // crawdad's serialized form: the code table's length and codes, the alphabet
    // size, the node count and the nodes (`base`, `check`), all `u32`.
    let trie = trie(words.iter().map(|&(w, _)| w));
    let mut rest = trie.as_slice();
    let mut take = || {
        let (head, tail) = rest.split_at(4);
        rest = tail;
        u32::from_le_bytes(head.try_into().expect("four bytes"))
    };
    let codes: Vec<u32> = (0..take()).map(|_| take()).collect();
    // Every character of the Basic Multilingual Plane: its code, `NO_CODE` for
    // a Han character no word has, `NOT_HAN` for a character that is not Han to
    // jieba. (Code 0 is crawdad's end marker, U+FFFF, never a word's character.)
    out.extend_from_slice(&0x10000u32.to_le_bytes());
    for c in 0..0x10000u32 {
        let code = match (char::from_u32(c), codes.get(c as usize).copied()) {
            (Some(ch), _) if !is_jieba_han(ch) => NOT_HAN,
            (Some(_), Some(code)) if code != 0 && code != u32::MAX => {
                assert!(code < 1 << 14, "code {code}");
                code as u16
            }
            _ => NO_CODE,
        };
        out.extend_from_slice(&code.to_le_bytes());
    }
    assert!(
        codes.len() <= 0x10000,
        "no word has a character beyond the BMP"
    );
    let _alphabet = take();
    let count = take() as usize;
    let raw: Vec<[u32; 2]> = (0..count).map(|_| [take(), take()]).collect();
    assert!(
        rest.is_empty(),
        "crawdad's trie layout: {} bytes left",
        rest.len()
    );
    out.extend_from_slice(&len_u32(count).to_le_bytes());
    // Zeros up to a multiple of a node's size, so that no node of a table
    // aligned to a 64-byte cache line straddles two lines.
    out.resize(out.len().next_multiple_of(NODE_BYTES), 0);
    for (i, &[base, check]) in raw.iter().enumerate() {
        let mut word = u32::MAX;
        let node = repack_node(&raw, i, base, check, |value| {
            word = value;
            class_of[&log_prob(words[value as usize].1).to_bits()]
        });
        for field in node.into_iter().chain([word]) {
            out.extend_from_slice(&field.to_le_bytes());
        }
    }
    // Each word's feature hash and built-in IDF (the median if the table lacks it).
    out.extend_from_slice(&len_u32(words.len()).to_le_bytes());
    for &(w, _) in &words {
        let hash = siphasher::sip::SipHasher13::new_with_keys(
            u64::from_le_bytes(*b"simdedup"),
            u64::from_le_bytes(*b"fprintv1"),
        )
        .hash(w.as_bytes());
        out.extend_from_slice(&hash.to_le_bytes());
        out.extend_from_slice(&idf.get(w).copied().unwrap_or(median).to_le_bytes());
    }
    out
}

/// crawdad's flag bit of a node's base (a leaf: the base is the word's value)
/// and check (the node ends a word: its leaf is its child by code 0).
const CRAWDAD_FLAG: u32 = 0x8000_0000;
/// crawdad's check of the root and of unused nodes.
const CRAWDAD_NONE: u32 = 0x7FFF_FFFF;
/// A base or check that is no node: a base from which every child index (base
/// xor a code below 2^14) is beyond the nodes, a check no node has.
const NO_INDEX: u32 = (1 << 21) - 1;

/// Node `i` of crawdad's trie `raw` (`base`, `check`) as the segmenter reads
/// it: its base (its children are at `base ^ code`; [`NO_INDEX`] if it has
/// none), its check (its parent; [`NO_INDEX`] for the root, unused nodes and
/// crawdad's end-marker leaves, which no character leads to) and the class of
/// the word it ends (`class` of the word's value; 0: it ends none). A word's
/// end is its node, without crawdad's leaf node after it.
fn repack_node(
    raw: &[[u32; 2]],
    i: usize,
    base: u32,
    check: u32,
    mut class: impl FnMut(u32) -> u32,
) -> [u32; 3] {
    assert!(
        raw.len() < (NO_INDEX - (1 << 14)) as usize,
        "{} nodes",
        raw.len()
    );
    if i == 0 {
        // The root: no parent, no word.
        assert!(base < NO_INDEX, "the root's base");
        return [base, NO_INDEX, 0];
    }
    if check == CRAWDAD_NONE {
        return [NO_INDEX, NO_INDEX, 0];
    }
    let parent = check & !CRAWDAD_FLAG;
    let [parent_base, parent_check] = raw[parent as usize];
    if parent_check & CRAWDAD_FLAG != 0
        && parent_base & CRAWDAD_FLAG == 0
        && parent_base == i as u32
    {
        // The end-marker leaf of a node that ends a word: folded into it.
        return [NO_INDEX, NO_INDEX, 0];
    }
    let (base, word_class) = if base & CRAWDAD_FLAG != 0 {
        (NO_INDEX, class(base & !CRAWDAD_FLAG))
    } else if check & CRAWDAD_FLAG != 0 {
        let [leaf_base, _] = raw[base as usize];
        assert!(
            leaf_base & CRAWDAD_FLAG != 0,
            "node {i}: its end marker is a leaf"
        );
        (base, class(leaf_base & !CRAWDAD_FLAG))
    } else {
        (base, 0)
    };
    assert!(base <= NO_INDEX && parent < NO_INDEX);
    [base, parent, word_class]
}

/// jieba's IDF table as jieba-rs reads it: a later line wins for its word; the
/// median (the lower one) is over every line read.
fn read_idf(text: &str) -> (HashMap<&str, f64>, f64) {
    let mut all = Vec::new();
    let mut idf: HashMap<&str, f64> = HashMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        if let (Some(word), Some(v)) = (parts.next(), parts.next().and_then(|x| x.parse().ok())) {
            all.push(v);
            idf.insert(word, v);
        }
    }
    all.sort_by(f64::total_cmp);
    (idf, all[(all.len() - 1) / 2])
}

fn idf(idf: HashMap<&str, f64>, median: f64) -> Vec<u8> {
    let mut rows: Vec<(&str, f64)> = idf.into_iter().collect();
    rows.sort_unstable_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
    let mut out = Vec::new();
    out.extend_from_slice(&median.to_le_bytes());
    out.extend_from_slice(&len_u32(rows.len()).to_le_bytes());
    for &(_, v) in &rows {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut end = 0;
    for &(w, _) in &rows {
        end += w.len();
        out.extend_from_slice(&len_u32(end).to_le_bytes());
    }
    let mut bytes: Vec<u8> = rows.iter().flat_map(|(w, _)| w.bytes()).collect();
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    out.extend_from_slice(&bytes);
    // The words' first bytes, a bit each: a word starting otherwise (any
    // ASCII word: the table has none) is missing without a probe.
    let mut first = [0u32; 8];
    for &(w, _) in &rows {
        let b = w.as_bytes()[0];
        first[usize::from(b / 32)] |= 1 << (b % 32);
    }
    for bits in first {
        out.extend_from_slice(&bits.to_le_bytes());
    }
    // The index: at most half full, linear probing.
    assert!(
        rows.len() < (1 << word_hash::ROW_BITS) - 1,
        "{} rows",
        rows.len()
    );
    let bits = (2 * rows.len()).next_power_of_two().trailing_zeros();
    let mut slots = vec![0u32; 1 << bits];
    let mask = slots.len() - 1;
    for (row, &(w, _)) in rows.iter().enumerate() {
        let h = word_hash::word_hash(w.as_bytes());
        let mut i = word_hash::home_slot(h, bits);
        while slots[i] != 0 {
            i = (i + 1) & mask;
        }
        slots[i] = word_hash::tag(h) << word_hash::ROW_BITS | (len_u32(row) + 1);
    }
    out.extend_from_slice(&bits.to_le_bytes());
    for slot in slots {
        out.extend_from_slice(&slot.to_le_bytes());
    }
    out
}

/// A crawdad trie of `words` (distinct) mapping each to its position in the
/// sequence, serialized.
fn trie<'a>(words: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let records: Vec<(&str, u32)> = words.enumerate().map(|(i, w)| (w, len_u32(i))).collect();
    crawdad::Trie::from_records(records)
        .expect("a trie of the words")
        .serialize_to_vec()
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).expect("fits 32 bits")
}
