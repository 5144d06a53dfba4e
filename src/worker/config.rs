//! The worker's settings (`[worker]` in the TOML file, `SIMDEDUP_WORKER__*`
//! in the environment), their defaults and the rules they must keep.

use serde::{Deserialize, Serialize};

/// Worker settings (`[worker]` in the TOML file, `SIMDEDUP_WORKER__*` in the environment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Consumer group name. Every worker of a namespace must use the same one.
    pub group: String,
    /// This worker's consumer name; empty = `<hostname>-<pid>-<random>`. A fixed
    /// name lets a restarted worker resume its own pending entries at once.
    pub consumer: String,
    /// Entries per XREADGROUP / XAUTOCLAIM (COUNT); a batch is committed in
    /// script calls of [`ack::ENTRIES_PER_CALL`](super::ack::ENTRIES_PER_CALL) entries.
    pub batch_size: usize,
    /// Entries read and not yet committed, at most. Also what a worker that
    /// crashes leaves for its peers to take over, decided after the entries
    /// read meanwhile: keep it at a few batches.
    pub max_in_flight: usize,
    /// Entries a worker reads past the oldest entry pending on another
    /// consumer of the group, at most; then it reads no new entry until that
    /// one is done ([`order`](super::order)). Keeps verdicts in stream order across workers
    /// when one falls behind — a worker killed (its entries stranded until a
    /// peer reclaims them), a peer's retries after an outage — at the cost of
    /// a pause of the others meanwhile. At least `max_in_flight`, so that
    /// healthy peers never wait on each other's batches; 0: no bound.
    pub order_slack: usize,
    /// When `ordered`: a batch also waits, before its index calls, until no
    /// other consumer holds an entry before its first ([`order`](super::order)), so that
    /// the batches of different workers decide in stream order, as `scan`
    /// would; fingerprinting and commits still overlap. Off: batches of
    /// different workers decide concurrently, and a copy read by one worker
    /// may be decided before its original held by another.
    pub order_across_workers: bool,
    /// Decide this worker's entries in stream order: batches take turns at the
    /// index and a batch's entries go one after another, so a copy is never
    /// decided before an original this worker read earlier (what `scan` does).
    /// Fingerprinting and commits still overlap. Off: index calls run
    /// concurrently (up to `index_concurrency`), faster against a remote index,
    /// but copies that arrive close together may be decided out of order.
    pub ordered: bool,
    /// Index calls of this worker in flight at once, over all its batches.
    /// With `ordered` off, batches call the index concurrently up to this
    /// bound; with it on, one batch at a time does, up to the lower of this
    /// and `ordered_index_concurrency`.
    pub index_concurrency: usize,
    /// When `ordered`: index calls of a batch in flight at once. A check waits
    /// for every earlier entry of the batch whose article could be its
    /// candidate (or share its id) to be decided (`may_interact` in `worker/batch.rs`); checks
    /// that cannot meet go together, so verdicts stay those of one after
    /// another while the round trips overlap. A query or a delete waits for
    /// everything before it. 1: one call at a time. Also read as `pipeline`,
    /// with a warning naming this (`crate::settings`).
    pub ordered_index_concurrency: usize,
    /// How many steps below the rest of the worker its fingerprinting threads
    /// run (a nice value, 0-19; Linux only; 0: the same priority). The index
    /// calls wait on the threads that talk to Redis, fingerprinting is bulk
    /// work done a batch ahead: on a busy host the former should run first
    /// (`src/worker/fingerprint_pool.rs`).
    pub fingerprint_nice: u8,
    /// XREADGROUP BLOCK, milliseconds. Shutdown may wait this long for a read.
    pub block_ms: u64,
    /// TTL of this worker's liveness key, refreshed three times per TTL. Once
    /// it expires, peers take over the worker's pending entries (a dead
    /// worker's entries move on within this plus `claim_interval_ms`); a live
    /// worker's are never taken, however long its batches take.
    pub liveness_ttl_ms: u64,
    /// How often to look for dead consumers' entries and for own entries no
    /// task holds (and refresh the pending/lag gauges).
    pub claim_interval_ms: u64,
    /// An entry delivered more than this many times is dead-lettered.
    pub max_deliveries: u64,
    /// How far ahead of the worker's clock an article's `ts` may be; later
    /// ones are rejected (`ts_in_future`), as are those older than the
    /// window (`ts_too_old`).
    pub max_clock_skew_ms: u64,
    /// Approximate MAXLEN of the output stream (0: never trimmed).
    pub output_maxlen: u64,
    /// Approximate MAXLEN of the dead-letter stream (0: never trimmed).
    pub dead_maxlen: u64,
    /// XDEL input entries once their output is written (keeps the input stream
    /// small; leave off if other consumer groups read it too).
    pub delete_processed: bool,
    /// Replicas that must acknowledge each commit (Redis `WAIT`) before its
    /// entries count as done (0: none). A commit fewer replicas acknowledged
    /// within `wait_timeout_ms` is held and asked again, so the worker stops
    /// taking new entries while its primary lacks replicas. See
    /// `docs/protocol.md` for what a failover can lose with and without it.
    pub wait_replicas: u32,
    /// How long one `WAIT` waits for the replicas, milliseconds.
    pub wait_timeout_ms: u64,
    /// Timeout of every Redis command but the blocking read, milliseconds.
    pub command_timeout_ms: u64,
    /// Upper bound of the retry backoff (exponential from 25 ms, jittered),
    /// milliseconds.
    pub backoff_max_ms: u64,
    /// After SIGTERM/SIGINT, wait at most this long for in-flight entries.
    pub shutdown_timeout_ms: u64,
    /// Address of the HTTP listener for /metrics, /healthz, /readyz (empty: none).
    pub http_addr: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            group: "simdedup".into(),
            consumer: String::new(),
            batch_size: 128,
            max_in_flight: 256,
            order_slack: 256,
            order_across_workers: true,
            ordered: true,
            index_concurrency: 32,
            ordered_index_concurrency: 16,
            fingerprint_nice: 10,
            block_ms: 1000,
            liveness_ttl_ms: 3_000,
            claim_interval_ms: 1_000,
            max_deliveries: 5,
            max_clock_skew_ms: 300_000,
            output_maxlen: 1_000_000,
            dead_maxlen: 100_000,
            delete_processed: false,
            wait_replicas: 0,
            wait_timeout_ms: 1_000,
            command_timeout_ms: 5_000,
            backoff_max_ms: 2_000,
            shutdown_timeout_ms: 10_000,
            http_addr: "127.0.0.1:9464".into(),
        }
    }
}

impl WorkerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size == 0 || self.max_in_flight < self.batch_size {
            return Err(
                "worker.batch_size must be positive and at most worker.max_in_flight".into(),
            );
        }
        if self.ordered_index_concurrency == 0 || self.ordered_index_concurrency > 256 {
            return Err(format!(
                "worker.ordered_index_concurrency = {} but it is 1 (one index call at a time) to 256",
                self.ordered_index_concurrency
            ));
        }
        if self.fingerprint_nice > 19 {
            return Err(format!(
                "worker.fingerprint_nice = {} but nice values go up to 19: use 0 (same priority) to 19 (lowest)",
                self.fingerprint_nice
            ));
        }
        if self.index_concurrency == 0 || self.max_deliveries == 0 {
            return Err(
                "worker.index_concurrency and worker.max_deliveries must be positive".into(),
            );
        }
        if self.liveness_ttl_ms < 300 || self.claim_interval_ms == 0 {
            return Err(format!(
                "worker.liveness_ttl_ms = {} and worker.claim_interval_ms = {}: the TTL is at least 300 ms (it is refreshed every third of it) and the interval positive",
                self.liveness_ttl_ms, self.claim_interval_ms
            ));
        }
        if self.wait_replicas > 0
            && (self.wait_timeout_ms == 0 || self.wait_timeout_ms >= self.command_timeout_ms)
        {
            return Err(format!(
                "worker.wait_timeout_ms = {} but with worker.wait_replicas it is positive (0 would make WAIT block forever) and below worker.command_timeout_ms ({})",
                self.wait_timeout_ms, self.command_timeout_ms
            ));
        }
        if self.group.is_empty() {
            return Err("worker.group must not be empty".into());
        }
        if self.max_in_flight > u32::MAX as usize / 2 {
            return Err("worker.max_in_flight is too large".into());
        }
        Ok(())
    }

    /// The consumer name to use: the configured one, or a fresh unique one.
    pub fn consumer_name(&self) -> String {
        if !self.consumer.is_empty() {
            return self.consumer.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "worker".into());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{host}-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
    }
}
