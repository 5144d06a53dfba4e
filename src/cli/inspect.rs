//! `simdedup inspect`: what the Redis index holds about one article.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::args::RedisCommon;
use super::fingerprint::fingerprint_json;
use super::runtime;
use crate::index::Verdict;
use crate::settings::{redact_url, IndexKind};
use crate::worker::service;
use crate::worker::shutdown::ShutdownTrigger;
use crate::worker::tools;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Article id. Exit status 1 when the index does not hold it.
    id: String,
    #[command(flatten)]
    redis: RedisCommon,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let s = args.redis.settings()?;
    if s.index == IndexKind::Embedded {
        bail!("`inspect` reads the shared Redis index; an embedded index lives only inside its worker");
    }
    let (inspection, location) = runtime()?.block_on(async {
        // A one-shot tool does not wait for Redis: the trigger is dropped at
        // once, and the connection attempt is bounded.
        let (_, shutdown) = ShutdownTrigger::new();
        let index = tokio::time::timeout(
            Duration::from_millis(s.worker.command_timeout_ms.max(1000) * 2),
            service::connect_redis_index(&s, shutdown),
        )
        .await
        .map_err(|_| anyhow::anyhow!("cannot reach Redis at {}", redact_url(&s.redis_url)))??
        .context("Redis index unavailable")?;
        let stored = index.locate(&args.id).await?;
        let inspection = tools::inspect(&index, &args.id, &s.decision).await?;
        anyhow::Ok((inspection, stored))
    })?;
    let Some(stored) = &inspection.stored else {
        bail!(
            "{} is not in the index (never seen, deleted, or outside the window)",
            args.id
        );
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

/// A stored verdict as the output stream words it: `overlap` a share from 0
/// to 1 (as in `evidence`), not the hundredths the index stores.
fn verdict_json(verdict: &Verdict) -> serde_json::Value {
    match verdict.duplicate() {
        None => serde_json::json!({ "verdict": "unique" }),
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
