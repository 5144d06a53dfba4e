//! `simdedup-bench`: the Redis index at scale and the workers end to end, on
//! a private redis-server. A tool of its own, outside the product: it links
//! the `simdedup` library for the index and runs the `simdedup` binary as the
//! workers.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser};

use simdedup::cli::advice::with_advice;
use simdedup::cli::{init_tracing, parse_rate, runtime, LogFormat};
use simdedup_bench::{report, BenchOptions};

/// The same allocator as the `simdedup` binary, so that the bench client's
/// CPU per check is what a worker pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "simdedup-bench",
    version,
    about = "Measure the simdedup Redis index at scale and the workers end to end, on a private redis-server",
    long_about = "Measure the simdedup Redis index at scale and the workers end to end.\n\n\
        Starts its own redis-server on a free port (no persistence, maxmemory capped, stopped at the \
        end and on Ctrl-C; needs `redis-server` on PATH or REDIS_SERVER_BIN). Then:\n\
        1. end to end on an empty index: K articles XADDed to simdedup:{bench}:in, W `simdedup worker` \
        processes, timed from the first worker's start until every entry has its output;\n\
        2. for each size: the index filled with seeded synthetic fingerprints over the last 48 h, Redis \
        bytes per article (INFO memory), M check-and-insert calls through the real path (client p50/p99, \
        Redis µs per check from INFO commandstats, Redis CPU per check), a new worker's view loaded from it \
        (seconds; this process' resident growth per article), and the end-to-end runs again.\n\n\
        Prints a Markdown table on stdout; --write-docs puts it, with the machine and the design card's \
        targets, between the `<!-- simdedup bench: begin/end -->` markers of a file.\n\n\
        Build both programs first (`cargo build --release`), then for example:\n  \
        target/release/simdedup-bench --quick                # a few minutes: 100 k articles\n  \
        target/release/simdedup-bench --sizes 1000000 --write-docs docs/benchmarks.md\n  \
        target/release/simdedup-bench --corpus ../shared/data/cctv-news-2022-2025.jsonl --no-index-sizes\n  \
        target/release/simdedup-bench --no-index-sizes --redis-url redis://127.0.0.1:7000  # a test cluster\n\n\
        10 M articles take about 4-5 GB of Redis memory and 30-60 minutes on 2 cores."
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, env = "SIMDEDUP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(flatten)]
    bench: BenchArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format, "warn");
    match run(cli.bench) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let text = with_advice(format!("{e:#}"), e.as_ref());
            eprintln!("simdedup-bench: error: {text}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The `simdedup` binary next to this one: cargo builds both into the same
/// directory.
fn sibling_simdedup() -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program's path")?;
    let path = me.with_file_name(format!("simdedup{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        bail!(
            "the workers run the `simdedup` binary, and there is none at {}: build it with \
             `cargo build --release` (it builds both programs), or name one with --simdedup PATH",
            path.display()
        );
    }
    Ok(path)
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// The `simdedup` binary the end-to-end workers run (default: the one next
    /// to this program, as `cargo build --release` puts it).
    #[arg(long, value_name = "PATH", env = "SIMDEDUP_BIN")]
    simdedup: Option<PathBuf>,
    /// Index sizes in articles, comma-separated (default 1000000,10000000; --quick: 100000).
    #[arg(long, value_delimiter = ',', value_name = "N,N,…")]
    sizes: Option<Vec<u64>>,
    /// Measure end to end on the empty index only (no preloaded sizes).
    #[arg(long, conflicts_with = "sizes")]
    no_index_sizes: bool,
    /// Measured check-and-insert calls per size (default 100000; --quick: 10000).
    #[arg(long, value_name = "M")]
    checks: Option<u64>,
    /// Checks in flight at once, as a busy worker has them.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Worker counts of the end-to-end runs, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4",
        value_name = "W,W,…"
    )]
    workers: Vec<usize>,
    /// No end-to-end runs (index measurements only).
    #[arg(long)]
    no_e2e: bool,
    /// Bucket length in hours of the index and the workers (the `bucket_hours`
    /// setting; default 24): longer buckets mean fewer buckets read per check
    /// and more memory held.
    #[arg(long, value_name = "HOURS")]
    bucket_hours: Option<u64>,
    /// Sketch hashes looked up per article, in the index and the workers (the
    /// `decision.lookup_signatures` setting, 1-12; default 6): fewer mean fewer
    /// Redis reads and writes per check and less memory, and lower recall on
    /// rewrites (docs/benchmarks.md).
    #[arg(long, value_name = "N")]
    lookup_signatures: Option<usize>,
    /// Articles per end-to-end run (default 20000; --quick: 5000; with --corpus,
    /// at most the corpus). Every run sends the same articles; on a filled
    /// index they are deleted after each run, so every run meets the same index.
    #[arg(long, value_name = "K")]
    e2e_articles: Option<u64>,
    /// Articles per second of the steady-feed runs (one worker, on the empty
    /// index and on each size): latency at a load the worker keeps up with,
    /// where the other runs drain a backlog as fast as they can.
    #[arg(long, value_name = "PER_SECOND", value_parser = parse_rate,
          default_value_t = simdedup_bench::DEFAULT_PACED_RATE)]
    paced_rate: f64,
    /// No steady-feed runs.
    #[arg(long)]
    no_paced: bool,
    /// Seed of the synthetic fingerprints and texts.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Real articles (JSONL with "text") for the end-to-end runs, e.g. ../shared/data/cctv-news-2022-2025.jsonl.
    #[arg(long, value_name = "FILE.jsonl")]
    corpus: Option<PathBuf>,
    /// A smoke run: sizes 100000, 10000 checks, 5000 articles per end-to-end run (flags given win).
    #[arg(long)]
    quick: bool,
    /// Replace the bench section of this Markdown file (e.g. docs/benchmarks.md) with the results.
    #[arg(long, value_name = "FILE")]
    write_docs: Option<PathBuf>,
    /// Redis maxmemory in GB (default: 3/4 of the available memory); the bench stops before it.
    #[arg(long, value_name = "GB")]
    max_memory_gb: Option<f64>,
    /// Passed to the workers (their default otherwise).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Passed to the workers (their default otherwise).
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Passed to the workers (their default otherwise).
    #[arg(long, value_name = "N", alias = "pipeline")]
    ordered_index_concurrency: Option<usize>,
    /// Passed to the workers: replicas each commit waits for (WAIT); none by default.
    #[arg(long, value_name = "N")]
    wait_replicas: Option<u32>,
    /// Give up on an end-to-end run after this many seconds.
    #[arg(long, default_value_t = 900, value_name = "SECONDS")]
    e2e_timeout: u64,
    /// No progress on stderr.
    #[arg(long)]
    no_progress: bool,
    /// Run the end-to-end measures on this Redis deployment instead of a
    /// private redis-server: one node, a Redis Cluster (any node's URL, or
    /// several comma-separated) or `redis+sentinel://…` (the `redis_url`
    /// forms). It is EMPTIED (FLUSHDB on every primary) before each run: a
    /// deployment for benchmarks only. Needs --no-index-sizes.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
}

fn run(args: BenchArgs) -> Result<()> {
    let exe = match args.simdedup {
        Some(path) => path,
        None => sibling_simdedup()?,
    };
    let mut o = BenchOptions::new(exe);
    if args.quick {
        o.sizes = vec![100_000];
        o.checks = 10_000;
        o.e2e_articles = 5_000;
    }
    if let Some(sizes) = args.sizes {
        o.sizes = sizes;
    }
    if args.no_index_sizes {
        o.sizes.clear();
    }
    if let Some(m) = args.checks {
        o.checks = m;
    }
    if let Some(k) = args.e2e_articles {
        o.e2e_articles = k;
    }
    o.concurrency = args.concurrency;
    o.paced_rate = (!args.no_paced).then_some(args.paced_rate);
    o.workers = if args.no_e2e {
        Vec::new()
    } else {
        args.workers
    };
    o.seed = args.seed;
    o.corpus = args.corpus;
    o.max_memory_bytes = args.max_memory_gb.map(|gb| (gb * 1e9) as u64);
    o.batch_size = args.batch_size;
    o.max_in_flight = args.max_in_flight;
    o.ordered_index_concurrency = args.ordered_index_concurrency;
    o.wait_replicas = args.wait_replicas;
    o.e2e_timeout = std::time::Duration::from_secs(args.e2e_timeout);
    o.bucket_hours = args.bucket_hours;
    o.lookup_signatures = args.lookup_signatures;
    o.progress = !args.no_progress;
    o.redis_url = args.redis_url;
    o.command_line = std::iter::once("simdedup-bench".to_owned())
        .chain(std::env::args().skip(1).map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        }))
        .collect::<Vec<_>>()
        .join(" ");
    let report = runtime()?.block_on(simdedup_bench::run(&o))?;
    print!("{}", report::markdown(&report));
    if let Some(path) = &args.write_docs {
        report::write_docs(path, &report).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("simdedup-bench: results written to {}", path.display());
    }
    Ok(())
}
