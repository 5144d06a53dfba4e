//! Signature sketches and the content hash: the copy-detection half of a fingerprint.
//!
//! SimHash measures how alike two bags of words are; it drifts when a short article
//! gains a boilerplate line, loses a paragraph or has words swapped. A copied article,
//! however, keeps most of its text verbatim piece by piece. So each article also
//! carries a *sketch*: the hashes of some of its sentences (the classic "N longest
//! sentences") or, by default, of a sample of its clauses.
//!
//! Why clauses, sampled: a rewrite that swaps one word per sentence breaks every
//! sentence hash but leaves most clauses intact; and choosing the clauses with the
//! smallest hashes (a bottom-k sample, as in MinHash) means a truncated or edited
//! copy keeps choosing the same clauses, so the share of the sketch two articles
//! have in common estimates how much of their text they share.
//!
//! Units are compared by their *key*: the lowercased letters and digits only, so
//! punctuation, spacing, markup and case changes do not matter.

use serde::{Deserialize, Serialize};

use crate::simhash::hash_bytes;
use crate::tokenize::{is_ascii_white_space, is_han, is_han3, is_word_char, LOWER_ALNUM};

/// Characters that end a sentence (after NFKC, so full-width `！？；` are ASCII).
const fn ends_sentence(c: char) -> bool {
    matches!(c, '。' | '!' | '?' | ';' | '…' | '\n' | '｡')
}

/// Characters that end a clause (besides those that end a sentence).
const fn ends_clause(c: char) -> bool {
    matches!(
        c,
        ',' | '、' | ':' | '(' | ')' | '"' | '“' | '”' | '「' | '」' | '《' | '》'
    )
}

/// What a signature hashes: whole sentences, or clauses (sentences cut at commas,
/// colons, brackets and quotes). Clauses survive sparse word substitution better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Sentence,
    Clause,
}

/// Which units are signed: the longest ones, or a hash-chosen sample (the units
/// with the smallest hashes), which any subset of the text keeps choosing alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Selection {
    Longest,
    Sampled,
}

/// The signature of one unit: the low 32 bits of its key's hash. Thirty-two bits
/// keep a stored sketch small (12 of them fit Redis's compact encodings), and a
/// chance collision among a dozen hashes costs nothing measurable.
pub fn unit_hash(key: &str) -> u32 {
    hash_bytes(key.as_bytes()) as u32
}

/// The key of a piece of text: its letters and digits, lowercased. Returns the
/// number of characters in the key.
pub fn key_of(text: &str, out: &mut String) -> usize {
    out.clear();
    let mut chars = 0;
    for c in text.chars() {
        if is_han(c) || c.is_ascii_digit() || c.is_ascii_lowercase() {
            out.push(c);
            chars += 1;
        } else if is_word_char(c) {
            for lower in c.to_lowercase() {
                out.push(lower);
                chars += 1;
            }
        }
    }
    chars
}

/// Split normalized text into sentences. A `.` ends a sentence only before
/// whitespace or the end (so "3.5" and "U.S.A" stay whole).
pub fn sentences(text: &str) -> impl Iterator<Item = &str> {
    pieces(text, Unit::Sentence)
}

/// Split normalized text into sentences or clauses.
pub fn pieces(text: &str, unit: Unit) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len();
        let mut iter = rest.char_indices().peekable();
        while let Some((i, c)) = iter.next() {
            let next = iter.peek().map(|&(_, n)| n);
            let stop = ends_sentence(c)
                || (c == '.' && next.is_none_or(char::is_whitespace))
                || (unit == Unit::Clause && ends_clause(c));
            if stop {
                end = i + c.len_utf8();
                break;
            }
        }
        let (sentence, tail) = rest.split_at(end);
        rest = tail;
        let sentence = sentence.trim();
        if !sentence.is_empty() {
            return Some(sentence);
        }
    })
}

/// What a text's sentences contribute to its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Hash of the whole text's key (exact-duplicate signal).
    pub content: u64,
    /// Hashes of the `n` chosen unit keys (each at least `min_chars` long), sorted, unique.
    pub hashes: Vec<u32>,
    /// Characters in the whole key.
    pub key_chars: usize,
}

/// Compute the content hash and the hashes of the `n` longest sentences whose key
/// has at least `min_chars` characters. Ties in length go to the smaller hash, so
/// the choice does not depend on sentence order.
pub fn signature(text: &str, n: usize, min_chars: usize) -> Signature {
    signature_with(text, n, min_chars, Unit::Sentence, Selection::Longest)
}

/// [`signature`] with a choice of unit and selection.
///
/// One pass over the text: the key of every unit is appended to one buffer, so
/// the key of the whole text (what the content hash hashes) is that buffer and a
/// unit's key is its tail since the unit began. Equivalent to splitting with
/// [`pieces`] and taking [`key_of`] of each (see `one_pass_equals_piecewise`).
pub fn signature_with(
    text: &str,
    n: usize,
    min_chars: usize,
    unit: Unit,
    selection: Selection,
) -> Signature {
    let bytes = text.as_bytes();
    let clauses = unit == Unit::Clause;
    let mut key = Key::with_room(text.len());
    let mut picked: Vec<(usize, u32)> = Vec::new();
    let mut key_chars = 0;
    let mut unit = OpenUnit::default();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let ends;
        if b < 0x80 {
            // Most of any text but Chinese: written without a branch on
            // whether the byte goes into the key (taken in no order a
            // predictor learns: at every word's end).
            let k = LOWER_ALNUM[usize::from(b)];
            key.push_ascii(k);
            unit.chars += usize::from(k != 0);
            unit.nonblank |= !is_ascii_white_space(b);
            i += 1;
            if !ASCII_MAY_END[usize::from(b)] {
                continue;
            }
            ends = if b == b'.' {
                text[i..].chars().next().is_none_or(char::is_whitespace)
            } else {
                ends_unit(char::from(b), clauses)
            };
        } else {
            if let Some(&[b0, b1, _]) = bytes.get(i..i + 3) {
                if is_han3(b0, b1) {
                    // A run of them, copied at once: most of Chinese text.
                    let start = i;
                    while let Some(&[b0, b1, _]) = bytes.get(i..i + 3) {
                        if !is_han3(b0, b1) {
                            break;
                        }
                        i += 3;
                        unit.chars += 1;
                    }
                    key.push_run(&bytes[start..i]);
                    unit.nonblank = true;
                    continue;
                }
            }
            ends = key.push_other(text, &mut i, &mut unit, clauses);
        }
        if ends {
            key_chars += unit.close(key.as_bytes(), min_chars, &mut picked);
        }
    }
    key_chars += unit.close(key.as_bytes(), min_chars, &mut picked);
    match selection {
        Selection::Longest => picked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1))),
        Selection::Sampled => picked.sort_unstable_by_key(|p| p.1),
    }
    let mut hashes: Vec<u32> = Vec::with_capacity(n.min(picked.len()));
    // Repeated units count once.
    for (_, h) in picked {
        if hashes.len() == n {
            break;
        }
        if !hashes.contains(&h) {
            hashes.push(h);
        }
    }
    hashes.sort_unstable();
    Signature {
        content: hash_bytes(key.as_bytes()),
        key_chars,
        hashes,
    }
}

/// Whether `c` ends a unit of sentences (`clauses` false) or of clauses,
/// but a `.`, which ends a sentence only before whitespace or the end.
fn ends_unit(c: char, clauses: bool) -> bool {
    ends_sentence(c) || (clauses && ends_clause(c))
}

/// The ASCII bytes that may end a unit: those that end a sentence or a
/// clause, and `.`.
const ASCII_MAY_END: [bool; 128] = {
    let mut table = [false; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8 as char;
        table[b] = ends_sentence(c) || ends_clause(c) || c == '.';
        b += 1;
    }
    table
};

/// The key being built, written in place: `buf[..len]`. `buf` has room for
/// a byte per byte of text yet to read (an ASCII byte or a Han character
/// never takes more in the key than in the text), so an ASCII byte is
/// written, and counted only if it belongs to the key, with no test of room.
struct Key {
    buf: Vec<u8>,
    len: usize,
}

impl Key {
    fn with_room(len: usize) -> Self {
        Key {
            buf: vec![0; len],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Append `k` unless it is 0.
    #[inline(always)]
    fn push_ascii(&mut self, k: u8) {
        self.buf[self.len] = k;
        self.len += usize::from(k != 0);
    }

    /// Append bytes of the text as they are (the room for them is there).
    #[inline(always)]
    fn push_run(&mut self, run: &[u8]) {
        self.buf[self.len..self.len + run.len()].copy_from_slice(run);
        self.len += run.len();
    }

    /// Read the character of `text` at `*i`, any but ASCII and the Han
    /// characters of [`is_han3`], and move `*i` past it: append what it
    /// puts in the key (lowercasing may lengthen it: room is made for the
    /// rest of the text after it), count it in `unit`, and say whether it
    /// ends the unit.
    fn push_other(
        &mut self,
        text: &str,
        i: &mut usize,
        unit: &mut OpenUnit,
        clauses: bool,
    ) -> bool {
        let c = text[*i..].chars().next().unwrap_or_default();
        *i += c.len_utf8();
        let rest = text.len() - *i;
        let mut buf = [0; 4];
        if is_han(c) {
            self.extend(c.encode_utf8(&mut buf).as_bytes(), rest);
            unit.chars += 1;
            unit.nonblank = true;
            return false;
        }
        if is_word_char(c) {
            for lower in c.to_lowercase() {
                self.extend(lower.encode_utf8(&mut buf).as_bytes(), rest);
                unit.chars += 1;
            }
        }
        unit.nonblank |= !c.is_whitespace();
        ends_unit(c, clauses)
    }

    /// Append `s`, keeping room for `rest` bytes more.
    fn extend(&mut self, s: &[u8], rest: usize) {
        let end = self.len + s.len();
        if self.buf.len() < end + rest {
            self.buf.resize(end + rest, 0);
        }
        self.buf[self.len..end].copy_from_slice(s);
        self.len = end;
    }
}

/// The unit being read: where its key starts in the key buffer, the key's
/// length in characters, and whether it has a non-whitespace character
/// (`pieces` drops blank units).
#[derive(Default)]
struct OpenUnit {
    start: usize,
    chars: usize,
    nonblank: bool,
}

impl OpenUnit {
    /// End the unit at the end of `key`: pick its hash if its key is long
    /// enough (and it is not blank, which only matters when `min_chars` is 0),
    /// start the next one there, and return the unit's length in characters.
    #[inline]
    fn close(&mut self, key: &[u8], min_chars: usize, picked: &mut Vec<(usize, u32)>) -> usize {
        let chars = self.chars;
        if self.nonblank && chars >= min_chars {
            picked.push((chars, hash_bytes(&key[self.start..]) as u32));
        }
        *self = OpenUnit {
            start: key.len(),
            ..OpenUnit::default()
        };
        chars
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_chinese_and_english_terminators() {
        let s: Vec<_> = sentences("第一句。第二句!Third one. Pi is 3.14 ok?\nlast").collect();
        assert_eq!(
            s,
            vec![
                "第一句。",
                "第二句!",
                "Third one.",
                "Pi is 3.14 ok?",
                "last"
            ]
        );
    }

    #[test]
    fn key_ignores_punctuation_space_and_case() {
        let mut a = String::new();
        let mut b = String::new();
        key_of("Hello, World! 你好。", &mut a);
        key_of("hello world 你好", &mut b);
        assert_eq!(a, b);
        assert_eq!(a, "helloworld你好");
    }

    #[test]
    fn picks_the_longest_sentences_in_any_order() {
        let text = "short one. a much much longer sentence here. medium sized one. the longest sentence of them all here.";
        let a = signature(text, 2, 5);
        let swapped = "the longest sentence of them all here. medium sized one. short one. a much much longer sentence here.";
        let b = signature(swapped, 2, 5);
        assert_eq!(a.hashes, b.hashes);
        assert_eq!(a.hashes.len(), 2);
        assert_ne!(a.content, b.content, "content hash is order-sensitive");
        let mut k = String::new();
        key_of("the longest sentence of them all here.", &mut k);
        assert!(a.hashes.contains(&unit_hash(&k)));
    }

    #[test]
    fn short_sentences_and_repeats_are_skipped() {
        let sig = signature(
            "tiny. tiny. a sentence long enough. a sentence long enough.",
            4,
            10,
        );
        assert_eq!(sig.hashes.len(), 1);
    }

    #[test]
    fn content_hash_is_the_hash_of_the_whole_key() {
        let mut k = String::new();
        key_of("Hello, World. 你好。", &mut k);
        assert_eq!(
            signature("Hello, World. 你好。", 3, 1).content,
            hash_bytes(k.as_bytes())
        );
    }

    /// The spec's recipe, literally: split with `pieces`, trim, drop empty, key each.
    fn piecewise(
        text: &str,
        n: usize,
        min_chars: usize,
        unit: Unit,
        selection: Selection,
    ) -> Signature {
        use std::hash::Hasher;
        let mut whole = crate::simhash::content_hasher();
        let mut key_chars = 0;
        let mut key = String::new();
        let mut picked: Vec<(usize, u32)> = Vec::new();
        for sentence in pieces(text, unit) {
            let chars = key_of(sentence, &mut key);
            whole.write(key.as_bytes());
            key_chars += chars;
            if chars >= min_chars {
                picked.push((chars, unit_hash(&key)));
            }
        }
        match selection {
            Selection::Longest => picked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1))),
            Selection::Sampled => picked.sort_unstable_by_key(|p| p.1),
        }
        let mut hashes: Vec<u32> = picked.into_iter().map(|(_, h)| h).collect();
        let mut seen = Vec::with_capacity(n);
        hashes.retain(|h| {
            if seen.len() < n && !seen.contains(h) {
                seen.push(*h);
                true
            } else {
                false
            }
        });
        hashes.sort_unstable();
        Signature {
            content: whole.finish(),
            key_chars,
            hashes,
        }
    }

    #[test]
    fn one_pass_equals_piecewise() {
        let texts = [
            "",
            " ",
            "\n\n",
            "。。。",
            "第一句。第二句!Third one. Pi is 3.14 ok?\nlast",
            "国家统计局今天（4月16日）发布数据,一季度国内生产总值同比增长5.3%,比上年四季度环比增长1.6%。“工业”《报告》「引号」、顿号:冒号(括号)",
            "ÀÉÎ İstanbul ǅ ß Σ ΣΑΣ straße. U.S.A. e.g. end.",
            "䷀䷁ Yijing 㐀㐁 Ext-A 𠀀 Ext-B 〇 … ｡ x",
            "a.\u{A0}b.\u{3000}c.\u{2028}d",
            "Mixed 中文English混合123数字. Another,clause;here!and?there…",
            "   leading and trailing   ",
            "tiny. tiny. a sentence long enough. a sentence long enough.",
        ];
        for text in texts {
            for unit in [Unit::Sentence, Unit::Clause] {
                for selection in [Selection::Longest, Selection::Sampled] {
                    for (n, min) in [(12, 10), (3, 1), (2, 0), (0, 0), (100, 3)] {
                        assert_eq!(
                            signature_with(text, n, min, unit, selection),
                            piecewise(text, n, min, unit, selection),
                            "{text:?} {unit:?} {selection:?} {n} {min}"
                        );
                    }
                }
            }
        }
    }

    /// The one pass against the split on random text, of characters whose
    /// key is longer than they are (`İ` and `Ⱥ`: three bytes for two), Han
    /// and not (`䷀`), every character that ends a unit, and whitespace a `.`
    /// may come before.
    #[test]
    fn one_pass_equals_piecewise_on_random_text() {
        let alphabet: Vec<char> =
            "aZ9 İȺẞ\u{212A}\u{2126}䷀𠀀中文.,:()\"!?;\n\u{3000}\u{A0}。…｡、“”「」《》é_-"
                .chars()
                .collect();
        let texts = crate::random_text::random_texts(11, 20_000, 0..24, |rng| rng.pick(&alphabet));
        for text in texts {
            for unit in [Unit::Sentence, Unit::Clause] {
                assert_eq!(
                    signature_with(&text, 12, 2, unit, Selection::Sampled),
                    piecewise(&text, 12, 2, unit, Selection::Sampled),
                    "{text:?} {unit:?}"
                );
            }
        }
    }

    #[test]
    fn content_hash_ignores_markup_level_changes() {
        assert_eq!(
            signature("Hello, world.", 3, 1).content,
            signature("hello world", 3, 1).content
        );
    }
}
