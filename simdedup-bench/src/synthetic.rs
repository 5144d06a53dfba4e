//! Seeded synthetic data: fingerprints for filling and probing the index, and
//! article texts for the end-to-end runs through the streams.
//!
//! Everything is a pure function of `(seed, i)`, so a run is reproducible and
//! any article can be generated again without keeping it.

use simdedup::fingerprint::Fingerprint;
use simdedup::index::IndexEntry;

/// SplitMix64's output function: a good 64-bit mix of `x`.
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic random stream (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// Skewed towards 0 (a rough Zipf): `n · u²`.
    pub fn skewed(&mut self, n: usize) -> usize {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u) * n as f64) as usize % n
    }
}

/// Synthetic index entries: article `i` is unique unless
/// [`is_near_duplicate`](FingerprintGen::is_near_duplicate), in which case it
/// copies article `i − 1001` (always an original) with one SimHash bit flipped
/// and a third of its clauses rewritten, as fingerprint v1 would produce for a
/// light rewrite. Sketches are bottom-12 samples of the clause hashes (small
/// numbers), some clauses boilerplate that many articles share: what makes
/// real sketch hashes unevenly spread. Timestamps spread over the `window_ms`
/// before `now_ms`.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintGen {
    seed: u64,
    now_ms: i64,
    window_ms: i64,
}

impl FingerprintGen {
    /// How far back a copy's original lies (in article numbers).
    pub const COPY_DISTANCE: u64 = 1001;

    pub fn new(seed: u64, now_ms: i64, window_ms: u64) -> FingerprintGen {
        FingerprintGen {
            seed: splitmix(seed ^ 0x5eed),
            now_ms,
            window_ms: window_ms.max(1) as i64,
        }
    }

    fn hash(&self, x: u64) -> u64 {
        splitmix(x ^ self.seed)
    }

    /// Article `i` copies an earlier one (1 in 5, from `i = 1001` on).
    pub fn is_near_duplicate(i: u64) -> bool {
        i % 5 == 4 && i >= Self::COPY_DISTANCE
    }

    /// How many of `range` are near-duplicates (what a check should find).
    pub fn expected_duplicates(range: std::ops::Range<u64>) -> u64 {
        // Count of i ≡ 4 (mod 5) in [max(start, 1001), end).
        let count_below = |n: u64| n / 5; // i < n with i % 5 == 4
        let lo = range.start.max(Self::COPY_DISTANCE);
        let hi = range.end.max(lo);
        count_below(hi) - count_below(lo)
    }

    /// The entry of article `i` when articles `0..n` fill the index: the same
    /// article, but timestamps rise with `i` over the window, as a live feed
    /// fills it. So each bucket opens after the one before it is complete and
    /// is shaped by its size, as in production. (Interleaved timestamps opened
    /// every bucket at once, shaped by a neighbour holding a few hundred
    /// articles: hashes of thousands of entries, hash tables instead of
    /// listpacks, ~520 instead of ~400 bytes per article at 10 M.)
    pub fn preload_entry(&self, i: u64, n: u64) -> IndexEntry {
        let mut entry = self.entry(i);
        let step = self.window_ms as f64 / n.max(1) as f64;
        entry.ts_ms = self.now_ms - self.window_ms + (i as f64 * step) as i64;
        entry
    }

    /// Boilerplate clauses ("…news agency reports") shared across articles.
    const BOILERPLATE: u64 = 64;

    /// The clause hashes of article `src`: 12 to 35 of them (a news article cut
    /// at commas), 1 to 11 for one article in 4 (briefs); and in 1 of 4
    /// articles one boilerplate clause out of [`Self::BOILERPLATE`], the first
    /// ones far more common than the last. On the zh corpus 70 % of sketches
    /// are full (12 hashes) and 32 % of the indexed hashes fall in the lowest
    /// 1/16 of the range; here 75 % and ≈ 30 %.
    fn clauses(&self, src: u64) -> Vec<u32> {
        let size = self.hash(src ^ 0xc1a5e);
        let n = if size.is_multiple_of(4) {
            1 + (size >> 8) % 11
        } else {
            12 + (size >> 8) % 24
        };
        let mut clauses: Vec<u32> = (0..n).map(|k| self.hash(src * 256 + k) as u32).collect();
        let roll = self.hash(src ^ 0xb0b0);
        if roll.is_multiple_of(4) {
            let u = (roll >> 11) as f64 / (1u64 << 53) as f64;
            let pick = (u * u * Self::BOILERPLATE as f64) as u64;
            clauses.push(self.hash(0xb011_e7a7e + pick) as u32);
        }
        clauses
    }

    /// The stored shingle sample of source article `src`, and its size: the
    /// [`SAMPLE`](simdedup::shingles::SAMPLE) smallest of the 100-400
    /// uniform values that a text of 200-800 tokens samples (one in two).
    fn shingles(&self, src: u64) -> (Vec<u16>, u16) {
        let n = 100 + self.hash(src ^ 0x5a5a) % 300;
        let mut values: Vec<u16> = (0..n)
            .map(|k| (self.hash(src * 1024 + k + 3_000_000_000_000) >> 48) as u16)
            .collect();
        values.sort_unstable();
        values.dedup();
        values.truncate(simdedup::shingles::SAMPLE);
        (values, (2 * n) as u16)
    }

    /// The entry of article `i`.
    pub fn entry(&self, i: u64) -> IndexEntry {
        let src = if Self::is_near_duplicate(i) {
            i - Self::COPY_DISTANCE
        } else {
            i
        };
        let mut clauses = self.clauses(src);
        if src != i {
            // A rewrite: every third clause changed.
            for (k, c) in clauses.iter_mut().enumerate().step_by(3) {
                *c = self.hash(i * 256 + k as u64 + 1_000_000_000_000) as u32;
            }
        }
        // The sketch: the 12 smallest clause hashes (bottom-k, as fingerprint
        // v1 samples them), so the indexed ones are small numbers, as in real
        // sketches.
        clauses.sort_unstable();
        clauses.dedup();
        clauses.truncate(12);
        let signatures = clauses;
        let simhash = self.hash(src ^ 0xabcdef) ^ u64::from(src != i);
        let (shingles, size) = self.shingles(src);
        // 173 s between neighbours, wrapping around the window: every part of the
        // window fills evenly whatever the number of articles.
        let offset = (i as i64).wrapping_mul(173_000) / 1000 % self.window_ms;
        IndexEntry {
            id: format!("article-{i:07}"),
            ts_ms: self.now_ms - self.window_ms + offset,
            fingerprint: Fingerprint {
                simhash,
                content: self.hash(i + 7_000_000_000),
                signatures,
                words: 300,
                numbers: Vec::new(),
                shingles,
                size,
            },
        }
    }
}

/// Common Chinese characters; pairs of them make the Chinese vocabulary (jieba
/// cuts them by its dictionary, as it does real text).
const ZH_CHARS: &str = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞";

/// Frequent English words mixed into the generated ones.
const EN_COMMON: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "on",
    "was",
    "with",
    "said",
    "as",
    "by",
    "at",
    "from",
    "it",
    "an",
    "be",
    "has",
    "have",
    "are",
    "this",
    "which",
    "after",
    "new",
    "year",
    "government",
    "people",
    "minister",
    "city",
    "report",
    "police",
    "market",
    "week",
];

const WORDS_PER_LANGUAGE: usize = 20_000;
const TOPIC_WORDS: usize = 400;

/// Seeded article texts, about 3 in 4 Chinese and 1 in 4 English, news-sized
/// (roughly 300–900 characters in 8–20 sentences of clauses). Each article
/// draws its words from its own "topic" (a slice of a 20,000-word vocabulary:
/// for Chinese the most common 2–4-character words of jieba's IDF table, so the
/// segmenter finds dictionary words as in real text; for English generated
/// pseudo-words) plus frequent words, so unrelated articles really differ.
/// Article `j` with `j % 5 == 4` (from `j = 7` on) is a rewrite of article
/// `j − 7`: about one sentence in six replaced, the last one dropped.
#[derive(Debug, Clone)]
pub struct TextGen {
    seed: u64,
    zh: Vec<String>,
    /// The 40 most frequent characters, as words.
    zh_frequent: Vec<String>,
    en: Vec<String>,
}

impl TextGen {
    pub fn new(seed: u64) -> TextGen {
        let chars: Vec<char> = ZH_CHARS.chars().collect();
        let mut rng = Rng::new(seed ^ 0x7e47);
        let zh = match dictionary_words(WORDS_PER_LANGUAGE) {
            Some(mut words) => {
                // Shuffled, so a topic (a slice) mixes common and rarer words.
                for i in (1..words.len()).rev() {
                    words.swap(i, rng.below(i + 1));
                }
                words
            }
            // Without the table: character pairs (jieba then finds fewer words).
            None => (0..WORDS_PER_LANGUAGE)
                .map(|_| (0..2).map(|_| chars[rng.below(chars.len())]).collect())
                .collect(),
        };
        const ONSETS: &[&str] = &[
            "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
            "st", "tr", "pl", "br", "ch", "sh",
        ];
        const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ea", "ou", "ai"];
        const CODAS: &[&str] = &["", "", "n", "r", "s", "t", "nd", "ll"];
        let en = (0..WORDS_PER_LANGUAGE)
            .map(|_| {
                (0..rng.range(1, 3))
                    .map(|_| {
                        format!(
                            "{}{}{}",
                            ONSETS[rng.below(ONSETS.len())],
                            VOWELS[rng.below(VOWELS.len())],
                            CODAS[rng.below(CODAS.len())]
                        )
                    })
                    .collect()
            })
            .collect();
        let zh_frequent = chars.iter().take(40).map(char::to_string).collect();
        TextGen {
            seed,
            zh,
            zh_frequent,
            en,
        }
    }

    /// Article `j` rewrites an earlier one.
    pub fn is_rewrite(j: u64) -> bool {
        j % 5 == 4 && j >= 7
    }

    /// The text of article `j`.
    pub fn text(&self, j: u64) -> String {
        if Self::is_rewrite(j) {
            let original = self.sentences(j - 7);
            let mut rng = Rng::new(self.seed ^ splitmix(j) ^ 0xed17);
            let keep = original.len().saturating_sub(1).max(1);
            let chinese = self.is_chinese(j - 7);
            let sentences: Vec<String> = original
                .into_iter()
                .take(keep)
                .map(|s| {
                    if rng.below(6) == 0 {
                        let topic = rng.below(WORDS_PER_LANGUAGE);
                        self.sentence(&mut rng, chinese, topic)
                    } else {
                        s
                    }
                })
                .collect();
            return join(&sentences, chinese);
        }
        join(&self.sentences(j), self.is_chinese(j))
    }

    fn is_chinese(&self, j: u64) -> bool {
        !splitmix(j ^ self.seed ^ 0x2a).is_multiple_of(4)
    }

    fn sentences(&self, j: u64) -> Vec<String> {
        let mut rng = Rng::new(self.seed ^ splitmix(j));
        let chinese = self.is_chinese(j);
        let topic = rng.below(WORDS_PER_LANGUAGE);
        (0..rng.range(8, 20))
            .map(|_| self.sentence(&mut rng, chinese, topic))
            .collect()
    }

    /// One sentence of 2–3 clauses of 3–8 words.
    fn sentence(&self, rng: &mut Rng, chinese: bool, topic: usize) -> String {
        let vocab = if chinese { &self.zh } else { &self.en };
        let mut out = String::new();
        let clauses = rng.range(2, 3);
        for c in 0..clauses {
            for w in 0..rng.range(3, 8) {
                let word: &str = if !chinese && rng.below(3) == 0 {
                    EN_COMMON[rng.skewed(EN_COMMON.len())]
                } else if chinese && rng.below(4) == 0 {
                    // A frequent single character (的, 是, 在, …).
                    &self.zh_frequent[rng.skewed(self.zh_frequent.len())]
                } else {
                    &vocab[(topic + rng.skewed(TOPIC_WORDS)) % vocab.len()]
                };
                if !chinese && w > 0 {
                    out.push(' ');
                }
                out.push_str(word);
            }
            if c + 1 < clauses {
                out.push_str(if chinese { "，" } else { ", " });
            }
        }
        out.push_str(if chinese { "。" } else { "." });
        out
    }
}

/// The `n` most common Chinese words of 2–4 characters in jieba's IDF table
/// (lowest IDF first), so that the segmenter finds real dictionary words.
fn dictionary_words(n: usize) -> Option<Vec<String>> {
    let table = simdedup::idf::IdfTable::builtin();
    let mut rows = Vec::new();
    simdedup::idf::write_table(&table, &mut rows).ok()?;
    // Rows come most telling (highest IDF) first.
    let words: Vec<String> = String::from_utf8_lossy(&rows)
        .lines()
        .rev()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| {
            let n = w.chars().count();
            (2..=4).contains(&n) && w.chars().all(simdedup::tokenize::is_han)
        })
        .take(n)
        .map(str::to_owned)
        .collect();
    (words.len() == n).then_some(words)
}

fn join(sentences: &[String], chinese: bool) -> String {
    sentences.join(if chinese { "" } else { " " })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_seeded_and_copies_are_near() {
        let g = FingerprintGen::new(1, 1_000_000_000_000, 48 * 3_600_000);
        assert_eq!(g.entry(5), g.entry(5));
        assert_ne!(
            g.entry(5).fingerprint,
            FingerprintGen::new(2, 1_000_000_000_000, 48 * 3_600_000)
                .entry(5)
                .fingerprint
        );
        let copy = g.entry(1004);
        let original = g.entry(3);
        let ordered: Vec<i64> = (0..1000).map(|i| g.preload_entry(i, 1000).ts_ms).collect();
        assert!(ordered.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(g.preload_entry(7, 1000).fingerprint, g.entry(7).fingerprint);
        assert!(FingerprintGen::is_near_duplicate(1004));
        assert_eq!(
            (copy.fingerprint.simhash ^ original.fingerprint.simhash).count_ones(),
            1
        );
        for i in [0, 1, 999, 5000, 123_456] {
            let e = g.entry(i);
            assert!(e.ts_ms <= 1_000_000_000_000 && e.ts_ms >= 1_000_000_000_000 - 48 * 3_600_000);
        }
    }

    #[test]
    fn sketches_are_bottom_k_samples_with_shared_boilerplate() {
        let g = FingerprintGen::new(1, 1_000_000_000_000, 48 * 3_600_000);
        let sketches: Vec<Vec<u32>> = (0..4000)
            .map(|i| g.entry(i).fingerprint.signatures)
            .collect();
        assert!(sketches.iter().all(|s| !s.is_empty() && s.len() <= 12));
        assert!(sketches.iter().all(|s| s.windows(2).all(|w| w[0] < w[1])));
        let full = sketches.iter().filter(|s| s.len() == 12).count();
        assert!((2800..3200).contains(&full), "{full} of 4000 full sketches");
        // The indexed (4 smallest) hashes are small numbers, as in real
        // sketches: on the zh corpus ~30 % fall in the lowest 1/16 of the range.
        let lookups: Vec<u32> = sketches
            .iter()
            .flat_map(|s| s[..s.len().min(4)].to_vec())
            .collect();
        let low = lookups.iter().filter(|&&h| h < 1 << 28).count() as f64 / lookups.len() as f64;
        assert!((0.25..0.4).contains(&low), "{low}");
        // Boilerplate: some hash is in the sketches of many articles.
        let mut counts = std::collections::HashMap::new();
        for h in sketches.iter().flatten() {
            *counts.entry(*h).or_insert(0u32) += 1;
        }
        assert!(counts.values().any(|&n| n >= 20), "a boilerplate hash");
        // A copy keeps most of its original's sketch.
        let (copy, original) = (g.entry(1004).fingerprint, g.entry(3).fingerprint);
        let shared = simdedup::decision::shared_count(&copy.signatures, &original.signatures);
        assert!(shared >= 4, "{shared} of 12 shared");
    }

    #[test]
    fn expected_duplicates_counts_the_copies() {
        for (lo, hi) in [(0, 0), (0, 2000), (1000, 1010), (1004, 1005), (7, 100_000)] {
            let brute = (lo..hi)
                .filter(|&i| FingerprintGen::is_near_duplicate(i))
                .count() as u64;
            assert_eq!(
                FingerprintGen::expected_duplicates(lo..hi),
                brute,
                "{lo}..{hi}"
            );
        }
    }

    #[test]
    fn texts_have_real_words() {
        let g = TextGen::new(1);
        let fp = simdedup::settings::Settings::default()
            .fingerprinter()
            .unwrap();
        let words: Vec<u32> = (0..1000)
            .map(|j| fp.fingerprint(&g.text(j)).words)
            .collect();
        assert!(words.iter().all(|&w| w >= 10), "{words:?}");
        let mean = words.iter().sum::<u32>() / words.len() as u32;
        assert!(mean >= 60, "mean {mean} words");
    }

    #[test]
    fn texts_are_seeded_news_sized_and_rewrites_share_most() {
        let g = TextGen::new(3);
        assert_eq!(g.text(10), TextGen::new(3).text(10));
        assert_ne!(g.text(10), TextGen::new(4).text(10));
        let lens: Vec<usize> = (0..200).map(|j| g.text(j).chars().count()).collect();
        let mean = lens.iter().sum::<usize>() / lens.len();
        assert!((150..2000).contains(&mean), "mean length {mean}");
        assert!((0..40).any(|j| g.text(j).contains('。')));
        assert!((0..40).any(|j| g.text(j).contains(". ")));
        let original = g.text(2);
        let rewrite = g.text(9);
        assert_ne!(original, rewrite);
        let shared = rewrite
            .split(['。', '.'])
            .filter(|s| !s.is_empty() && original.contains(*s))
            .count();
        assert!(shared >= 3, "{original}\n{rewrite}");
    }
}
