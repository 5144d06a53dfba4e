//! The worker as a service: settings in, HTTP listener and worker running until
//! the shutdown trigger fires. What `simdedup worker` calls.

use std::sync::Arc;

use std::time::Duration;

use crate::connect::ConnectOptions;
use crate::index::{Index, IndexError, RedisIndex, RedisIndexOptions};
use crate::settings::Settings;

use super::shutdown::{Shutdown, ShutdownTrigger};
use super::{http, RunSummary, Worker, WorkerError};

/// Run a worker over `index` with `settings` until `shutdown` fires (the binary
/// fires it on SIGTERM/SIGINT), serving `/metrics`, `/healthz`, `/readyz` on
/// `settings.worker.http_addr` when it is not empty.
pub async fn run<I: Index + 'static>(
    settings: &Settings,
    index: Arc<I>,
    trigger: ShutdownTrigger,
) -> Result<RunSummary, WorkerError> {
    let fingerprinter = settings
        .fingerprinter()
        .map_err(|e| WorkerError::Config(e.to_string()))?;
    let worker = Worker::new(
        &settings.redis_url,
        &settings.namespace,
        index,
        fingerprinter,
        settings.worker.clone(),
        settings.max_text_bytes,
    )?
    .event_window(settings.decision.window_ms);
    let http_task = if settings.worker.http_addr.is_empty() {
        None
    } else {
        let addr = &settings.worker.http_addr;
        let listener = http::bind(addr)
            .await
            .map_err(|e| WorkerError::Config(http_bind_error(addr, &e)))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz, /readyz");
        Some(tokio::spawn(http::serve(
            listener,
            worker.metrics(),
            worker.health(),
            trigger.subscribe(),
        )))
    };
    let shutdown: Shutdown = trigger.subscribe();
    let summary = worker.run(shutdown).await;
    // Whatever ended the worker ends the listener too.
    trigger.fire();
    // The listener closes its connections within its grace; waiting on it is
    // bounded all the same, so that no client keeps the process alive.
    if let Some(task) = http_task {
        let _ = tokio::time::timeout(2 * http::SHUTDOWN_GRACE, task).await;
    }
    summary
}

/// Connect the Redis index for `settings`, retrying with backoff while Redis is
/// unreachable (a worker may start before its Redis). `Ok(None)`: shutdown was
/// requested meanwhile. Configuration errors (e.g. an evicting
/// `maxmemory-policy`) are returned at once.
pub async fn connect_redis_index(
    settings: &Settings,
    mut shutdown: Shutdown,
) -> Result<Option<RedisIndex>, IndexError> {
    let options = RedisIndexOptions {
        allow_eviction: settings.allow_eviction,
        bucket_ms: settings.bucket_hours.map(|h| u64::from(h) * 3_600_000),
        connect: ConnectOptions {
            response_timeout: Duration::from_millis(settings.worker.command_timeout_ms),
            ..ConnectOptions::default()
        },
        ..RedisIndexOptions::default()
    };
    let mut backoff = super::Backoff::new(Duration::from_millis(settings.worker.backoff_max_ms));
    loop {
        let attempt = async {
            let index = RedisIndex::connect(
                &settings.redis_url,
                &settings.namespace,
                settings.decision.clone(),
                options.clone(),
            )
            .await?;
            // Load the view of the window before serving.
            index.catch_up().await?;
            Ok::<_, IndexError>(index)
        };
        match attempt.await {
            Ok(index) => return Ok(Some(index)),
            Err(IndexError::Unavailable { reason, source }) => {
                let why = match &source {
                    Some(e) => crate::cli::advice::with_advice(reason, e),
                    None => reason,
                };
                tracing::warn!(%why, "Redis index unreachable; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = shutdown.recv() => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Why the worker cannot serve its endpoints on `addr`, and what to do.
fn http_bind_error(addr: &str, e: &std::io::Error) -> String {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        " (another process listens there: several workers on one host each need their own \
         address, or none with an empty one)"
    } else {
        ""
    };
    format!(
        "cannot serve /metrics, /healthz, /readyz on {addr}: {e}{hint}; set another with \
         --http-addr or SIMDEDUP_WORKER__HTTP_ADDR"
    )
}
