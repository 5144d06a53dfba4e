//! `simdedup-bench`: the index at scale and the workers end to end, in one command.
//!
//! Starts a private `redis-server` ([`simdedup::redis_server`]) with a memory cap,
//! then:
//!
//! 1. **empty index, end to end**: for each worker count, an empty database,
//!    K articles produced into the input stream, W `simdedup worker` processes,
//!    timed until every entry has its output ([`e2e`]);
//! 2. for each size N: an empty database, N synthetic fingerprints
//!    ([`synthetic`]) stored with `RedisIndex::preload` over the last 48 h,
//!    Redis memory per article, a short `MONITOR` calibration, then M checks
//!    through `Index::check_and_insert` measured by the client (latency) and by
//!    Redis (`INFO commandstats`, `INFO cpu`) ([`index`]), then the end-to-end
//!    runs again on the filled index.
//!
//! The result is a [`BenchReport`]; [`report`] prints it as a table and writes
//! it into a marked section of `docs/benchmarks.md`. Everything started here
//! (server, workers) is stopped when [`run`] returns, on error and on
//! Ctrl-C/SIGTERM too.

pub mod e2e;
pub mod index;
pub mod info;
pub mod progress;
pub mod report;
pub mod synthetic;
pub mod worker_metrics;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use e2e::{Articles, E2e, WorkerSetup};
use index::{Checks, Memory};
use report::Machine;
use simdedup::connect::{Conn, ConnectOptions};
use simdedup::decision::DecisionConfig;
use simdedup::index::{Index, IndexError, RedisIndex, RedisIndexOptions};
use simdedup::redis_server::{RedisServer, RedisServerError};
use synthetic::{FingerprintGen, TextGen};

/// Checks run under `MONITOR` before the measured ones, to tell the commands a
/// check sends from those its scripts run.
const CALIBRATION_CHECKS: u64 = 200;

/// Articles per second of the steady-feed runs: 3.5 times the average of
/// 50 M articles per two days, the upper end of the job as public write-ups
/// size it (`docs/operations.md`).
pub const DEFAULT_PACED_RATE: f64 = 1000.0;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Index sizes (articles), measured in increasing order.
    pub sizes: Vec<u64>,
    /// Measured checks per size.
    pub checks: u64,
    /// Checks in flight.
    pub concurrency: usize,
    /// Worker counts of the end-to-end runs (empty: no end-to-end runs).
    pub workers: Vec<usize>,
    /// Articles per end-to-end run.
    pub e2e_articles: u64,
    /// A steady feed of this many articles per second into one worker, on the
    /// empty index and on each size: latency at a load the worker keeps up
    /// with (`None`: no such runs). The other runs drain a backlog as fast as
    /// they can, where a call's latency is mostly its queue.
    pub paced_rate: Option<f64>,
    pub seed: u64,
    /// Real articles for the end-to-end runs instead of synthetic ones.
    pub corpus: Option<PathBuf>,
    /// Namespace of the index and the streams.
    pub namespace: String,
    /// Redis `maxmemory` (and the bench's own limit); default: 3/4 of the
    /// machine's available memory.
    pub max_memory_bytes: Option<u64>,
    /// Passed to the workers (`--batch-size`, `--max-in-flight`,
    /// `--ordered-index-concurrency`); their defaults otherwise.
    pub batch_size: Option<usize>,
    pub max_in_flight: Option<usize>,
    pub ordered_index_concurrency: Option<usize>,
    /// Replicas each worker commit waits for (`--wait-replicas`); none otherwise.
    pub wait_replicas: Option<u32>,
    /// Bucket length in hours of the index and the workers (`bucket_hours`);
    /// their default (24 h) otherwise.
    pub bucket_hours: Option<u64>,
    /// Sketch hashes looked up per article (`decision.lookup_signatures`) of
    /// the index and the workers; their default (4) otherwise.
    pub lookup_signatures: Option<usize>,
    /// Give up on an end-to-end run after this long.
    pub e2e_timeout: Duration,
    /// The `simdedup` binary the workers run.
    pub worker_exe: PathBuf,
    /// Progress on stderr.
    pub progress: bool,
    /// The command line, for the report.
    pub command_line: String,
    /// A Redis deployment to run the end-to-end measures on, by its
    /// `redis_url` (one node, cluster seeds, `redis+sentinel://`), instead of
    /// a private `redis-server`. Emptied (`FLUSHDB`) before each run.
    pub redis_url: Option<String>,
}

impl BenchOptions {
    /// Defaults: sizes 1 M and 10 M, 100 k checks, 16 in flight, 1/2/4 workers,
    /// 20 k articles per end-to-end run.
    pub fn new(worker_exe: PathBuf) -> BenchOptions {
        BenchOptions {
            sizes: vec![1_000_000, 10_000_000],
            checks: 100_000,
            concurrency: 16,
            workers: vec![1, 2, 4],
            e2e_articles: 20_000,
            paced_rate: Some(DEFAULT_PACED_RATE),
            seed: 1,
            corpus: None,
            namespace: "bench".into(),
            max_memory_bytes: None,
            batch_size: None,
            max_in_flight: None,
            ordered_index_concurrency: None,
            wait_replicas: None,
            bucket_hours: None,
            lookup_signatures: None,
            e2e_timeout: Duration::from_secs(900),
            worker_exe,
            progress: true,
            command_line: String::new(),
            redis_url: None,
        }
    }
}

/// Why a bench stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Server(#[from] RedisServerError),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("end-to-end run: {0}")]
    Worker(String),
    #[error(
        "{articles} articles would need about {:.1} GB of Redis memory, over the limit of {:.1} GB \
         (--max-memory-gb; default 3/4 of the available memory): use smaller --sizes",
        *projected_bytes as f64 / 1e9,
        *limit_bytes as f64 / 1e9
    )]
    MemoryBudget {
        articles: u64,
        projected_bytes: u64,
        limit_bytes: u64,
    },
    #[error("cannot read corpus {path}: {why}")]
    Corpus { path: PathBuf, why: String },
    #[error("invalid options: {0}")]
    Options(String),
    #[error("interrupted; the private redis-server and the workers were stopped")]
    Interrupted,
    #[error("a measuring task failed: {0}")]
    Task(String),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A worker's cold start: `RedisIndex::catch_up` of a new process' view.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ViewLoad {
    pub seconds: f64,
    /// This process' resident memory growth over the articles held.
    pub bytes_per_article: f64,
}

/// Everything measured at one size.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SizeResult {
    pub articles: u64,
    pub preload_seconds: f64,
    pub memory: Memory,
    /// A cold view of the N articles, as a worker loads it before serving.
    pub view: ViewLoad,
    pub checks: Checks,
    pub e2e: Vec<E2e>,
    /// The steady-feed run on the filled index ([`BenchOptions::paced_rate`]).
    pub paced: Option<E2e>,
    /// The empty-index runs again, right after this size's, on a second
    /// private `redis-server`: the baseline of the same minutes. A shared VM
    /// can run 30 % slower half an hour into a bench than at its start, and a
    /// ratio against the first empty-index runs would count that as the
    /// index's cost.
    pub empty_after: Vec<E2e>,
}

/// A whole bench run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BenchReport {
    pub command_line: String,
    pub date_utc: String,
    pub machine: Machine,
    pub redis_version: String,
    pub articles: String,
    /// Load average (1 min) at the start and at the end.
    pub load_start: f64,
    pub load_end: f64,
    pub empty: Vec<E2e>,
    /// The steady-feed run on the empty index.
    pub empty_paced: Option<E2e>,
    pub sizes: Vec<SizeResult>,
}

impl BenchOptions {
    /// Whether there are steady-feed runs: a rate, and end-to-end runs at all.
    fn paced(&self) -> bool {
        self.paced_rate.is_some() && !self.workers.is_empty()
    }

    fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: &str| Err(BenchError::Options(m.into()));
        if self.sizes.contains(&0) {
            return bad("--sizes must be positive numbers of articles");
        }
        if self.checks == 0 || self.concurrency == 0 {
            return bad("--checks and --concurrency must be positive");
        }
        if self.workers.contains(&0) {
            return bad("--workers must be positive counts");
        }
        if self.bucket_hours.is_some_and(|h| h == 0 || h > 720) {
            return bad("--bucket-hours must be 1 to 720");
        }
        let sketch = simdedup::fingerprint::FingerprintConfig::default().signatures;
        if self.lookup_signatures.is_some_and(|n| n == 0 || n > sketch) {
            return Err(BenchError::Options(format!(
                "--lookup-signatures must be 1 to {sketch} (the hashes in a sketch)"
            )));
        }
        if self.paced_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return bad("--paced-rate must be a number of articles per second above 0");
        }
        if self.redis_url.is_some() && !self.sizes.is_empty() {
            return bad(
                "--redis-url measures end to end only (the index sizes need a private server): add --no-index-sizes",
            );
        }
        if let Some(url) = &self.redis_url {
            simdedup::connect::validate_url(url).map_err(BenchError::Options)?;
        }
        if !self.workers.is_empty() && self.e2e_articles == 0 {
            return bad("--e2e-articles must be positive (or --no-e2e)");
        }
        simdedup::keys::validate_namespace(&self.namespace).map_err(BenchError::Options)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Run the bench. Stops everything it started when it returns, and when the
/// process gets SIGINT/SIGTERM meanwhile ([`BenchError::Interrupted`]).
pub async fn run(options: &BenchOptions) -> Result<BenchReport, BenchError> {
    options.validate()?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = run_inner(options) => r,
        _ = tokio::signal::ctrl_c() => Err(BenchError::Interrupted),
        _ = terminate.recv() => Err(BenchError::Interrupted),
    }
}

async fn run_inner(options: &BenchOptions) -> Result<BenchReport, BenchError> {
    let machine = Machine::read();
    let limit = options
        .max_memory_bytes
        .unwrap_or(machine.available_bytes / 4 * 3)
        .max(64 << 20);
    let articles = match &options.corpus {
        Some(path) => Articles::corpus(path)?,
        None => Articles::Synthetic(TextGen::new(options.seed)),
    };
    // A private server, unless a deployment was named (end to end only).
    let server = match &options.redis_url {
        Some(_) => None,
        None => Some(RedisServer::start_with(&[
            "--maxmemory",
            &limit.to_string(),
            "--maxmemory-policy",
            "noeviction",
        ])?),
    };
    let (url, log_dir) = match (&server, &options.redis_url) {
        (Some(server), _) => {
            note(
                options,
                &format!(
                    "started a private {} on 127.0.0.1:{} (maxmemory {:.1} GB, no persistence; stopped at the end)",
                    server.binary().display(),
                    server.port(),
                    limit as f64 / 1e9
                ),
            );
            (server.url(), server.dir().to_owned())
        }
        (None, url) => {
            let url = url.clone().unwrap_or_default();
            let dir = std::env::temp_dir().join(format!("simdedup-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            note(
                options,
                &format!(
                    "end to end on {} (emptied before each run); worker logs in {}",
                    simdedup::redact::redact_url(&url),
                    dir.display()
                ),
            );
            (url, dir)
        }
    };
    // The end-to-end runs reach Redis as the workers do ([`Conn`]: one node,
    // a cluster or through Sentinel).
    let mut e2e_conn = e2e_connect(&url).await?;
    let setup = WorkerSetup {
        exe: options.worker_exe.clone(),
        url: url.clone(),
        namespace: options.namespace.clone(),
        batch_size: options.batch_size,
        max_in_flight: options.max_in_flight,
        ordered_index_concurrency: options.ordered_index_concurrency,
        wait_replicas: options.wait_replicas,
        bucket_hours: options.bucket_hours,
        lookup_signatures: options.lookup_signatures,
        timeout: options.e2e_timeout,
        log_dir,
    };
    let per_run = articles.per_run(options.e2e_articles);
    if per_run < options.e2e_articles {
        note(
            options,
            &format!(
                "{}: {per_run} articles per end-to-end run (--e2e-articles {})",
                articles.describe(),
                options.e2e_articles
            ),
        );
    }
    let mut report = BenchReport {
        command_line: options.command_line.clone(),
        date_utc: report::utc_now(),
        redis_version: info::Info::fetch_for(&mut e2e_conn, &setup.namespace, "server")
            .await?
            .text("redis_version")
            .unwrap_or("?")
            .to_owned(),
        articles: if options.workers.is_empty() {
            "none (no end-to-end runs)".into()
        } else {
            format!(
                "{}, the same {per_run} in every run (on a filled index deleted after each run, so that every run meets the same index)",
                articles.describe()
            )
        },
        load_start: report::load_average(),
        machine,
        ..BenchReport::default()
    };
    let mut runs = E2eRuns {
        options,
        setup: &setup,
        articles: &articles,
        per_run,
        next_run: 0,
    };
    report.empty = runs.all(&mut e2e_conn, "empty index", true).await?;
    report.empty_paced = runs.paced(&mut e2e_conn, "empty index", true).await?;
    let Some(server) = server else {
        report.load_end = report::load_average();
        return Ok(report);
    };
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let mut sizes = options.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut bytes_per_article: Option<f64> = None;
    for &n in &sizes {
        flush(&mut conn).await?;
        let base = info::Info::fetch(&mut conn, "memory")
            .await?
            .num("used_memory") as u64;
        if let Some(bpa) = bytes_per_article {
            let projected = base + (bpa * n as f64 * 1.05) as u64;
            if projected > limit {
                return Err(BenchError::MemoryBudget {
                    articles: n,
                    projected_bytes: projected,
                    limit_bytes: limit,
                });
            }
        }
        let mut decision = DecisionConfig::default();
        if let Some(n) = options.lookup_signatures {
            decision.lookup_signatures = n;
        }
        let gen = FingerprintGen::new(options.seed, now_ms(), decision.window_ms);
        let index = RedisIndex::connect(
            &url,
            &options.namespace,
            decision,
            RedisIndexOptions {
                expected_articles: n,
                bucket_ms: options.bucket_hours.map(|h| h * 3_600_000),
                // A preload pipeline or a burst of checks on a busy 2-core
                // box may keep Redis longer than a worker's 2 s: a long run
                // must not die of it (a timeout only matters when hit).
                connect: ConnectOptions {
                    response_timeout: std::time::Duration::from_secs(60),
                    ..ConnectOptions::default()
                },
                ..RedisIndexOptions::default()
            },
        )
        .await?;
        note(options, &format!("{n} articles: preloading"));
        let preload_time =
            index::preload(&index, &mut conn, gen, 0..n, base, limit, options.progress).await?;
        let memory = index::memory(&mut conn, base, n).await?;
        bytes_per_article = Some(memory.bytes_per_article);
        note(
            options,
            &format!(
                "{n} articles preloaded in {:.0} s: {:.0} bytes/article; {} checks with {} in flight",
                preload_time.as_secs_f64(),
                memory.bytes_per_article,
                options.checks,
                options.concurrency
            ),
        );
        let view = {
            let (started, rss) = (std::time::Instant::now(), resident_bytes());
            index.catch_up().await?;
            let held = index.view_articles();
            let view = ViewLoad {
                seconds: started.elapsed().as_secs_f64(),
                bytes_per_article: resident_bytes().saturating_sub(rss) as f64 / held.max(1) as f64,
            };
            note(
                options,
                &format!(
                    "view loaded: {held} articles in {:.1} s, {:.0} bytes/article of this process' memory",
                    view.seconds, view.bytes_per_article
                ),
            );
            view
        };
        // Far enough past the measured articles that no calibration article is
        // a copy of a measured one or the other way round.
        let first = n + options.checks + 2 * FingerprintGen::COPY_DISTANCE;
        let calibration = first..first + CALIBRATION_CHECKS;
        let origins = index::calibrate(
            &index,
            &format!("127.0.0.1:{}", server.port()),
            gen,
            calibration,
        )
        .await?;
        let checks = index::measure_checks(
            &index,
            &mut conn,
            gen,
            n..n + options.checks,
            options.concurrency,
            &origins,
            options.progress,
        )
        .await?;
        note(options, &report::checks_line(&checks));
        // The workers of the end-to-end runs hold copies of their own: this
        // process' view would only crowd them.
        drop(index);
        let mut result = SizeResult {
            articles: n,
            preload_seconds: preload_time.as_secs_f64(),
            memory,
            view,
            checks,
            e2e: Vec::new(),
            paced: None,
            empty_after: Vec::new(),
        };
        result.e2e = runs
            .all(&mut e2e_conn, &format!("{n} articles"), false)
            .await?;
        result.paced = runs
            .paced(&mut e2e_conn, &format!("{n} articles"), false)
            .await?;
        if !result.e2e.is_empty() {
            result.empty_after = runs.empty_again(&format!("after {n} articles")).await?;
        }
        report.sizes.push(result);
    }
    report.load_end = report::load_average();
    drop(conn);
    drop(server);
    Ok(report)
}

/// The end-to-end runs of a bench. Every run sends the same articles under
/// its own number (their ids, [`e2e::article_id`]), so that each compares like
/// for like with the others: the same worker count on the empty index, other
/// worker counts, the steady feed. On a filled index a run's articles are
/// deleted after it ([`forget_run`]): the next run meets the index as the
/// preload left it, and finds no text it sends already stored (it would be a
/// copy of itself). A deleted article's SimHash stays in its block sets until
/// its bucket expires (`lua/delete.lua`); the deletion log takes it out of
/// every worker's view.
struct E2eRuns<'a> {
    options: &'a BenchOptions,
    setup: &'a WorkerSetup,
    articles: &'a Articles,
    /// Articles per run.
    per_run: u64,
    next_run: u64,
}

impl E2eRuns<'_> {
    /// One run per worker count on the index as it is (`empty`: on an emptied
    /// database each time).
    async fn all(
        &mut self,
        conn: &mut Conn,
        label: &str,
        empty: bool,
    ) -> Result<Vec<E2e>, BenchError> {
        let mut results = Vec::new();
        for &w in &self.options.workers {
            let what = format!("{label}: end to end with {w} worker(s)");
            results.push(self.one(conn, &what, empty, w, None).await?);
        }
        Ok(results)
    }

    /// The steady-feed run ([`BenchOptions::paced_rate`]): one worker
    /// (`empty`: on an emptied database).
    async fn paced(
        &mut self,
        conn: &mut Conn,
        label: &str,
        empty: bool,
    ) -> Result<Option<E2e>, BenchError> {
        let Some(rate) = self.options.paced_rate.filter(|_| self.options.paced()) else {
            return Ok(None);
        };
        let what = format!("{label}: a steady feed of {rate:.0} articles/s into 1 worker");
        Ok(Some(self.one(conn, &what, empty, 1, Some(rate)).await?))
    }

    /// One run through `workers` workers, at `rate` if given ([`e2e::run`]),
    /// under the next run number; `empty`: on an emptied database, else on
    /// the filled index, whose run's articles are deleted afterwards.
    async fn one(
        &mut self,
        conn: &mut Conn,
        what: &str,
        empty: bool,
        workers: usize,
        rate: Option<f64>,
    ) -> Result<E2e, BenchError> {
        if empty {
            flush(conn).await?;
        }
        note(self.options, what);
        let run = self.next_run;
        let r = e2e::run(
            conn,
            self.setup,
            self.articles,
            run,
            self.per_run,
            workers,
            rate,
        )
        .await?;
        self.next_run += 1;
        note(self.options, &report::e2e_line(&r));
        if !empty {
            forget_run(self.setup, run, &r).await?;
        }
        Ok(r)
    }

    /// The empty-index runs once more, on a second private `redis-server`
    /// started for them (the first one holds the filled index), with the same
    /// slices and workers; stopped when they are done.
    async fn empty_again(&mut self, label: &str) -> Result<Vec<E2e>, BenchError> {
        let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"])?;
        let setup = WorkerSetup {
            url: server.url(),
            log_dir: server.dir().to_owned(),
            ..self.setup.clone()
        };
        let mut conn = e2e_connect(&setup.url).await?;
        let mut again = E2eRuns {
            setup: &setup,
            ..*self
        };
        let runs = again
            .all(&mut conn, &format!("empty index ({label})"), true)
            .await?;
        self.next_run = again.next_run;
        Ok(runs)
    }
}

/// Delete the articles end-to-end run `run` stored (`result`: what it
/// answered), so that the filled index is again as the preload left it.
/// Every article the run decided (unique or duplicate) was stored: a count
/// that differs is an error, not a figure.
async fn forget_run(setup: &WorkerSetup, run: u64, result: &E2e) -> Result<(), BenchError> {
    let index = RedisIndex::connect(
        &setup.url,
        &setup.namespace,
        DecisionConfig::default(),
        RedisIndexOptions {
            bucket_ms: setup.bucket_hours.map(|h| h * 3_600_000),
            connect: ConnectOptions {
                response_timeout: std::time::Duration::from_secs(60),
                ..ConnectOptions::default()
            },
            ..RedisIndexOptions::default()
        },
    )
    .await?;
    // Deletes in 32 tasks: a few seconds for 20,000 articles.
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..32 {
        let index = index.clone();
        let k = result.articles;
        tasks.spawn(async move {
            let mut deleted = 0u64;
            for j in (first..k).step_by(32) {
                deleted += u64::from(index.delete(&e2e::article_id(run, j)).await?.found);
            }
            Ok::<u64, IndexError>(deleted)
        });
    }
    let mut deleted = 0;
    while let Some(task) = tasks.join_next().await {
        deleted += task.map_err(|e| BenchError::Task(e.to_string()))??;
    }
    let stored = result.unique + result.duplicate;
    if deleted != stored {
        return Err(BenchError::Worker(format!(
            "run {run} decided {stored} articles but {deleted} of its ids were found to delete"
        )));
    }
    Ok(())
}

/// A connection as the workers open one, with a patient reply timeout.
async fn e2e_connect(url: &str) -> Result<Conn, BenchError> {
    let options = ConnectOptions {
        response_timeout: Duration::from_secs(60),
        ..ConnectOptions::default()
    };
    Conn::connect(url, &options)
        .await
        .map_err(|e| BenchError::Worker(e.to_string()))
}

/// Empty the database (on a cluster: every primary's).
async fn flush<C: redis::aio::ConnectionLike + Send>(conn: &mut C) -> Result<(), BenchError> {
    redis::cmd("FLUSHDB")
        .arg("SYNC")
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// This process' resident memory (`VmRSS`), 0 where `/proc` does not tell.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

fn note(options: &BenchOptions, line: &str) {
    if options.progress {
        eprintln!("simdedup-bench: {line}");
    }
}
