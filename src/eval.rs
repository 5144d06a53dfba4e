//! Quality evaluation against a labelled stream (as in `../shared/eval`): the same
//! definitions as its `score.py`, so `simdedup eval` and the scorer agree.
//!
//! - recall: share of articles whose best earlier Jaccard ≥ 0.7 that were flagged;
//! - precision: share of flagged articles whose best earlier Jaccard ≥ 0.5.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct TruthRow {
    id: String,
    #[serde(default)]
    kind: Option<String>,
    best_j: f64,
}

/// Why a truth file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    #[error("reading the truth file")]
    Read(#[from] std::io::Error),
    #[error("truth line {line} is not {{\"id\", \"best_j\", [\"kind\"]}}")]
    Row {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

/// Ground truth: per id, its best earlier Jaccard and the kind of rewrite.
#[derive(Debug, Default)]
pub struct Truth {
    rows: HashMap<String, (f64, String)>,
    order: Vec<String>,
}

impl Truth {
    pub fn read(reader: impl BufRead) -> Result<Truth, TruthError> {
        let mut truth = Truth::default();
        for (n, line) in reader.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let row: TruthRow = serde_json::from_str(&line).map_err(|source| TruthError::Row {
                line: n + 1,
                source,
            })?;
            truth.order.push(row.id.clone());
            truth
                .rows
                .insert(row.id, (row.best_j, row.kind.unwrap_or_default()));
        }
        Ok(truth)
    }
}

#[derive(Debug, Serialize)]
pub struct Score {
    pub docs: usize,
    pub missing: usize,
    pub recall: f64,
    pub precision: f64,
    pub flagged: usize,
    pub strong: usize,
    pub recall_by_kind: BTreeMap<String, f64>,
    /// Flagged articles whose best earlier Jaccard is below 0.5 (up to 10).
    pub false_positives: Vec<String>,
    /// Strong duplicates that were not flagged (up to 10).
    pub missed: Vec<String>,
}

/// Score verdicts (`id` → flagged as duplicate).
pub fn score(truth: &Truth, flagged: &HashMap<String, bool>) -> Score {
    let mut strong = 0usize;
    let mut hit = 0usize;
    let mut by_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut missed = Vec::new();
    let mut flagged_n = 0usize;
    let mut good_flags = 0usize;
    let mut false_positives = Vec::new();
    let mut missing = 0usize;
    for id in &truth.order {
        let (best_j, kind) = &truth.rows[id];
        let is_flagged = match flagged.get(id) {
            Some(&f) => f,
            None => {
                missing += 1;
                false
            }
        };
        if *best_j >= 0.7 {
            strong += 1;
            let e = by_kind.entry(kind.clone()).or_default();
            e.1 += 1;
            if is_flagged {
                hit += 1;
                e.0 += 1;
            } else if missed.len() < 10 {
                missed.push(id.clone());
            }
        }
        if is_flagged {
            flagged_n += 1;
            if *best_j >= 0.5 {
                good_flags += 1;
            } else if false_positives.len() < 10 {
                false_positives.push(id.clone());
            }
        }
    }
    let round = |x: f64| (x * 10_000.0).round() / 10_000.0;
    Score {
        docs: truth.order.len(),
        missing,
        recall: round(hit as f64 / strong.max(1) as f64),
        precision: round(good_flags as f64 / flagged_n.max(1) as f64),
        flagged: flagged_n,
        strong,
        recall_by_kind: by_kind
            .into_iter()
            .map(|(k, (a, b))| (k, (a as f64 / b as f64 * 1000.0).round() / 1000.0))
            .collect(),
        false_positives,
        missed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_like_the_reference_scorer() {
        let truth = Truth::read(
            r#"{"id":"a","kind":"orig","best_j":0.0}
{"id":"b","kind":"copy","best_j":0.9}
{"id":"c","kind":"edit","best_j":0.75}
{"id":"d","kind":"orig","best_j":0.2}
"#
            .as_bytes(),
        )
        .unwrap();
        let flagged: HashMap<String, bool> = [("a", false), ("b", true), ("c", false), ("d", true)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let s = score(&truth, &flagged);
        assert_eq!((s.strong, s.flagged), (2, 2));
        assert_eq!(s.recall, 0.5);
        assert_eq!(s.precision, 0.5);
        assert_eq!(s.false_positives, vec!["d"]);
        assert_eq!(s.missed, vec!["c"]);
        assert_eq!(s.recall_by_kind["copy"], 1.0);
    }
}
