//! Run one JSONL stream (`{id, text}` lines) through the embedded index and the
//! Redis index (a private `redis-server` on a free port) and list the verdicts
//! that differ. The conformance suite holds the two to the same behaviour on
//! constructed cases; this checks it on real articles.
//!
//! cargo run --release --example compare_indexes -- ../shared/eval/dev-zh/stream.jsonl
use std::io::{BufRead, BufReader};

use simdedup::article::parse_json_line;
use simdedup::index::{EmbeddedIndex, Index, IndexEntry, RedisIndex, RedisIndexOptions};
use simdedup::redis_server::RedisServer;
use simdedup::settings::Settings;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: compare_indexes STREAM.jsonl"))?;
    let settings = Settings::load(None)?;
    let fingerprinter = settings.fingerprinter()?;
    let server = RedisServer::start()?;
    let config = settings.decision.clone();
    let redis = RedisIndex::connect(
        &server.url(),
        "compare",
        config.clone(),
        RedisIndexOptions::default(),
    )
    .await?;
    let embedded = EmbeddedIndex::new(config);
    // One millisecond apart, an hour ago: all inside the window, in order.
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        - 3_600_000;
    let (mut checked, mut differ, mut skipped) = (0, 0, 0);
    for (n, line) in BufReader::new(std::fs::File::open(&path)?)
        .split(b'\n')
        .enumerate()
    {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        // A line that is no article is rejected by both indexes' callers
        // alike: it is reported and skipped, not compared.
        let article = match parse_json_line(&line, usize::MAX) {
            Ok(article) => article,
            Err(e) => {
                eprintln!("line {}: skipped, not an article: {e}", n + 1);
                skipped += 1;
                continue;
            }
        };
        let entry = IndexEntry {
            id: article.id,
            ts_ms: start + n as i64,
            fingerprint: fingerprinter.fingerprint(&article.text),
        };
        let a = embedded.check_and_insert(&entry).await?;
        let b = redis.check_and_insert(&entry).await?;
        checked += 1;
        if a.verdict != b.verdict {
            differ += 1;
            println!(
                "line {}: {}\n  embedded: {:?}\n  redis:    {:?}",
                n + 1,
                entry.id,
                a.verdict,
                b.verdict
            );
        }
    }
    println!("{checked} articles, {differ} verdicts differ, {skipped} lines skipped");
    Ok(())
}
