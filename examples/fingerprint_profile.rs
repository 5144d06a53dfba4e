//! A single-threaded driver for instruction-count profiling of fingerprinting:
//! `valgrind --tool=callgrind --toggle-collect='*fingerprint_profile::run*'
//!  target/release/examples/fingerprint_profile FILE.jsonl [N]` counts only the
//! fingerprinting of the first N (default 2,000) articles, not start-up or parsing.

use std::io::{BufRead, BufReader};

use simdedup::fingerprint::Fingerprinter;

#[inline(never)]
fn run(fp: &Fingerprinter, texts: &[String]) -> u64 {
    texts
        .iter()
        .map(|t| fp.fingerprint(t).simhash)
        .fold(0, |a, h| a ^ h)
}

/// Time this thread has spent on a CPU (Linux `schedstat`), in ns; 0 elsewhere.
/// Unlike wall time, it does not count waiting for a core on a busy machine.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: fingerprint_profile FILE.jsonl [N]"))?;
    let n: usize = args.next().map_or(Ok(2000), |s| s.parse())?;
    let mut texts = Vec::with_capacity(n);
    for (n, line) in BufReader::new(std::fs::File::open(&path)?)
        .lines()
        .enumerate()
    {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        // A line that is no JSON is reported and skipped, as `scan` rejects it.
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("line {}: skipped, not JSON: {e}", n + 1);
                continue;
            }
        };
        if let Some(t) = v["text"].as_str() {
            texts.push(t.to_owned());
        }
        if texts.len() == n {
            break;
        }
    }
    let fp = Fingerprinter::with_defaults()?;
    let t = std::time::Instant::now();
    let again = Fingerprinter::with_defaults()?;
    eprintln!(
        "a second Fingerprinter (tables already loaded): {:?}",
        t.elapsed()
    );
    drop(again);
    // Warm the lazily built tables outside the measured function.
    fp.fingerprint("预热 warm up");
    let (cpu0, wall) = (thread_cpu_ns(), std::time::Instant::now());
    let x = run(&fp, &texts);
    let (cpu, wall) = (thread_cpu_ns().saturating_sub(cpu0), wall.elapsed());
    println!(
        "{} articles, xor of simhashes {x:016x}; {:.3} s wall, {:.3} s on-CPU: {:.0} articles/s of CPU",
        texts.len(),
        wall.as_secs_f64(),
        cpu as f64 / 1e9,
        texts.len() as f64 / (cpu as f64 / 1e9)
    );
    Ok(())
}
