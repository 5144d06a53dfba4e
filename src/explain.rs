//! Why a verdict: the evidence the decision weighs between two texts, for a person
//! (`simdedup explain A B`) or a machine (`--json`).
//!
//! B is judged against A as if A had arrived first, with the same
//! [`evidence`] the index's decision uses (time
//! windows aside: two texts have none), so an explanation cannot disagree with
//! a verdict. What the fingerprint keeps only as hashes is shown as text: the
//! clauses behind the shared sketch hashes, the numbers that agree or differ.

use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::article::validate_text;
use crate::settings::Settings;

use crate::decision::{
    evidence, hundredths, hundredths_text, ByShare, CandidateView, DecisionConfig, Evidence, Signal,
};
use crate::distinctive::numbers;
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::normalize::normalize;
use crate::signature::{key_of, pieces, unit_hash};

/// The decision on B against A, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// B duplicates A.
    pub duplicate: bool,
    /// The deciding signal, when it does.
    pub signal: Option<Signal>,
    /// B is no copy of A but a fuller story of it: it holds most of A and
    /// much more of its own (the verdict would name A in `expands`).
    pub expands: bool,
    /// One sentence saying why.
    pub reason: String,
    /// SimHash distance and the bounds it is held to.
    pub distance: u32,
    pub simhash_bound: u32,
    pub sentence_bound: Option<u32>,
    pub evidence: Evidence,
    /// Clauses (as B writes them) whose sketch hashes both texts carry.
    pub shared_clauses: Vec<String>,
    /// Distinct numbers of both texts, of A only, of B only.
    pub numbers_shared: Vec<String>,
    pub numbers_only_a: Vec<String>,
    pub numbers_only_b: Vec<String>,
    /// Both texts' fingerprints.
    pub a: Fingerprint,
    pub b: Fingerprint,
}

/// Explain the verdict on text `b` against text `a`.
pub fn explain(fp: &Fingerprinter, a: &str, b: &str, cfg: &DecisionConfig) -> Explanation {
    let (na, nb) = (normalize(a), normalize(b));
    let (fa, fb) = (
        fp.fingerprint_normalized(&na),
        fp.fingerprint_normalized(&nb),
    );
    // A as an index holds it: B is checked against what was stored of A.
    let stored = fa.stored();
    let e = evidence(&fb, &CandidateView::of("A", &stored, 0), cfg);
    let empty = fa.is_empty() || fb.is_empty();
    let signal = e.signal().filter(|_| !empty);
    let reason = reason(&e, cfg, empty);
    let shared: BTreeSet<u32> = fa
        .signatures
        .iter()
        .filter(|h| fb.signatures.binary_search(h).is_ok())
        .copied()
        .collect();
    let config = fp.config();
    let mut key = String::new();
    let mut shared_clauses = Vec::new();
    let mut seen = BTreeSet::new();
    for clause in pieces(&nb, config.signature_unit) {
        if key_of(clause, &mut key) >= config.min_signature_chars {
            let h = unit_hash(&key);
            if shared.contains(&h) && seen.insert(h) {
                shared_clauses.push(clause.to_owned());
            }
        }
    }
    let (num_a, num_b): (BTreeSet<&str>, BTreeSet<&str>) =
        (numbers(&na).collect(), numbers(&nb).collect());
    let owned = |s: &mut dyn Iterator<Item = &&str>| s.map(|n| n.to_string()).collect();
    Explanation {
        duplicate: signal.is_some(),
        signal,
        expands: e.expands && !empty,
        reason,
        distance: e.distance,
        simhash_bound: cfg.max_distance,
        sentence_bound: e.sentence_bound,
        shared_clauses,
        numbers_shared: owned(&mut num_a.intersection(&num_b)),
        numbers_only_a: owned(&mut num_a.difference(&num_b)),
        numbers_only_b: owned(&mut num_b.difference(&num_a)),
        evidence: e,
        a: fa,
        b: fb,
    }
}

/// `simdedup explain A B`: read both texts (`-` is standard input, for one of
/// them), explain, print for a person or as JSON.
pub fn run(settings: &Settings, a: &Path, b: &Path, json: bool) -> anyhow::Result<()> {
    if a == Path::new("-") && b == Path::new("-") {
        bail!("only one of A and B can be standard input (`-`)");
    }
    let read = |path: &Path| -> anyhow::Result<String> {
        let mut text = String::new();
        if path == Path::new("-") {
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading standard input (it must be UTF-8 text)")?;
        } else {
            text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {} (it must be UTF-8 text)", path.display()))?;
        }
        validate_text(&text, settings.max_text_bytes)
            .with_context(|| format!("{} cannot be fingerprinted", path.display()))?;
        Ok(text)
    };
    let (ta, tb) = (read(a)?, read(b)?);
    let x = explain(&settings.fingerprinter()?, &ta, &tb, &settings.decision);
    if json {
        crate::cli::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&x)?))?;
    } else {
        crate::cli::print_stdout(&x.to_string())?;
    }
    Ok(())
}

/// A share as verdicts carry it: two decimals, rounded as [`hundredths`].
fn share(x: f64) -> String {
    hundredths_text(hundredths(x))
}

fn reason(e: &Evidence, cfg: &DecisionConfig, empty: bool) -> String {
    if empty {
        return "a text without content words is compared with nothing".into();
    }
    let agreement = e
        .number_agreement
        .map_or_else(|| "too few numbers to compare".into(), share);
    let sh = &e.shares;
    match (e.matched_by, e.template) {
        (Some(Signal::Exact), _) => "the same letters and digits (equal content hashes)".into(),
        (Some(Signal::Excerpt), true) => format!(
            "{} of B's text is in A, but only {} of its numbers: not its figures",
            share(sh.b_in_a),
            e.numbers_found.map_or_else(String::new, share)
        ),
        (Some(signal), true) => format!(
            "the same template, other figures: a {signal} match, but the numbers agree {agreement} < {}",
            cfg.template_min_agreement
        ),
        (Some(Signal::Simhash), false) => format!(
            "SimHash distance {} ≤ {}; numbers: {agreement}",
            e.distance, cfg.max_distance
        ),
        (Some(Signal::Sentence), false) => format!(
            "overlap {} allows {} bits and the distance is {}; numbers: {agreement}",
            share(e.overlap),
            e.sentence_bound.unwrap_or(0),
            e.distance
        ),
        (Some(Signal::Excerpt), false) => format!(
            "{} of B's text is in A (≥ {}): an excerpt or abridgment of it",
            share(sh.b_in_a),
            cfg.copy_share
        ),
        (None, _) if e.by_share == ByShare::New => {
            let new = format!(
                "most of B is new: {} of its text is in A (< {} by a standard error), whatever else matches",
                share(sh.b_in_a),
                cfg.new_share
            );
            if e.expands {
                format!("{new}; B holds {} of A: it expands A", share(sh.a_in_b))
            } else {
                new
            }
        }
        (None, _) => match e.sentence_bound {
            Some(bound) => format!(
                "distance {} > {} and > {bound}, the bound overlap {} allows",
                e.distance,
                cfg.max_distance,
                share(e.overlap)
            ),
            None => format!(
                "distance {} > {} and no shared clause",
                e.distance, cfg.max_distance
            ),
        },
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.evidence;
        match self.signal {
            Some(signal) => writeln!(f, "verdict:   B duplicates A ({signal})")?,
            None if self.expands => {
                writeln!(f, "verdict:   B is not a duplicate of A: it expands A")?
            }
            None => writeln!(f, "verdict:   B is not a duplicate of A")?,
        }
        writeln!(f, "why:       {}", self.reason)?;
        write!(
            f,
            "simhash:   distance {} (alone a duplicate at ≤ {}",
            self.distance, self.simhash_bound
        )?;
        match self.sentence_bound {
            Some(b) => writeln!(f, "; with the shared clauses ≤ {b})")?,
            None => writeln!(f, ")")?,
        }
        writeln!(
            f,
            "overlap:   {} (resemblance {}, B in A {}, A in B {}; {} of {}/{} sketch hashes shared)",
            share(e.overlap),
            share(e.resemblance),
            share(e.containment),
            share(e.containment_reverse),
            e.shared,
            self.a.signatures.len(),
            self.b.signatures.len()
        )?;
        let sh = &e.shares;
        writeln!(
            f,
            "shares:    B in A {}, A in B {}, Jaccard {} (5-gram shingles, on {} and {} sample values): {}",
            share(sh.b_in_a),
            share(sh.a_in_b),
            share(sh.jaccard),
            sh.b_sample,
            sh.a_sample,
            match e.by_share {
                ByShare::Unjudged => "not judged by its share",
                ByShare::Copy => "a copy by its share",
                ByShare::New => "new by its share",
                ByShare::Between => "neither a copy nor new by its share",
            }
        )?;
        match (e.number_agreement, e.numbers_found) {
            (Some(a), Some(found)) => writeln!(
                f,
                "numbers:   agree {}, B's found in A {}",
                share(a),
                share(found)
            )?,
            _ => writeln!(f, "numbers:   too few to compare")?,
        }
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_owned()
            } else {
                v.join(" ")
            }
        };
        writeln!(f, "  shared:  {}", list(&self.numbers_shared))?;
        writeln!(f, "  A only:  {}", list(&self.numbers_only_a))?;
        writeln!(f, "  B only:  {}", list(&self.numbers_only_b))?;
        writeln!(f, "shared clauses ({}):", self.shared_clauses.len())?;
        for c in &self.shared_clauses {
            writeln!(f, "  {c}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explain_default(a: &str, b: &str) -> Explanation {
        let fp = Fingerprinter::with_defaults().unwrap();
        explain(&fp, a, b, &DecisionConfig::default())
    }

    #[test]
    fn a_copy_shows_its_shared_clauses() {
        let a = "The central bank raised its main rate by a quarter point on Tuesday, its third rise this year. Markets had expected the move after inflation reached 4.1 pct in March.";
        let b = format!("{a} Analysts said more rises were likely.");
        let x = explain_default(a, &b);
        assert!(x.duplicate, "{x}");
        assert!(x
            .shared_clauses
            .iter()
            .any(|c| c.contains("raised its main rate")));
        assert_eq!(x.numbers_shared, ["4.1"]);
    }
}
