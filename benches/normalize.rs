//! Normalization time on 1 MB texts: hostile markup that a scan per marker
//! would make quadratic, and real news for comparison.
//!
//! `cargo bench --bench normalize` reads the news from
//! `../shared/data/cctv-news-2022-2025.jsonl` next to the project root (override
//! with `SIMDEDUP_BENCH_CORPUS=FILE`, JSONL with a `text` field); the hostile
//! inputs are built here. Figures and the command are recorded in
//! `docs/benchmarks.md`.

use std::io::BufRead;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use simdedup::normalize::normalize;

const MB: usize = 1 << 20;

/// About 1 MB of real articles, joined by blank lines.
fn news() -> String {
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
    let mut text = String::with_capacity(MB + 64 * 1024);
    for line in std::io::BufReader::new(file).lines() {
        let line = line.expect("read corpus line");
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).expect("corpus line is JSON");
        text.push_str(v["text"].as_str().expect("corpus line has a text"));
        text.push_str("\n\n");
        if text.len() >= MB {
            break;
        }
    }
    text
}

fn bench(c: &mut Criterion) {
    let inputs = [
        ("open_brackets", "[".repeat(MB)),
        ("unclosed_links", "[x](".repeat(MB / 4)),
        ("unclosed_tags", "<a".repeat(MB / 2)),
        ("news", news()),
    ];
    let mut group = c.benchmark_group("normalize_1mb");
    group.sample_size(10);
    for (name, text) in &inputs {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(*name, |b| b.iter(|| normalize(text).len()));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
