//! `simdedup produce`: JSONL articles into the input stream (pipelined XADD).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::args::RedisTarget;
use super::{connect, open_input, parse_rate, runtime};
use crate::keys::Keys;
use crate::worker::tools::{self, Durability};

#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// JSONL articles ({"id","text",["title"],["ts"],["op"]}); `-` for standard input.
    file: PathBuf,
    /// XADD commands per round trip.
    #[arg(long, default_value_t = 500)]
    pipeline: usize,
    /// Produce at most this many articles per second, as a steady feed (round
    /// trips of ~10 ms' worth each), instead of as fast as Redis takes them.
    #[arg(long, value_name = "PER_SECOND", value_parser = parse_rate)]
    rate: Option<f64>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    no_progress: bool,
    /// Replicas that must acknowledge each round trip (Redis WAIT) before
    /// its entries count as added (setting worker.wait_replicas; default 0).
    /// A round trip they did not acknowledge is sent again, after a failover
    /// to the new primary (a repeated id gets its stored verdict); entries
    /// still unacknowledged after 60 s are counted and make produce exit 1.
    #[arg(long, value_name = "N")]
    wait_replicas: Option<u32>,
    #[command(flatten)]
    redis: RedisTarget,
}

/// The settings `produce` has flags for.
#[derive(Serialize)]
struct Flags<'a> {
    #[serde(flatten)]
    redis: &'a RedisTarget,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<WorkerFlags>,
}

#[derive(Serialize)]
struct WorkerFlags {
    wait_replicas: u32,
}

pub fn run(args: ProduceArgs) -> Result<()> {
    let flags = Flags {
        redis: &args.redis,
        worker: args.wait_replicas.map(|n| WorkerFlags { wait_replicas: n }),
    };
    let s = args.redis.settings_with(&flags)?;
    let durability = Durability {
        replicas: s.worker.wait_replicas,
        wait_timeout_ms: s.worker.wait_timeout_ms,
        ..Durability::default()
    };
    let (input, total) = open_input(Some(&args.file))?;
    let bar = if !args.no_progress && std::io::stderr().is_terminal() {
        let bar = match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::new_spinner(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} producing [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )?
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let keys = Keys::new(&s.namespace);
    let started = Instant::now();
    let summary = runtime()?.block_on(async {
        let mut conn = connect(&s).await?;
        if durability.replicas == 0 {
            warn_if_replicated(&mut conn).await;
        }
        let reconnect = || async {
            connect(&s)
                .await
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))
        };
        let summary = tools::produce(
            &mut conn,
            reconnect,
            &keys,
            input,
            args.pipeline,
            args.rate,
            durability,
            &bar,
        )
        .await?;
        anyhow::Ok(summary)
    })?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let resent = match summary.resent {
        0 => String::new(),
        n => format!(", {n} sent again after errors"),
    };
    eprintln!(
        "simdedup: {} entries added to {} in {:.2}s ({:.0}/s), {} lines skipped{resent}",
        summary.added,
        keys.input_stream(),
        secs,
        summary.added as f64 / secs.max(1e-9),
        summary.skipped
    );
    if summary.unconfirmed > 0 {
        bail!(
            "{} of the {} entries added were not acknowledged by {} replica(s) within {} s \
             (WAIT): a failover may have lost them; produce them again (a repeated id gets \
             its stored verdict), or find why the replicas lag (INFO replication)",
            summary.unconfirmed,
            summary.added,
            durability.replicas,
            durability.patience.as_secs()
        );
    }
    Ok(())
}

/// Say once that the server has replicas and nothing waits for them.
async fn warn_if_replicated(conn: &mut crate::connect::Conn) {
    let info = redis::cmd("INFO")
        .arg("replication")
        .query_async::<redis::Value>(conn)
        .await;
    if let Some(n) = info.ok().as_ref().and_then(tools::replicas_connected) {
        if n > 0 {
            eprintln!(
                "simdedup: the server has {n} replica(s) and produce does not wait for them: \
                 a failover can lose the entries added in the moments before it (they are \
                 reported as added). --wait-replicas {n} makes each round trip wait until the \
                 replicas hold it, and send again what a failover lost."
            );
        }
    }
}
