//! A minimal HTTP/1.1 listener for `/metrics`, `/healthz` and `/readyz`.
//!
//! Hand-rolled on tokio: three GET routes read by Prometheus and Kubernetes do
//! not need a web framework (and its compile time). Each connection serves one
//! request and closes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::metrics::Metrics;
use super::shutdown::Shutdown;
use super::Health;

/// Bind `addr` (e.g. `127.0.0.1:9464`, port 0 for any) and return the listener,
/// so callers learn the port before serving.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serve until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut shutdown: Shutdown,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.recv() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let (m, h) = (metrics.clone(), health.clone());
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), handle(stream, m, h)).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(
    mut stream: TcpStream,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // Read the request head (we ignore any body).
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("").split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        ("GET", "/healthz") if health.alive.load(Ordering::Relaxed) => {
            ("200 OK", "text/plain", "ok\n".to_owned())
        }
        ("GET", "/healthz") => (
            "503 Service Unavailable",
            "text/plain",
            "stopped\n".to_owned(),
        ),
        ("GET", "/readyz") => match health.readiness() {
            Ok(()) => ("200 OK", "text/plain", "ready\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
