//! Fingerprint every article of a JSONL file (`{"id","text"}` per line) and print one
//! JSON fingerprint per line: a tool for analysing thresholds offline.
//!
//! Settings come from the environment as for the binary, e.g.
//! `SIMDEDUP_FINGERPRINT__SENTENCES=8 cargo run --release --example fingerprint_jsonl -- FILE`.

use std::io::{BufRead, BufReader, Write};

use rayon::prelude::*;
use simdedup::article::parse_json_line;
use simdedup::settings::Settings;
use simdedup::simhash::to_hex;

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: fingerprint_jsonl FILE.jsonl"))?;
    let settings = Settings::load(None)?;
    let fp = settings.fingerprinter()?;
    let lines: Vec<Vec<u8>> = BufReader::new(std::fs::File::open(&path)?)
        .split(b'\n')
        .collect::<Result<_, _>>()?;
    let rows: Vec<String> = lines
        .par_iter()
        .filter(|l| !l.is_empty())
        .map(|l| match parse_json_line(l, usize::MAX) {
            Ok(a) => {
                let f = fp.fingerprint(&a.text);
                serde_json::json!({
                    "id": a.id, "simhash": to_hex(f.simhash), "content": to_hex(f.content),
                    "signatures": f.signatures.iter().map(|s| format!("{s:08x}")).collect::<Vec<_>>(), "words": f.words, "numbers": f.numbers,
                    "chars": a.text.chars().count(),
                })
                .to_string()
            }
            Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for r in rows {
        writeln!(out, "{r}")?;
    }
    Ok(())
}
