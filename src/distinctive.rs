//! Distinctive tokens: the figures that make a report the news it is.
//!
//! Templated reports — earnings tables, daily market and output figures, COVID
//! counts, notices of the same kind about different people — share most of their
//! words and clauses with every other report of their template, so SimHash and
//! the clause sketch call them copies. What differs is what the reader needs:
//! the numbers. A copy, a correction or a reissue keeps them (a fixed figure or
//! an added paragraph changes a few, a cut tail drops some); a new report of
//! the same template changes nearly all of them.
//!
//! So each fingerprint carries a small bottom-k sample of its numbers' hashes
//! (the *number sketch*), and a match that only the template could explain —
//! SimHash or shared clauses, not an exact copy — counts only when the two
//! samples largely agree (see [`crate::decision`]). The agreement is read
//! like the clause sketch's overlap: resemblance or containment either way, so a
//! truncated copy or one with an added paragraph still agrees.
//!
//! A number is a maximal run of ASCII digits (after NFKC, so full-width digits
//! are ASCII), continued across a single `.` or `,` that has a digit on both
//! sides: `1,406.5`, `3.7`, `2024`, `10` (from `10日`). Numbers are the one kind
//! of distinctive token every language writes alike; names and rare words would
//! need per-language rules that a template's proper nouns (a company, a place)
//! defeat as often as they help.

use crate::simhash::hash_bytes;

/// How many number hashes a fingerprint keeps: the smallest distinct ones.
pub const NUMBER_SKETCH: usize = 8;

/// The numbers of normalized text, in order (repeats included).
pub fn numbers(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        i = next_digit(bytes, i);
        if i == bytes.len() {
            return None;
        }
        let start = i;
        loop {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            // One separator between digits keeps the number whole.
            if i + 1 < bytes.len()
                && matches!(bytes[i], b'.' | b',')
                && bytes[i + 1].is_ascii_digit()
            {
                i += 1;
            } else {
                break;
            }
        }
        Some(&text[start..i])
    })
}

/// The position of the first ASCII digit of `bytes` from `from` on, or its length.
fn next_digit(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    // Most text has few digits: skip 16 bytes at a time, with no early exit
    // within a chunk so that the test vectorizes.
    while let Some(chunk) = bytes.get(i..i + 16) {
        if chunk.iter().fold(false, |any, b| any | b.is_ascii_digit()) {
            break;
        }
        i += 16;
    }
    while i < bytes.len() && !bytes[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// The hash of one number in the sketch: the high 16 bits of its SipHash. Two
/// bytes suffice: a sketch is compared with a few others' at a time, and a chance
/// collision only makes two reports look slightly more alike.
pub fn number_hash(number: &str) -> u16 {
    (hash_bytes(number.as_bytes()) >> 48) as u16
}

/// The number sketch of normalized text: the [`NUMBER_SKETCH`] smallest distinct
/// number hashes, ascending.
pub fn number_sketch(text: &str) -> Vec<u16> {
    let mut hashes: Vec<u16> = numbers(text).map(number_hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    hashes.truncate(NUMBER_SKETCH);
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_separators_between_digits() {
        let got: Vec<&str> =
            numbers("Net 2,764,000 vs 2,540,000. Shr 61 cts, 3.7 pct; 10日 1. 2,x").collect();
        assert_eq!(got, ["2,764,000", "2,540,000", "61", "3.7", "10", "1", "2"]);
        assert_eq!(numbers("no figures here").count(), 0);
    }

    #[test]
    fn next_digit_finds_the_first_digit() {
        let text = "统计局数据显示，一季度国内生产总值同比增长5.3%，工业增加值 12 point";
        let bytes = text.as_bytes();
        for from in 0..=bytes.len() {
            let slow = (from..bytes.len())
                .find(|&i| bytes[i].is_ascii_digit())
                .unwrap_or(bytes.len());
            assert_eq!(next_digit(bytes, from), slow, "{from}");
        }
        assert_eq!(next_digit(b"", 0), 0);
    }

    #[test]
    fn sketch_is_the_smallest_distinct_hashes() {
        let text = "1 2 3 4 5 6 7 8 9 10 11 12 1 2 3";
        let sketch = number_sketch(text);
        assert_eq!(sketch.len(), NUMBER_SKETCH);
        assert!(sketch.windows(2).all(|w| w[0] < w[1]));
        let mut all: Vec<u16> = (1..=12).map(|n| number_hash(&n.to_string())).collect();
        all.sort_unstable();
        assert_eq!(sketch, all[..NUMBER_SKETCH]);
        assert!(number_sketch("none").is_empty());
    }
}
