//! Builds the fingerprint's word tables at compile time, so that no process
//! parses a dictionary at start-up.
//!
//! Inputs (`src/jieba/`, zstd-compressed): jieba's dictionary `dict.txt`
//! (`word freq tag` lines) and IDF table `idf.txt` (`word idf` lines), the files
//! that ship with jieba and jieba-rs (MIT). Outputs in `OUT_DIR`, embedded by
//! `src/dictionary.rs` and `src/idf.rs` with `include_bytes!`:
//!
//! - `dictionary.bin`: `0 - ln(total frequency)`, the word count, `ln(freq) -
//!   ln(total frequency)` of each word (its log-probability, the term jieba's
//!   route adds), then a character-wise double-array trie of the words whose
//!   characters are all Han (the only words a Han block can contain), mapping a
//!   word to its index: the character → code table (`u32` per scalar value up
//!   to the largest character, `u32::MAX` for none) and the nodes (`base`,
//!   `check`), both with their lengths in front. The trie is crawdad's, its
//!   arrays written out plain so that `src/dictionary.rs` walks them itself.
//! - `idf.bin`: the median IDF, the word count, the IDF of each word in rising
//!   order (ties by word), the words' end offsets and bytes in that order, then a
//!   trie mapping a word to its index.
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
use han::is_jieba_han;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/jieba/dict.txt.zst");
    println!("cargo:rerun-if-changed=src/jieba/idf.txt.zst");
    println!("cargo:rerun-if-changed=src/jieba/han.rs");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let out = Path::new(&out);
    std::fs::write(
        out.join("dictionary.bin"),
        dictionary(&unpack("src/jieba/dict.txt.zst")),
    )
    .expect("write dictionary.bin");
    std::fs::write(out.join("idf.bin"), idf(&unpack("src/jieba/idf.txt.zst")))
        .expect("write idf.bin");
}

fn unpack(path: &str) -> String {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut text = String::new();
    ruzstd::decoding::StreamingDecoder::new(file)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    text
}

fn dictionary(text: &str) -> Vec<u8> {
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
    let mut out = Vec::new();
    out.extend_from_slice(&(0.0 - log_total).to_le_bytes());
    out.extend_from_slice(&len_u32(words.len()).to_le_bytes());
    for &(_, f) in &words {
        out.extend_from_slice(&((f as f64).ln() - log_total).to_le_bytes());
    }
    // crawdad's serialized form: the code table's length and codes, the alphabet
    // size, the node count and the nodes (`base`, `check`), all `u32`. Written
    // out without the alphabet size.
    let trie = trie(words.iter().map(|&(w, _)| w));
    let mut rest = trie.as_slice();
    let mut take = || {
        let (head, tail) = rest.split_at(4);
        rest = tail;
        u32::from_le_bytes(head.try_into().expect("four bytes"))
    };
    let codes = take();
    out.extend_from_slice(&codes.to_le_bytes());
    for _ in 0..codes {
        out.extend_from_slice(&take().to_le_bytes());
    }
    let _alphabet = take();
    let nodes = take();
    out.extend_from_slice(&nodes.to_le_bytes());
    for _ in 0..2 * nodes {
        out.extend_from_slice(&take().to_le_bytes());
    }
    assert!(
        rest.is_empty(),
        "crawdad's trie layout: {} bytes left",
        rest.len()
    );
    out
}

fn idf(text: &str) -> Vec<u8> {
    // jieba-rs: a later line wins for its word; the median (the lower one) is over
    // every line read.
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
    let median = all[(all.len() - 1) / 2];
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
    out.extend_from_slice(&trie(rows.iter().map(|&(w, _)| w)));
    out
}

/// A trie of `words` (distinct) mapping each to its position in the sequence.
fn trie<'a>(words: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let records: Vec<(&str, u32)> = words.enumerate().map(|(i, w)| (w, len_u32(i))).collect();
    crawdad::Trie::from_records(records)
        .expect("a trie of the words")
        .serialize_to_vec()
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).expect("fits 32 bits")
}
