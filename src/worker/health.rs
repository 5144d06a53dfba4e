//! Liveness and readiness of a worker, shared with the HTTP listener, and the
//! one place that turns transient Redis errors into a state.
//!
//! Every call the worker retries on a transient error (a read, an index call,
//! a commit, a heartbeat) holds a [`Trouble`] while it is failing. The worker
//! is *unavailable* while any is held: `/readyz` answers 503 with the reason,
//! and one line is logged when that starts and one when it ends, however many
//! entries are waiting meanwhile (each keeps its place and its delivery count).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::metrics::Metrics;

/// Liveness and readiness, shared with the HTTP listener.
#[derive(Debug, Default)]
pub struct Health {
    /// Connected, group ensured, not shutting down (failing calls aside: see
    /// [`Health::readiness`]).
    pub ready: AtomicBool,
    /// The main loop is running.
    pub alive: AtomicBool,
    failing: Mutex<Failing>,
    /// Calls that were failing and are no longer (see [`Health::pause`]).
    recoveries: AtomicU64,
    recovered: Notify,
}

/// Why a worker is not ready: the body of a 503 from `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// A call is failing with a transient Redis error: the latest reason.
    #[error("Redis unavailable: {0}")]
    RedisUnavailable(String),
    #[error("not serving (starting or shutting down)")]
    NotServing,
    #[error("stopped")]
    Stopped,
}

#[derive(Debug, Default)]
struct Failing {
    /// Calls now failing with a transient error.
    calls: usize,
    /// The latest reason, for `/readyz`.
    reason: String,
    /// When the worker became unavailable; `None` while available.
    since: Option<Instant>,
    /// When it last became available again (or started).
    available_since: Option<Instant>,
}

impl Health {
    fn failing(&self) -> MutexGuard<'_, Failing> {
        self.failing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), NotReady> {
        let failing = self.failing();
        if failing.calls > 0 {
            return Err(NotReady::RedisUnavailable(failing.reason.clone()));
        }
        if !self.ready.load(Ordering::Relaxed) {
            return Err(if self.alive.load(Ordering::Relaxed) {
                NotReady::NotServing
            } else {
                NotReady::Stopped
            });
        }
        Ok(())
    }

    /// How long Redis has served every call of this worker without a
    /// transient error; `None` while one is failing. A worker judges its peers
    /// dead only after a whole liveness TTL of this (`liveness.rs`): a peer
    /// that could not refresh its key during an outage has had time to since.
    pub fn available_for(&self) -> Option<Duration> {
        let failing = self.failing();
        match (failing.since, failing.available_since) {
            (None, Some(t)) => Some(t.elapsed()),
            _ => None,
        }
    }

    /// Mark the worker started (the reference for [`Health::available_for`]).
    pub fn started(&self) {
        self.failing().available_since = Some(Instant::now());
        self.ready.store(true, Ordering::Relaxed);
    }

    /// A call failed with a transient error: the worker is unavailable until
    /// the returned guard, and every other one, is dropped (the call
    /// succeeded or was given up). `holding`: entries this worker holds, for
    /// the log line.
    pub fn trouble(self: &Arc<Self>, reason: &str, metrics: &Metrics, holding: i64) -> Trouble {
        let mut failing = self.failing();
        failing.calls += 1;
        failing.reason = reason.to_owned();
        if failing.since.is_none() {
            failing.since = Some(Instant::now());
            metrics.redis_outages.inc();
            tracing::warn!(
                reason,
                holding,
                "Redis unavailable: holding the entries in flight and retrying (not ready)"
            );
        }
        Trouble(self.clone())
    }

    /// The latest reason of a call still failing.
    pub fn still(&self, reason: &str) {
        self.failing().reason = reason.to_owned();
    }

    /// How many failing calls have ended so far: read it before an attempt,
    /// pass it to [`Health::pause`] after a failure.
    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Acquire)
    }

    /// Wait `delay` before the next attempt of a failing call, or less: until
    /// some other failing call of this worker ends (succeeds) after `seen`
    /// was read. When Redis comes back every held call then tries again at
    /// once, not each after its own backoff: the entries held resume
    /// together, in their order, rather than later ones first.
    pub async fn pause(&self, seen: u64, delay: Duration) {
        let woken = self.recovered.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if self.recoveries() != seen {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = woken => {}
        }
    }
}

/// A call failing with a transient error; see [`Health::trouble`].
#[derive(Debug)]
pub struct Trouble(Arc<Health>);

impl Drop for Trouble {
    fn drop(&mut self) {
        self.0.recoveries.fetch_add(1, Ordering::AcqRel);
        self.0.recovered.notify_waiters();
        let mut failing = self.0.failing();
        failing.calls -= 1;
        if failing.calls == 0 {
            if let Some(since) = failing.since.take() {
                failing.available_since = Some(Instant::now());
                tracing::info!(
                    after_ms = since.elapsed().as_millis() as u64,
                    "Redis available again: resuming (ready)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_while_any_call_fails() {
        let (health, metrics) = (Arc::new(Health::default()), Metrics::default());
        health.alive.store(true, Ordering::Relaxed);
        assert_eq!(
            health.readiness(),
            Err(NotReady::NotServing),
            "not started yet"
        );
        health.started();
        assert!(health.readiness().is_ok());
        let a = health.trouble("OOM", &metrics, 10);
        let b = health.trouble("OOM", &metrics, 10);
        assert_eq!(metrics.redis_outages.get(), 1, "one outage");
        let unavailable = NotReady::RedisUnavailable("OOM".into());
        assert_eq!(unavailable.to_string(), "Redis unavailable: OOM");
        assert_eq!(health.readiness(), Err(unavailable));
        assert_eq!(health.available_for(), None);
        drop(a);
        assert!(health.readiness().is_err(), "one call still fails");
        drop(b);
        assert!(health.readiness().is_ok());
        assert!(health.available_for().is_some());
        let _c = health.trouble("LOADING", &metrics, 0);
        assert_eq!(metrics.redis_outages.get(), 2);
    }

    #[tokio::test]
    async fn a_call_that_recovers_wakes_the_others_held() {
        let (health, metrics) = (Arc::new(Health::default()), Metrics::default());
        health.started();
        let first = health.trouble("OOM", &metrics, 2);
        let seen = health.recoveries();
        let held = {
            let h = health.clone();
            tokio::spawn(async move { h.pause(seen, Duration::from_secs(3600)).await })
        };
        tokio::task::yield_now().await;
        drop(first);
        tokio::time::timeout(Duration::from_secs(60), held)
            .await
            .expect("woken, not after its backoff")
            .unwrap();
        // A recovery between the attempt and the pause is not missed.
        tokio::time::timeout(
            Duration::from_secs(60),
            health.pause(seen, Duration::from_secs(3600)),
        )
        .await
        .expect("returns at once");
    }
}
