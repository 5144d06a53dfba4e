//! jieba's dictionary, built at compile time, and its segmentation of Han text.
//!
//! Chinese words are cut the way jieba cuts without its HMM: every dictionary
//! word starting at every character is a candidate, and the route through the
//! block with the highest product of word probabilities `freq / total` wins
//! (a character no word starts with stands alone, with frequency 1). This is
//! jieba-rs's `cut(text, false)` on the same dictionary, word for word (the tests
//! compare the two); it is written out here because the dictionary is a
//! double-array trie built by `build.rs` and embedded in the binary, which a
//! process maps instead of parsing 350 k lines at start-up, and because the
//! fingerprint needs only the words, not jieba's tokens.

use std::cell::RefCell;
use std::sync::OnceLock;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, KnownLayout, Unaligned};

use crate::prefetch::prefetch;

#[path = "jieba/han.rs"]
mod han;
pub use han::is_jieba_han;
use han::{NOT_HAN, NO_CODE};

/// The dictionary: a double-array trie of the Han words, each word-ending node
/// carrying its word's log-probability class, and each word's features. The
/// large tables are read in place from the binary (`build.rs` lays them out).
pub struct Dictionary {
    /// Trie code of each character of the Basic Multilingual Plane, indexed by
    /// scalar value: [`NOT_HAN`] for a character that is not Han to jieba,
    /// [`NO_CODE`] for a Han character no word has. (No word has a character
    /// beyond it.)
    codes: &'static [U16; 0x10000],
    /// The trie's nodes: the child of node `n` by code `c` is node
    /// `base(n) ^ c` if its check is `n`; a node's class, if not 0, says it
    /// ends a word and indexes that word's log-probability. 16 bytes each, so
    /// that one cache line holds all a step of the walk reads.
    nodes: &'static [Node],
    /// `ln(freq / total)` of the words, by class (index 0 unused).
    log_probs: Vec<f64>,
    /// Each word's feature hash and built-in IDF, by index.
    features: &'static [Features],
    /// `ln(1 / total)`: a character no word starts with stands alone with
    /// frequency 1.
    lone_log_prob: f64,
}

/// A trie node, as `build.rs` laid it out (`repack_node`).
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Node {
    /// Its children are at `base ^ code` (a node without children has a base
    /// from which every child index is beyond the nodes).
    base: U32,
    /// Its parent (for the root and unused nodes, an index no node has).
    check: U32,
    /// The log-probability class of the word it ends (0: none).
    class: U32,
    /// The index of the word it ends (`u32::MAX`: none).
    word: U32,
}

/// A word's feature hash ([`crate::simhash::hash_bytes`]) and the bits of its
/// IDF in the built-in table ([`crate::idf::IdfTable::builtin`]).
#[derive(FromBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct Features {
    hash: U64,
    idf: U64,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("words", &self.features.len())
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// The tables `build.rs` made (layout described there), aligned to a cache
/// line: the nodes start at a multiple of 16 bytes in it, so that each lies
/// in one line.
static DICTIONARY_BIN: &CacheAligned<[u8]> =
    &CacheAligned(*include_bytes!(concat!(env!("OUT_DIR"), "/dictionary.bin")));

/// Bytes aligned to a 64-byte cache line.
#[repr(C, align(64))]
struct CacheAligned<T: ?Sized>(T);

impl Dictionary {
    /// The embedded dictionary, read once per process.
    pub fn builtin() -> &'static Dictionary {
        static DICTIONARY: OnceLock<Dictionary> = OnceLock::new();
        DICTIONARY.get_or_init(|| {
            let bin = &DICTIONARY_BIN.0;
            let (lone_log_prob, rest) = take_f64(bin);
            let (classes, rest) = take_u32(rest);
            let (log_probs, rest) = rest.split_at(classes as usize * 8);
            let (codes, rest) = take_u32(rest);
            let (codes, rest) = rest.split_at(codes as usize * 2);
            let (nodes, rest) = take_u32(rest);
            // Zeros up to a multiple of a node's size from the start.
            let read = bin.len() - rest.len();
            let rest = &rest[read.next_multiple_of(size_of::<Node>()) - read..];
            let (nodes, rest) = rest.split_at(nodes as usize * size_of::<Node>());
            let (words, rest) = take_u32(rest);
            let features = &rest[..words as usize * size_of::<Features>()];
            Dictionary {
                codes: <[U16; 0x10000]>::ref_from_bytes(codes)
                    .expect("build.rs wrote a u16 code per BMP character"),
                nodes: <[Node]>::ref_from_bytes(nodes).expect("build.rs wrote whole nodes"),
                log_probs: log_probs
                    .chunks_exact(8)
                    .map(|x| f64::from_le_bytes(x.try_into().unwrap_or_default()))
                    .collect(),
                features: <[Features]>::ref_from_bytes(features)
                    .expect("build.rs wrote whole features"),
                lone_log_prob,
            }
        })
    }

    /// Call `f` with each word of two or more characters that jieba (without HMM)
    /// cuts from `text`, in order. Only Han blocks are segmented; any other
    /// character stands alone, as it does in jieba, and so is never such a word.
    pub fn for_each_word<'a>(&self, text: &'a str, mut f: impl FnMut(&'a str)) {
        self.for_each_word_id(text, |word, _| f(word));
    }

    /// [`Dictionary::for_each_word`], with each word's index (for
    /// [`Dictionary::features`]).
    pub fn for_each_word_id<'a>(&self, text: &'a str, mut f: impl FnMut(&'a str, u32)) {
        SCRATCH.with(|scratch| {
            // A callback that segments again gets buffers of its own.
            let mut fresh = Scratch::default();
            let mut guard = scratch.try_borrow_mut();
            let s = guard.as_deref_mut().unwrap_or(&mut fresh);
            // Room for every character of the text, each of three bytes or
            // more, and for each block's length after its last.
            let room = 2 * (text.len() / 3 + 1);
            if s.codes.len() < room {
                s.codes.resize(room, 0);
                s.offsets.resize(room, 0);
            }
            // The blocks, all decoded first.
            s.blocks.clear();
            let (mut i, mut at) = (0, 0);
            while i < text.len() {
                let (code, len) = self.code_at(text, i);
                if code == NOT_HAN {
                    i += len;
                    continue;
                }
                let (end, n) = self.han_block(text, i, &mut s.codes[at..], &mut s.offsets[at..]);
                s.blocks.push(Block {
                    start: i,
                    end,
                    at,
                    n,
                });
                (i, at) = (end, at + n + 1);
            }
            // Cutting a block walks the trie from each of its characters. A
            // walk is a chain of loads, each likely to wait on memory (the
            // trie is larger than the caches), and where it ends is a branch
            // no predictor learns, so the processor does not run ahead into
            // the next walks by itself. So ask, while cutting a block, for
            // what the walks of the block after it will read at their third
            // step, and of the block two on at their second (their first, a
            // child of the root, is nearly always in the cache), by walks
            // that take no branch ([`prefetch_walk`]). (Worth, on an Intel
            // Xeon, against asking within the block being cut by walks that
            // branch: 0.89 of the CPU of `scan` on a corpus of Chinese news;
            // see docs/benchmarks.md.)
            let block_codes = |b: usize| {
                s.blocks
                    .get(b)
                    .map_or(&[][..], |block| block.codes(&s.codes))
            };
            self.prefetch_steps::<2>(block_codes(0));
            self.prefetch_steps::<2>(block_codes(1));
            self.prefetch_steps::<3>(block_codes(0));
            for (b, block) in s.blocks.iter().enumerate() {
                self.prefetch_steps::<2>(block_codes(b + 2));
                self.prefetch_steps::<3>(block_codes(b + 1));
                self.cut_block(
                    &text[block.start..block.end],
                    block.codes(&s.codes),
                    &s.offsets[block.at..=block.at + block.n],
                    &mut s.route,
                    &mut f,
                );
            }
        });
    }

    /// Ask for the nodes the walks from each of `codes` will read at their
    /// `STEPS`th step (by [`prefetch_walk`]); a walk from one of the last
    /// characters, which has fewer, reads nothing new there.
    #[inline(always)]
    fn prefetch_steps<const STEPS: usize>(&self, codes: &[u32]) {
        for walk in codes.windows(STEPS) {
            prefetch_walk(self.nodes, walk);
        }
    }

    /// The code of the character at byte `i` of `text` ([`NOT_HAN`] if it is
    /// not Han to jieba) and its length in bytes.
    #[inline(always)]
    fn code_at(&self, text: &str, i: usize) -> (u16, usize) {
        let bytes = text.as_bytes();
        let b = bytes[i];
        if b < 0x80 {
            (NOT_HAN, 1)
        } else if (0xE0..=0xEF).contains(&b) {
            (self.code3(b, bytes[i + 1], bytes[i + 2]), 3)
        } else {
            let c = text[i..].chars().next().unwrap_or_default();
            let code = match self.codes.get(c as usize) {
                Some(code) => code.get(),
                None if is_jieba_han(c) => NO_CODE,
                None => NOT_HAN,
            };
            (code, c.len_utf8())
        }
    }

    /// The code of a character of three bytes (U+0800–U+FFFF, nearly all
    /// Han text), decoded here.
    #[inline(always)]
    fn code3(&self, b0: u8, b1: u8, b2: u8) -> u16 {
        let c = usize::from(b0 & 0x0F) << 12 | usize::from(b1 & 0x3F) << 6 | usize::from(b2 & 0x3F);
        self.codes[c].get()
    }

    /// Write to `codes` and `offsets` the codes and byte offsets (from `start`)
    /// of the Han characters from byte `start` of `text` on, and after them the
    /// block's length; the block's end and its number of characters. The
    /// buffers hold a character per three bytes of `text`, and one more.
    fn han_block(
        &self,
        text: &str,
        start: usize,
        codes: &mut [u32],
        offsets: &mut [u32],
    ) -> (usize, usize) {
        let mut i = start;
        let mut n = 0;
        // A character per slot of the buffers (they have room for the whole
        // block, so only the text's end or a character not Han ends it).
        for (code_slot, offset_slot) in codes.iter_mut().zip(offsets.iter_mut()) {
            let (code, len) = match text.as_bytes().get(i..i + 3) {
                Some(&[b0, b1, b2]) if b0 & 0xF0 == 0xE0 => (self.code3(b0, b1, b2), 3),
                _ if i < text.len() => self.code_at(text, i),
                _ => break,
            };
            if code == NOT_HAN {
                break;
            }
            *code_slot = u32::from(code);
            *offset_slot = (i - start) as u32;
            n += 1;
            i += len;
        }
        offsets[n] = (i - start) as u32;
        (i, n)
    }

    /// Segment one block of Han characters (their trie codes, and their byte
    /// offsets in the block followed by its length) along jieba's best route.
    #[inline(never)]
    fn cut_block<'a>(
        &self,
        block: &'a str,
        codes: &[u32],
        offsets: &[u32],
        route: &mut Vec<Step>,
        f: &mut impl FnMut(&'a str, u32),
    ) {
        let n = codes.len();
        // route[i]: the log-probability of the best cut of chars[i..], the end
        // of its first word and that word's index. Filled from the end, as
        // jieba does, with its tie rule: of equal probabilities the longer word
        // wins.
        route.clear();
        route.resize(n + 1, Step::default());
        let nodes = self.nodes;
        let root_base = nodes[0].base.get();
        for i in (0..n).rev() {
            // The words starting here, shortest first; the character alone
            // (frequency 1) if there are none. Any word beats no word: every
            // log-probability is at least minus infinity.
            let mut best = Step {
                prob: f64::NEG_INFINITY,
                end: 0,
                word: 0,
            };
            let (mut node, mut node_base) = (0u32, root_base);
            for (end, &code) in (i + 1..).zip(&codes[i..]) {
                // A node without children gives an index beyond the nodes, a
                // missing code (`NO_CODE`) a node that is no child of this one:
                // the walk ends there.
                let Some((child, next)) = child(nodes, node, node_base, code) else {
                    break;
                };
                (node, node_base) = (child, next.base.get());
                let class = next.class.get();
                if class == 0 {
                    continue;
                }
                let prob = self.log_probs[class as usize] + route[end].prob;
                if prob >= best.prob {
                    best = Step {
                        prob,
                        end: end as u32,
                        word: next.word.get(),
                    };
                }
            }
            if best.end == 0 {
                best = Step {
                    prob: self.lone_log_prob + route[i + 1].prob,
                    end: i as u32 + 1,
                    word: 0,
                };
            }
            route[i] = best;
        }
        let mut i = 0;
        while i < n {
            let Step { end, word, .. } = route[i];
            let end = end as usize;
            if end - i >= 2 {
                // A word's features are read once its text has been cut (to
                // weigh it), each a load from a table larger than the caches
                // at an index nothing predicts: ask for them now. (Worth: 0.97
                // of the CPU of `scan` on a corpus of Chinese news.)
                if let Some(features) = self.features.get(word as usize) {
                    prefetch(features);
                }
                f(&block[offsets[i] as usize..offsets[end] as usize], word);
            }
            i = end;
        }
    }
}

impl Dictionary {
    /// The feature hash and built-in IDF of the word of index `word` (from
    /// [`Dictionary::for_each_word_id`]).
    #[inline]
    pub fn features(&self, word: u32) -> (u64, f64) {
        let features = &self.features[word as usize];
        (features.hash.get(), f64::from_bits(features.idf.get()))
    }

    /// The number of words; every word index is below it.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    /// Is the dictionary empty?
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// The index of `word` if it is a dictionary word.
    pub fn word_id(&self, word: &str) -> Option<u32> {
        self.find(word).map(|(_, id)| id)
    }

    /// The log-probability and index of `word` if it is a dictionary word, by
    /// a walk of the trie from the root.
    fn find(&self, word: &str) -> Option<(f64, u32)> {
        let codes = word.chars().map(|c| {
            let code = self
                .codes
                .get(c as usize)
                .map_or(NO_CODE, |code| code.get());
            u32::from(code)
        });
        let next = walk(self.nodes, self.nodes[0], codes)?;
        let class = next.class.get() as usize;
        (class != 0).then(|| (self.log_probs[class], next.word.get()))
    }
}

/// Ask the processor to bring into its cache the node a walk from the root
/// along `codes` reaches at its last step; a hint that changes no result.
/// The walk takes no branch: where it leaves the trie (a node whose check
/// is not its parent) it goes on from that node all the same and asks for
/// a line nothing needs, which costs a prefetch, where a branch on each
/// step would cost a misprediction whenever it ends (as often as words
/// end, in no order a predictor learns). Where it leaves the trie at its
/// last step, the line it asks for is the one the real walk reads to find
/// that.
#[inline(always)]
fn prefetch_walk(nodes: &[Node], codes: &[u32]) {
    let Some((&last, path)) = codes.split_last() else {
        return;
    };
    let base = path.iter().fold(nodes[0].base.get(), |base, &code| {
        node_at(nodes, base ^ code).base.get()
    });
    prefetch(node_at(nodes, base ^ last));
}

/// The node at `index`, or the last node where `index` is beyond them.
#[inline(always)]
fn node_at(nodes: &[Node], index: u32) -> &Node {
    &nodes[(index as usize).min(nodes.len() - 1)]
}

/// The node a walk from the root (`root`, node 0) along `codes` ends on, if
/// every step has a child.
#[inline(always)]
fn walk(nodes: &[Node], root: Node, codes: impl IntoIterator<Item = u32>) -> Option<Node> {
    let (_, node) = codes
        .into_iter()
        .try_fold((0, root), |(node, next), code| {
            child(nodes, node, next.base.get(), code)
        })?;
    Some(node)
}

/// The child of `node` (whose base is `node_base`) by `code`, and its
/// index, if it has one.
#[inline]
fn child(nodes: &[Node], node: u32, node_base: u32, code: u32) -> Option<(u32, Node)> {
    let child = node_base ^ code;
    let &next = nodes.get(child as usize)?;
    (next.check.get() == node).then_some((child, next))
}

/// Per-thread buffers of the segmentation, kept between texts.
#[derive(Default)]
struct Scratch {
    /// Trie code of each character of the text's blocks: a block's `n`
    /// codes and one slot more (its length, in `offsets`), then the next
    /// block's (a buffer as long as the text needs).
    codes: Vec<u32>,
    /// Byte offset of each character in its block, and after them the
    /// block's length, at the same slots as the codes.
    offsets: Vec<u32>,
    /// The best route from each character on.
    route: Vec<Step>,
    /// The Han blocks of the text.
    blocks: Vec<Block>,
}

/// A block of Han characters: its bytes in the text, and where its codes
/// and offsets start in [`Scratch`] and how many characters it has (its
/// offsets are `n + 1`: the block's length last).
struct Block {
    start: usize,
    end: usize,
    at: usize,
    n: usize,
}

impl Block {
    /// The codes of the block's characters, of the codes in [`Scratch`].
    fn codes<'a>(&self, codes: &'a [u32]) -> &'a [u32] {
        &codes[self.at..self.at + self.n]
    }
}

/// A step of the best route through a block from one of its characters.
#[derive(Clone, Copy, Default)]
struct Step {
    /// The log-probability of the route.
    prob: f64,
    /// The end of its first word.
    end: u32,
    /// That word's index, if it is a dictionary word.
    word: u32,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Split a little-endian `f64` off the front of `b`.
pub(crate) fn take_f64(b: &[u8]) -> (f64, &[u8]) {
    let (head, rest) = b.split_at(8);
    (
        f64::from_le_bytes(head.try_into().unwrap_or_default()),
        rest,
    )
}

/// Split a little-endian `u32` off the front of `b`.
pub(crate) fn take_u32(b: &[u8]) -> (u32, &[u8]) {
    let (head, rest) = b.split_at(4);
    (
        u32::from_le_bytes(head.try_into().unwrap_or_default()),
        rest,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::random_text::{random_texts, COMMON_HAN};

    /// jieba-rs's words of two or more characters, for comparison.
    fn jieba_words(jieba: &jieba_rs::Jieba, text: &str) -> Vec<String> {
        jieba
            .cut(text, false)
            .into_iter()
            .map(|t| t.word)
            .filter(|w| w.chars().count() >= 2 && w.chars().all(is_jieba_han))
            .map(str::to_owned)
            .collect()
    }

    fn words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        Dictionary::builtin().for_each_word(text, |w| out.push(w.to_owned()));
        out
    }

    impl Dictionary {
        /// The log-probability of `word` if it is a dictionary word, by a walk
        /// of the trie from the root.
        fn log_prob_of(&self, word: &str) -> Option<f64> {
            self.find(word).map(|(log_prob, _)| log_prob)
        }
    }

    /// jieba's dictionary as jieba-rs reads it: each word's log-probability
    /// `ln(freq) - ln(total)` (a later line wins; the total counts every line),
    /// of the words made of Han characters only.
    fn jieba_log_probs() -> HashMap<String, f64> {
        let text = String::from_utf8(crate::tokenize::jieba_dictionary()).unwrap();
        let mut total = 0usize;
        let mut freq = HashMap::new();
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let Some(word) = parts.next() else { continue };
            let f: usize = parts.next().map_or(0, |x| x.parse().unwrap());
            total += f;
            freq.insert(word.to_owned(), f);
        }
        let log_total = (total as f64).ln();
        freq.into_iter()
            .filter(|(w, _)| w.chars().all(is_jieba_han))
            .map(|(w, f)| (w, (f as f64).ln() - log_total))
            .collect()
    }

    /// Every dictionary word ends on a node with its exact log-probability, and
    /// nothing else does: not the words' other prefixes, not random strings.
    #[test]
    fn trie_holds_exactly_the_dictionary() {
        let dictionary = Dictionary::builtin();
        let words = jieba_log_probs();
        assert!(words.len() > 300_000, "{}", words.len());
        for (word, &log_prob) in &words {
            assert_eq!(
                dictionary.log_prob_of(word).map(f64::to_bits),
                Some(log_prob.to_bits()),
                "{word}"
            );
            for (end, _) in word.char_indices().skip(1) {
                let prefix = &word[..end];
                assert_eq!(
                    dictionary.log_prob_of(prefix).map(f64::to_bits),
                    words.get(prefix).map(|p| p.to_bits()),
                    "{prefix}"
                );
            }
        }
        let chars: Vec<char> = COMMON_HAN.chars().chain("〇a，𠀀㐀丽".chars()).collect();
        for text in random_texts(0x6A09_E667_F3BC_C908, 20_000, 1..5, |rng| rng.pick(&chars)) {
            assert_eq!(
                dictionary.log_prob_of(&text).map(f64::to_bits),
                words.get(&text).map(|p| p.to_bits()),
                "{text}"
            );
        }
    }

    /// Each word's index gives its feature hash and built-in IDF, and the words
    /// cut from text carry their own index.
    #[test]
    fn features_are_the_words_hash_and_idf() {
        let dictionary = Dictionary::builtin();
        let idf = crate::idf::IdfTable::builtin();
        let mut ids = std::collections::HashSet::new();
        for word in jieba_log_probs().keys() {
            let (_, id) = dictionary.find(word).unwrap();
            assert!(ids.insert(id), "{word}: index {id} twice");
            let (hash, word_idf) = dictionary.features(id);
            assert_eq!(hash, crate::simhash::hash_bytes(word.as_bytes()), "{word}");
            assert_eq!(word_idf.to_bits(), idf.get(word).to_bits(), "{word}");
        }
        let chars: Vec<char> = COMMON_HAN.chars().collect();
        for text in random_texts(0xBB67_AE85_84CA_A73B, 100, 5..200, |rng| rng.pick(&chars)) {
            dictionary.for_each_word_id(&text, |word, id| {
                assert_eq!(dictionary.find(word).map(|(_, i)| i), Some(id), "{word}");
            });
        }
    }

    #[test]
    fn cuts_like_jieba() {
        let jieba = crate::tokenize::jieba();
        for text in [
            "我们今天在北京参观了故宫博物院",
            "国家统计局今天发布数据，一季度国内生产总值同比增长百分之五点三。",
            "南京市长江大桥",
            "他来到了网易杭研大厦",
            "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
            "结婚的和尚未结婚的",
            "工信处女干事每月经过下属科室都要亲口交代口交换机等技术性器件的安装工作",
            "〇一二𠀀𠀁㐀丽",
        ] {
            assert_eq!(words(text), jieba_words(&jieba, text), "{text}");
        }
    }

    /// Text drawn from the dictionary's own characters in random order (the
    /// routes jieba takes through unfamiliar text, ties and single characters
    /// included), cut both ways.
    #[test]
    fn cuts_like_jieba_on_random_han_text() {
        let jieba = crate::tokenize::jieba();
        let chars: Vec<char> = COMMON_HAN.chars().collect();
        let texts = random_texts(0x2545_F491_4F6C_DD1D, 200, 5..305, |rng| {
            match rng.below(40) {
                0 => '，',
                1 => '〇',
                _ => rng.pick(&chars),
            }
        });
        for text in texts {
            assert_eq!(words(&text), jieba_words(&jieba, &text), "{text}");
        }
    }

    /// No node straddles two cache lines: the tables are aligned to one, and
    /// the nodes (16 bytes each) start at a multiple of 16 bytes in them.
    #[test]
    fn each_node_lies_in_one_cache_line() {
        let nodes = Dictionary::builtin().nodes;
        assert_eq!(size_of::<Node>(), 16);
        assert_eq!(nodes.as_ptr() as usize % 16, 0);
    }

    #[test]
    fn jieba_han_ranges_split_blocks() {
        // 〇 (U+3007) is not Han to jieba: it ends a block and stands alone.
        assert!(!is_jieba_han('〇'));
        assert!(is_jieba_han('中') && is_jieba_han('𠀀'));
        assert_eq!(words("北京〇上海"), vec!["北京", "上海"]);
    }
}
