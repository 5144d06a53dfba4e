//! The fingerprint (version [`FINGERPRINT_VERSION`]): text → normalized
//! text → words → TF-IDF weighted SimHash, plus clause signatures, a content
//! hash, a sketch of the text's numbers and a sample of its 5-gram shingles.
//! Pure and I/O-free; the exact recipe is specified in `docs/fingerprint.md`
//! and pinned by golden vectors in `tests/`.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::dictionary::Dictionary;
use crate::distinctive::number_sketch;
use crate::hotwords::{HotWords, Lookup, HOT_WORDS};
use crate::idf::IdfTable;
use crate::normalize::normalize;
use crate::shingles::{shingle, SAMPLE};
use crate::signature::{signature_with, Selection, Unit};
use crate::simhash::{hash_bytes, quantize, to_hex, SimHasher};
use crate::tokenize::Tokenizer;

/// The fingerprint recipe version. Fingerprints of different versions must not be
/// compared; the index stores it so an upgrade can tell.
pub const FINGERPRINT_VERSION: u32 = 3;

/// Tunables of the fingerprint. Changing any of them changes fingerprints, so every
/// worker sharing an index must use the same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FingerprintConfig {
    /// Keep only the `top_words` highest TF-IDF words as SimHash features (0 = all).
    pub top_words: usize,
    /// How many sentences (or clauses) are signed: the size of the signature sketch.
    pub signatures: usize,
    /// Sign whole sentences or clauses.
    pub signature_unit: Unit,
    /// Sign the longest units or a hash-chosen sample.
    pub signature_selection: Selection,
    /// Units whose key (letters and digits) is shorter than this are not signed.
    pub min_signature_chars: usize,
    /// Let jieba guess words missing from its dictionary (HMM). Off: faster and
    /// steadier under small edits.
    pub hmm: bool,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        Self {
            top_words: 0,
            signatures: 12,
            signature_unit: Unit::Clause,
            signature_selection: Selection::Sampled,
            min_signature_chars: 10,
            hmm: false,
        }
    }
}

/// Everything the index needs to know about an article's content.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Fingerprint {
    /// TF-IDF weighted SimHash-64 of the content words.
    pub simhash: u64,
    /// Hash of the normalized content's letters and digits (exact-copy signal).
    pub content: u64,
    /// Signature sketch: hashes of sampled clauses (or sentences), sorted. Two
    /// articles sharing a large part of it copied text from one another.
    pub signatures: Vec<u32>,
    /// Number of content words (0 means there was nothing to fingerprint).
    pub words: u32,
    /// Number sketch: hashes of the text's numbers, the smallest few, sorted
    /// (see [`crate::distinctive`]). Reports of one template differ here.
    #[serde(default)]
    pub numbers: Vec<u16>,
    /// Shingle sample: 16-bit values of sampled 5-gram shingles, sorted (see
    /// [`crate::shingles`]). How much of one text is found in another.
    #[serde(default)]
    pub shingles: Vec<u16>,
    /// The text's size: Han characters, plus [`WORD_SIZE`](crate::shingles::WORD_SIZE) per other word
    /// ([`crate::shingles`]); whether it is long enough to be judged by
    /// what share of it another article holds.
    #[serde(default)]
    pub size: u16,
}

impl Fingerprint {
    /// An article with no content words cannot be compared with anything.
    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// The sketch hashes an index files this article under: the `n` smallest
    /// (the sketch is sorted ascending).
    pub fn lookup_signatures(&self, n: usize) -> &[u32] {
        &self.signatures[..n.min(self.signatures.len())]
    }

    /// The fingerprint as an index stores it: the [`SAMPLE`] smallest values
    /// of the shingle sample.
    pub fn stored(&self) -> Fingerprint {
        Fingerprint {
            shingles: self.shingles[..self.shingles.len().min(SAMPLE)].to_vec(),
            ..self.clone()
        }
    }

    pub fn simhash_hex(&self) -> String {
        to_hex(self.simhash)
    }
}

/// Computes fingerprints. Cheap to clone (shares the segmenter and IDF table) and
/// `Send + Sync`, so one instance serves all threads.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    tokenizer: Tokenizer,
    idf: Arc<IdfTable>,
    /// Stop words and common words with IDF and hash precomputed (a cache of
    /// `idf` and the tokenizer's stop words).
    hot: Arc<HotWords>,
    /// The compile-time dictionary, when it both cuts Han text and holds its
    /// words' hashes and IDF in `idf` (the built-in table): a word it cut is
    /// counted by its index, and needs neither looked up nor hashed.
    dictionary: Option<DictionaryWords>,
    config: FingerprintConfig,
}

impl Fingerprinter {
    pub fn new(tokenizer: Tokenizer, idf: Arc<IdfTable>, config: FingerprintConfig) -> Self {
        let dictionary = tokenizer
            .dictionary()
            .filter(|_| idf.is_builtin())
            .map(|dictionary| DictionaryWords::new(dictionary, tokenizer.stop_words()));
        // The common words of the built-in table are Han words, which the
        // dictionary cuts and counts by index when it is there: then the hot
        // table need hold only the stop words.
        let common = if dictionary.is_some() { 0 } else { HOT_WORDS };
        let hot = Arc::new(HotWords::build(&idf, tokenizer.stop_words(), common));
        Self {
            tokenizer,
            idf,
            hot,
            dictionary,
            config,
        }
    }

    /// The default recipe: jieba's IDF table, shipped stop words, default config.
    pub fn with_defaults() -> Result<Self, crate::idf::IdfError> {
        let config = FingerprintConfig::default();
        Ok(Self::new(
            Tokenizer::new(config.hmm),
            IdfTable::builtin(),
            config,
        ))
    }

    pub fn config(&self) -> &FingerprintConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Fingerprint raw article text (HTML and markdown allowed).
    pub fn fingerprint(&self, text: &str) -> Fingerprint {
        self.fingerprint_normalized(&normalize(text))
    }

    /// Fingerprint text that has already been through [`normalize`].
    pub fn fingerprint_normalized(&self, text: &str) -> Fingerprint {
        COUNTS.with_borrow_mut(|(hot_tf, dictionary_tf, cut)| {
            self.fingerprint_with(text, hot_tf, dictionary_tf, cut)
        })
    }

    fn fingerprint_with(
        &self,
        text: &str,
        hot_tf: &mut SlotCounts,
        dictionary_tf: &mut SlotCounts,
        cut: &mut Vec<CutWord>,
    ) -> Fingerprint {
        let hot = &*self.hot;
        // Term counts: of the words the dictionary cut by index (`dictionary`),
        // of other words in the hot table by slot, of the rest by word.
        hot_tf.reset(hot.slots());
        dictionary_tf.reset(self.dictionary.as_ref().map_or(0, |d| d.dictionary.len()));
        // The words counted in `dictionary_tf`, in the order of its `touched`.
        let mut dictionary_words: Vec<&str> = Vec::new();
        let mut cold_tf: FxHashMap<&str, u32> = FxHashMap::default();
        // About a distinct word per ten bytes of English text: room for them
        // all, so that the map seldom grows.
        cold_tf.reserve(text.len() / 10);
        // Other words borrowed from `text` are counted directly; lowercased
        // ones are copied to `owned` first (their ranges in `owned_words`)
        // and counted after (they cannot be borrowed from `text`).
        let mut owned = String::new();
        let mut owned_words: Vec<(usize, usize)> = Vec::new();
        // The words the dictionary cut, but stop words, counted after the
        // cut (below).
        cut.clear();
        self.tokenizer.for_each_candidate_id(text, |w, id| {
            if let (Some(id), Some(d), Some(start)) =
                (id, &self.dictionary, subslice_offset(text, w))
            {
                if !d.is_stop(id) {
                    cut.push((id, start, w.len()));
                }
                return;
            }
            match hot.lookup(w) {
                Lookup::Stop => {}
                Lookup::Hot(slot) => {
                    hot_tf.add(slot);
                }
                Lookup::Miss => {
                    if let Some(start) = subslice_offset(text, w) {
                        *cold_tf.entry(&text[start..start + w.len()]).or_insert(0) += 1;
                    } else {
                        let start = owned.len();
                        owned.push_str(w);
                        owned_words.push((start, owned.len()));
                    }
                }
            }
        });
        // Each count is a load from a table larger than the nearer caches
        // (a count per dictionary word), at an index nothing predicts:
        // counted with the count `AHEAD` words on asked for, the loads wait
        // on memory together, not one by one. (Worth: 0.98 of the CPU of
        // `scan` on a corpus of Chinese news on an Intel Xeon.)
        const AHEAD: usize = 8;
        for k in 0..cut.len() {
            if let Some(&(id, ..)) = cut.get(k + AHEAD) {
                dictionary_tf.prefetch(id);
            }
            let (id, start, len) = cut[k];
            if dictionary_tf.add(id) {
                dictionary_words.push(&text[start..start + len]);
            }
        }
        for &(start, end) in &owned_words {
            *cold_tf.entry(&owned[start..end]).or_insert(0) += 1;
        }
        let words: u32 = dictionary_tf.total + hot_tf.total + cold_tf.values().sum::<u32>();
        // (word, weight, feature hash) of every distinct content word.
        let mut weighted: Vec<(&str, f64, u64)> =
            Vec::with_capacity(dictionary_tf.touched.len() + hot_tf.touched.len() + cold_tf.len());
        if let Some(d) = &self.dictionary {
            weighted.extend(dictionary_tf.touched.iter().zip(&dictionary_words).map(
                |(&id, &w)| {
                    let (hash, idf) = d.dictionary.features(id);
                    (w, f64::from(dictionary_tf.counts[id as usize]) * idf, hash)
                },
            ));
        }
        weighted.extend(hot_tf.touched.iter().map(|&slot| {
            let n = hot_tf.counts[slot as usize];
            (hot.word(slot), f64::from(n) * hot.idf(slot), hot.hash(slot))
        }));
        weighted.extend(
            cold_tf
                .into_iter()
                .map(|(w, n)| (w, f64::from(n) * self.idf.get(w), hash_bytes(w.as_bytes()))),
        );
        if self.config.top_words > 0 && weighted.len() > self.config.top_words {
            // Highest weight first; ties by word so the cut is deterministic.
            weighted.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
            weighted.truncate(self.config.top_words);
        }
        let mut hasher = SimHasher::default();
        for &(_, weight, hash) in &weighted {
            hasher.add_hash(hash, quantize(weight));
        }
        let sig = signature_with(
            text,
            self.config.signatures,
            self.config.min_signature_chars,
            self.config.signature_unit,
            self.config.signature_selection,
        );
        let shingled = shingle(text);
        Fingerprint {
            simhash: hasher.finish(),
            content: sig.content,
            signatures: sig.hashes,
            words,
            numbers: number_sketch(text),
            shingles: shingled.sample,
            size: shingled.size,
        }
    }
}

thread_local! {
    /// Per-thread term counts of hot words and of dictionary words, and the
    /// dictionary's words of an article before they are counted, kept
    /// between articles.
    static COUNTS: std::cell::RefCell<(SlotCounts, SlotCounts, Vec<CutWord>)> =
        std::cell::RefCell::default();
}

/// A word the dictionary cut: its index, and where it lies in the text
/// (start, length in bytes).
type CutWord = (u32, usize, usize);

/// The compile-time dictionary and which of its words are stop words.
#[derive(Debug, Clone)]
struct DictionaryWords {
    dictionary: &'static Dictionary,
    /// Bit `i` is set if word `i` is a stop word.
    stop: Arc<[u64]>,
}

impl DictionaryWords {
    fn new<'a>(dictionary: &'static Dictionary, stop_words: impl Iterator<Item = &'a str>) -> Self {
        let mut stop = vec![0u64; dictionary.len().div_ceil(64)];
        for id in stop_words.filter_map(|w| dictionary.word_id(w)) {
            stop[id as usize / 64] |= 1 << (id % 64);
        }
        Self {
            dictionary,
            stop: stop.into(),
        }
    }

    #[inline]
    fn is_stop(&self, id: u32) -> bool {
        self.stop[id as usize / 64] & 1 << (id % 64) != 0
    }
}

/// Term counts indexed by slot (of the hot table, or dictionary index), with
/// the slots touched so far: counting is an array increment, and clearing
/// touches only what was counted.
#[derive(Debug, Default)]
struct SlotCounts {
    counts: Vec<u32>,
    touched: Vec<u32>,
    total: u32,
}

impl SlotCounts {
    /// Zero all counts, for a table of `slots` slots.
    fn reset(&mut self, slots: usize) {
        for &slot in &self.touched {
            self.counts[slot as usize] = 0;
        }
        self.touched.clear();
        self.total = 0;
        if self.counts.len() < slots {
            // Zeroed by the allocator: fresh memory is zero already, so pages
            // no count lands on (all of them, for text the dictionary never
            // cuts) are never touched.
            self.counts = vec![0; slots];
        }
    }

    /// A hint that `slot` will be counted soon.
    #[inline]
    fn prefetch(&self, slot: u32) {
        if let Some(count) = self.counts.get(slot as usize) {
            crate::prefetch::prefetch(count);
        }
    }

    /// Count `slot` once more; whether it is the first time.
    #[inline]
    fn add(&mut self, slot: u32) -> bool {
        let count = &mut self.counts[slot as usize];
        let first = *count == 0;
        if first {
            self.touched.push(slot);
        }
        *count += 1;
        self.total += 1;
        first
    }
}

/// If `part` is a slice of `whole`, its byte offset.
fn subslice_offset(whole: &str, part: &str) -> Option<usize> {
    let start = part.as_ptr() as usize;
    let base = whole.as_ptr() as usize;
    (start >= base && start + part.len() <= base + whole.len()).then(|| start - base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp() -> Fingerprinter {
        Fingerprinter::with_defaults().unwrap()
    }

    #[test]
    fn markup_does_not_change_the_fingerprint() {
        let f = fp();
        let plain = "国家统计局今天发布数据，一季度国内生产总值同比增长百分之五点三。消费对经济增长的贡献率明显提升。";
        let marked = "<p>**国家统计局今天发布数据**，一季度国内生产总值同比增长百分之五点三。</p><!--x-->\n\n消费对经济增长的贡献率明显提升。";
        assert_eq!(f.fingerprint(plain), f.fingerprint(marked));
    }

    #[test]
    fn empty_text_has_no_words() {
        let f = fp();
        assert!(f.fingerprint("").is_empty());
        assert!(f.fingerprint("。。。!!! --").is_empty());
        assert!(!f.fingerprint("Hello world again").is_empty());
    }

    #[test]
    fn case_does_not_matter_for_latin() {
        let f = fp();
        assert_eq!(
            f.fingerprint("Stocks Rally As Markets Rebound").simhash,
            f.fingerprint("stocks rally as markets rebound").simhash
        );
    }

    /// The dictionary's precomputed hashes and IDF give the fingerprint that
    /// computing them gives.
    #[test]
    fn dictionary_features_change_nothing() {
        use crate::random_text::{random_texts, COMMON_HAN};
        let fast = fp();
        assert!(fast.dictionary.is_some());
        let mut slow = fast.clone();
        slow.dictionary = None;
        let alphabet: Vec<char> = COMMON_HAN
            .chars()
            .chain("，。“”、（）《》 ab1 .-〇𠀀㐀丽的了是".chars())
            .collect();
        let texts = random_texts(0x3C6E_F372_FE94_F82B, 300, 1..600, |rng| {
            rng.pick(&alphabet)
        });
        let articles = include_str!("../examples/articles.jsonl")
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["text"].as_str().map(str::to_owned));
        let mut n = 0;
        for text in texts.into_iter().chain(articles) {
            assert_eq!(fast.fingerprint(&text), slow.fingerprint(&text), "{text}");
            n += 1;
        }
        assert!(n > 300);
    }

    #[test]
    fn top_words_limits_features() {
        let base = fp();
        let cfg = FingerprintConfig {
            top_words: 1,
            ..Default::default()
        };
        let one = Fingerprinter::new(base.tokenizer().clone(), IdfTable::builtin(), cfg);
        // With one feature the SimHash is that feature's hash.
        let h = one.fingerprint("apple apple banana").simhash;
        assert_eq!(h, crate::simhash::hash_bytes(b"apple"));
    }
}
