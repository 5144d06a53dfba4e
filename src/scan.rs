//! `simdedup scan`: JSONL articles in, one verdict per line out, no Redis.
//!
//! Parsing and fingerprinting run on all cores (rayon) a chunk at a time, on a
//! thread of their own; decisions run on the caller's thread in arrival order, so
//! each article is checked against exactly the articles before it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::ops::Range;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;

use crate::article::{id_hint, parse_json_line, EventTimeBounds, Rejection};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::index::{EmbeddedIndex, IndexEntry, Verdict};
use crate::simhash::to_hex;

/// Lines fingerprinted together, at most: enough to keep every core busy.
const CHUNK_LINES: usize = 1024;
/// A chunk ends at the line that takes it to this many bytes, so that its
/// buffer, reserved once and kept, stays about this size: memory the
/// allocator takes fresh from the system (and the kernel clears) once.
const CHUNK_BYTES: usize = 1 << 20;

/// One output line of `scan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScanRecord {
    /// The article's id (null when the line was rejected before an id was read).
    pub id: Option<String>,
    /// `unique`, `duplicate` or `rejected`.
    pub verdict: &'static str,
    pub dup_of: Option<String>,
    pub distance: Option<u32>,
    pub signal: Option<&'static str>,
    /// Duplicates: the estimated share of text in common with the article
    /// that matched (0 to 1, two decimals; see `docs/protocol.md`).
    #[serde(serialize_with = "serialize_hundredths")]
    pub overlap: Option<u8>,
    pub simhash: Option<String>,
    /// Unique articles: the earlier article this one is a fuller story of
    /// (it holds most of that one's text, and much more of its own).
    pub expands: Option<String>,
    pub reason: Option<String>,
    /// 1-based input line number, on rejected lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

impl ScanRecord {
    fn decided(id: String, fp: &Fingerprint, verdict: &Verdict) -> Self {
        let d = verdict.duplicate();
        ScanRecord {
            id: Some(id),
            verdict: if d.is_some() { "duplicate" } else { "unique" },
            dup_of: d.map(|d| d.dup_of.clone()),
            distance: d.map(|d| d.distance),
            signal: d.map(|d| d.signal.as_str()),
            overlap: d.and_then(|d| d.overlap),
            simhash: Some(to_hex(fp.simhash)),
            expands: verdict.expands().map(str::to_owned),
            reason: None,
            line: None,
        }
    }

    fn rejected(id: Option<String>, line: u64, why: &Rejection) -> Self {
        ScanRecord {
            id,
            verdict: "rejected",
            dup_of: None,
            distance: None,
            signal: None,
            overlap: None,
            simhash: None,
            expands: None,
            reason: Some(format!("line {line}: {why}")),
            line: Some(line),
        }
    }
}

/// Options of a scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub max_text_bytes: usize,
    /// Timestamp for articles without `ts` (all such articles share one window).
    pub default_ts_ms: i64,
    /// Input size in bytes, for the progress bar (None: a spinner).
    pub total_bytes: Option<u64>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// A `ts` that reads as another unit than milliseconds at
    /// `default_ts_ms` is rejected as the worker rejects it (`ts_wrong_unit`).
    pub event_time: EventTimeBounds,
}

/// Counts of a finished scan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScanSummary {
    pub articles: u64,
    pub unique: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub by_signal: BTreeMap<&'static str, u64>,
    pub by_reason: BTreeMap<&'static str, u64>,
    #[serde(serialize_with = "serialize_secs")]
    pub elapsed: Duration,
}

/// Hundredths as the JSON number they stand for (`83` → `0.83`).
fn serialize_hundredths<S: serde::Serializer>(h: &Option<u8>, s: S) -> Result<S::Ok, S::Error> {
    match h {
        Some(h) => s.serialize_f64(f64::from(*h) / 100.0),
        None => s.serialize_none(),
    }
}

fn serialize_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl ScanSummary {
    pub fn per_second(&self) -> f64 {
        self.articles as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for ScanSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// " (a 1, b 2)" for a non-empty breakdown, nothing otherwise.
        fn breakdown(
            f: &mut std::fmt::Formatter<'_>,
            counts: &BTreeMap<&str, u64>,
        ) -> std::fmt::Result {
            if counts.is_empty() {
                return Ok(());
            }
            let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            write!(f, " ({})", parts.join(", "))
        }
        write!(
            f,
            "{} articles in {:.2}s after start-up ({:.0}/s): {} unique, {} duplicate",
            self.articles,
            self.elapsed.as_secs_f64(),
            self.per_second(),
            self.unique,
            self.duplicate
        )?;
        breakdown(f, &self.by_signal)?;
        write!(f, ", {} rejected", self.rejected)?;
        breakdown(f, &self.by_reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("reading input: {0}")]
    Read(#[source] std::io::Error),
    #[error("writing verdicts: {0}")]
    Write(#[source] std::io::Error),
}

/// A line after the parallel stage: of an article, what the decision needs
/// (its text is dropped on the thread that fingerprinted it).
enum Prepared {
    Ok {
        id: String,
        ts_ms: Option<i64>,
        fingerprint: Fingerprint,
    },
    Rejected {
        id: Option<String>,
        line: u64,
        why: Rejection,
    },
}

fn prepare(fp: &Fingerprinter, line_no: u64, bytes: &[u8], options: &ScanOptions) -> Prepared {
    let parsed =
        parse_json_line(bytes, options.max_text_bytes).and_then(|article| match article.ts_ms {
            Some(ts) => options
                .event_time
                .check_unit(ts, options.default_ts_ms)
                .map(|()| article),
            None => Ok(article),
        });
    match parsed {
        Err(why) => Prepared::Rejected {
            id: id_hint(bytes),
            line: line_no,
            why,
        },
        Ok(article) => {
            let fingerprint = fp.fingerprint(&article.text);
            if fingerprint.is_empty() {
                Prepared::Rejected {
                    id: Some(article.id),
                    line: line_no,
                    why: Rejection::NoContent,
                }
            } else {
                Prepared::Ok {
                    id: article.id,
                    ts_ms: article.ts_ms,
                    fingerprint,
                }
            }
        }
    }
}

/// Run a scan: read JSONL from `input`, write one [`ScanRecord`] per non-blank line
/// to `output` as a JSON line, deciding against (and inserting into) `index`.
pub fn scan(
    input: impl BufRead + Send,
    output: impl Write,
    fingerprinter: &Fingerprinter,
    index: &EmbeddedIndex,
    options: &ScanOptions,
) -> Result<ScanSummary, ScanError> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, output);
    let summary = scan_records(input, fingerprinter, index, options, |record| {
        serde_json::to_writer(&mut out, &record)?;
        out.write_all(b"\n")
    })?;
    out.flush().map_err(ScanError::Write)?;
    Ok(summary)
}

/// [`scan`], handing each [`ScanRecord`] to `sink` in input order instead of
/// writing it; an error from `sink` ends the scan as [`ScanError::Write`].
pub fn scan_records(
    mut input: impl BufRead + Send,
    fingerprinter: &Fingerprinter,
    index: &EmbeddedIndex,
    options: &ScanOptions,
    mut sink: impl FnMut(ScanRecord) -> std::io::Result<()>,
) -> Result<ScanSummary, ScanError> {
    let started = Instant::now();
    let bar = progress_bar(options);
    let mut summary = ScanSummary::default();
    let (tx, rx) = mpsc::sync_channel::<Result<(Vec<Prepared>, u64), std::io::Error>>(2);

    std::thread::scope(|scope| -> Result<(), ScanError> {
        scope.spawn(move || {
            let mut line_no = 0u64;
            // A chunk's lines, one after another in one buffer, and each line's
            // number and range in it; both kept for the next chunk.
            let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK_BYTES + (1 << 16));
            let mut lines: Vec<(u64, Range<usize>)> = Vec::with_capacity(CHUNK_LINES);
            loop {
                chunk.clear();
                lines.clear();
                let mut bytes_read = 0u64;
                while lines.len() < CHUNK_LINES && chunk.len() < CHUNK_BYTES {
                    let start = chunk.len();
                    match read_line_into(&mut input, &mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            bytes_read += n as u64;
                            line_no += 1;
                            if chunk[start..].iter().all(u8::is_ascii_whitespace) {
                                chunk.truncate(start);
                                continue;
                            }
                            lines.push((line_no, start..chunk.len()));
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                if lines.is_empty() && bytes_read == 0 {
                    return;
                }
                let prepared: Vec<Prepared> = lines
                    .par_iter()
                    .map(|(n, range)| {
                        let bytes = &chunk[range.clone()];
                        prepare(fingerprinter, *n, bytes, options)
                    })
                    .collect();
                if tx.send(Ok((prepared, bytes_read))).is_err() {
                    return;
                }
            }
        });

        for chunk in rx {
            let (prepared, bytes_read) = chunk.map_err(ScanError::Read)?;
            for item in prepared {
                summary.articles += 1;
                let record = match item {
                    Prepared::Ok {
                        id,
                        ts_ms,
                        fingerprint,
                    } => {
                        let entry = IndexEntry {
                            id,
                            ts_ms: ts_ms.unwrap_or(options.default_ts_ms),
                            fingerprint,
                        };
                        let outcome = index.check_and_insert_now(&entry);
                        match outcome.verdict.duplicate() {
                            Some(d) => {
                                summary.duplicate += 1;
                                *summary.by_signal.entry(d.signal.as_str()).or_insert(0) += 1;
                            }
                            None => summary.unique += 1,
                        }
                        ScanRecord::decided(entry.id, &entry.fingerprint, &outcome.verdict)
                    }
                    Prepared::Rejected { id, line, why } => {
                        summary.rejected += 1;
                        *summary.by_reason.entry(why.code()).or_insert(0) += 1;
                        ScanRecord::rejected(id, line, &why)
                    }
                };
                sink(record).map_err(ScanError::Write)?;
            }
            bar.inc(bytes_read);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Append the next line of `input` (to its `\n` or the end) to `buf`, and
/// return its length: `read_until(b'\n', buf)`, with the `memchr` crate's
/// vectorised newline search.
fn read_line_into(input: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (done, used) = match memchr::memchr(b'\n', available) {
            Some(i) => (true, i + 1),
            None => (available.is_empty(), available.len()),
        };
        buf.extend_from_slice(&available[..used]);
        input.consume(used);
        read += used;
        if done {
            return Ok(read);
        }
    }
}

fn progress_bar(options: &ScanOptions) -> ProgressBar {
    if !options.progress {
        return ProgressBar::hidden();
    }
    match options.total_bytes {
        Some(total) => {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} scanning [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} scanning {bytes} {bytes_per_sec}")
                    .expect("static template"),
            );
            bar
        }
    }
}
