//! The `simdedup` subcommands. Each file holds one command: its flags (a clap
//! `Args` struct) and its body (`run`). `src/main.rs` only parses the command
//! line, sets up tracing and calls `run`.
//!
//! Flags that are settings are not copied into [`Settings`]
//! field by field: the flag structs serialize to the settings' own keys, and
//! [`args`] layers them over the file and the environment through `config`.
//!
//! An error is printed by `src/main.rs` with [`error_text`]: its causes on one
//! line, then what to do about it ([`advice`]).

pub mod advice;
pub mod args;
pub mod config;
pub mod delete;
pub mod demo;
pub mod eval;
pub mod explain;
pub mod fingerprint;
pub mod idf;
pub mod inspect;
pub mod produce;
pub mod scan;
pub mod stats;
pub mod worker;

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::Path;

use anyhow::{Context, Result};

use crate::connect::{Conn, ConnectOptions};
use crate::settings::Settings;

/// The log format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Log to stderr in `format`, at `default_level` unless `SIMDEDUP_LOG` says
/// otherwise (an `EnvFilter` directive such as `simdedup=debug`).
pub fn init_tracing(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SIMDEDUP_LOG")
        .unwrap_or_else(|_| default_level.into());
    // Colour only for a person at a terminal: in a file or a journal the
    // escape codes are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
}

/// Write `text` to standard output. An error (a closed pipe among them)
/// is returned, not a panic as `print!` would: see [`is_broken_pipe`].
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Whether `error` comes from writing to a pipe whose reader has gone (`…
/// | head`): the command then ends quietly and successfully.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `error` and its causes on one line, `outer: inner`, leaving out a cause
/// whose text the message before it already holds (errors that print their
/// source themselves would otherwise say it twice), then what to do about
/// it ([`advice::with_advice`]).
pub fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    advice::with_advice(text, error.as_ref())
}

/// `path` for reading, standard input for `None` or `-`; with the file's size
/// when known (for progress bars).
pub fn open_input(path: Option<&Path>) -> Result<(Box<dyn BufRead + Send>, Option<u64>)> {
    match path {
        Some(p) if p != Path::new("-") => {
            let f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            let len = f.metadata().ok().map(|m| m.len());
            Ok((Box::new(BufReader::with_capacity(1 << 20, f)), len))
        }
        _ => Ok((Box::new(BufReader::new(std::io::stdin())), None)),
    }
}

/// Milliseconds since the Unix epoch (the default `ts` of articles without one).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The async runtime of the commands that talk to Redis.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// One connection to the settings' Redis (a node, a cluster or the primary
/// its sentinels name), for a tool's run.
pub async fn connect(s: &Settings) -> Result<Conn> {
    let options = ConnectOptions {
        response_timeout: std::time::Duration::from_millis(s.worker.command_timeout_ms),
        ..ConnectOptions::default()
    };
    Ok(Conn::connect(&s.redis_url, &options).await?)
}

/// A `--rate`: a positive number of articles per second.
pub fn parse_rate(s: &str) -> Result<f64> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => anyhow::bail!(
            "'{s}' is not a rate: give articles per second, a number above 0 (e.g. 1000)"
        ),
    }
}

/// The shared Redis index of the settings' namespace, for the one-shot
/// command `command`: the connection attempt is bounded, and a process
/// configured for the embedded index is told that there is nothing to read.
pub(crate) async fn shared_index(s: &Settings, command: &str) -> Result<crate::index::RedisIndex> {
    if s.index == crate::settings::IndexKind::Embedded {
        anyhow::bail!(
            "`{command}` works on the shared Redis index; an embedded index lives only inside its worker"
        );
    }
    // A one-shot tool does not wait for Redis: the trigger is dropped at
    // once.
    let (_, shutdown) = crate::worker::shutdown::ShutdownTrigger::new();
    tokio::time::timeout(
        std::time::Duration::from_millis(s.worker.command_timeout_ms.max(1000) * 2),
        crate::worker::service::connect_redis_index(s, shutdown),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "cannot reach Redis at {}",
            crate::redact::redact_url(&s.redis_url)
        )
    })??
    .context("Redis index unavailable")
}
