//! `simdedup inspect`: what the Redis index holds about one article, or
//! which articles have a SimHash block.

use anyhow::{bail, Result};
use clap::Args;

use super::args::RedisCommon;
use super::fingerprint::fingerprint_json;
use super::{runtime, shared_index};
use crate::index::{BlockHolder, Verdict};
use crate::simhash::hamming;
use crate::worker::tools;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Article id. Exit status 1 when the index does not hold it.
    #[arg(required_unless_present = "block")]
    id: Option<String>,
    /// Instead of one article: the articles of the window one of whose four
    /// 16-bit SimHash blocks is HEX (4 hex digits, e.g. a8ce), read from the
    /// block sets, with their ids, verdicts, the positions of the block in
    /// their SimHash and their SimHash distance to the first one listed.
    /// Exit status 1 when none has it.
    #[arg(long, value_name = "HEX", value_parser = parse_block, conflicts_with = "id")]
    block: Option<u16>,
    #[command(flatten)]
    redis: RedisCommon,
}

/// A block value: 1 to 4 hex digits.
fn parse_block(s: &str) -> Result<u16> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    (1..=4)
        .contains(&digits.len())
        .then(|| u16::from_str_radix(digits, 16).ok())
        .flatten()
        .ok_or_else(|| anyhow::anyhow!("{s:?} is not a 16-bit block: give 4 hex digits, e.g. a8ce"))
}

pub fn run(args: InspectArgs) -> Result<()> {
    let s = args.redis.settings()?;
    let rt = runtime()?;
    let index = rt.block_on(shared_index(&s, "inspect"))?;
    let Some(id) = &args.id else {
        let block = args.block.expect("clap requires an id or --block");
        let holders = rt.block_on(index.block_holders(block))?;
        if holders.is_empty() {
            bail!("no article in the window has SimHash block {block:04x}");
        }
        let json = block_json(block, &holders);
        super::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
        return Ok(());
    };
    let (inspection, location) = rt.block_on(async {
        let stored = index.locate(id).await?;
        let inspection = tools::inspect(&index, id, &s.decision).await?;
        anyhow::Ok((inspection, stored))
    })?;
    let Some(stored) = &inspection.stored else {
        bail!("{id} is not in the index (never seen, deleted, or outside the window)");
    };
    let mut json = serde_json::json!({
        "id": inspection.id,
        "ts_ms": stored.ts_ms,
        "fingerprint": fingerprint_json(&stored.fingerprint),
    });
    if let Some((bucket, handle)) = location {
        json["bucket"] = bucket.into();
        json["handle"] = handle.into();
    }
    json["verdict"] = verdict_json(&stored.verdict);
    json["cluster"] = serde_json::to_value(&inspection.cluster)?;
    if let Some(evidence) = &inspection.evidence {
        json["evidence"] = serde_json::to_value(evidence)?;
    }
    super::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
    Ok(())
}

/// The articles having block `block`: each with where it is, its SimHash,
/// the positions of the block in it, and its distance to the first one.
fn block_json(block: u16, holders: &[BlockHolder]) -> serde_json::Value {
    let first = holders.first().map_or(0, |h| h.simhash);
    let articles: Vec<serde_json::Value> = holders
        .iter()
        .map(|h| {
            let positions: Vec<usize> = (0..4)
                .filter(|p| (h.simhash >> (48 - 16 * p)) as u16 == block)
                .collect();
            let mut json = serde_json::json!({
                "id": h.id,
                "bucket": h.bucket,
                "handle": h.handle,
                "ts_ms": h.ts_ms,
                "simhash": format!("{:016x}", h.simhash),
                "positions": positions,
                "distance_to_first": hamming(h.simhash, first),
            });
            json["verdict"] = verdict_json(&h.verdict);
            json
        })
        .collect();
    serde_json::json!({ "block": format!("{block:04x}"), "articles": articles })
}

/// A stored verdict as the output stream words it: `overlap` a share from 0
/// to 1 (as in `evidence`), not the hundredths the index stores.
fn verdict_json(verdict: &Verdict) -> serde_json::Value {
    match verdict.duplicate() {
        None => match verdict.expands() {
            Some(expands) => serde_json::json!({ "verdict": "unique", "expands": expands }),
            None => serde_json::json!({ "verdict": "unique" }),
        },
        Some(d) => serde_json::json!({
            "verdict": "duplicate",
            "dup_of": d.dup_of,
            "matched": d.matched,
            "distance": d.distance,
            "signal": d.signal,
            "overlap": d.overlap.map(|h| f64::from(h) / 100.0),
        }),
    }
}
