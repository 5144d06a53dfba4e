//! The worker's fingerprinting threads, run at a lower CPU priority than the
//! threads that talk to Redis.
//!
//! Why: fingerprinting is bulk CPU work (segmentation, TF-IDF, SimHash, the
//! sketch), done a batch ahead of the index. An ordered worker's index calls
//! are one round trip after another, and each waits on the thread that reads
//! the reply: when that thread (or a Redis on the same host) queues behind
//! fingerprinting for a scheduler slice, the check's latency grows by
//! milliseconds and the worker's throughput with it. A higher nice value lets
//! the latency-bound threads run first and the fingerprinting take what is
//! left. Measured on 2 cores shared with Redis, against fingerprinting at the
//! same priority: the workers' p99 of an index call is 4–27 % lower (20 %
//! with four workers), their throughput the same or higher.
//!
//! A nice value ranks threads within one scheduling group: against the
//! worker's own async threads always, against Redis only when both share a
//! group (one session or cgroup, as under `simdedup-bench`; a systemd unit or a
//! container is a group of its own). On Linux the nice value is a per-thread
//! attribute; elsewhere it would be the process', so the priority is only
//! changed on Linux.

use std::sync::atomic::{AtomicBool, Ordering};

/// A thread pool for fingerprinting whose threads run `nice` steps below the
/// priority of the thread that builds it (0: the same), named `simdedup-fp-N`
/// (as `top -H` shows them).
pub fn build(nice: u8) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("simdedup-fp-{i}"))
        .start_handler(move |_| lower_this_thread(nice))
        .build()
}

/// Warn at most once per process when the priority cannot be changed.
static WARNED: AtomicBool = AtomicBool::new(false);

fn lower_this_thread(nice: u8) {
    if nice == 0 {
        return;
    }
    if let Err(e) = renice_this_thread(nice) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, nice, "could not lower the fingerprinting threads' priority; they run at the process' priority");
        }
    }
}

/// Add `nice` to this thread's nice value (at most 19; raising a nice value
/// needs no privilege). A new thread starts with its creator's value, which
/// `getpriority(PRIO_PROCESS, 0)` reads on Linux.
#[cfg(target_os = "linux")]
fn renice_this_thread(nice: u8) -> std::io::Result<()> {
    use rustix::process::{getpriority_process, setpriority_process};
    let current = getpriority_process(None)?;
    let target = (current + i32::from(nice)).min(19);
    setpriority_process(Some(rustix::thread::gettid()), target)?;
    Ok(())
}

/// Elsewhere a nice value belongs to the whole process: nothing is changed
/// (`worker.fingerprint_nice` is documented as Linux only).
#[cfg(not(target_os = "linux"))]
fn renice_this_thread(_nice: u8) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use rustix::process::getpriority_process;

    fn thread_nice() -> i32 {
        getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[test]
    fn pool_threads_run_below_their_creator_and_the_creator_stays() {
        let process = thread_nice();
        let pool = build(7).unwrap();
        let seen: Vec<(i32, String)> = pool.broadcast(|_| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            (thread_nice(), name)
        });
        assert!(!seen.is_empty());
        for (nice, name) in &seen {
            assert_eq!(*nice, (process + 7).min(19), "thread {name}");
            assert!(name.starts_with("simdedup-fp-"), "{name}");
        }
        // The caller's thread (a tokio thread in the worker) is untouched.
        assert_eq!(thread_nice(), process);
    }

    #[test]
    fn nice_zero_leaves_the_priority_alone() {
        let process = thread_nice();
        let pool = build(0).unwrap();
        assert!(pool
            .broadcast(|_| thread_nice())
            .iter()
            .all(|&n| n == process));
    }
}
