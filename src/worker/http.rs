//! The worker's HTTP endpoints, served with axum: `/metrics` for Prometheus,
//! `/healthz` (liveness) and `/readyz` (readiness) for Kubernetes.
//!
//! Each probe answers from the worker's [`Health`] flags, so a probe never
//! waits on Redis: a worker that cannot reach Redis says so at once (503).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

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

/// Serve until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut shutdown: Shutdown,
) {
    let served = axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(async move { shutdown.recv().await })
        .await;
    if let Err(e) = served {
        tracing::warn!(error = %e, "HTTP listener stopped");
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
