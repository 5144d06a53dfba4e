//! One behavioural suite for every [`Index`] implementation.
//!
//! Each case is an async fn generic over `I: Index`, given a fresh, empty index
//! built with [`config()`]. `tests/it/embedded_index.rs` and `tests/it/redis_index.rs`
//! run every case through [`conformance_cases!`], one `#[tokio::test]` per case
//! per implementation, so the two cannot drift apart.
//!
//! Timestamps are event time around [`base()`], a little in the future of the wall
//! clock: the Redis index expires keys by wall clock, so articles must be recent
//! for it to keep them (the embedded one only looks at event time).
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use simdedup::decision::{DecisionConfig, Signal};
use simdedup::fingerprint::Fingerprint;
use simdedup::index::{Cluster, Duplicate, Index, IndexEntry, IndexError, Outcome, Verdict};

pub const HOUR: i64 = 3600 * 1000;
pub const WINDOW: i64 = 48 * HOUR;

/// Invokes `$run!(case)` for every case of the suite.
#[macro_export]
macro_rules! conformance_cases {
    ($run:ident) => {
        $run!(exact_signal_beats_simhash);
        $run!(simhash_signal_up_to_k);
        $run!(sentence_signal_needs_shared_sketch);
        $run!(dup_of_resolves_to_the_root);
        $run!(same_id_is_replayed_never_reinserted);
        $run!(query_writes_nothing);
        $run!(delete_forgets_an_article);
        $run!(window_edges_are_inclusive);
        $run!(empty_fingerprints_are_never_compared);
        $run!(get_returns_what_was_stored);
        $run!(cluster_lists_root_and_duplicates);
        $run!(empty_ids_are_refused);
        $run!(checks_report_what_they_examined);
        $run!(block_neighbours_beyond_k_need_the_sketch_index);
        $run!(a_hash_lists_only_its_first_articles);
        $run!(a_story_copied_many_times_costs_each_check_the_same);
        $run!(a_deleted_root_is_never_named);
    };
}

/// The thresholds every case assumes (explicit, so tuning the defaults does not
/// silently change what is tested).
// `..Default::default()` keeps this compiling when the decision gains a knob.
#[allow(clippy::needless_update)]
pub fn config() -> DecisionConfig {
    DecisionConfig {
        max_distance: 3,
        sentence_max_distance: 22,
        containment_min_sample: 8,
        window_ms: WINDOW as u64,
        ..DecisionConfig::default()
    }
}

/// A timestamp one window ahead of now, at half past an hour (so no case sits on
/// a bucket edge by accident).
pub fn base() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now + WINDOW).div_euclid(HOUR) * HOUR + HOUR / 2
}

pub fn fp(simhash: u64, content: u64, signatures: &[u32]) -> Fingerprint {
    let mut signatures = signatures.to_vec();
    signatures.sort_unstable();
    Fingerprint {
        simhash,
        content,
        signatures,
        words: 40,
        numbers: Vec::new(),
        ..Default::default()
    }
}

pub fn entry(id: &str, ts_ms: i64, fingerprint: Fingerprint) -> IndexEntry {
    IndexEntry {
        id: id.to_owned(),
        ts_ms,
        fingerprint,
    }
}

/// A SimHash with bits spread out: no 16-bit block of it is zero-heavy.
pub const S: u64 = 0x9e37_79b9_7f4a_7c15;
/// Flip `n` bits of `S`, 3 per 16-bit block, so that at n ≥ 4 no block is shared.
pub fn flip(n: u32) -> u64 {
    let mut x = S;
    for i in 0..n {
        let block = i % 4;
        let bit = i / 4;
        x ^= 1 << (block * 16 + bit);
    }
    x
}

/// A sorted sketch of `n` distinct pseudo-random hashes (as fingerprints carry).
pub fn sketch(seed: u64, n: u64) -> Vec<u32> {
    let mut s: Vec<u32> = (0..n)
        .map(|i| ((seed * 1000 + i).wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32)
        .collect();
    s.sort_unstable();
    s
}

/// A duplicate verdict; `overlap` in hundredths (0 for the tests' articles
/// without a sketch, 100 for those sharing all of it).
fn dup(dup_of: &str, matched: &str, distance: u32, signal: Signal, overlap: u8) -> Verdict {
    Verdict::Duplicate(Duplicate {
        dup_of: dup_of.into(),
        matched: matched.into(),
        distance,
        signal,
        overlap: Some(overlap),
    })
}

pub async fn insert<I: Index>(idx: &I, e: &IndexEntry) -> Outcome {
    idx.check_and_insert(e).await.expect("check_and_insert")
}

async fn verdict<I: Index>(idx: &I, e: &IndexEntry) -> Verdict {
    let out = insert(idx, e).await;
    assert!(!out.replayed, "{} was not expected to be stored yet", e.id);
    out.verdict
}

pub async fn exact_signal_beats_simhash<I: Index>(idx: &I) {
    let t = base();
    assert_eq!(
        verdict(idx, &entry("a", t, fp(S, 1, &[]))).await,
        Verdict::UNIQUE
    );
    // Same content, SimHash far away: exact.
    assert_eq!(
        verdict(idx, &entry("b", t + 1, fp(!S, 1, &[]))).await,
        dup("a", "a", 64, Signal::Exact, 0)
    );
    // A SimHash neighbour of `a` and an exact copy of `a`: exact wins over closer.
    assert_eq!(
        verdict(idx, &entry("c", t + 2, fp(flip(2), 1, &[]))).await,
        dup("a", "a", 2, Signal::Exact, 0)
    );
}

pub async fn simhash_signal_up_to_k<I: Index>(idx: &I) {
    let t = base();
    assert_eq!(
        verdict(idx, &entry("a", t, fp(S, 1, &[]))).await,
        Verdict::UNIQUE
    );
    assert_eq!(
        verdict(idx, &entry("b", t, fp(flip(3), 2, &[]))).await,
        dup("a", "a", 3, Signal::Simhash, 0)
    );
    // Distance 4 from `a` (and 7 from `b`), every block different: not found.
    assert_eq!(
        verdict(idx, &entry("c", t, fp(S ^ 0x0002_0002_0002_0002, 3, &[]))).await,
        Verdict::UNIQUE
    );
    // Distance 4 within one block: found by the other blocks, but beyond k.
    assert_eq!(
        verdict(idx, &entry("d", t, fp(S ^ 0xf000, 4, &[]))).await,
        Verdict::UNIQUE
    );
}

pub async fn sentence_signal_needs_shared_sketch<I: Index>(idx: &I) {
    let t = base();
    let sk = sketch(1, 12);
    assert_eq!(
        verdict(idx, &entry("a", t, fp(S, 1, &sk))).await,
        Verdict::UNIQUE
    );
    // 12 bits away (no block shared), whole sketch shared: a sentence duplicate.
    assert_eq!(
        verdict(idx, &entry("b", t, fp(flip(12), 2, &sk))).await,
        dup("a", "a", 12, Signal::Sentence, 100)
    );
    // One shared signature of twelve is not enough at 12 bits.
    let mut one = sketch(2, 11);
    one.push(sk[0]);
    one.sort_unstable();
    assert_eq!(
        verdict(idx, &entry("c", t, fp(!S, 3, &one))).await,
        Verdict::UNIQUE
    );
    // The whole sketch shared but 40 bits away: beyond any bound.
    assert_eq!(
        verdict(idx, &entry("d", t, fp(S ^ 0x0000_00ff_ffff_ffff, 4, &sk))).await,
        Verdict::UNIQUE
    );
}

pub async fn dup_of_resolves_to_the_root<I: Index>(idx: &I) {
    let t = base();
    verdict(idx, &entry("root", t, fp(S, 1, &[]))).await;
    assert_eq!(
        verdict(idx, &entry("mid", t + 1, fp(S ^ 0b11, 2, &[]))).await,
        dup("root", "root", 2, Signal::Simhash, 0)
    );
    // Distance 1 from `mid`, 3 from `root`: matches `mid`, belongs to `root`.
    assert_eq!(
        verdict(idx, &entry("leaf", t + 2, fp(S ^ 0b111, 3, &[]))).await,
        dup("root", "mid", 1, Signal::Simhash, 0)
    );
}

pub async fn same_id_is_replayed_never_reinserted<I: Index>(idx: &I) {
    let t = base();
    let a = entry("a", t, fp(S, 1, &[]));
    assert_eq!(verdict(idx, &a).await, Verdict::UNIQUE);
    let again = insert(idx, &a).await;
    assert_eq!((again.verdict, again.replayed), (Verdict::UNIQUE, true));
    let b = entry("b", t + 5, fp(S, 1, &[]));
    let first = insert(idx, &b).await;
    assert_eq!(first.verdict, dup("a", "a", 0, Signal::Exact, 0));
    // Never "duplicate of itself", even with another fingerprint and time.
    let other = entry("b", t + 9, fp(!S, 99, &[]));
    let replay = insert(idx, &other).await;
    assert!(replay.replayed);
    assert_eq!(replay.verdict, first.verdict);
    // And nothing was written by the replay: `b` keeps its stored fingerprint.
    assert_eq!(
        idx.get("b").await.unwrap().unwrap().fingerprint,
        b.fingerprint
    );
    assert_eq!(
        verdict(idx, &entry("c", t, fp(!S, 99, &[]))).await,
        Verdict::UNIQUE
    );
}

pub async fn query_writes_nothing<I: Index>(idx: &I) {
    let t = base();
    let a = entry("a", t, fp(S, 1, &[]));
    let q = idx.query(&a).await.unwrap();
    assert_eq!((q.verdict, q.replayed), (Verdict::UNIQUE, false));
    assert_eq!(idx.get("a").await.unwrap(), None);
    // Still unique, so nothing was recorded.
    assert_eq!(idx.query(&a).await.unwrap().verdict, Verdict::UNIQUE);
    assert_eq!(verdict(idx, &a).await, Verdict::UNIQUE);
    let b = entry("b", t, fp(S ^ 1, 2, &[]));
    let q = idx.query(&b).await.unwrap();
    assert_eq!(q.verdict, dup("a", "a", 1, Signal::Simhash, 0));
    assert!(!q.replayed);
    assert_eq!(idx.get("b").await.unwrap(), None);
    assert_eq!(
        idx.cluster("a").await.unwrap().unwrap().duplicates,
        Vec::<String>::new()
    );
    // A stored id gets its stored verdict.
    let q = idx.query(&entry("a", t, fp(!S, 7, &[]))).await.unwrap();
    assert_eq!((q.verdict, q.replayed), (Verdict::UNIQUE, true));
}

pub async fn delete_forgets_an_article<I: Index>(idx: &I) {
    let t = base();
    let sk = sketch(3, 12);
    let a = entry("a", t, fp(S, 1, &sk));
    verdict(idx, &a).await;
    assert!(idx.delete("a").await.unwrap().found);
    assert!(!idx.delete("a").await.unwrap().found);
    assert!(!idx.delete("never").await.unwrap().found);
    assert_eq!(idx.get("a").await.unwrap(), None);
    assert_eq!(idx.cluster("a").await.unwrap(), None);
    // No signal finds the deleted article any more.
    assert_eq!(
        verdict(idx, &entry("b", t, fp(S, 1, &sk))).await,
        Verdict::UNIQUE
    );
    // Its id can be used again, and is then compared like any other.
    assert_eq!(verdict(idx, &a).await, dup("b", "b", 0, Signal::Exact, 100));
}

pub async fn window_edges_are_inclusive<I: Index>(idx: &I) {
    let t = base();
    verdict(idx, &entry("a", t, fp(S, 1, &[]))).await;
    // Exactly one window later: still compared.
    assert_eq!(
        verdict(idx, &entry("b", t + WINDOW, fp(S, 1, &[]))).await,
        dup("a", "a", 0, Signal::Exact, 0)
    );
    // One window and a millisecond earlier than `a` (arriving late): compared with
    // nothing.
    assert_eq!(
        verdict(idx, &entry("c", t - WINDOW - 1, fp(S, 1, &[]))).await,
        Verdict::UNIQUE
    );
    // A window and a millisecond after `a`: matches `b` only, still in `a`'s cluster.
    assert_eq!(
        verdict(idx, &entry("d", t + WINDOW + 1, fp(S ^ 1, 2, &[]))).await,
        dup("a", "b", 1, Signal::Simhash, 0)
    );
}

pub async fn empty_fingerprints_are_never_compared<I: Index>(idx: &I) {
    let t = base();
    let empty = Fingerprint {
        words: 0,
        ..fp(0, 5, &[])
    };
    assert_eq!(
        verdict(idx, &entry("e1", t, empty.clone())).await,
        Verdict::UNIQUE
    );
    assert_eq!(
        verdict(idx, &entry("e2", t, empty.clone())).await,
        Verdict::UNIQUE
    );
    assert_eq!(idx.get("e2").await.unwrap().unwrap().fingerprint, empty);
    assert!(insert(idx, &entry("e1", t, empty)).await.replayed);
    // A real article with the same content hash does not match them either.
    assert_eq!(
        verdict(idx, &entry("r", t, fp(0, 5, &[]))).await,
        Verdict::UNIQUE
    );
}

pub async fn get_returns_what_was_stored<I: Index>(idx: &I) {
    let t = base();
    let a = entry("a/é|:1", t + 123, fp(S, 1, &sketch(4, 12)));
    verdict(idx, &a).await;
    let b = entry("b", t + 456, fp(S ^ 4, 2, &sketch(5, 3)));
    let vb = verdict(idx, &b).await;
    let got = idx.get("a/é|:1").await.unwrap().unwrap();
    assert_eq!(
        (got.id.as_str(), got.ts_ms, &got.fingerprint, &got.verdict),
        (a.id.as_str(), a.ts_ms, &a.fingerprint, &Verdict::UNIQUE)
    );
    let got = idx.get("b").await.unwrap().unwrap();
    assert_eq!(
        (got.ts_ms, &got.fingerprint, &got.verdict),
        (b.ts_ms, &b.fingerprint, &vb)
    );
    assert_eq!(vb, dup("a/é|:1", "a/é|:1", 1, Signal::Simhash, 0));
    assert_eq!(idx.get("nope").await.unwrap(), None);
}

pub async fn cluster_lists_root_and_duplicates<I: Index>(idx: &I) {
    let t = base();
    verdict(idx, &entry("r", t, fp(S, 1, &[]))).await;
    verdict(idx, &entry("d2", t + 1, fp(S ^ 1, 2, &[]))).await;
    verdict(idx, &entry("d1", t + 2, fp(S ^ 3, 3, &[]))).await;
    verdict(idx, &entry("alone", t, fp(!S, 9, &[]))).await;
    let want = Cluster {
        root: "r".into(),
        duplicates: vec!["d1".into(), "d2".into()],
    };
    assert_eq!(idx.cluster("r").await.unwrap(), Some(want.clone()));
    assert_eq!(idx.cluster("d1").await.unwrap(), Some(want));
    assert_eq!(
        idx.cluster("alone").await.unwrap(),
        Some(Cluster {
            root: "alone".into(),
            duplicates: vec![]
        })
    );
    assert_eq!(idx.cluster("nope").await.unwrap(), None);
    assert!(idx.delete("d2").await.unwrap().found);
    assert_eq!(
        idx.cluster("r").await.unwrap().unwrap().duplicates,
        vec!["d1"]
    );
    // The root deleted: a duplicate keeps its dup_of, and is all that is known.
    assert!(idx.delete("r").await.unwrap().found);
    assert_eq!(
        idx.cluster("d1").await.unwrap(),
        Some(Cluster {
            root: "r".into(),
            duplicates: vec!["d1".into()]
        })
    );
}

pub async fn empty_ids_are_refused<I: Index>(idx: &I) {
    let e = entry("", base(), fp(S, 1, &[]));
    assert!(matches!(
        idx.check_and_insert(&e).await,
        Err(IndexError::EmptyId)
    ));
    assert!(matches!(idx.query(&e).await, Err(IndexError::EmptyId)));
    // Nothing was stored: a real article with that fingerprint is unique.
    assert_eq!(
        verdict(idx, &entry("a", base(), fp(S, 1, &[]))).await,
        Verdict::UNIQUE
    );
}

pub async fn checks_report_what_they_examined<I: Index>(idx: &I) {
    let t = base();
    let first = insert(idx, &entry("a", t, fp(S, 1, &sketch(1, 12)))).await;
    assert!(!first.replayed);
    assert_eq!(first.examined, 0, "an empty index has nothing to examine");
    let copy = insert(idx, &entry("b", t, fp(flip(1), 2, &sketch(1, 12)))).await;
    assert!(copy.verdict.is_duplicate());
    assert!(copy.examined >= 1, "{copy:?}");
    let replay = insert(idx, &entry("b", t, fp(flip(1), 2, &sketch(1, 12)))).await;
    assert!(replay.replayed);
    assert_eq!(replay.examined, 0);
}

/// A SimHash block neighbour farther than `max_distance` is no candidate by
/// itself: the sentence signal needs the sketch index to link the two (one of
/// the `lookup_signatures` smallest hashes shared), whatever the rest of the
/// sketches share. (The embedded index once compared every block neighbour.)
pub async fn block_neighbours_beyond_k_need_the_sketch_index<I: Index>(idx: &I) {
    let t = base();
    let a_sketch: Vec<u32> = (1..=12).map(|i| i * 1000).collect();
    verdict(idx, &entry("a", t, fp(S, 1, &a_sketch))).await;
    // 5 bits away in one block (three blocks shared), the largest hashes of
    // `a` shared, but not its lookup ones (the smallest), and its own lookup
    // hashes are new.
    let lookup = config().lookup_signatures;
    let mut b_sketch: Vec<u32> = (1..=lookup as u32).collect();
    b_sketch.extend_from_slice(&a_sketch[lookup..]);
    assert_eq!(
        verdict(idx, &entry("b", t, fp(S ^ 0x1f, 2, &b_sketch))).await,
        Verdict::UNIQUE
    );
    // The same distance with the whole sketch shared: the sketch index links
    // them, and the sentence signal decides.
    assert_eq!(
        verdict(idx, &entry("c", t, fp(S ^ 0x1f_0000, 3, &a_sketch))).await,
        dup("a", "a", 5, Signal::Sentence, 100)
    );
}

/// A sketch hash many articles share (a boilerplate clause) lists only the
/// first `LISTED_PER_HASH` of them, so a check fetches at most that many
/// articles through it however common it is; the others are stored all the
/// same. The same holds for content hashes and SimHashes.
pub async fn a_hash_lists_only_its_first_articles<I: Index>(idx: &I) {
    use simdedup::index::LISTED_PER_HASH;
    let t = base();
    let common = 7u32;
    for i in 0..LISTED_PER_HASH as u64 + 4 {
        // SimHashes ~32 bits apart with no 16-bit block in common, distinct
        // contents, and a sketch whose smallest hash is the shared one: one
        // clause of twelve in common is no duplicate at that distance.
        let simhash = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ S;
        let mut sk: Vec<u32> = sketch(100 + i, 11).iter().map(|h| h | 0x100).collect();
        sk.push(common);
        sk.sort_unstable();
        let e = entry(&format!("a{i}"), t, fp(simhash, 1000 + i, &sk));
        let out = insert(idx, &e).await;
        assert_eq!(out.verdict, Verdict::UNIQUE, "a{i}");
        assert_eq!(
            out.examined as usize,
            (i as usize).min(LISTED_PER_HASH),
            "a{i}: the articles listed under the shared hash"
        );
        assert_eq!(
            idx.get(&e.id).await.unwrap().unwrap().fingerprint,
            e.fingerprint
        );
    }
}

/// A story republished many times in a day: every copy is a duplicate of the
/// first, each check examines no more once `LISTED_PER_HASH` copies are
/// listed under each of its keys, and the cluster names every copy (its
/// links outgrow what a root holds inline).
pub async fn a_story_copied_many_times_costs_each_check_the_same<I: Index>(idx: &I) {
    use simdedup::index::LISTED_PER_HASH;
    let t = base();
    let story = fp(S, 1, &sketch(1, 12));
    verdict(idx, &entry("first", t, story.clone())).await;
    let mut examined = Vec::new();
    for i in 1..=3 * LISTED_PER_HASH {
        let out = insert(
            idx,
            &entry(&format!("copy-{i:02}"), t + i as i64, story.clone()),
        )
        .await;
        let d = out.verdict.duplicate().expect("a copy is a duplicate");
        assert_eq!(
            (d.dup_of.as_str(), d.signal),
            ("first", Signal::Exact),
            "copy-{i:02}"
        );
        examined.push(out.examined);
    }
    let listed = examined[LISTED_PER_HASH - 1];
    assert!(
        examined[..LISTED_PER_HASH].is_sorted() && examined[0] < listed,
        "{examined:?}"
    );
    assert!(
        examined[LISTED_PER_HASH..].iter().all(|&e| e == listed),
        "{examined:?}"
    );
    let cluster = idx.cluster("copy-07").await.unwrap().unwrap();
    assert_eq!(cluster.root, "first");
    assert_eq!(cluster.duplicates.len(), 3 * LISTED_PER_HASH);
    assert!(idx.delete("first").await.unwrap().found);
    assert_eq!(
        idx.cluster("copy-07").await.unwrap().unwrap().duplicates,
        ["copy-07"]
    );
}

/// A verdict never names a deleted article: a copy matching a duplicate whose
/// root was deleted names that duplicate, which stands for its cluster; one
/// matching the deleted article's own text finds only what is still stored.
pub async fn a_deleted_root_is_never_named<I: Index>(idx: &I) {
    let t = base();
    verdict(idx, &entry("root", t, fp(S, 1, &[]))).await;
    // 3 bits from the root, 3 more from the reworded copy: a chain.
    verdict(idx, &entry("reworded", t + 1, fp(S ^ 0b111, 2, &[]))).await;
    assert!(idx.delete("root").await.unwrap().found);
    let far = S ^ 0b111 ^ 0b111_000;
    assert_eq!(
        verdict(idx, &entry("again", t + 2, fp(far, 3, &[]))).await,
        dup("reworded", "reworded", 3, Signal::Simhash, 0)
    );
    // The root's own text again: it meets the reworded copy, not the root.
    assert_eq!(
        verdict(idx, &entry("root-again", t + 3, fp(S, 4, &[]))).await,
        dup("reworded", "reworded", 3, Signal::Simhash, 0)
    );
    // A query answers as a check would.
    let q = idx
        .query(&entry("q", t + 4, fp(S ^ 1, 5, &[])))
        .await
        .unwrap();
    let d = q
        .verdict
        .duplicate()
        .expect("a query of a copy is a duplicate");
    assert_ne!(d.dup_of, "root", "{q:?}");
    assert_eq!(
        idx.cluster("again").await.unwrap().unwrap().root,
        "reworded"
    );
}
