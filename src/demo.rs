//! `simdedup demo`: the worker pipeline on the bundled sample, on any machine.
//!
//! With Redis (a `--redis-url`, or else a private `redis-server` started here on
//! a free port and stopped afterwards): the sample is produced into the
//! namespace's input stream as `simdedup produce` would, one worker (Redis
//! index) runs in this process until every entry is answered, and the verdicts
//! are printed in input order, joined on `source`. The worker decides in stream
//! order, so the verdicts are those `scan` gives. (The sample has no `ts`: its
//! articles take the time they are produced, as a live feed's would.) Without
//! `redis-server` on
//! `PATH` and no URL, it says so and runs the same sample through the embedded
//! index in-process (what `simdedup scan` does), since there are no streams.
//!
//! Settings are the defaults (no config file, no `SIMDEDUP_*` environment), so
//! the demo shows the same thing everywhere.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use redis::Value;

use crate::connect::{Conn, ConnectOptions};
use crate::index::EmbeddedIndex;
use crate::keys::Keys;
use crate::redact::redact_url;
use crate::redis_server::RedisServer;
use crate::scan::{scan, ScanOptions};
use crate::settings::Settings;
use crate::worker::shutdown::ShutdownTrigger;
use crate::worker::stream::parse_raw_entry;
use crate::worker::tools::line_fields;
use crate::worker::{service, RunSummary};

/// The bundled sample (`examples/articles.jsonl`), embedded so the demo runs
/// from any directory.
pub const SAMPLE: &str = include_str!("../examples/articles.jsonl");

/// Default namespace of the demo (keys `simdedup:{demo}:*`).
pub const DEFAULT_NAMESPACE: &str = "demo";

/// What the demo runs on.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Use this Redis instead of starting a private `redis-server`.
    pub redis_url: Option<String>,
    /// Namespace to produce into.
    pub namespace: String,
    /// Give up waiting for verdicts after this long.
    pub timeout: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            redis_url: None,
            namespace: DEFAULT_NAMESPACE.into(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// Which pipeline the demo ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A `redis-server` the demo started on this port and stopped afterwards.
    PrivateServer { port: u16 },
    /// The Redis given with `--redis-url`.
    GivenUrl,
    /// No Redis: the embedded index, in-process.
    Embedded,
}

/// What a demo run did.
#[derive(Debug, Clone)]
pub struct DemoReport {
    pub backend: Backend,
    /// Verdicts printed.
    pub verdicts: usize,
    /// Counts by verdict (`unique`, `duplicate`, `rejected`).
    pub by_verdict: HashMap<String, usize>,
    /// Sample lines the producer skipped (not JSON objects), as line numbers.
    pub skipped_lines: Vec<usize>,
}

/// Run the demo: verdicts (one JSON object per line) to `out`, what is
/// happening to `note` (stderr in the binary).
pub fn run(options: &DemoOptions, out: &mut dyn Write, note: &mut dyn Write) -> Result<DemoReport> {
    crate::keys::validate_namespace(&options.namespace).map_err(anyhow::Error::msg)?;
    if let Some(url) = &options.redis_url {
        writeln!(
            note,
            "simdedup demo: using the Redis at {}",
            redact_url(url)
        )?;
        return run_on_redis(url, Backend::GivenUrl, options, out, note);
    }
    match crate::redis_server::find_binary() {
        Some(bin) => {
            let server = RedisServer::start_binary(&bin, &[])?;
            writeln!(
                note,
                "simdedup demo: started a private {} on 127.0.0.1:{} (no persistence; stopped at the end)",
                bin.display(),
                server.port()
            )?;
            let backend = Backend::PrivateServer {
                port: server.port(),
            };
            let report = run_on_redis(&server.url(), backend, options, out, note);
            drop(server);
            report
        }
        None => {
            writeln!(
                note,
                "simdedup demo: redis-server is not installed (not on PATH): running the sample \
                 through the EMBEDDED index in this process instead (no streams, no workers). \
                 Install redis-server, or pass --redis-url, for the worker pipeline."
            )?;
            run_embedded(out, note)
        }
    }
}

fn run_embedded(out: &mut dyn Write, note: &mut dyn Write) -> Result<DemoReport> {
    let settings = Settings::default();
    let fingerprinter = settings.fingerprinter()?;
    let index = EmbeddedIndex::new(settings.decision.clone());
    let mut lines = Vec::new();
    let options = ScanOptions {
        max_text_bytes: settings.max_text_bytes,
        default_ts_ms: now_ms(),
        total_bytes: None,
        progress: false,
        event_time: settings.event_time(),
    };
    let summary = scan(
        SAMPLE.as_bytes(),
        &mut lines,
        &fingerprinter,
        &index,
        &options,
    )?;
    out.write_all(&lines)?;
    let mut by_verdict = HashMap::new();
    let mut verdicts = 0;
    for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line)?;
        *by_verdict
            .entry(v["verdict"].as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
        verdicts += 1;
    }
    writeln!(note, "simdedup demo (embedded index): {summary}")?;
    Ok(DemoReport {
        backend: Backend::Embedded,
        verdicts,
        by_verdict,
        skipped_lines: Vec::new(),
    })
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn run_on_redis(
    url: &str,
    backend: Backend,
    options: &DemoOptions,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<DemoReport> {
    let mut settings = Settings {
        redis_url: url.to_owned(),
        namespace: options.namespace.clone(),
        ..Settings::default()
    };
    settings.worker.consumer = "demo".into();
    settings.worker.http_addr = String::new();
    settings.worker.block_ms = 200;
    settings.validate()?;
    let keys = Keys::new(&settings.namespace);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (answers, sources, skipped_lines, summary) = runtime.block_on(async {
        let mut conn = Conn::connect(url, &ConnectOptions::default()).await?;
        // Verdicts already in the output stream (an earlier run) are not ours.
        let newest: Value = redis::cmd("XREVRANGE")
            .arg(keys.output_stream())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        let mut after = match &newest {
            Value::Array(list) if !list.is_empty() => parse_raw_entry(&list[0])
                .map_err(|e| anyhow::anyhow!("{}", e.0))?
                .id,
            _ => "0-0".to_owned(),
        };
        // Produce, as `simdedup produce` does (lines that are not JSON objects
        // are skipped).
        let mut pipe = redis::pipe();
        let mut skipped_lines = Vec::new();
        for (n, line) in SAMPLE.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let Some(fields) = line_fields(line.as_bytes()) else {
                skipped_lines.push(n + 1);
                continue;
            };
            pipe.cmd("XADD").arg(keys.input_stream()).arg("*");
            for (k, v) in &fields {
                pipe.arg(k).arg(v);
            }
        }
        let sources: Vec<String> = pipe.query_async(&mut conn).await?;
        writeln!(
            note,
            "simdedup demo: produced {} articles into {}{}",
            sources.len(),
            keys.input_stream(),
            if skipped_lines.is_empty() {
                String::new()
            } else {
                format!(
                    " (sample line {} is not JSON: skipped, as `simdedup produce` does)",
                    skipped_lines
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
        writeln!(
            note,
            "simdedup demo: running a worker (Redis index, group `{}`) until every entry is answered in {}",
            settings.worker.group,
            keys.output_stream()
        )?;
        let (trigger, _) = ShutdownTrigger::new();
        let index = service::connect_redis_index(&settings, trigger.subscribe())
            .await?
            .context("Redis index unavailable")?;
        let worker = service::run(&settings, Arc::new(index), trigger.clone());
        tokio::pin!(worker);
        let wanted: std::collections::HashSet<&str> = sources.iter().map(String::as_str).collect();
        let mut answers: HashMap<String, HashMap<String, String>> = HashMap::new();
        let deadline = Instant::now() + options.timeout;
        let waiting = async {
            while answers.len() < wanted.len() {
                if Instant::now() > deadline {
                    bail!(
                        "timed out after {:?}: {} of {} verdicts",
                        options.timeout,
                        answers.len(),
                        wanted.len()
                    );
                }
                let reply: Value = redis::cmd("XRANGE")
                    .arg(keys.output_stream())
                    .arg(format!("({after}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(100)
                    .query_async(&mut conn)
                    .await?;
                let entries = match reply {
                    Value::Array(list) => list,
                    _ => Vec::new(),
                };
                if entries.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                for e in &entries {
                    let raw = parse_raw_entry(e).map_err(|e| anyhow::anyhow!("{}", e.0))?;
                    after = raw.id.clone();
                    let fields: HashMap<String, String> = raw
                        .fields
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| {
                            (
                                String::from_utf8_lossy(&k).into_owned(),
                                String::from_utf8_lossy(&v).into_owned(),
                            )
                        })
                        .collect();
                    if let Some(source) = fields.get("source") {
                        if wanted.contains(source.as_str()) {
                            answers.insert(source.clone(), fields);
                        }
                    }
                }
            }
            anyhow::Ok(())
        };
        tokio::select! {
            stopped = &mut worker => {
                let _ = stopped?;
                bail!("the worker stopped before answering every entry");
            }
            waited = waiting => waited?,
        }
        trigger.fire();
        let summary: RunSummary = worker.await?;
        anyhow::Ok((answers, sources, skipped_lines, summary))
    })?;
    let mut by_verdict = HashMap::new();
    for source in &sources {
        let fields = &answers[source];
        // Every field the output stream has, as it has it (strings), sorted
        // by name: the stream's own order depends on the verdict.
        let obj: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        *by_verdict
            .entry(fields.get("verdict").cloned().unwrap_or_default())
            .or_insert(0) += 1;
        writeln!(out, "{}", serde_json::Value::Object(obj))?;
    }
    let mut counts: Vec<_> = by_verdict.iter().collect();
    counts.sort();
    writeln!(
        note,
        "simdedup demo: {} verdicts ({}); {}",
        sources.len(),
        counts
            .iter()
            .map(|(v, n)| format!("{n} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        if summary.emitted as usize >= sources.len() {
            "all written by the demo's worker".to_owned()
        } else {
            format!(
                "{} written by the demo's worker, the rest by other workers of the namespace",
                summary.emitted
            )
        }
    )?;
    Ok(DemoReport {
        backend,
        verdicts: sources.len(),
        by_verdict,
        skipped_lines,
    })
}
