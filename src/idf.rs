//! IDF tables: how rare (and so how telling) each word is.
//!
//! The default is jieba's own table (the `idf.txt` that ships with jieba and
//! jieba-rs, ~270 k Chinese words). Words missing from a table get its median IDF,
//! as jieba does. `simdedup idf build` makes a table from one's own corpus, which
//! matters for English and for domain vocabulary the default never saw.
//!
//! File format (jieba's): one `word idf` pair per line, separated by whitespace.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;

use crate::tokenize::Tokenizer;

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
    #[error("jieba-rs's built-in IDF table could not be read (its Debug layout changed: {0})")]
    Builtin(&'static str),
}

/// Word → inverse document frequency.
#[derive(Debug, Clone)]
pub struct IdfTable {
    // Fx: looked up once per distinct word of every article; SipHash's DoS
    // resistance buys nothing for a table we load ourselves.
    idf: FxHashMap<String, f64>,
    median: f64,
}

impl IdfTable {
    /// jieba's built-in table, loaded once per process and shared.
    pub fn builtin() -> Result<Arc<IdfTable>, IdfError> {
        static BUILTIN: OnceLock<Result<Arc<IdfTable>, &'static str>> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                parse_jieba_debug(&format!("{:?}", jieba_rs::TfIdf::default())).map(Arc::new)
            })
            .clone()
            .map_err(IdfError::Builtin)
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
        IdfTable { idf, median }
    }

    /// The IDF of `word`, or the table's median when the word is unknown.
    pub fn get(&self, word: &str) -> f64 {
        self.idf.get(word).copied().unwrap_or(self.median)
    }

    /// Every word of the table with its IDF, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> + '_ {
        self.idf.iter().map(|(w, &v)| (w.as_str(), v))
    }

    pub fn median(&self) -> f64 {
        self.median
    }

    pub fn len(&self) -> usize {
        self.idf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.idf.is_empty()
    }
}

/// jieba-rs keeps its table private, but `TfIdf` derives `Debug`, which prints
/// `TfIdf { idf_dict: {"word": 1.23, ...}, median_idf: 4.56, .. }`. Reading that once
/// gives us jieba's exact table without shipping a second 6 MB copy of it. A test
/// pins known entries so a layout change upstream fails loudly.
fn parse_jieba_debug(debug: &str) -> Result<IdfTable, &'static str> {
    let start = debug.find("idf_dict: {").ok_or("no `idf_dict: {`")? + "idf_dict: {".len();
    let bytes = debug.as_bytes();
    let mut idf = FxHashMap::default();
    idf.reserve(300_000);
    let mut i = start;
    loop {
        while bytes.get(i) == Some(&b' ') || bytes.get(i) == Some(&b',') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'}') => break,
            Some(b'"') => {}
            _ => return Err("expected a quoted word"),
        }
        i += 1;
        let mut word = String::new();
        loop {
            let rest = &debug[i..];
            let stop = rest.find(['"', '\\']).ok_or("unterminated word")?;
            word.push_str(&rest[..stop]);
            i += stop;
            if bytes[i] == b'"' {
                i += 1;
                break;
            }
            // An escape: \" \\ \' \n \t or \u{..}; jieba's words only ever need the simple ones.
            let escaped = *bytes.get(i + 1).ok_or("dangling escape")?;
            word.push(match escaped {
                b'"' => '"',
                b'\\' => '\\',
                b'\'' => '\'',
                b'n' => '\n',
                b't' => '\t',
                b'r' => '\r',
                _ => return Err("unsupported escape in a word"),
            });
            i += 2;
        }
        let rest = debug[i..]
            .strip_prefix(": ")
            .ok_or("expected `: ` after a word")?;
        let len = rest.find([',', '}']).ok_or("unterminated number")?;
        let value: f64 = rest[..len].trim().parse().map_err(|_| "bad number")?;
        idf.insert(word, value);
        i += 2 + len;
    }
    if idf.is_empty() {
        return Err("empty idf_dict");
    }
    let median = debug[i..]
        .find("median_idf: ")
        .and_then(|p| {
            let rest = &debug[i + p + "median_idf: ".len()..];
            let end = rest.find([',', ' ', '}']).unwrap_or(rest.len());
            rest[..end].parse::<f64>().ok()
        })
        .ok_or("no median_idf")?;
    Ok(IdfTable { idf, median })
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
    let mut rows: Vec<(&String, &f64)> = table.idf.iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
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
        let t = IdfTable::builtin().expect("builtin");
        assert!(t.len() > 250_000, "{}", t.len());
        // First rows of jieba's idf.txt.
        assert_eq!(t.get("劳动防护"), 13.900677652);
        assert_eq!(t.get("生化学"), 13.900677652);
        assert!(t.median() > 5.0 && t.median() < 15.0, "{}", t.median());
        assert_eq!(t.get("zzz-not-a-word"), t.median());
    }

    #[test]
    fn parses_debug_with_escapes() {
        let t = parse_jieba_debug(
            r#"TfIdf { idf_dict: {"a\"b": 1.5, "c": 2.0}, median_idf: 1.5, config: X }"#,
        )
        .unwrap();
        assert_eq!(t.get("a\"b"), 1.5);
        assert_eq!(t.get("c"), 2.0);
        assert_eq!(t.median(), 1.5);
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
