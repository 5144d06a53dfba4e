//! Shutdown signalling, mini-redis style: the worker is handed a [`Shutdown`]
//! and stops reading when it fires; whoever owns the [`ShutdownTrigger`] (the
//! binary on SIGTERM/SIGINT, a test directly) fires it.
//!
//! A `watch` channel rather than a `broadcast`: late subscribers and clones see
//! the fired state too, and checking it is a cheap non-blocking read.

use tokio::sync::watch;

/// Fires the shutdown of every [`Shutdown`] made from it.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger(std::sync::Arc<watch::Sender<bool>>);

/// Listens for shutdown. Clone freely.
#[derive(Debug, Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl ShutdownTrigger {
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (ShutdownTrigger(std::sync::Arc::new(tx)), Shutdown(rx))
    }

    /// Ask every listener to stop. Idempotent.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }

    pub fn subscribe(&self) -> Shutdown {
        Shutdown(self.0.subscribe())
    }
}

impl Shutdown {
    /// A shutdown that never fires (for callers that stop by other means).
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive forever so `recv` never resolves.
        std::mem::forget(tx);
        Shutdown(rx)
    }

    pub fn is_shutdown(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolve once shutdown has been requested (at once if it already was).
    pub async fn recv(&mut self) {
        // An error means every trigger was dropped: treat as "never fires".
        if self.0.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Fire `trigger` on SIGTERM or SIGINT (Ctrl-C). Spawned by the binary.
pub async fn on_signals(trigger: ShutdownTrigger) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                    _ = int.recv() => tracing::info!("SIGINT: shutting down"),
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    trigger.fire();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fires_every_listener_including_late_ones() {
        let (trigger, mut a) = ShutdownTrigger::new();
        assert!(!a.is_shutdown());
        trigger.fire();
        a.recv().await;
        let mut late = trigger.subscribe();
        assert!(late.is_shutdown());
        late.recv().await;
    }
}
