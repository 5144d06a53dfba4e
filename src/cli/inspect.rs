//! `simdedup inspect`: what the Redis index holds about one article.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use super::args::RedisCommon;
use super::runtime;
use crate::settings::{redact_url, IndexKind};
use crate::worker::service;
use crate::worker::shutdown::ShutdownTrigger;
use crate::worker::tools;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Article id.
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
    let mut json = serde_json::to_value(&inspection)?;
    if let Some(st) = &inspection.stored {
        json["simhash"] = serde_json::Value::String(st.fingerprint.simhash_hex());
    }
    if let Some((bucket, handle)) = location {
        json["bucket"] = serde_json::Value::String(bucket);
        json["handle"] = serde_json::Value::from(handle);
    }
    println!("{}", serde_json::to_string_pretty(&json)?);
    if inspection.stored.is_none() {
        eprintln!(
            "simdedup: {} is not in the index (never seen, deleted, or outside the window)",
            args.id
        );
    }
    Ok(())
}
