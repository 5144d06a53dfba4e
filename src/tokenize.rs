//! Tokenization: normalized text → content words.
//!
//! Chinese (Han) runs are segmented as jieba segments them (without the HMM: by
//! the compile-time dictionary of [`crate::dictionary`]; with it: by jieba-rs);
//! everything else by Unicode word boundaries (UAX #29), lowercased. Mixed text works because the two are applied
//! to alternating runs. Stop words (shipped in `src/stopwords/`) and words too short
//! to carry a topic are dropped. The rules are part of the fingerprint
//! (`docs/fingerprint.md`).

use std::sync::{Arc, OnceLock};

use jieba_rs::Jieba;
use rustc_hash::FxHashSet;
use unicode_segmentation::UnicodeSegmentation;

use crate::dictionary::Dictionary;

const ZH_STOP_WORDS: &str = include_str!("stopwords/zh.txt");
const EN_STOP_WORDS: &str = include_str!("stopwords/en.txt");

/// `char::is_whitespace` for an ASCII byte.
#[inline]
pub(crate) fn is_ascii_white_space(b: u8) -> bool {
    matches!(b, b'\t'..=b'\r' | b' ')
}

/// Is `c` a Han ideograph (the script jieba segments)?
pub fn is_han(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF      // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F  // Extensions B–F and supplement
        | 0x3007             // 〇
    )
}

/// Whether a three-byte character with first bytes `b0 b1` is a Han
/// character of U+4000–U+9FFF (lead byte E4–E9; E4 B7 is U+4DC0–U+4DFF, not
/// Han): most of Chinese text, read in place without decoding.
#[inline(always)]
pub(crate) fn is_han3(b0: u8, b1: u8) -> bool {
    matches!(b0, 0xE5..=0xE9) || (b0 == 0xE4 && b1 != 0xB7)
}

/// A byte as a word or a key reads it in place: an ASCII letter or digit,
/// lowercased; 0 for any other (an ASCII byte in no word or key, or a byte of
/// a character beyond ASCII, read whole).
pub(crate) const LOWER_ALNUM: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 128 {
        if (b as u8).is_ascii_alphanumeric() {
            table[b] = (b as u8).to_ascii_lowercase();
        }
        b += 1;
    }
    table
};

/// Is `c` a letter or digit (Unicode), with fast answers for ASCII, Han and the
/// common CJK punctuation that make up most of Chinese text (the general test is
/// a table search).
#[inline]
pub fn is_word_char(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphanumeric()
    } else if is_han(c) {
        true
    } else if matches!(c, '\u{3001}'..='\u{3002}' | '\u{3008}'..='\u{3011}' | '\u{2010}'..='\u{2027}')
    {
        false
    } else {
        c.is_alphanumeric()
    }
}

/// The shared jieba-rs segmenter (for the HMM), on jieba's dictionary as the
/// compile-time tables read it (`src/jieba/dict.txt.zst`). Building one
/// decompresses and parses the dictionary, ~150 ms and ~33 MB, so the process
/// builds it once, when first asked.
pub fn shared_jieba() -> Arc<Jieba> {
    static JIEBA: OnceLock<Arc<Jieba>> = OnceLock::new();
    JIEBA.get_or_init(|| Arc::new(jieba())).clone()
}

/// A jieba-rs segmenter on jieba's dictionary.
pub(crate) fn jieba() -> Jieba {
    Jieba::with_dict(&mut jieba_dictionary().as_slice()).expect("jieba's dictionary parses")
}

/// jieba's dictionary (`word freq [tag]` lines), decompressed from the copy
/// in the binary (`src/jieba/dict.txt.zst`, the file `build.rs` reads).
pub(crate) fn jieba_dictionary() -> Vec<u8> {
    static DICT: &[u8] = include_bytes!("jieba/dict.txt.zst");
    let mut text = Vec::new();
    let mut dict = ruzstd::decoding::StreamingDecoder::new(DICT)
        .expect("src/jieba/dict.txt.zst is a zstd frame");
    std::io::Read::read_to_end(&mut dict, &mut text).expect("src/jieba/dict.txt.zst decompresses");
    text
}

/// What cuts Han runs into words.
#[derive(Clone)]
enum Segmenter {
    /// jieba's cut without the HMM, on the compile-time dictionary.
    Dictionary(&'static Dictionary),
    /// jieba-rs with its HMM guessing words missing from the dictionary.
    JiebaHmm(Arc<Jieba>),
}

/// Splits normalized text into content words.
#[derive(Clone)]
pub struct Tokenizer {
    segmenter: Segmenter,
    stop_words: Arc<FxHashSet<&'static str>>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("stop_words", &self.stop_words.len())
            .field("hmm", &matches!(self.segmenter, Segmenter::JiebaHmm(_)))
            .finish()
    }
}

impl Tokenizer {
    /// A tokenizer with the shipped stop words. `hmm` lets jieba guess words
    /// missing from its dictionary (names, new terms).
    pub fn new(hmm: bool) -> Self {
        let segmenter = if hmm {
            Segmenter::JiebaHmm(shared_jieba())
        } else {
            Segmenter::Dictionary(Dictionary::builtin())
        };
        static STOP: OnceLock<Arc<FxHashSet<&'static str>>> = OnceLock::new();
        let stop_words = STOP
            .get_or_init(|| {
                Arc::new(
                    ZH_STOP_WORDS
                        .lines()
                        .chain(EN_STOP_WORDS.lines())
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .collect(),
                )
            })
            .clone();
        Self {
            segmenter,
            stop_words,
        }
    }

    /// Is `word` (already lowercased) a stop word?
    pub fn is_stop_word(&self, word: &str) -> bool {
        self.stop_words.contains(word)
    }

    /// The compile-time dictionary, if it is what cuts Han text.
    pub fn dictionary(&self) -> Option<&'static Dictionary> {
        match self.segmenter {
            Segmenter::Dictionary(dictionary) => Some(dictionary),
            Segmenter::JiebaHmm(_) => None,
        }
    }

    /// The stop words (lowercase).
    pub fn stop_words(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.stop_words.iter().copied()
    }

    /// Call `f` with each content word of `text`, in order. Words are borrowed from
    /// `text` when they need no lowercasing.
    pub fn for_each_word(&self, text: &str, mut f: impl FnMut(&str)) {
        self.for_each_candidate(text, |w| {
            if !self.is_stop_word(w) {
                f(w)
            }
        });
    }

    /// Call `f` with each token of `text` that is a content word unless it is a
    /// stop word (at least two characters, one of them a letter or digit), in
    /// order. Callers that look every word up in a table anyway can check stop
    /// words there; [`Tokenizer::for_each_word`] checks them here.
    pub fn for_each_candidate(&self, text: &str, mut f: impl FnMut(&str)) {
        self.for_each_candidate_id(text, |word, _| f(word));
    }

    /// [`Tokenizer::for_each_candidate`], with the index of each word the
    /// compile-time dictionary cut (for [`Dictionary::features`]).
    pub fn for_each_candidate_id(&self, text: &str, mut f: impl FnMut(&str, Option<u32>)) {
        let mut lower = String::new();
        for (is_han_run, run) in script_runs(text) {
            if is_han_run {
                match &self.segmenter {
                    // Words of two or more Han characters: candidates all.
                    Segmenter::Dictionary(dictionary) => {
                        dictionary.for_each_word_id(run, |word, id| f(word, Some(id)))
                    }
                    Segmenter::JiebaHmm(jieba) => {
                        for token in jieba.cut(run, true) {
                            if is_candidate(token.word) {
                                f(token.word, None);
                            }
                        }
                    }
                }
            } else if run.chars().any(is_word_char) {
                // (A word of `unicode_words` holds a letter or digit: the
                // segments it keeps are those holding one. Runs of punctuation
                // and spaces alone are common between Han runs, as a
                // paragraph's closing `。` and the line break after it, and
                // have none: the segmenter is skipped for them.)
                unicode_words(run, |word| {
                    let (word, upper) = match word {
                        Word::Ascii { word, upper } => (word, upper),
                        Word::Other(word) if word.is_ascii() => {
                            (word, word.bytes().any(|b| b.is_ascii_uppercase()))
                        }
                        Word::Other(word) => {
                            let word = if word.chars().any(changes_in_lowercase) {
                                lower.clear();
                                lower.extend(word.chars().flat_map(char::to_lowercase));
                                lower.as_str()
                            } else {
                                word
                            };
                            if is_candidate(word) {
                                f(word, None);
                            }
                            return;
                        }
                    };
                    // A character a byte, and a letter or digit among them (a
                    // word holds one): a candidate has two bytes. Only `A-Z`
                    // can be uppercase, and lowercase one for one.
                    if word.len() >= 2 && upper {
                        lower.clear();
                        lower.push_str(word);
                        lower.make_ascii_lowercase();
                        f(&lower, None);
                    } else if word.len() >= 2 {
                        f(word, None);
                    }
                });
            }
        }
    }

    /// The content words of `text`, owned (for tests and tools; the hot path uses
    /// [`Tokenizer::for_each_word`]).
    pub fn words(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_word(text, |w| out.push(w.to_owned()));
        out
    }

    /// A content word has at least two characters, at least one of them a letter
    /// or digit, and is not a stop word.
    #[cfg(test)]
    fn keep(&self, word: &str) -> bool {
        is_candidate(word) && !self.stop_words.contains(word)
    }
}

/// Call `f` with each of `text`'s words by Unicode word boundaries (UAX #29:
/// `unicode_words`, the segments with a letter or digit), in order: those of
/// the ASCII pieces as [`Word::Ascii`], the rest as [`Word::Other`].
///
/// Text is cut into pieces at ASCII whitespace; a piece of ASCII characters is
/// split by the ASCII subset of the rules ([`ascii_words`]), a run of other
/// pieces (with the whitespace before it, which a mark after it or a
/// non-ASCII space before it may join) by the general segmenter. UAX #29
/// always breaks between ASCII whitespace and an ASCII character after it, and
/// between an ASCII character and whitespace after it, and no rule looks across
/// such a break at anything but the whitespace, so the pieces cut alone as they
/// cut in place (see `fast_words_equal_unicode_words`).
fn unicode_words<'a>(text: &'a str, mut f: impl FnMut(Word<'a>)) {
    let bytes = text.as_bytes();
    // Where the pending non-ASCII pieces begin (at the whitespace before them).
    let mut slow: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let space = i;
        while i < bytes.len() && is_ascii_white_space(bytes[i]) {
            i += 1;
        }
        let start = i;
        let mut ascii = true;
        while i < bytes.len() && !is_ascii_white_space(bytes[i]) {
            ascii &= bytes[i] < 0x80;
            i += 1;
        }
        if ascii {
            if let Some(from) = slow.take() {
                text[from..space]
                    .unicode_words()
                    .map(Word::Other)
                    .for_each(&mut f);
            }
            ascii_words(&text[start..i], &mut f);
        } else {
            slow.get_or_insert(space);
        }
    }
    if let Some(from) = slow {
        text[from..]
            .unicode_words()
            .map(Word::Other)
            .for_each(&mut f);
    }
}

/// A word of [`unicode_words`].
#[derive(Debug, Clone, Copy)]
enum Word<'a> {
    /// Split by [`ascii_words`], which tells whether it has an uppercase
    /// letter.
    Ascii { word: &'a str, upper: bool },
    /// Split by the general segmenter (it may be ASCII too).
    Other(&'a str),
}

/// UAX #29 words of ASCII text without whitespace: letters, digits and `_`
/// never break apart (WB5, WB8–WB10, WB13a/b); `:`, `.` and `'` join two
/// letters (WB6/7), `,`, `;`, `.` and `'` two digits (WB11/12); every other
/// character stands alone and is no word. A segment of `_` only is no word.
fn ascii_words<'a>(text: &'a str, f: &mut impl FnMut(Word<'a>)) {
    let b = text.as_bytes();
    let n = b.len();
    let class = |i: usize| ASCII_CLASS[usize::from(b[i])];
    let mut i = 0;
    while i < n {
        let mut seen = class(i);
        if seen & WORDISH == 0 {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < n {
            let c = class(i);
            if c & WORDISH != 0 {
                seen |= c;
                i += 1;
                continue;
            }
            let Some(next) = b.get(i + 1).map(|&next| ASCII_CLASS[usize::from(next)]) else {
                break;
            };
            let both = class(i - 1) & next;
            if (both & LETTER != 0 && c & MID_LETTER != 0)
                || (both & DIGIT != 0 && c & MID_NUMBER != 0)
            {
                seen |= next;
                i += 2;
            } else {
                break;
            }
        }
        if seen & ALPHANUMERIC != 0 {
            f(Word::Ascii {
                word: &text[start..i],
                upper: seen & UPPER != 0,
            });
        }
    }
}

// What [`ascii_words`] asks of an ASCII byte, a bit each ([`ASCII_CLASS`]).
/// A letter, digit or `_`: they never break apart.
const WORDISH: u8 = 1;
/// A letter or digit.
const ALPHANUMERIC: u8 = 2;
/// An uppercase letter.
const UPPER: u8 = 4;
/// A letter.
const LETTER: u8 = 8;
/// A digit.
const DIGIT: u8 = 16;
/// A character that joins two letters (`:.'`).
const MID_LETTER: u8 = 32;
/// A character that joins two digits (`,;.'`).
const MID_NUMBER: u8 = 64;

/// The class of each ASCII byte (and 0 for the others, never read).
const ASCII_CLASS: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        let mut class = 0;
        if c.is_ascii_alphanumeric() || c == b'_' {
            class |= WORDISH;
        }
        if c.is_ascii_alphanumeric() {
            class |= ALPHANUMERIC;
        }
        if c.is_ascii_uppercase() {
            class |= UPPER;
        }
        if c.is_ascii_alphabetic() {
            class |= LETTER;
        }
        if c.is_ascii_digit() {
            class |= DIGIT;
        }
        if matches!(c, b':' | b'.' | b'\'') {
            class |= MID_LETTER;
        }
        if matches!(c, b',' | b';' | b'.' | b'\'') {
            class |= MID_NUMBER;
        }
        table[b] = class;
        b += 1;
    }
    table
};

/// Whether `c`'s lowercase mapping is other than `c`: an uppercase letter,
/// or a titlecase one (`ǅ`, the Greek `ᾈ`), which is not uppercase.
fn changes_in_lowercase(c: char) -> bool {
    let mut lower = c.to_lowercase();
    lower.next() != Some(c) || lower.next().is_some()
}

/// At least two characters, at least one of them a letter or digit (Han included).
#[inline]
fn is_candidate(word: &str) -> bool {
    match word.as_bytes() {
        [] | [_] => false,
        // A character U+4000–U+9FFF (lead byte E4–E9, three bytes) and more:
        // two characters, the first nearly always Han.
        [0xE4..=0xE9, _, _, _, ..] => {
            is_han(word.chars().next().unwrap_or_default()) || word.chars().any(is_word_char)
        }
        _ => {
            let mut chars = word.chars();
            chars.next().is_some() && chars.next().is_some() && word.chars().any(is_word_char)
        }
    }
}

/// Punctuation that may sit inside a run handed to jieba: jieba splits there
/// itself and emits each such character as a one-character token, which is never
/// a content word. Letters, digits, whitespace and the characters jieba glues to
/// words (`+#&._%-`) end a run instead.
fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_punctuation() && !matches!(c, '+' | '#' | '&' | '.' | '_' | '%' | '-')
    } else if matches!(c, '\u{3001}'..='\u{3002}' | '\u{3008}'..='\u{3011}' | '\u{2010}'..='\u{2027}')
    {
        // Common CJK punctuation, quotes and dashes: neither alphanumeric nor
        // whitespace (the general tests are table searches).
        true
    } else {
        !c.is_alphanumeric() && !c.is_whitespace()
    }
}

/// Split `text` into runs for jieba (starting with a Han character, with the
/// punctuation between Han characters, `true`) and runs for word boundaries
/// (everything else, `false`).
/// Fewer, longer jieba runs save its per-call cost; the words are the same as
/// cutting each Han run alone (see `merged_runs_cut_like_separate_runs`).
fn script_runs(text: &str) -> impl Iterator<Item = (bool, &str)> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        // A jieba run starts at a Han character and goes on over Han and
        // separators; any other run goes on until the next Han character (so
        // punctuation inside Latin text, as in "fox's", stays with its word).
        let jieba_run = is_han(first);
        if !jieba_run {
            let (run, tail) = rest.split_at(next_han(rest));
            rest = tail;
            return Some((false, run));
        }
        let bytes = rest.as_bytes();
        let mut i = 0;
        // Where the last Han character read ends: separators after it go
        // with what follows them, which UAX #29 may glue them to (`‿ab`,
        // `٫5` are words).
        let mut after_han = 0;
        let end = loop {
            let Some(&b) = bytes.get(i) else {
                break bytes.len();
            };
            let han3 = bytes.get(i + 1).is_some_and(|&b1| is_han3(b, b1));
            let (c, han, len) = if han3 {
                // Han ([`is_han3`]): no need to decode.
                ('\u{4E00}', true, 3)
            } else if b < 0x80 {
                (char::from(b), false, 1)
            } else {
                let c = rest[i..].chars().next().unwrap_or_default();
                (c, is_han(c), c.len_utf8())
            };
            if !(han || is_separator(c)) {
                break after_han;
            }
            i += len;
            if han {
                after_han = i;
            }
        };
        let (run, tail) = rest.split_at(end);
        rest = tail;
        Some((true, run))
    })
}

/// The byte offset of the first Han character of `text`, or its length. Every
/// Han character (U+3007 on) starts with a byte from E3 on, which no other
/// byte of UTF-8 is: the bytes below are passed over undecoded.
fn next_han(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        // Sixteen bytes at a time (one vector compare) while none is such.
        for block in bytes[i..].chunks_exact(16) {
            if block.iter().fold(false, |any, &b| any | (b >= 0xE3)) {
                break;
            }
            i += 16;
        }
        match bytes[i..].iter().position(|&b| b >= 0xE3) {
            Some(skip) => i += skip,
            None => return bytes.len(),
        }
        let c = text[i..].chars().next().unwrap_or_default();
        if is_han(c) {
            return i;
        }
        i += c.len_utf8();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_text::{random_texts, COMMON_HAN};

    #[test]
    fn chinese_is_segmented_and_stop_words_dropped() {
        let t = Tokenizer::new(false);
        let words = t.words("我们今天在北京参观了故宫博物院");
        assert!(words.contains(&"北京".to_string()), "{words:?}");
        assert!(
            !words.iter().any(|w| w == "我们" || w == "今天"),
            "{words:?}"
        );
    }

    #[test]
    fn english_is_lowercased_and_filtered() {
        let t = Tokenizer::new(false);
        assert_eq!(
            t.words("The Quick brown fox's JUMP, a b"),
            vec!["quick", "brown", "fox's", "jump"]
        );
    }

    #[test]
    fn mixed_scripts() {
        let t = Tokenizer::new(false);
        let words = t.words("苹果公司发布iPhone 16手机");
        assert!(words.contains(&"iphone".to_string()), "{words:?}");
        assert!(words.contains(&"16".to_string()), "{words:?}");
        assert!(words.contains(&"手机".to_string()), "{words:?}");
    }

    #[test]
    fn punctuation_only_has_no_words() {
        let t = Tokenizer::new(false);
        assert!(t.words("!!! ... ，。").is_empty());
    }

    #[test]
    fn han3_is_han_of_three_bytes_to_u9fff() {
        for c in '\u{800}'..='\u{FFFF}' {
            let mut buf = [0; 4];
            let b = c.encode_utf8(&mut buf).as_bytes();
            assert_eq!(
                is_han3(b[0], b[1]),
                is_han(c) && ('\u{4000}'..='\u{9FFF}').contains(&c),
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn word_char_fast_paths_agree_with_unicode() {
        for c in ('\u{0}'..='\u{FFFF}').chain('\u{20000}'..='\u{2FFFF}') {
            assert_eq!(
                is_word_char(c),
                is_han(c) || c.is_alphanumeric(),
                "{c:?} U+{:04X}",
                c as u32
            );
        }
    }

    /// A run is given to UAX #29 only if it holds a letter or digit
    /// (`is_word_char`): `unicode_words` keeps the UAX #29 segments holding
    /// a character alphanumeric by the segmenter's own tables, so they must
    /// agree with the standard library's on every character.
    #[test]
    fn runs_without_word_chars_have_no_words() {
        // (A Han character starts a run for jieba instead.)
        for c in ('\u{0}'..='\u{10FFFF}').filter(|c| !is_han(*c)) {
            let s = c.to_string();
            assert_eq!(
                s.unicode_words().next().is_some(),
                is_word_char(c),
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn separator_fast_path_agrees_with_unicode() {
        for c in '\u{80}'..='\u{FFFF}' {
            assert_eq!(
                is_separator(c),
                !c.is_alphanumeric() && !c.is_whitespace(),
                "U+{:04X}",
                c as u32
            );
        }
    }

    #[test]
    fn candidate_fast_path_agrees() {
        for w in [
            "", "a", "ab", "中", "中文", "䷀䷁", "䷀a", "中,", "，，", "a,", "𠀀𠀁", "1.5", "--",
        ] {
            let slow = w.chars().count() >= 2 && w.chars().any(is_word_char);
            assert_eq!(is_candidate(w), slow, "{w:?}");
        }
    }

    /// The piecewise, ASCII-fast word split against `unicode_words` on random
    /// text of ASCII letters, digits, punctuation and whitespace mixed with
    /// marks, quotes, spaces and letters beyond ASCII.
    #[test]
    fn fast_words_equal_unicode_words() {
        let alphabet: Vec<char> = "aZk1_9.,;:'\"-!? \t\n\r\u{B}\u{C}aaa111 \u{301}\u{93E}\u{200D}\u{200B}\u{A0}\u{2019}\u{2018}£é€ß\u{3000}\u{1F600}\u{1F1FA}"
            .chars()
            .collect();
        let mut state = 0xD1B5_4A32_D192_ED03u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut fast = Vec::new();
            unicode_words(&text, |w| {
                fast.push(match w {
                    Word::Ascii { word, upper } => {
                        assert_eq!(
                            upper,
                            word.bytes().any(|b| b.is_ascii_uppercase()),
                            "{word:?}"
                        );
                        word
                    }
                    Word::Other(word) => word,
                })
            });
            let slow: Vec<&str> = text.unicode_words().collect();
            assert_eq!(fast, slow, "{text:?}");
        }
    }

    #[test]
    fn runs_alternate() {
        let runs: Vec<_> = script_runs("ab中文,“引号”cd 5.3%新闻").collect();
        assert_eq!(
            runs,
            vec![
                (false, "ab"),
                (true, "中文,“引号"),
                (false, "”cd 5.3%"),
                (true, "新闻")
            ]
        );
    }

    /// Every content word as jieba-rs's own `cut` (without HMM) finds it on the
    /// same runs: the compile-time dictionary cuts exactly like it.
    #[test]
    fn dictionary_cuts_like_jieba_rs() {
        let t = Tokenizer::new(false);
        let jieba = shared_jieba();
        let jieba_words = |text: &str| {
            let mut out = Vec::new();
            for (is_han_run, run) in script_runs(text) {
                if is_han_run {
                    out.extend(
                        jieba
                            .cut(run, false)
                            .into_iter()
                            .map(|tok| tok.word)
                            .filter(|w| t.keep(w))
                            .map(str::to_owned),
                    );
                } else {
                    out.extend(t.words(run));
                }
            }
            out
        };
        let alphabet: Vec<char> = COMMON_HAN
            .chars()
            .chain("，。“”、（）《》ab1 .-〇𠀀㐀丽".chars())
            .collect();
        for text in random_texts(0x9E37_79B9_7F4A_7C15, 300, 1..401, |rng| {
            rng.pick(&alphabet)
        }) {
            assert_eq!(t.words(&text), jieba_words(&text), "{text}");
        }
    }

    #[test]
    fn merged_runs_cut_like_separate_runs() {
        let t = Tokenizer::new(false);
        let text = "国家统计局今天发布数据,一季度国内生产总值同比增长。“工业生产”较快增长、服务业持续恢复:市场销售(稳定)增长《报告》指出!";
        let separately: Vec<String> = text
            .split(|c: char| !is_han(c))
            .flat_map(|run| {
                shared_jieba()
                    .cut(run, false)
                    .into_iter()
                    .map(|tok| tok.word.to_owned())
                    .collect::<Vec<_>>()
            })
            .filter(|w| t.keep(w))
            .collect();
        assert_eq!(t.words(text), separately);
    }

    /// The spec's words, literally: maximal Han and non-Han runs; Han runs
    /// cut by jieba; the rest by `unicode_words`, each lowercased a
    /// character at a time; content words kept.
    fn spec_words(t: &Tokenizer, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(first) = rest.chars().next() {
            let han = is_han(first);
            let end = rest
                .char_indices()
                .find(|&(_, c)| is_han(c) != han)
                .map_or(rest.len(), |(i, _)| i);
            let (run, tail) = rest.split_at(end);
            rest = tail;
            if han {
                out.extend(
                    shared_jieba()
                        .cut(run, false)
                        .into_iter()
                        .map(|tok| tok.word.to_owned()),
                );
            } else {
                out.extend(
                    run.unicode_words()
                        .map(|w| w.chars().flat_map(char::to_lowercase).collect()),
                );
            }
        }
        out.retain(|w| t.keep(w));
        out
    }

    #[test]
    fn punctuation_after_han_goes_with_the_word_it_joins() {
        let t = Tokenizer::new(false);
        // UAX #29 glues each of these to a letter or digit after it.
        for glue in [
            '\u{203F}', '\u{2040}', '\u{2054}', '\u{30A0}', '\u{02C2}', '\u{055A}', '\u{0600}',
            '\u{066B}',
        ] {
            for text in [
                format!("中{glue}ab"),
                format!("北京{glue}5"),
                format!("新闻{glue}，{glue}word 中国{glue}"),
            ] {
                assert_eq!(t.words(&text), spec_words(&t, &text), "{text:?}");
            }
        }
        assert_eq!(t.words("中\u{203F}ab"), ["\u{203F}ab"]);
    }

    #[test]
    fn titlecase_letters_are_lowercased() {
        let t = Tokenizer::new(false);
        // The Greek titlecase letters and ǅ: not uppercase, yet lowercased.
        for c in [
            '\u{1F88}', '\u{1F9F}', '\u{1FAF}', '\u{1FBC}', '\u{1FCC}', '\u{1FFC}', '\u{01C5}',
        ] {
            let text = format!("{c}ρα");
            assert_eq!(t.words(&text), spec_words(&t, &text), "{text:?}");
            assert_eq!(t.words(&text), [format!("{}ρα", c.to_lowercase())]);
        }
    }
}
