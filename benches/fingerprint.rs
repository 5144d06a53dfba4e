//! Fingerprinting throughput on real news (single thread = per core).
//!
//! `cargo bench --bench fingerprint` reads `../shared/data/cctv-news-2022-2025.jsonl`
//! next to the project root (override with `SIMDEDUP_BENCH_CORPUS=FILE`, JSONL with a `text` field). Figures
//! and the command are recorded in `docs/benchmarks.md`.

use std::io::BufRead;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use simdedup::fingerprint::Fingerprinter;
use simdedup::normalize::normalize;

fn corpus() -> Vec<String> {
    // `../shared` is a sibling of the project root (of this worktree, wherever it
    // is checked out), not of the current directory.
    let path = std::env::var("SIMDEDUP_BENCH_CORPUS").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/data/cctv-news-2022-2025.jsonl"
        )
        .to_owned()
    });
    let file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!("cannot open the bench corpus {path}: {e}. Set SIMDEDUP_BENCH_CORPUS to a JSONL file with a `text` field.")
    });
    std::io::BufReader::new(file)
        .lines()
        .map(|l| l.expect("read corpus line"))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l).expect("corpus line is JSON");
            v["text"]
                .as_str()
                .expect("corpus line has a text")
                .to_owned()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let texts = corpus();
    let bytes: usize = texts.iter().map(String::len).sum();
    let fp = Fingerprinter::with_defaults().expect("default fingerprinter");
    let mut group = c.benchmark_group("fingerprint");
    group.sample_size(10);
    group.throughput(Throughput::Elements(texts.len() as u64));
    group.bench_function("corpus_articles_single_thread", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| fp.fingerprint(t).simhash)
                .fold(0u64, |a, h| a ^ h)
        })
    });
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("corpus_bytes_normalize_only", |b| {
        b.iter(|| texts.iter().map(|t| normalize(t).len()).sum::<usize>())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
