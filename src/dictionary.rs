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

/// The dictionary: `ln(freq)` of each Han word and a trie from word to index.
pub struct Dictionary {
    trie: crawdad::Trie,
    /// `ln(freq)` of word `i` at bytes `8 i..8 i + 8` (little-endian `f64`).
    log_freqs: &'static [u8],
    /// `ln` of the total frequency of jieba's whole dictionary.
    log_total: f64,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dictionary")
            .field("words", &(self.log_freqs.len() / 8))
            .field("trie_bytes", &self.trie.heap_bytes())
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
            let (log_total, rest) = take_f64(DICTIONARY_BIN);
            let (words, rest) = take_u32(rest);
            let (log_freqs, rest) = rest.split_at(words as usize * 8);
            let (trie, _) = crawdad::Trie::deserialize_from_slice(rest);
            Dictionary {
                trie,
                log_freqs,
                log_total,
            }
        })
    }

    #[inline]
    fn log_freq(&self, word: u32) -> f64 {
        let at = word as usize * 8;
        f64::from_le_bytes(self.log_freqs[at..at + 8].try_into().unwrap_or_default())
    }

    /// Call `f` with each word of two or more characters that jieba (without HMM)
    /// cuts from `text`, in order. Only Han blocks are segmented; any other
    /// character stands alone, as it does in jieba, and so is never such a word.
    pub fn for_each_word<'a>(&self, text: &'a str, mut f: impl FnMut(&'a str)) {
        SCRATCH.with(|scratch| {
            // A callback that segments again gets buffers of its own.
            let mut fresh = Scratch::default();
            let mut guard = scratch.try_borrow_mut();
            let scratch = guard.as_deref_mut().unwrap_or(&mut fresh);
            let mut rest = text;
            while let Some(start) = rest.find(is_jieba_han) {
                let block = &rest[start..];
                let end = block
                    .char_indices()
                    .find(|&(_, c)| !is_jieba_han(c))
                    .map_or(block.len(), |(i, _)| i);
                let (block, tail) = block.split_at(end);
                self.cut_block(block, scratch, &mut f);
                rest = tail;
            }
        });
    }

    /// Segment one block of Han characters along jieba's best route.
    fn cut_block<'a>(&self, block: &'a str, s: &mut Scratch, f: &mut impl FnMut(&'a str)) {
        s.chars.clear();
        s.offsets.clear();
        for (i, c) in block.char_indices() {
            s.chars.push(c);
            s.offsets.push(i as u32);
        }
        let n = s.chars.len();
        s.offsets.push(block.len() as u32);
        // route[i]: (log-probability of the best cut of chars[i..], end of its
        // first word). Filled from the end, as jieba does, with its tie rule: of
        // equal probabilities the longer word wins.
        s.route.clear();
        s.route.resize(n + 1, (0.0, n as u32));
        let log_total = self.log_total;
        for i in (0..n).rev() {
            let mut best: Option<(f64, u32)> = None;
            for (word, len) in self.trie.common_prefix_search(s.chars[i..].iter().copied()) {
                let end = i + len;
                let prob = self.log_freq(word) - log_total + s.route[end].0;
                match best {
                    Some((p, e)) if !(prob > p || (prob == p && end as u32 > e)) => {}
                    _ => best = Some((prob, end as u32)),
                }
            }
            s.route[i] = best.unwrap_or((0.0 - log_total + s.route[i + 1].0, i as u32 + 1));
        }
        let mut i = 0;
        while i < n {
            let end = s.route[i].1 as usize;
            if end - i >= 2 {
                f(&block[s.offsets[i] as usize..s.offsets[end] as usize]);
            }
            i = end;
        }
    }
}

/// Per-thread buffers of the segmentation, kept between blocks.
#[derive(Default)]
struct Scratch {
    chars: Vec<char>,
    /// Byte offset of each character in the block, and the block's length.
    offsets: Vec<u32>,
    route: Vec<(f64, u32)>,
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
        let jieba = jieba_rs::Jieba::new();
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
        let jieba = jieba_rs::Jieba::new();
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
