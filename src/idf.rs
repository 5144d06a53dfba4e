//! IDF tables: how rare (and so how telling) each word is.
//!
//! The default is jieba's own table (the `idf.txt` that ships with jieba and
//! jieba-rs, ~270 k Chinese words), built into the binary at compile time
//! (`build.rs`): a process reads it in place instead of parsing it. Words missing from a
//! table get its median IDF, as jieba does. `simdedup idf build` makes a table from one's own corpus, which
//! matters for English and for domain vocabulary the default never saw.
//!
//! File format (jieba's): one `word idf` pair per line, separated by whitespace.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;
use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

use crate::dictionary::{take_f64, take_u32};
use crate::tokenize::Tokenizer;

#[path = "jieba/word_hash.rs"]
mod word_hash;
use word_hash::{home_slot, tag, word_hash, ROW_BITS};

#[derive(Debug, thiserror::Error)]
pub enum IdfError {
    #[error("cannot read IDF table {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "IDF table {path}, line {line}: expected `word idf` with a finite number, found {found:?}"
    )]
    Parse {
        path: String,
        line: usize,
        found: String,
    },
    #[error("IDF table {path} has no entries")]
    Empty { path: String },
}

/// Word → inverse document frequency.
#[derive(Debug, Clone)]
pub struct IdfTable {
    words: Words,
    median: f64,
}

#[derive(Debug, Clone)]
enum Words {
    /// jieba's table, as `build.rs` laid it out.
    Builtin(&'static Builtin),
    // Fx: looked up once per distinct word of every article; SipHash's DoS
    // resistance buys nothing for a table we load ourselves.
    Map(FxHashMap<String, f64>),
}

/// The compile-time table, read in place from the binary: words in rising IDF
/// order (ties by word), and an open-addressing index from word to position.
struct Builtin {
    /// IDF of word `i` at bytes `8 i..8 i + 8` (little-endian `f64`).
    idf: &'static [u8],
    /// End of word `i` in `text` at bytes `4 i..4 i + 4` (little-endian `u32`).
    ends: &'static [u8],
    /// The words' UTF-8, one after another.
    text: &'static [u8],
    /// Bit `b` is set if a word starts with byte `b`.
    first: &'static [U32; 8],
    /// The index: a word's row plus one and its hash's tag
    /// (`src/jieba/word_hash.rs`), or 0; `2^slot_bits` slots.
    slots: &'static [U32],
    slot_bits: u32,
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin")
            .field("words", &self.len())
            .finish()
    }
}

impl Builtin {
    fn len(&self) -> usize {
        self.idf.len() / 8
    }

    #[inline]
    fn idf(&self, i: usize) -> f64 {
        f64::from_le_bytes(self.idf[8 * i..8 * i + 8].try_into().unwrap_or_default())
    }

    fn end(&self, i: usize) -> usize {
        u32::from_le_bytes(self.ends[4 * i..4 * i + 4].try_into().unwrap_or_default()) as usize
    }

    fn word_bytes(&self, i: usize) -> &'static [u8] {
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        &self.text[start..self.end(i)]
    }

    fn word(&self, i: usize) -> &'static str {
        std::str::from_utf8(self.word_bytes(i)).expect("build.rs wrote UTF-8 words")
    }

    /// The position of `word`, if the table has it.
    #[inline]
    fn find(&self, word: &str) -> Option<usize> {
        let word = word.as_bytes();
        let &b = word.first()?;
        if self.first[usize::from(b / 32)].get() & 1 << (b % 32) == 0 {
            return None;
        }
        let h = word_hash(word);
        let tag = tag(h);
        let mask = self.slots.len() - 1;
        let mut i = home_slot(h, self.slot_bits);
        loop {
            let slot = self.slots[i].get();
            if slot == 0 {
                return None;
            }
            let row = (slot & ((1 << ROW_BITS) - 1)) as usize - 1;
            if slot >> ROW_BITS == tag && self.word_bytes(row) == word {
                return Some(row);
            }
            i = (i + 1) & mask;
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        (0..self.len()).map(|i| (self.word(i), self.idf(i)))
    }
}

/// The table `build.rs` made (layout described there).
static IDF_BIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/idf.bin"));

impl IdfTable {
    /// jieba's built-in table, read in place from the binary and shared.
    pub fn builtin() -> Arc<IdfTable> {
        static BUILTIN: OnceLock<(Builtin, f64)> = OnceLock::new();
        let (builtin, median) = BUILTIN.get_or_init(|| {
            let (median, rest) = take_f64(IDF_BIN);
            let (n, rest) = take_u32(rest);
            let n = n as usize;
            let (idf, rest) = rest.split_at(8 * n);
            let (ends, rest) = rest.split_at(4 * n);
            let text_len =
                u32::from_le_bytes(ends[4 * n - 4..].try_into().unwrap_or_default()) as usize;
            let (text, rest) = rest.split_at(text_len.next_multiple_of(4));
            let (first, rest) = rest.split_at(32);
            let (slot_bits, slots) = take_u32(rest);
            (
                Builtin {
                    idf,
                    ends,
                    text: &text[..text_len],
                    first: <[U32; 8]>::ref_from_bytes(first).expect("build.rs wrote 256 bits"),
                    slots: <[U32]>::ref_from_bytes(slots).expect("build.rs wrote whole slots"),
                    slot_bits,
                },
                median,
            )
        });
        Arc::new(IdfTable {
            words: Words::Builtin(builtin),
            median: *median,
        })
    }

    /// Load a `word idf` table from a file.
    pub fn from_file(path: &Path) -> Result<IdfTable, IdfError> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| IdfError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_reader(std::io::BufReader::new(file), &shown)
    }

    /// Load a `word idf` table; `name` is used in error messages.
    pub fn from_reader(reader: impl BufRead, name: &str) -> Result<IdfTable, IdfError> {
        let mut idf = HashMap::new();
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(|source| IdfError::Read {
                path: name.to_owned(),
                source,
            })?;
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let mut parts = trimmed.split_whitespace();
            let parsed = match (
                parts.next(),
                parts.next().map(str::parse::<f64>),
                parts.next(),
            ) {
                (Some(word), Some(Ok(value)), None) if value.is_finite() => Some((word, value)),
                _ => None,
            };
            let Some((word, value)) = parsed else {
                return Err(IdfError::Parse {
                    path: name.to_owned(),
                    line: n + 1,
                    found: line.chars().take(80).collect(),
                });
            };
            idf.insert(word.to_owned(), value);
        }
        if idf.is_empty() {
            return Err(IdfError::Empty {
                path: name.to_owned(),
            });
        }
        Ok(Self::from_map(idf))
    }

    /// A table from a map; the median is the lower median, as jieba computes it.
    pub fn from_map(idf: HashMap<String, f64>) -> IdfTable {
        let idf: FxHashMap<String, f64> = idf.into_iter().collect();
        let mut values: Vec<f64> = idf.values().copied().collect();
        values.sort_by(f64::total_cmp);
        let median = values
            .get(values.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(1.0);
        IdfTable {
            words: Words::Map(idf),
            median,
        }
    }

    /// Is this jieba's built-in table ([`IdfTable::builtin`])?
    pub fn is_builtin(&self) -> bool {
        matches!(self.words, Words::Builtin(_))
    }

    /// The IDF of `word`, or the table's median when the word is unknown.
    pub fn get(&self, word: &str) -> f64 {
        match &self.words {
            Words::Builtin(b) => b.find(word).map_or(self.median, |i| b.idf(i)),
            Words::Map(map) => map.get(word).copied().unwrap_or(self.median),
        }
    }

    /// Every word of the table with its IDF, in no particular order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&str, f64)> + '_> {
        match &self.words {
            Words::Builtin(b) => Box::new(b.iter().map(|(w, v)| -> (&str, f64) { (w, v) })),
            Words::Map(map) => Box::new(map.iter().map(|(w, &v)| (w.as_str(), v))),
        }
    }

    /// The `n` words of lowest IDF (ties by word) among those `keep` accepts,
    /// in no particular order.
    pub fn lowest(&self, n: usize, keep: impl Fn(&str) -> bool) -> Vec<(&str, f64)> {
        match &self.words {
            // Already in rising order.
            Words::Builtin(b) => b.iter().filter(|(w, _)| keep(w)).take(n).collect(),
            Words::Map(_) => {
                let mut rows: Vec<(&str, f64)> = self.iter().filter(|(w, _)| keep(w)).collect();
                if rows.len() > n {
                    rows.select_nth_unstable_by(n, |a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
                    rows.truncate(n);
                }
                rows
            }
        }
    }

    pub fn median(&self) -> f64 {
        self.median
    }

    pub fn len(&self) -> usize {
        match &self.words {
            Words::Builtin(b) => b.len(),
            Words::Map(map) => map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counts document frequencies over a corpus to build a custom IDF table.
#[derive(Debug)]
pub struct IdfBuilder {
    tokenizer: Tokenizer,
    docs: u64,
    df: HashMap<String, u64>,
}

impl IdfBuilder {
    pub fn new(tokenizer: Tokenizer) -> Self {
        Self {
            tokenizer,
            docs: 0,
            df: HashMap::new(),
        }
    }

    /// Count one document (already normalized).
    pub fn add_normalized(&mut self, text: &str) {
        let mut seen: Vec<String> = Vec::new();
        self.tokenizer
            .for_each_word(text, |w| seen.push(w.to_owned()));
        seen.sort_unstable();
        seen.dedup();
        for w in seen {
            *self.df.entry(w).or_insert(0) += 1;
        }
        self.docs += 1;
    }

    pub fn documents(&self) -> u64 {
        self.docs
    }

    /// idf = ln(N / df) for words seen in at least `min_df` documents (rarer words
    /// are left out and get the median, which keeps typos from dominating).
    pub fn build(&self, min_df: u64) -> IdfTable {
        let n = self.docs.max(1) as f64;
        let idf = self
            .df
            .iter()
            .filter(|(_, &df)| df >= min_df.max(1))
            .map(|(w, &df)| (w.clone(), (n / df as f64).ln()))
            .collect();
        IdfTable::from_map(idf)
    }
}

/// Write a table as `word idf` lines, most telling first, then by word (stable output).
pub fn write_table(table: &IdfTable, mut out: impl Write) -> std::io::Result<()> {
    let mut rows: Vec<(&str, f64)> = table.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    for (word, idf) in rows {
        writeln!(out, "{word} {idf:.6}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_jiebas() {
        let t = IdfTable::builtin();
        assert!(t.len() > 250_000, "{}", t.len());
        // First rows of jieba's idf.txt.
        assert_eq!(t.get("劳动防护"), 13.900677652);
        assert_eq!(t.get("生化学"), 13.900677652);
        assert!(t.median() > 5.0 && t.median() < 15.0, "{}", t.median());
        assert_eq!(t.get("zzz-not-a-word"), t.median());
    }

    #[test]
    fn file_format_round_trip_and_errors() {
        let t = IdfTable::from_reader("# comment\nfoo 2.5\nbar 1.0\n\n".as_bytes(), "mem").unwrap();
        assert_eq!(t.get("foo"), 2.5);
        let mut buf = Vec::new();
        write_table(&t, &mut buf).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "foo 2.500000\nbar 1.000000\n"
        );
        let err = IdfTable::from_reader("foo 2.5\nbar x\n".as_bytes(), "mem").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(IdfTable::from_reader("".as_bytes(), "mem").is_err());
    }

    #[test]
    fn builder_counts_document_frequency() {
        let mut b = IdfBuilder::new(Tokenizer::new(false));
        b.add_normalized("apple banana apple");
        b.add_normalized("apple cherry");
        let t = b.build(1);
        assert_eq!(t.get("apple"), 0.0); // in every document
        assert!((t.get("banana") - 2f64.ln()).abs() < 1e-12);
        assert_eq!(b.build(2).len(), 1);
    }
}
