//! `simdedup worker`: a stream worker, until SIGTERM or SIGINT.

use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use super::args::RedisCommon;
use super::runtime;
use crate::index::EmbeddedIndex;
use crate::settings::IndexKind;
use crate::worker::service;
use crate::worker::shutdown::{on_signals, ShutdownTrigger};

#[derive(Args, Debug, Serialize)]
pub struct WorkerArgs {
    #[command(flatten)]
    #[serde(flatten)]
    redis: RedisCommon,
    /// Index to decide with: `redis` (shared, default) or `embedded` (in-process, one worker only).
    #[arg(long, value_name = "KIND", value_enum)]
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<IndexKind>,
    #[command(flatten)]
    worker: WorkerFlags,
}

/// The `worker.*` settings that have flags.
#[derive(Args, Debug, Serialize)]
struct WorkerFlags {
    /// Consumer name (default: <hostname>-<pid>-<random>).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer: Option<String>,
    /// Address for /metrics, /healthz, /readyz (several workers on one host: one each); empty string disables.
    #[arg(long, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    http_addr: Option<String>,
    /// Entries per read (commits go 16 entries per script call).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_size: Option<usize>,
    /// Entries read and not yet committed, at most.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_in_flight: Option<usize>,
    /// Index calls of a batch in flight at once, in order; a check waits for the
    /// earlier ones it could meet (1-256; 1: one at a time).
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    ordered_index_concurrency: Option<usize>,
    /// `--ordered-index-concurrency` under its old name, read with a warning
    /// (`crate::settings`); not in the help.
    #[arg(
        long = "pipeline",
        value_name = "N",
        hide = true,
        conflicts_with = "ordered_index_concurrency"
    )]
    #[serde(rename = "pipeline", skip_serializing_if = "Option::is_none")]
    old_pipeline: Option<usize>,
    /// Nice steps the fingerprinting threads run below the Redis I/O (0-19, Linux).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=19))]
    #[serde(skip_serializing_if = "Option::is_none")]
    fingerprint_nice: Option<u8>,
    /// TTL of the worker's liveness key; peers take over a dead worker's
    /// entries once it expires (milliseconds).
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    liveness_ttl_ms: Option<u64>,
    /// How often to look for dead workers' entries (milliseconds).
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_interval_ms: Option<u64>,
    /// Dead-letter an entry delivered more than this many times.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_deliveries: Option<u64>,
    /// XREADGROUP BLOCK (milliseconds).
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    block_ms: Option<u64>,
    /// On SIGTERM/SIGINT, wait at most this long for in-flight entries (milliseconds).
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    shutdown_timeout_ms: Option<u64>,
    /// Replicas that must acknowledge each commit (Redis WAIT) before its
    /// entries count as done; a commit short of them is held and sent again
    /// (0: none; see docs/protocol.md, Failover).
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_replicas: Option<u32>,
}

pub fn run(args: WorkerArgs) -> Result<()> {
    let s = args.redis.settings_with(&args)?;
    runtime()?.block_on(async {
        let (trigger, _) = ShutdownTrigger::new();
        tokio::spawn(on_signals(trigger.clone()));
        match s.index {
            IndexKind::Embedded => {
                tracing::warn!(
                    "embedded index: correct for ONE worker only; its state is lost on exit"
                );
                let index = Arc::new(EmbeddedIndex::new(s.decision.clone()));
                service::run(&s, index, trigger).await?;
            }
            IndexKind::Redis => {
                let Some(index) = service::connect_redis_index(&s, trigger.subscribe()).await?
                else {
                    return Ok(());
                };
                service::run(&s, Arc::new(index), trigger).await?;
            }
        }
        // The run's summary is the worker's last log line ("worker stopped"),
        // in the log's format.
        Ok(())
    })
}
