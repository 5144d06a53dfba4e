//! The worker's HTTP endpoints, served with axum: `/metrics` for Prometheus,
//! `/healthz` (liveness) and `/readyz` (readiness) for Kubernetes.
//!
//! Each probe answers from the worker's [`Health`] flags, so a probe never
//! waits on Redis: a worker that cannot reach Redis says so at once (503).
//!
//! The listener is open to whatever can reach it, so no client can hold it:
//! a request's headers must arrive within [`HEADER_READ_TIMEOUT`], at most
//! [`MAX_CONNECTIONS`] are served at once (more wait in the kernel's accept
//! queue), and shutdown waits at most [`SHUTDOWN_GRACE`] for requests in
//! progress before closing every connection.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::metrics::{Metrics, CONTENT_TYPE};
use super::shutdown::Shutdown;
use super::Health;

/// Bind `addr` (e.g. `127.0.0.1:9464`, port 0 for any) and return the listener,
/// so callers learn the port before serving.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[derive(Clone)]
struct Endpoints {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// The three routes; any other path is a 404, any other method a 405.
fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Endpoints { metrics, health })
}

/// How long a client may take to send a request's headers; then its
/// connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;

/// How long shutdown waits for requests in progress; then every connection is
/// closed, whatever its client is doing.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Serve until `shutdown` fires, then return within [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut shutdown: Shutdown,
) {
    let app = router(metrics, health);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Set once shutdown starts: each connection finishes its request and closes.
    let (closing, closing_seen) = watch::channel(false);
    let mut connections = JoinSet::new();
    loop {
        // A permit first: at the cap, nothing more is accepted.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = shutdown.recv() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was accepted: try again shortly.
                    tracing::debug!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.recv() => break,
        };
        while connections.try_join_next().is_some() {}
        let service = TowerToHyperService::new(app.clone());
        let mut closing_seen = closing_seen.clone();
        connections.spawn(async move {
            let _permit = permit;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = async { closing_seen.wait_for(|closing| *closing).await.is_ok() } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            open = connections.len(),
            "closing HTTP connections still open at shutdown"
        );
        connections.shutdown().await;
    }
}

async fn metrics_text(State(s): State<Endpoints>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], s.metrics.render())
}

async fn healthz(State(s): State<Endpoints>) -> impl IntoResponse {
    if s.health.alive.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "stopped\n")
    }
}

async fn readyz(State(s): State<Endpoints>) -> impl IntoResponse {
    match s.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}
