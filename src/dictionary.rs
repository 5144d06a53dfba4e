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

#[path = "jieba/han.rs"]
mod han;
pub use han::is_jieba_han;

/// The dictionary: a double-array trie from Han word to index, and each word's
/// log-probability.
pub struct Dictionary {
    /// Trie code of each character, indexed by scalar value ([`NO_CODE`]: no
    /// word has the character).
    codes: Vec<u32>,
    /// The trie's nodes, `[base, check]`, laid out as crawdad lays them: the
    /// child of node `n` by code `c` is `base(n) ^ c` if its `check` is `n`. A
    /// node whose base has [`FLAG`] set is a leaf: its base is a word's index.
    /// A node whose check has it set ends a word too: the word's leaf is its
    /// child by code 0.
    nodes: Vec<[u32; 2]>,
    /// `ln(freq / total)` of each word, by index.
    log_probs: Vec<f64>,
    /// `ln(1 / total)`: a character no word starts with stands alone with
    /// frequency 1.
    lone_log_prob: f64,
}

/// The code of a character no dictionary word contains.
const NO_CODE: u32 = u32::MAX;
/// The flag bit of a node's base (a leaf) and check (has a leaf).
const FLAG: u32 = 0x8000_0000;

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("words", &self.log_probs.len())
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// The tables `build.rs` made (layout described there).
static DICTIONARY_BIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dictionary.bin"));

impl Dictionary {
    /// The embedded dictionary, unpacked once per process (a few milliseconds).
    pub fn builtin() -> &'static Dictionary {
        static DICTIONARY: OnceLock<Dictionary> = OnceLock::new();
        DICTIONARY.get_or_init(|| {
            let (lone_log_prob, rest) = take_f64(DICTIONARY_BIN);
            let (words, rest) = take_u32(rest);
            let (log_probs, rest) = rest.split_at(words as usize * 8);
            let (codes, rest) = take_u32(rest);
            let (codes, rest) = rest.split_at(codes as usize * 4);
            let (nodes, _) = take_u32(rest);
            let nodes = &rest[4..4 + nodes as usize * 8];
            let u32s = |b: &[u8]| -> Vec<u32> {
                b.chunks_exact(4)
                    .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                    .collect()
            };
            Dictionary {
                codes: u32s(codes),
                nodes: nodes
                    .chunks_exact(8)
                    .map(|x| [take_u32(x).0, take_u32(&x[4..]).0])
                    .collect(),
                log_probs: log_probs
                    .chunks_exact(8)
                    .map(|x| f64::from_le_bytes(x.try_into().unwrap_or_default()))
                    .collect(),
                lone_log_prob,
            }
        })
    }

    /// Call `f` with each word of two or more characters that jieba (without HMM)
    /// cuts from `text`, in order. Only Han blocks are segmented; any other
    /// character stands alone, as it does in jieba, and so is never such a word.
    pub fn for_each_word<'a>(&self, text: &'a str, mut f: impl FnMut(&'a str)) {
        SCRATCH.with(|scratch| {
            // A callback that segments again gets buffers of its own.
            let mut fresh = Scratch::default();
            let mut guard = scratch.try_borrow_mut();
            let s = guard.as_deref_mut().unwrap_or(&mut fresh);
            // One pass: each Han character's code and offset are collected until
            // the block ends, then the block is cut.
            s.codes.clear();
            s.offsets.clear();
            let mut block_start = 0;
            let bytes = text.as_bytes();
            let mut i = 0;
            while i < bytes.len() {
                let b = bytes[i];
                let (c, len) = if b < 0x80 {
                    (u32::from(b), 1)
                } else if (0xE0..=0xEF).contains(&b) {
                    // Three bytes (U+0800–U+FFFF, nearly all Han text), decoded here.
                    let c = u32::from(b & 0x0F) << 12
                        | u32::from(bytes[i + 1] & 0x3F) << 6
                        | u32::from(bytes[i + 2] & 0x3F);
                    (c, 3)
                } else {
                    let c = text[i..].chars().next().unwrap_or_default();
                    (c as u32, c.len_utf8())
                };
                if char::from_u32(c).is_some_and(is_jieba_han) {
                    if s.codes.is_empty() {
                        block_start = i;
                    }
                    s.codes
                        .push(self.codes.get(c as usize).copied().unwrap_or(NO_CODE));
                    s.offsets.push((i - block_start) as u32);
                } else if !s.codes.is_empty() {
                    self.cut_block(&text[block_start..i], s, &mut f);
                }
                i += len;
            }
            if !s.codes.is_empty() {
                self.cut_block(&text[block_start..], s, &mut f);
            }
        });
    }

    /// Segment one block of Han characters (their codes and offsets in
    /// `s`, which it empties) along jieba's best route.
    fn cut_block<'a>(&self, block: &'a str, s: &mut Scratch, f: &mut impl FnMut(&'a str)) {
        let n = s.codes.len();
        s.offsets.push(block.len() as u32);
        // prob[i], end[i]: the log-probability of the best cut of chars[i..] and
        // the end of its first word. Filled from the end, as jieba does, with its
        // tie rule: of equal probabilities the longer word wins.
        s.prob.clear();
        s.prob.resize(n + 1, 0.0);
        s.end.clear();
        s.end.resize(n + 1, n as u32);
        let nodes = &self.nodes[..];
        for i in (0..n).rev() {
            // The character alone (frequency 1) if no word starts here; the
            // words starting here, shortest first, otherwise.
            let mut best = (self.lone_log_prob + s.prob[i + 1], i as u32 + 1);
            let mut found = false;
            let (mut node, mut base) = (0u32, nodes[0][0]);
            for (k, &code) in s.codes[i..].iter().enumerate() {
                // A leaf's base (flagged) and a missing code (`NO_CODE`) both
                // give an index beyond the nodes: the walk ends there too.
                let child = (base ^ code) as usize;
                let Some(&[child_base, child_check]) = nodes.get(child) else {
                    break;
                };
                if child_check & !FLAG != node {
                    break;
                }
                (node, base) = (child as u32, child_base);
                let word = if child_base & FLAG != 0 {
                    child_base & !FLAG
                } else if child_check & FLAG != 0 {
                    nodes[child_base as usize][0] & !FLAG
                } else {
                    continue;
                };
                let end = i + k + 1;
                let prob = self.log_probs[word as usize] + s.prob[end];
                if !found || prob >= best.0 {
                    best = (prob, end as u32);
                    found = true;
                }
            }
            s.prob[i] = best.0;
            s.end[i] = best.1;
        }
        let mut i = 0;
        while i < n {
            let end = s.end[i] as usize;
            if end - i >= 2 {
                f(&block[s.offsets[i] as usize..s.offsets[end] as usize]);
            }
            i = end;
        }
        s.codes.clear();
        s.offsets.clear();
    }
}

/// Per-thread buffers of the segmentation, kept between blocks.
#[derive(Default)]
struct Scratch {
    /// Trie code of each character of the block.
    codes: Vec<u32>,
    /// Byte offset of each character in the block, and the block's length.
    offsets: Vec<u32>,
    prob: Vec<f64>,
    end: Vec<u32>,
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

    #[test]
    fn jieba_han_ranges_split_blocks() {
        // 〇 (U+3007) is not Han to jieba: it ends a block and stands alone.
        assert!(!is_jieba_han('〇'));
        assert!(is_jieba_han('中') && is_jieba_han('𠀀'));
        assert_eq!(words("北京〇上海"), vec!["北京", "上海"]);
    }
}
