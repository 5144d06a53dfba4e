//! The shingle sample: how much of one text is found in another.
//!
//! A copy is judged by how much of the *new* article was seen before: an
//! excerpt or an abridgment keeps a part of its source and adds little, so
//! nearly all of its text is in the source, whatever share of the source it
//! keeps; a full story that follows its own flash holds the flash and much
//! more, so most of its text is new. The measure is the share of an article's
//! **5-gram shingles** (five tokens in a row: a token is a Han character, or a
//! word of other letters and digits, lowercased) found in the other article.
//!
//! Each fingerprint carries a sample of its shingles, sized for that: the
//! shingles whose hash has its top [`RATE_BITS`] bits clear (one in two), as
//! 16-bit values (the hash's next 16 bits), sorted and distinct. A fresh
//! fingerprint holds every such value; an index stores the [`SAMPLE`]
//! smallest. A sample is complete up to its largest value — every sampled
//! shingle of its text with a value up to there is in it — so over the range
//! two samples both cover, the share of one text's values found in the
//! other's estimates the share of its shingles found in the other text
//! ([`shares`]). For a new article checked against a stored one the range is
//! the stored sample's: all of a stored flash, and of a stored long article
//! a part as large as the sample, which a short excerpt of it covers in
//! proportion to its length (a quarter of the article, a quarter of the
//! sample's values).
//!
//! Two distinct shingles share a value with probability 2^-16 within the
//! covered range, so a sample of a long text answers "found" for an
//! unrelated value about once in a few hundred: it can only make two texts
//! look a hair more alike.

use crate::tokenize::{is_han, is_han3, is_word_char, LOWER_ALNUM};

/// Tokens per shingle.
pub const SHINGLE: usize = 5;

/// A shingle is sampled when the top `RATE_BITS` bits of its hash are clear.
pub const RATE_BITS: u32 = 1;

/// The most values an index stores of a sample: the smallest.
pub const SAMPLE: usize = 48;

/// The most values a fresh fingerprint holds of a sample: the smallest. A
/// new article is weighed against stored ones, whose samples reach as far as
/// their [`SAMPLE`] values do; its own reaches four times as far, so that a
/// long article still covers most of what a short stored one holds.
pub const FRESH: usize = 4 * SAMPLE;

/// A Han character counts 1 towards an article's [`size`](Shingled::size), a
/// word of other letters and digits `WORD_SIZE`: 150 Chinese characters hold
/// about as much as 50 English words.
pub const WORD_SIZE: u32 = 3;

/// The multiplier that folds a shingle's five token values into one
/// (`t1·K⁴ + t2·K³ + t3·K² + t4·K + t5`, wrapping): the 64-bit golden ratio
/// shifted left 13 bits. Its fifth power is 0 in 64 bits, so folding each
/// token in as it comes (`F·K + t`) drops the one five tokens back by
/// itself: a scan keeps one number, no window. The oldest token counts by
/// its low 12 bits, the next by 25, and so on.
const FOLD: u64 = 0x9E37_79B9_7F4A_7C15 << 13;
const _: () = assert!(
    FOLD.wrapping_mul(FOLD)
        .wrapping_mul(FOLD)
        .wrapping_mul(FOLD)
        .wrapping_mul(FOLD)
        == 0
);

/// What a text's shingles contribute to its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shingled {
    /// The sample, sorted ascending, distinct: the [`FRESH`] smallest values.
    pub sample: Vec<u16>,
    /// The text's size: Han characters plus [`WORD_SIZE`] per other word,
    /// at most `u16::MAX`.
    pub size: u16,
}

/// FNV-1a (64-bit): a word's value is the hash of its lowercased UTF-8.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A word's value.
pub fn word_value(word: &[u8]) -> u64 {
    word.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// A shingle's hash is its fold times `MIX` (wrapping): the top bits of a
/// product with a large odd constant depend on every bit of the fold
/// (Fibonacci hashing), and only the top bits are used.
const MIX: u64 = 0xff51_afd7_ed55_8ccd;

/// The hash of a shingle whose fold is `folded`.
#[inline]
fn mix(folded: u64) -> u64 {
    folded.wrapping_mul(MIX)
}

/// A scan of normalized text's tokens (see the module documentation): a Han
/// character's value is its UTF-8 bytes read as a big-endian number, a
/// word's its [`word_value`]. Counts them, and samples the shingles they
/// complete.
struct Scan<'a> {
    /// Tokens, and of them Han characters (the others are words).
    tokens: usize,
    han: u32,
    /// The fold of the last [`SHINGLE`] tokens ([`FOLD`]).
    folded: u64,
    /// The FNV-1a hash of the word being read, lowercased, as far as it is
    /// read, and whether one is being read.
    word: u64,
    in_word: bool,
    /// Room for a value per token (each written in place, kept when sampled:
    /// half are, in no order a branch could predict); `kept` so far.
    sampled: &'a mut [u16],
    kept: usize,
}

impl Scan<'_> {
    /// Take one token; sample the shingle it completes.
    #[inline(always)]
    fn token(&mut self, value: u64) {
        self.folded = self.folded.wrapping_mul(FOLD).wrapping_add(value);
        self.tokens += 1;
        let h = mix(self.folded);
        self.sampled[self.kept] = (h >> (48 - RATE_BITS)) as u16;
        self.kept += usize::from((h >> (64 - RATE_BITS) == 0) & (self.tokens >= SHINGLE));
    }

    /// Take the run of three-byte Han characters ([`is_han3`]) that
    /// `bytes` starts with, each a token; how many bytes it took. The same
    /// as [`token`](Scan::token) per character, in a loop that keeps the
    /// scan's state in registers: most of Chinese text.
    #[inline(always)]
    fn han_run(&mut self, bytes: &[u8]) -> usize {
        let han = |c: &[u8]| match *c {
            [b0, b1, b2] if is_han3(b0, b1) => {
                Some(u64::from(b0) << 16 | u64::from(b1) << 8 | u64::from(b2))
            }
            _ => None,
        };
        let mut chars = bytes.chunks_exact(3).map_while(han);
        // The text's first tokens complete no shingle.
        let mut taken = 0;
        while self.tokens < SHINGLE {
            let Some(value) = chars.next() else {
                // The run ends here. (`chars` is not fused: asked again, it
                // would go on past the character that ended the run.)
                self.han += taken as u32;
                return 3 * taken;
            };
            self.token(value);
            taken += 1;
        }
        let (mut folded, mut kept) = (self.folded, self.kept);
        let sampled = &mut *self.sampled;
        let mut warm = 0;
        for value in chars {
            folded = folded.wrapping_mul(FOLD).wrapping_add(value);
            let h = mix(folded);
            sampled[kept] = (h >> (48 - RATE_BITS)) as u16;
            kept += usize::from(h >> (64 - RATE_BITS) == 0);
            warm += 1;
        }
        (self.folded, self.kept) = (folded, kept);
        self.tokens += warm;
        self.han += (taken + warm) as u32;
        3 * (taken + warm)
    }

    /// Take the ASCII characters `bytes` starts with: a letter or digit
    /// extends the word being read, any other character ends it. How many
    /// bytes it took.
    #[inline(always)]
    fn ascii_run(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        for &b in bytes {
            let lower = LOWER_ALNUM[usize::from(b)];
            if lower != 0 {
                self.word_byte(lower);
            } else if b < 0x80 {
                self.end_word();
            } else {
                break;
            }
            taken += 1;
        }
        taken
    }

    /// Read one more byte of a word (lowercased UTF-8).
    #[inline(always)]
    fn word_byte(&mut self, b: u8) {
        self.word = (self.word ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        self.in_word = true;
    }

    /// End the word being read, if any: it is a token.
    #[inline(always)]
    fn end_word(&mut self) {
        if self.in_word {
            self.token(self.word);
            self.word = FNV_OFFSET;
            self.in_word = false;
        }
    }
}

thread_local! {
    /// Per-thread room for the values a scan samples, and for sorting them,
    /// kept between articles.
    static ROOM: std::cell::RefCell<(Vec<u16>, Vec<u16>)> = std::cell::RefCell::default();
}

/// The `FRESH` smallest of `values`, sorted, once each (a value in `values`
/// `k` times counts `k` times: fewer when one repeats among them, and the
/// result is still complete up to its largest). `values` is scratch: its
/// order is not kept.
///
/// The values are uniform, so of a long text's about `2·FRESH` lie in the
/// lowest `2·FRESH / len` of their range: only the values below a bound
/// there are sorted, and all of them only when fewer than `FRESH` are. They
/// are sorted by a radix sort of two passes, by the low byte and then by
/// the high one, each stable: a few instructions per value, `n` however the
/// values lie, and no branch on how a value compares with the others.
/// (Worth, against an insertion of each value into a bucket per high byte,
/// whose branch on that is taken in no order a predictor can learn: a third
/// less time in this function, and 0.97 of the CPU of the whole `scan` of
/// the cctv corpus on an Intel Xeon, for 32 M instead of 24 M instructions
/// over the same 3,000 articles as [`scan_tokens`]. Gathering the values
/// below the bound before the passes, rather than filtering them in each:
/// 26 M instructions, and 0.7 of the perf samples in this function.)
fn smallest_distinct(values: &mut [u16], sorted: &mut Vec<u16>) -> Vec<u16> {
    let high = |v: u16| usize::from(v >> 8);
    let low = |v: u16| usize::from(v & 0xFF);
    // ends[b + 1]: how many values have high byte b; after the running sum,
    // where they end in the sorted values (and ends[b] where they start).
    let mut ends = [0u32; 257];
    for &v in values.iter() {
        ends[high(v) + 1] += 1;
    }
    running_sum(&mut ends);
    // The values of the lowest `buckets` high bytes are sorted: when there
    // are `FRESH` of them at least, the `FRESH` smallest are among them.
    let mut buckets = if values.len() > 2 * FRESH {
        (2 * FRESH * 256).div_ceil(values.len())
    } else {
        256
    };
    if (ends[buckets] as usize) < FRESH {
        buckets = 256;
    }
    let below = ends[buckets] as usize;
    // When some are left out, gather the rest to the front first, in a pass
    // with no branch on which are kept (a filter's branch is taken in no
    // order a predictor can learn).
    if buckets < 256 {
        let mut kept = 0;
        for j in 0..values.len() {
            let v = values[j];
            values[kept] = v;
            kept += usize::from(high(v) < buckets);
        }
    }
    let values = &mut values[..below];
    // By the low byte, into `sorted`.
    let mut starts = [0u32; 257];
    for &v in values.iter() {
        starts[low(v) + 1] += 1;
    }
    running_sum(&mut starts);
    sorted.clear();
    sorted.resize(below, 0);
    for &v in values.iter() {
        let at = &mut starts[low(v)];
        sorted[*at as usize] = v;
        *at += 1;
    }
    // Then by the high byte, back into `values`: sorted by both.
    let mut next = ends;
    for &v in sorted.iter() {
        let at = &mut next[high(v)];
        values[*at as usize] = v;
        *at += 1;
    }
    let mut out = values[..below.min(FRESH)].to_vec();
    out.dedup();
    out
}

/// Counts per bucket (`counts[b + 1]` for bucket b) → where each bucket
/// starts (`counts[b]`) and ends (`counts[b + 1]`).
fn running_sum(counts: &mut [u32; 257]) {
    for b in 0..256 {
        counts[b + 1] += counts[b];
    }
}

/// The shingle sample and size of normalized text (see the module
/// documentation).
pub fn shingle(text: &str) -> Shingled {
    ROOM.with_borrow_mut(|(sampled, sorted)| {
        // A token takes a byte of text at least.
        if sampled.len() < text.len() {
            sampled.resize(text.len(), 0);
        }
        let (han, words, kept) = scan_tokens(text, sampled);
        let size = han.saturating_add(words.saturating_mul(WORD_SIZE));
        Shingled {
            sample: smallest_distinct(&mut sampled[..kept], sorted),
            size: u16::try_from(size).unwrap_or(u16::MAX),
        }
    })
}

/// A Han character's value: its UTF-8 bytes read as a big-endian number.
fn han_value(c: char) -> u64 {
    c.encode_utf8(&mut [0; 4])
        .bytes()
        .fold(0, |v, b| v << 8 | u64::from(b))
}

/// Scan `text`'s tokens, writing the values of their shingles to `sampled`
/// (room for one per byte): the Han characters, the words, and how many
/// values were sampled, first in `sampled`. The scan's state is local, so
/// that it lives in registers; runs of ASCII characters and runs of Han
/// characters are read in loops of their own, most of any text (worth, by
/// `valgrind --tool=callgrind`, against one loop that classified every byte
/// and character: 54 M instead of 79 M instructions for the first 3,000
/// articles of a corpus of Chinese news; and an ASCII loop that takes the
/// spaces and punctuation between words too, against one that returned at
/// the end of each word: 29 M instead of 37 M for the first 1,000 of a
/// corpus of English news).
fn scan_tokens(text: &str, sampled: &mut [u16]) -> (u32, u32, usize) {
    let mut scan = Scan {
        tokens: 0,
        han: 0,
        folded: 0,
        word: FNV_OFFSET,
        in_word: false,
        sampled,
        kept: 0,
    };
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b < 0x80 {
            i += scan.ascii_run(&bytes[i..]);
            continue;
        }
        if let Some(&[b0, b1, _]) = bytes.get(i..i + 3) {
            if is_han3(b0, b1) {
                scan.end_word();
                i += scan.han_run(&bytes[i..]);
                continue;
            }
        }
        let c = text[i..].chars().next().unwrap_or_default();
        i += c.len_utf8();
        if is_han(c) {
            scan.end_word();
            scan.han += 1;
            scan.token(han_value(c));
        } else if is_word_char(c) {
            for lower in c.to_lowercase() {
                let mut buf = [0; 4];
                for &b in lower.encode_utf8(&mut buf).as_bytes() {
                    scan.word_byte(b);
                }
            }
        } else {
            scan.end_word();
        }
    }
    scan.end_word();
    let words = u32::try_from(scan.tokens - scan.han as usize).unwrap_or(u32::MAX);
    (scan.han, words, scan.kept)
}

/// How much two texts share, estimated from their samples.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Shares {
    /// The share of `b`'s shingles found in `a`.
    pub b_in_a: f64,
    /// The share of `a`'s shingles found in `b`.
    pub a_in_b: f64,
    /// Shared shingles / the shingles of either (Jaccard).
    pub jaccard: f64,
    /// `b`'s values the estimates rest on (in the range both cover).
    pub b_sample: usize,
    /// `a`'s values the estimates rest on.
    pub a_sample: usize,
}

impl Shares {
    /// The bounds of `b_in_a` `z` standard errors either side (Wilson's
    /// score interval): a share read off a few values is known loosely.
    pub fn b_in_a_bounds(&self, z: f64) -> (f64, f64) {
        wilson(self.b_in_a, self.b_sample, z)
    }
}

/// Wilson's score interval of a share `p` of `n` trials, `z` standard errors
/// either side.
fn wilson(p: f64, n: usize, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, z2) = (n as f64, z * z);
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    (centre - margin, centre + margin)
}

/// The largest value a sample is complete up to: its largest when it holds
/// [`SAMPLE`] or more (a stored one may have left larger ones out; a fresh
/// one has none larger), else every value.
fn covered(sample: &[u16]) -> u16 {
    match sample.last() {
        Some(&last) if sample.len() >= SAMPLE => last,
        _ => u16::MAX,
    }
}

/// The shares of two texts with samples `a` and `b` (each sorted, distinct),
/// over the range both samples cover.
pub fn shares(b: &[u16], a: &[u16]) -> Shares {
    let top = covered(a).min(covered(b));
    let b = &b[..b.partition_point(|&v| v <= top)];
    let a = &a[..a.partition_point(|&v| v <= top)];
    if a.is_empty() || b.is_empty() {
        return Shares {
            b_sample: b.len(),
            a_sample: a.len(),
            ..Shares::default()
        };
    }
    let shared = shared_count(a, b) as f64;
    Shares {
        b_in_a: shared / b.len() as f64,
        a_in_b: shared / a.len() as f64,
        jaccard: shared / ((a.len() + b.len()) as f64 - shared),
        b_sample: b.len(),
        a_sample: a.len(),
    }
}

/// Number of values present in both sorted slices.
pub fn shared_count<T: Ord>(a: &[T], b: &[T]) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                n += 1;
                i += 1;
                j += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_is_found_whole_in_its_source() {
        let source: String = (0..400)
            .map(|i| char::from_u32(0x4E00 + (i * 37 % 2000)).unwrap())
            .collect();
        let excerpt: String = source.chars().skip(120).take(150).collect();
        let (s, e) = (shingle(&source), shingle(&excerpt));
        assert_eq!((s.size, e.size), (400, 150));
        let stored = &s.sample[..SAMPLE];
        let sh = shares(&e.sample, stored);
        assert!(sh.b_sample >= 4, "{sh:?}");
        assert_eq!(sh.b_in_a, 1.0);
        assert!(sh.a_in_b < 0.6, "{sh:?}");
    }

    #[test]
    fn smallest_distinct_keeps_the_smallest_however_the_values_lie() {
        let mut rng = crate::random_text::Rng::new(7);
        let mut uniform = |n: usize, below: usize| -> Vec<u16> {
            (0..n).map(|_| rng.below(below) as u16).collect()
        };
        let long = uniform(5000, 1 << 16);
        // Long, but all in the top buckets: the bound for a long text holds
        // none of them, so all are sorted.
        let high: Vec<u16> = uniform(1000, 1 << 8).iter().map(|v| v | 0xFF00).collect();
        // Few values, each many times.
        let repeated: Vec<u16> = uniform(2000, 40).iter().map(|v| v * 1000).collect();
        let mut sorted = Vec::new();
        for values in [
            vec![],
            uniform(50, 1 << 16),
            uniform(300, 1 << 16),
            long,
            high,
            repeated,
        ] {
            assert_eq!(
                smallest_distinct(&mut values.clone(), &mut sorted),
                smallest_literally(values.clone()),
                "{} values",
                values.len()
            );
        }
    }

    /// The `FRESH` smallest of `values`, sorted, once each: the recipe's last
    /// step, literally.
    fn smallest_literally(mut values: Vec<u16>) -> Vec<u16> {
        values.sort_unstable();
        values.truncate(FRESH);
        values.dedup();
        values
    }

    /// The spec's recipe, literally: tokens, every window of five folded
    /// and mixed, sampled, sorted and distinct; the size, Han characters
    /// and words counted.
    fn literal(text: &str) -> Shingled {
        let mut tokens: Vec<u64> = Vec::new();
        let mut han = 0u32;
        let mut word = String::new();
        let end = |word: &mut String, tokens: &mut Vec<u64>| {
            if !word.is_empty() {
                tokens.push(word_value(word.as_bytes()));
                word.clear();
            }
        };
        for c in text.chars() {
            if is_han(c) {
                end(&mut word, &mut tokens);
                tokens.push(han_value(c));
                han += 1;
            } else if is_word_char(c) {
                word.extend(c.to_lowercase());
            } else {
                end(&mut word, &mut tokens);
            }
        }
        end(&mut word, &mut tokens);
        let sample: Vec<u16> = tokens
            .windows(SHINGLE)
            .map(|w| {
                let k = |p: u32| FOLD.wrapping_pow(p);
                mix(w
                    .iter()
                    .zip([4, 3, 2, 1, 0])
                    .fold(0u64, |h, (&t, p)| h.wrapping_add(t.wrapping_mul(k(p)))))
            })
            .filter(|h| h >> (64 - RATE_BITS) == 0)
            .map(|h| (h >> (48 - RATE_BITS)) as u16)
            .collect();
        let words = tokens.len() as u32 - han;
        Shingled {
            sample: smallest_literally(sample),
            size: u16::try_from(han + words * WORD_SIZE).unwrap_or(u16::MAX),
        }
    }

    #[test]
    fn the_scan_samples_what_the_recipe_says() {
        for text in [
            "",
            "一二三四",
            "国家统计局今天发布数据，一季度国内生产总值同比增长5.3%。䷀䷁ Yijing 㐀㐁 𠀀 〇",
            "The Quick brown fox jumps over the lazy dog; ÀÉÎ İstanbul straße ΣΑΣ 3.14 U.S.A.",
            "Mixed 中文English混合123数字 and more words here to make shingles",
            // A short Han run among the first tokens, ended by three bytes.
            "中国abc北京天安门广场",
            "中国【北京天安门广场",
        ] {
            assert_eq!(shingle(text), literal(text), "{text:?}");
        }
        // Long enough that the smallest values are cut from the rest first.
        let han: Vec<char> = crate::random_text::COMMON_HAN.chars().collect();
        let mut rng = crate::random_text::Rng::new(3);
        for len in [400, 1000, 5000] {
            let text: String = (0..len).map(|_| rng.pick(&han)).collect();
            let got = shingle(&text);
            assert_eq!(got, literal(&text), "{len}");
            let got = got.sample;
            assert!(len < 1000 || got.len() > FRESH - 12, "{len}: {}", got.len());
        }
        // A text that repeats itself: the smallest values come many times
        // each, and the sample is the distinct ones among the `FRESH`
        // smallest, far fewer than `FRESH`.
        let text: String = (0..60)
            .map(|_| rng.pick(&han))
            .collect::<String>()
            .repeat(20);
        let got = shingle(&text);
        assert_eq!(got, literal(&text));
        assert!(got.sample.len() < 20, "{}", got.sample.len());
    }

    /// Han text with every kind of character between its runs: ASCII
    /// punctuation, letters and digits, the punctuation of Chinese text,
    /// other scripts' word characters, Han characters of other lengths, and
    /// characters no word holds.
    #[test]
    fn han_runs_end_where_the_recipe_says() {
        let han: Vec<char> = crate::random_text::COMMON_HAN.chars().collect();
        let between: Vec<char> = ",. ;:!?()\n-'\"aZ09、。〈》【】‐—“”…‧〇㐀𠀀䷀·•─가カéΩİ〜\u{2028}"
            .chars()
            .collect();
        let texts = crate::random_text::random_texts(7, 3_000, 0..300, |rng| {
            if rng.below(4) == 0 {
                rng.pick(&between)
            } else {
                rng.pick(&han)
            }
        });
        for text in &texts {
            assert_eq!(shingle(text), literal(text), "{text:?}");
        }
    }

    #[test]
    fn words_are_tokens_and_case_does_not_matter() {
        let a = shingle("The Quick brown fox jumps over the lazy dog, again and again.");
        let b = shingle("the quick BROWN fox: jumps over the lazy dog again and again");
        assert_eq!(a, b);
        assert_eq!(a.size, 12 * WORD_SIZE as u16);
        assert_eq!(shingle("one two three four").sample, Vec::<u16>::new());
    }
}
