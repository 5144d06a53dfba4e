//! The duplicate decision: given an article's fingerprint and the candidates an
//! index found for it, which earlier article (if any) is it a copy of, and why.
//!
//! Pure and shared by every [`Index`](crate::index::Index) implementation, so the
//! embedded and Redis indexes cannot disagree on a verdict.
//!
//! An article duplicates a candidate when
//! - **exact**: their content hashes are equal; or
//! - **simhash**: their SimHashes differ in at most `max_distance` bits; or
//! - **sentence**: they share part of their signature sketch (a bottom-k sample of
//!   clause hashes) *and* their SimHashes are close, where "close" loosens with the
//!   evidence: the bound is `sentence_max_distance × overlap` bits, `overlap` being
//!   the larger of the sketches' resemblance (shared / smaller sketch) and the
//!   estimated containment of either article in the other (see [`overlap`]). A copy
//!   that keeps all its text may differ by `sentence_max_distance` bits (edits, an
//!   added paragraph, a cut tail); one sharing a single clause of twelve must be
//!   nearly identical in SimHash. This is the precise second check that short
//!   texts, whose SimHash alone is unstable, need.
//!
//! A simhash or sentence match also needs the two articles' **numbers** to agree
//! (when both have a few): reports of one template — earnings tables, daily
//! figures, notices about different people — share their words and clauses but
//! not their figures, while a copy, a correction or a reissue keeps most of
//! them (see [`crate::distinctive`] and [`template_agreement`]). An exact match
//! needs nothing more: its letters and digits are the same.
//!
//! Among matches the best is the exact one, then the closest SimHash, then the one
//! sharing most signatures, then the earliest, then the smallest id.

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
pub use crate::shingles::shared_count;
use crate::shingles::{shares, Shares};
use crate::simhash::hamming;

/// Which signal decided a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Signal {
    Exact,
    Simhash,
    Sentence,
    /// Most of the article's text is in the earlier one: an excerpt, an
    /// abridgment (see [`crate::shingles`]).
    Excerpt,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Exact => "exact",
            Signal::Simhash => "simhash",
            Signal::Sentence => "sentence",
            Signal::Excerpt => "excerpt",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        match s {
            "exact" => Some(Signal::Exact),
            "simhash" => Some(Signal::Simhash),
            "sentence" => Some(Signal::Sentence),
            "excerpt" => Some(Signal::Excerpt),
            _ => None,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Thresholds of the decision. Defaults are measured on the dev sets (see
/// `docs/benchmarks.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecisionConfig {
    /// SimHash Hamming distance that alone makes a duplicate (k). The index finds
    /// these through 4 × 16-bit blocks, which guarantees k ≤ 3.
    pub max_distance: u32,
    /// SimHash bound for a candidate whose text the sketches say is fully shared;
    /// it shrinks in proportion to the estimated overlap.
    pub sentence_max_distance: u32,
    /// A containment estimate divides by at least this many sketch hashes, so a
    /// couple of coincidences between small samples cannot claim full containment.
    pub containment_min_sample: usize,
    /// Only articles whose timestamps are within this many milliseconds of each
    /// other are compared (the retention window; default two days).
    pub window_ms: u64,
    /// Candidates are looked up by the this many smallest hashes of the sketch
    /// (verification still uses the whole sketch). Two sketches sharing a good part
    /// of their hashes usually share some of their smallest ones (bottom-k of a
    /// bottom-k sample), so half the sketch finds the duplicates the whole would.
    /// Fewer miss copies whose edits are spread over every part of the text
    /// (a word substituted here and there): each edited clause gets a new hash,
    /// and the new hashes that fall among the smallest push the shared ones out
    /// of a short lookup prefix (measured in `docs/benchmarks.md`).
    pub lookup_signatures: usize,
    /// A simhash or sentence match whose number sketches agree less than this
    /// (resemblance or containment, 0..=1) is a different report of the same
    /// template, not a copy. 0 turns the rule off.
    pub template_min_agreement: f64,
    /// The template rule applies only when both articles have at least this
    /// many distinct numbers in their sketches: fewer say nothing either way.
    pub template_min_numbers: usize,
    /// An article at least this large (`Fingerprint::size`: Han characters,
    /// three per other word) is judged by how much of it an earlier article
    /// holds; a smaller one, a quote rather than an article, only by the
    /// other signals.
    pub judged_size: u16,
    /// A judged article whose share of shingles found in an earlier one is at
    /// least this, and above [`new_share`](DecisionConfig::new_share) within
    /// one standard error (a share read off a few sample values is known
    /// loosely), is its copy: `excerpt`, when no other signal matched.
    pub copy_share: f64,
    /// A judged article whose share found in an earlier one is below this
    /// within one standard error is new: never that one's copy, whatever
    /// else matches.
    pub new_share: f64,
    /// A new article that holds at least this share of the earlier one is
    /// a fuller story of it, and its verdict names it (`expands`).
    pub expands_share: f64,
    /// A share is trusted when it rests on at least this many sample values.
    pub shingle_min_sample: usize,
}

/// The largest `max_distance` the 4-block pigeonhole index can guarantee to find.
pub const MAX_PIGEONHOLE_DISTANCE: u32 = 3;

/// The most lookup sketch hashes an article is filed under: a candidate
/// index tags each entry of its one sketch table with the position of its
/// hash in a few bits.
pub const MAX_LOOKUP_SIGNATURES: usize = 16;

impl Default for DecisionConfig {
    fn default() -> Self {
        Self {
            max_distance: 3,
            sentence_max_distance: 17,
            containment_min_sample: 8,
            window_ms: 48 * 3600 * 1000,
            lookup_signatures: 6,
            template_min_agreement: 0.5,
            template_min_numbers: 3,
            judged_size: 150,
            copy_share: 0.8,
            new_share: 0.6,
            expands_share: 0.8,
            shingle_min_sample: 4,
        }
    }
}

/// A decision setting out of its range, named with its value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionConfigError {
    #[error("max_distance = {0} but the 4 × 16-bit block index only guarantees finding distances ≤ {MAX_PIGEONHOLE_DISTANCE}")]
    MaxDistance(u32),
    #[error("sentence_max_distance = {0} but a 64-bit hash differs in at most 64 bits")]
    SentenceMaxDistance(u32),
    #[error("lookup_signatures = {0} but it must be 1 to {MAX_LOOKUP_SIGNATURES}")]
    LookupSignatures(usize),
    #[error("window_ms must be positive")]
    WindowMs,
    #[error("template_min_agreement = {0} but an agreement is a share (0 to 1)")]
    TemplateMinAgreement(f64),
}

impl DecisionConfig {
    /// Check the thresholds make sense together.
    pub fn validate(&self) -> Result<(), DecisionConfigError> {
        if self.max_distance > MAX_PIGEONHOLE_DISTANCE {
            return Err(DecisionConfigError::MaxDistance(self.max_distance));
        }
        if self.sentence_max_distance > 64 {
            return Err(DecisionConfigError::SentenceMaxDistance(
                self.sentence_max_distance,
            ));
        }
        if !(1..=MAX_LOOKUP_SIGNATURES).contains(&self.lookup_signatures) {
            return Err(DecisionConfigError::LookupSignatures(
                self.lookup_signatures,
            ));
        }
        if self.window_ms == 0 {
            return Err(DecisionConfigError::WindowMs);
        }
        if !(0.0..=1.0).contains(&self.template_min_agreement) {
            return Err(DecisionConfigError::TemplateMinAgreement(
                self.template_min_agreement,
            ));
        }
        Ok(())
    }

    /// Are two timestamps close enough to be compared?
    pub fn in_window(&self, a_ms: i64, b_ms: i64) -> bool {
        a_ms.abs_diff(b_ms) <= self.window_ms
    }

    /// The farthest, in SimHash bits, a candidate can be and still match
    /// article `fp` other than by equal content: the simhash signal's bound,
    /// or the sentence signal's at full overlap; any distance for an article
    /// judged by its share (an excerpt of a long story is far from it in
    /// SimHash, and so is the flash a full story expands).
    pub fn farthest_match(&self, fp: &Fingerprint) -> u32 {
        if fp.size >= self.judged_size {
            64
        } else {
            self.sentence_reach()
        }
    }

    /// The farthest, in SimHash bits, a candidate can be and still match by
    /// the simhash or the sentence signal (the sentence bound at full
    /// overlap): beyond it, only by the share of text found.
    pub fn sentence_reach(&self) -> u32 {
        self.max_distance.max(self.sentence_max_distance)
    }

    /// The SimHash bound for a candidate with estimated text overlap `overlap`
    /// (0..=1); `None` when nothing is shared.
    pub fn sentence_bound(&self, overlap: f64) -> Option<u32> {
        // A hair of slack so exact fractions (e.g. 6/12) are not lost to rounding.
        (overlap > 0.0).then(|| {
            (f64::from(self.sentence_max_distance) * overlap.min(1.0) + 1e-9).floor() as u32
        })
    }
}

/// Estimated share of `b`'s text that is also in `a`, from their sketches (sorted
/// bottom-k samples of clause hashes).
///
/// Every hash of `a` up to its largest sketch hash `τ` is in `a`'s sketch, so for
/// `b`'s sketch hashes ≤ `τ`, membership in `a` can be read off exactly; the share
/// found estimates |a ∩ b| / |b|. This is what a truncated copy (all its text in
/// the original) or an original with a paragraph added (all of it in the copy)
/// shows, where resemblance alone would only see a part.
pub fn containment<T: Ord + Copy>(b: &[T], a: &[T], min_sample: usize) -> f64 {
    let Some(&tau) = a.last() else {
        return 0.0;
    };
    let sample = &b[..b.partition_point(|&x| x <= tau)];
    if sample.is_empty() {
        return 0.0;
    }
    shared_count(sample, a) as f64 / sample.len().max(min_sample) as f64
}

/// How much text two sketches say their articles share: their resemblance
/// (shared / smaller sketch), the containment of `a` in `b` and that of `b` in `a`.
pub fn overlaps<T: Ord + Copy>(a: &[T], b: &[T], min_sample: usize) -> [f64; 3] {
    let shared = shared_count(a, b);
    if shared == 0 {
        return [0.0; 3];
    }
    [
        shared as f64 / a.len().min(b.len()) as f64,
        containment(a, b, min_sample),
        containment(b, a, min_sample),
    ]
}

/// The largest of [`overlaps`]: what the sentence bound scales with.
pub fn overlap<T: Ord + Copy>(a: &[T], b: &[T], min_sample: usize) -> f64 {
    overlaps(a, b, min_sample).into_iter().fold(0.0, f64::max)
}

/// What the decision needs to know about a stored article.
#[derive(Debug, Clone, Copy)]
pub struct CandidateView<'a> {
    pub id: &'a str,
    pub simhash: u64,
    pub content: u64,
    pub signatures: &'a [u32],
    pub numbers: &'a [u16],
    pub shingles: &'a [u16],
    pub ts_ms: i64,
}

impl<'a> CandidateView<'a> {
    /// Article `id`, stored at `ts_ms` with fingerprint `fp`.
    pub fn of(id: &'a str, fp: &'a Fingerprint, ts_ms: i64) -> Self {
        CandidateView {
            id,
            simhash: fp.simhash,
            content: fp.content,
            signatures: &fp.signatures,
            numbers: &fp.numbers,
            shingles: &fp.shingles,
            ts_ms,
        }
    }
}

/// A match: which candidate, how far, by which signal, sharing how much text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Match {
    pub id: String,
    pub distance: u32,
    pub signal: Signal,
    /// The estimated overlap ([`Evidence::overlap`]) in hundredths ([`hundredths`]).
    pub overlap: u8,
}

/// A share (0..=1) in hundredths, rounded: how a verdict carries its overlap,
/// exact to the two digits it is shown with (see [`hundredths_text`]).
pub fn hundredths(share: f64) -> u8 {
    (share.clamp(0.0, 1.0) * 100.0).round() as u8
}

/// Hundredths as the share they are: `83` → `0.83`, `100` → `1.00`.
pub fn hundredths_text(h: u8) -> String {
    format!("{}.{:02}", h / 100, h % 100)
}

/// How far two number sketches agree (resemblance or containment either way,
/// each number counting alike), or `None` when either has fewer than
/// `min_numbers` numbers and so says nothing about templates.
pub fn template_agreement(a: &[u16], b: &[u16], min_numbers: usize) -> Option<f64> {
    (a.len() >= min_numbers.max(1) && b.len() >= min_numbers.max(1)).then(|| overlap(a, b, 1))
}

/// What an article's share of shingles found in a candidate makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ByShare {
    /// Too small (a quote, not an article), or its share rests on too few
    /// sample values: judged by the other signals alone.
    Unjudged,
    /// Most of its text is in the candidate: a copy.
    Copy,
    /// Most of its text is not: never the candidate's copy.
    New,
    /// Between the two: judged by the other signals.
    Between,
}

/// How many standard errors a share must clear the
/// [`new_share`](DecisionConfig::new_share) by: upwards to make an article a
/// copy, downwards to make it new. A wrong "copy" drops an article a reader
/// should have seen, a wrong "new" only keeps one more copy, so a copy needs
/// the surer reading.
const COPY_STANDARD_ERRORS: f64 = 1.5;
const NEW_STANDARD_ERRORS: f64 = 1.0;

impl DecisionConfig {
    /// What `shares` make of an article of `size` ([`ByShare`]).
    pub fn judge_by_share(&self, size: u16, shares: &Shares) -> ByShare {
        if size < self.judged_size || shares.b_sample < self.shingle_min_sample {
            return ByShare::Unjudged;
        }
        let (low, _) = shares.b_in_a_bounds(COPY_STANDARD_ERRORS);
        let (_, high) = shares.b_in_a_bounds(NEW_STANDARD_ERRORS);
        if shares.b_in_a >= self.copy_share && low >= self.new_share {
            ByShare::Copy
        } else if high < self.new_share {
            ByShare::New
        } else {
            ByShare::Between
        }
    }
}

/// Everything the decision weighs about one candidate, and what it makes of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Equal content hashes: the same letters and digits.
    pub exact: bool,
    /// SimHash Hamming distance.
    pub distance: u32,
    /// Sketch hashes the two share.
    pub shared: usize,
    /// Shared hashes / the smaller sketch.
    pub resemblance: f64,
    /// Estimated share of the article's text found in the candidate.
    pub containment: f64,
    /// Estimated share of the candidate's text found in the article.
    pub containment_reverse: f64,
    /// The overlap the sentence bound scales with: the largest of the three.
    pub overlap: f64,
    /// The SimHash bound the sentence signal allows at this overlap.
    pub sentence_bound: Option<u32>,
    /// Agreement of the number sketches, when both have enough numbers.
    pub number_agreement: Option<f64>,
    /// The share of the article's numbers found in the candidate's, when
    /// both have enough numbers: what an excerpt's figures must reach.
    pub numbers_found: Option<f64>,
    /// What the shingle samples say: the shares of each text found in the
    /// other and their Jaccard.
    pub shares: Shares,
    /// What the article's share found in the candidate makes of it.
    pub by_share: ByShare,
    /// The article holds the candidate and much more: a fuller story of it,
    /// never its duplicate.
    pub expands: bool,
    /// The signal the texts match by before the template rule, if any.
    pub matched_by: Option<Signal>,
    /// The template rule turned that match down: same template, other figures.
    pub template: bool,
}

impl Evidence {
    /// The verdict: the signal the candidate duplicates by, if any.
    pub fn signal(&self) -> Option<Signal> {
        self.matched_by.filter(|_| !self.template)
    }
}

/// Weigh one candidate against an article's fingerprint.
pub fn evidence(fp: &Fingerprint, c: &CandidateView<'_>, cfg: &DecisionConfig) -> Evidence {
    let distance = hamming(fp.simhash, c.simhash);
    let shared = shared_count(&fp.signatures, c.signatures);
    let [resemblance, containment, containment_reverse] =
        overlaps(&fp.signatures, c.signatures, cfg.containment_min_sample);
    let overlap = resemblance.max(containment).max(containment_reverse);
    let sentence_bound = cfg.sentence_bound(overlap);
    let exact = fp.content == c.content;
    let shares = shares(&fp.shingles, c.shingles);
    let by_share = cfg.judge_by_share(fp.size, &shares);
    let matched_by = if exact {
        Some(Signal::Exact)
    } else if by_share == ByShare::New {
        None
    } else if distance <= cfg.max_distance {
        Some(Signal::Simhash)
    } else if sentence_bound.is_some_and(|bound| distance <= bound) {
        Some(Signal::Sentence)
    } else if by_share == ByShare::Copy {
        Some(Signal::Excerpt)
    } else {
        None
    };
    let number_agreement = template_agreement(&fp.numbers, c.numbers, cfg.template_min_numbers);
    let numbers_found = numbers_found(&fp.numbers, c.numbers, cfg.template_min_numbers);
    // Reports of one template differ in their figures; an excerpt copies its
    // figures with its words, so its own must be found like its text.
    let template = !exact
        && match matched_by {
            None | Some(Signal::Exact) => false,
            Some(Signal::Excerpt) => numbers_found.is_some_and(|f| f < cfg.new_share),
            Some(_) => number_agreement.is_some_and(|a| a < cfg.template_min_agreement),
        };
    // No copy of the candidate, and most of it new: it expands the
    // candidate when it holds most of the candidate's text.
    let expands = (matched_by.is_none() || template)
        && by_share != ByShare::Unjudged
        && shares.b_in_a < cfg.new_share
        && shares.a_sample >= cfg.shingle_min_sample
        && shares.a_in_b >= cfg.expands_share;
    Evidence {
        exact,
        distance,
        shared,
        resemblance,
        containment,
        containment_reverse,
        overlap,
        sentence_bound,
        number_agreement,
        numbers_found,
        shares,
        by_share,
        expands,
        matched_by,
        template,
    }
}

/// The share of `b`'s numbers found in `a`'s, or `None` when either has fewer
/// than `min_numbers` (see [`template_agreement`]). A number sketch that is
/// not full holds all of its text's numbers, so then every number of `b`
/// counts; a full one, the numbers of `b` up to its largest hash.
pub fn numbers_found(b: &[u16], a: &[u16], min_numbers: usize) -> Option<f64> {
    let enough = b.len() >= min_numbers.max(1) && a.len() >= min_numbers.max(1);
    enough.then(|| {
        if a.len() < crate::distinctive::NUMBER_SKETCH {
            shared_count(b, a) as f64 / b.len() as f64
        } else {
            containment(b, a, 1)
        }
    })
}

/// Classify one candidate: the signal under which it is a duplicate, if any,
/// with the evidence that decided.
pub fn classify(
    fp: &Fingerprint,
    c: &CandidateView<'_>,
    cfg: &DecisionConfig,
) -> Option<(Signal, Evidence)> {
    let e = evidence(fp, c, cfg);
    Some((e.signal()?, e))
}

/// What [`decide`] found for an article.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The best match: the article is its duplicate.
    pub matched: Option<Match>,
    /// Without a match, the earlier article this one is a fuller story of
    /// ([`Evidence::expands`]), if any.
    pub expands: Option<String>,
}

/// Choose the best match for an article at `ts_ms` among `candidates` (which may
/// repeat and may include articles outside the window; both are handled here),
/// or, without one, the candidate it expands.
pub fn decide<'a>(
    fp: &Fingerprint,
    ts_ms: i64,
    candidates: impl IntoIterator<Item = CandidateView<'a>>,
    cfg: &DecisionConfig,
) -> Decision {
    if fp.is_empty() {
        return Decision::default();
    }
    // Smaller is better: exact first, then distance, then more shared signatures,
    // then earlier, then the smaller id (so the choice never depends on input order).
    type Rank<'a> = (bool, u32, std::cmp::Reverse<usize>, i64, &'a str);
    let mut best: Option<(Rank<'a>, Signal, f64)> = None;
    // The expanded candidate: the largest share of it held, then the
    // earliest, then the smaller id.
    type Expanded<'a> = (std::cmp::Reverse<u8>, i64, &'a str);
    let mut expands: Option<Expanded<'a>> = None;
    for c in candidates {
        if !cfg.in_window(ts_ms, c.ts_ms) {
            continue;
        }
        let e = evidence(fp, &c, cfg);
        let Some(signal) = e.signal() else {
            if e.expands {
                let rank = (
                    std::cmp::Reverse(hundredths(e.shares.a_in_b)),
                    c.ts_ms,
                    c.id,
                );
                if expands.is_none_or(|x| rank < x) {
                    expands = Some(rank);
                }
            }
            continue;
        };
        let rank = (
            signal != Signal::Exact,
            e.distance,
            std::cmp::Reverse(e.shared),
            c.ts_ms,
            c.id,
        );
        if best.as_ref().is_none_or(|(b, _, _)| rank < *b) {
            // An excerpt shares its own text with the candidate, not the
            // candidate's: its overlap is the share of it found there.
            let overlap = if signal == Signal::Excerpt {
                e.shares.b_in_a
            } else {
                e.overlap
            };
            best = Some((rank, signal, overlap));
        }
    }
    let matched = best.map(|((_, distance, _, _, id), signal, overlap)| Match {
        id: id.to_owned(),
        distance,
        signal,
        overlap: hundredths(overlap),
    });
    Decision {
        expands: expands
            .filter(|_| matched.is_none())
            .map(|(_, _, id)| id.to_owned()),
        matched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched<'a>(
        fp: &Fingerprint,
        ts_ms: i64,
        candidates: impl IntoIterator<Item = CandidateView<'a>>,
        cfg: &DecisionConfig,
    ) -> Option<Match> {
        decide(fp, ts_ms, candidates, cfg).matched
    }

    fn fp(simhash: u64, content: u64, signatures: &[u32]) -> Fingerprint {
        Fingerprint {
            simhash,
            content,
            signatures: signatures.to_vec(),
            words: 10,
            numbers: Vec::new(),
            ..Default::default()
        }
    }

    fn cand<'a>(
        id: &'a str,
        simhash: u64,
        content: u64,
        signatures: &'a [u32],
        ts_ms: i64,
    ) -> CandidateView<'a> {
        CandidateView {
            id,
            simhash,
            content,
            signatures,
            numbers: &[],
            shingles: &[],
            ts_ms,
        }
    }

    #[test]
    fn signals_and_bounds() {
        let cfg = DecisionConfig::default();
        let me = fp(0, 1, &[10, 20]);
        let far = u64::MAX; // distance 64
        assert_eq!(
            classify(&me, &cand("a", far, 1, &[], 0), &cfg).unwrap().0,
            Signal::Exact
        );
        assert_eq!(
            classify(&me, &cand("a", 0b111, 2, &[], 0), &cfg).unwrap().0,
            Signal::Simhash
        );
        assert!(classify(&me, &cand("a", 0b1111, 2, &[], 0), &cfg).is_none());
        // Sharing the whole (one-signature) sketch allows 17 bits.
        let bits17 = (1u64 << 17) - 1;
        let sentence =
            |h: u64, sig: &[u32]| classify(&me, &cand("a", h, 2, sig, 0), &cfg).map(|c| c.0);
        assert_eq!(sentence(bits17, &[20]), Some(Signal::Sentence));
        assert_eq!(sentence((bits17 << 1) | 1, &[20]), None);
        // Sharing 1 of 2 (overlap 0.5) allows 8 bits.
        assert_eq!(sentence(0xff, &[20, 30]), Some(Signal::Sentence));
        assert_eq!(sentence(0x1ff, &[20, 30]), None);
    }

    #[test]
    fn nothing_farther_than_the_farthest_match_matches_but_by_content() {
        for (max_distance, sentence_max_distance) in [(3, 17), (3, 2), (0, 0)] {
            let cfg = DecisionConfig {
                max_distance,
                sentence_max_distance,
                ..Default::default()
            };
            let me = fp(0, 1, &[10, 20]);
            let at = |bits: u32| {
                let h = if bits == 0 {
                    0
                } else {
                    u64::MAX >> (64 - bits)
                };
                classify(&me, &cand("a", h, 2, &[10, 20], 0), &cfg).is_some()
            };
            let farthest = cfg.farthest_match(&me);
            assert!(at(farthest) && !at(farthest + 1), "{cfg:?}");
        }
    }

    #[test]
    fn best_match_wins_and_window_applies() {
        let cfg = DecisionConfig {
            window_ms: 100,
            ..Default::default()
        };
        let me = fp(0, 1, &[5]);
        let s = [5u32];
        let cands = vec![
            cand("far-in-time", 0, 1, &s, 1000),
            cand("sentence", 0xff, 2, &s, 0),
            cand("simhash", 0b11, 2, &[], 0),
            cand("closer", 0b1, 2, &[], 50),
        ];
        let m = matched(&me, 0, cands, &cfg).unwrap();
        assert_eq!(
            (m.id.as_str(), m.distance, m.signal),
            ("closer", 1, Signal::Simhash)
        );
        // The window edge is inclusive.
        let m = matched(&me, 0, vec![cand("edge", 0, 1, &s, 100)], &cfg).unwrap();
        assert_eq!(m.signal, Signal::Exact);
        assert!(matched(&me, 0, vec![cand("out", 0, 1, &s, 101)], &cfg).is_none());
    }

    #[test]
    fn empty_fingerprint_never_matches() {
        let me = Fingerprint {
            words: 0,
            ..fp(0, 1, &[])
        };
        assert!(matched(
            &me,
            0,
            vec![cand("a", 0, 1, &[], 0)],
            &DecisionConfig::default()
        )
        .is_none());
    }

    #[test]
    fn ties_go_to_the_earliest_then_smallest_id() {
        let me = fp(0, 1, &[]);
        let cfg = DecisionConfig::default();
        let m = matched(
            &me,
            10,
            vec![
                cand("b", 1, 2, &[], 5),
                cand("a", 1, 2, &[], 5),
                cand("c", 1, 2, &[], 9),
            ],
            &cfg,
        );
        assert_eq!(m.unwrap().id, "a");
    }

    #[test]
    fn sentence_bound_grows_with_overlap() {
        let cfg = DecisionConfig::default();
        assert_eq!(cfg.sentence_bound(0.0), None);
        assert_eq!(cfg.sentence_bound(0.5), Some(8));
        assert_eq!(cfg.sentence_bound(1.0), Some(17));
        assert_eq!(cfg.sentence_bound(1.0 / 12.0), Some(1));
    }

    #[test]
    fn containment_sees_a_truncated_copy_whole() {
        // The original's sketch: 12 smallest of 0, 10, 20, ... ; the copy kept every
        // other clause, so its sketch reaches further up.
        let original: Vec<u32> = (0..12).map(|i| i * 10).collect();
        let copy: Vec<u32> = (0..12).map(|i| i * 20).collect();
        // Resemblance sees 6 of 12; containment of the copy in the original is full.
        assert_eq!(shared_count(&copy, &original), 6);
        assert_eq!(containment(&copy, &original, 1), 1.0);
        assert_eq!(overlap(&copy, &original, 1), 1.0);
        // A minimum sample keeps two lucky hits from claiming everything.
        assert_eq!(containment(&[5, 10, 1000], &[0, 5, 10, 20], 8), 2.0 / 8.0);
        assert_eq!(overlap(&[1, 2], &[3, 4], 8), 0.0);
        assert_eq!(containment(&[1], &[], 8), 0.0);
    }

    #[test]
    fn same_template_other_figures_is_no_duplicate() {
        let cfg = DecisionConfig::default();
        let report = |numbers: &[u16]| Fingerprint {
            numbers: numbers.to_vec(),
            ..fp(0, 1, &[10, 20])
        };
        let earlier = [1u16, 2, 3, 4, 5, 6];
        let near = |numbers| CandidateView {
            numbers,
            ..cand("a", 0b11, 2, &[10, 20], 0)
        };
        // Same words (SimHash distance 2), other figures: a new report.
        let e = evidence(&report(&[7, 8, 9, 11, 12, 13]), &near(&earlier), &cfg);
        assert_eq!(e.matched_by, Some(Signal::Simhash));
        assert!(e.template);
        assert_eq!(e.signal(), None);
        // A figure fixed: a correction, still a duplicate.
        let e = evidence(&report(&[1, 2, 3, 4, 5, 7]), &near(&earlier), &cfg);
        assert_eq!(e.signal(), Some(Signal::Simhash));
        // A tail cut: all its figures are in the earlier one (containment).
        let e = evidence(&report(&[1, 2, 3]), &near(&earlier), &cfg);
        assert_eq!(e.number_agreement, Some(1.0));
        assert_eq!(e.signal(), Some(Signal::Simhash));
        // Too few numbers on one side say nothing.
        let e = evidence(&report(&[7, 8]), &near(&earlier), &cfg);
        assert_eq!(
            (e.number_agreement, e.signal()),
            (None, Some(Signal::Simhash))
        );
        // An exact copy needs no figures to agree; the rule off lets all through.
        let exact = CandidateView {
            content: 1,
            ..near(&earlier)
        };
        let other = report(&[7, 8, 9, 11, 12, 13]);
        assert_eq!(evidence(&other, &exact, &cfg).signal(), Some(Signal::Exact));
        let off = DecisionConfig {
            template_min_agreement: 0.0,
            ..cfg
        };
        assert_eq!(
            evidence(&other, &near(&earlier), &off).signal(),
            Some(Signal::Simhash)
        );
    }

    #[test]
    fn lookup_finds_a_copy_whose_edits_are_spread_out() {
        // A copy with a word substituted in four clauses: their new hashes
        // happen to fall below every kept one, and take the lowest places of
        // its sketch. The index links two articles when their lookup prefixes
        // share a hash.
        let original: Vec<u32> = (1..=12).map(|i| i * 100).collect();
        let mut copy = vec![5, 15, 25, 35];
        copy.extend_from_slice(&original[..8]);
        let linked = |n: usize| shared_count(&original[..n], &copy[..n]) > 0;
        let lookup = DecisionConfig::default().lookup_signatures;
        assert!(linked(lookup), "not found through {lookup} lookup hashes");
        // Four would not find it: the edited clauses fill the whole prefix.
        assert!(!linked(4));
    }

    #[test]
    fn a_match_carries_its_overlap_in_hundredths() {
        let cfg = DecisionConfig::default();
        let me = fp(0, 1, &[10, 20, 30]);
        // Two of three sketch hashes shared, 1 bit apart: a SimHash match
        // whose overlap is the sketches' resemblance, 2/3.
        let m = matched(&me, 0, vec![cand("a", 1, 2, &[10, 20, 40], 0)], &cfg).unwrap();
        assert_eq!((m.signal, m.overlap), (Signal::Simhash, 67));
        // Nothing sampled in common: 0, whatever decided.
        let m = matched(&me, 0, vec![cand("b", 0, 1, &[], 0)], &cfg).unwrap();
        assert_eq!((m.signal, m.overlap), (Signal::Exact, 0));
        assert_eq!(hundredths(2.0 / 3.0), 67);
        assert_eq!(hundredths(0.125), 13);
        assert_eq!(hundredths(1.5), 100);
        assert_eq!(hundredths_text(67), "0.67");
        assert_eq!(hundredths_text(5), "0.05");
        assert_eq!(hundredths_text(100), "1.00");
    }

    #[test]
    fn validate_rejects_unreachable_k() {
        let cfg = DecisionConfig {
            max_distance: 4,
            ..Default::default()
        };
        let e = cfg.validate().unwrap_err();
        assert_eq!(e, DecisionConfigError::MaxDistance(4));
        assert!(e.to_string().contains("≤ 3"), "{e}");
        assert!(DecisionConfig::default().validate().is_ok());
    }

    #[test]
    fn shared_count_of_sorted() {
        assert_eq!(shared_count(&[1, 3, 5, 7], &[2, 3, 7, 9]), 2);
        assert_eq!(shared_count(&[], &[1]), 0);
    }

    /// `count` sentences of 25 common Han characters from `seed`, each ending
    /// in a full stop: distinct text, as news sentences are.
    fn sentences(seed: u64, count: usize) -> Vec<String> {
        let han: Vec<char> = crate::random_text::COMMON_HAN.chars().collect();
        let mut rng = crate::random_text::Rng::new(seed);
        (0..count)
            .map(|_| {
                let mut s: String = (0..25).map(|_| rng.pick(&han)).collect();
                s.push('。');
                s
            })
            .collect()
    }

    fn fingerprint(text: &str) -> Fingerprint {
        crate::fingerprint::Fingerprinter::with_defaults()
            .unwrap()
            .fingerprint(text)
    }

    #[test]
    fn an_excerpt_is_a_copy_whatever_share_of_the_source_it_keeps() {
        let cfg = DecisionConfig::default();
        let source = sentences(7, 40);
        let a = fingerprint(&source.concat()).stored();
        // A quarter of the story, from its middle: far from it in SimHash.
        let excerpt = fingerprint(&source[14..24].concat());
        assert!(excerpt.size >= cfg.judged_size);
        let d = decide(&excerpt, 1, [CandidateView::of("source", &a, 0)], &cfg);
        let m = d.matched.expect("the excerpt is the source's copy");
        assert_eq!((m.id.as_str(), m.signal), ("source", Signal::Excerpt));
        assert!(m.distance > cfg.sentence_max_distance, "{m:?}");
        assert_eq!(d.expands, None);
        // Another story of the same length shares nothing with it.
        let other = fingerprint(&sentences(8, 10).concat());
        assert_eq!(
            decide(&other, 1, [CandidateView::of("source", &a, 0)], &cfg),
            Decision::default()
        );
    }

    #[test]
    fn the_full_story_after_its_flash_is_new_and_names_the_flash() {
        let cfg = DecisionConfig::default();
        let story = sentences(11, 40);
        let flash = fingerprint(&story[..8].concat()).stored();
        let full = fingerprint(&story.concat());
        let d = decide(&full, 1, [CandidateView::of("flash", &flash, 0)], &cfg);
        assert_eq!(d.matched, None, "{d:?}");
        assert_eq!(d.expands.as_deref(), Some("flash"));
        // The other way round, the flash after its story is a copy.
        let stored = full.stored();
        let flash = fingerprint(&story[..8].concat());
        let m = matched(&flash, 1, [CandidateView::of("full", &stored, 0)], &cfg);
        assert_eq!(m.map(|m| m.id), Some("full".to_owned()));
    }
}
