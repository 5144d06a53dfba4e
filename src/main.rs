//! The `simdedup` command line: parses arguments, sets up tracing, calls the library.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use simdedup::article::{parse_json_line, validate_text};
use simdedup::connect::{Conn, ConnectOptions};
use simdedup::eval::{score, Truth};
use simdedup::idf::{write_table, IdfBuilder};
use simdedup::index::EmbeddedIndex;
use simdedup::keys::Keys;
use simdedup::normalize::normalize;
use simdedup::scan::{scan, ScanOptions};
use simdedup::settings::{redact_url, IndexKind, Settings};
use simdedup::tokenize::Tokenizer;
use simdedup::worker::service;
use simdedup::worker::shutdown::{on_signals, ShutdownTrigger};
use simdedup::worker::tools;
use std::sync::Arc;

/// mimalloc instead of the system allocator: the worker's per-article work
/// (tokenizing, candidates, Redis replies) is many small allocations, and
/// glibc's malloc and free were a quarter of a check's CPU
/// (`perf`, docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "simdedup",
    version,
    about = "Near-duplicate detection for articles: SimHash + sentence signatures, embedded or on Redis",
    long_about = "Near-duplicate detection for articles.\n\n\
        Each article is checked against the articles before it (within a retention window) and is \
        `unique` (kept), `duplicate` (with `dup_of` naming the kept article) or `rejected` (with a reason).\n\n\
        Quick start:  simdedup scan articles.jsonl > verdicts.jsonl"
)]
struct Cli {
    /// Log format on stderr: `human` or `json` (one JSON object per line).
    #[arg(long, global = true, env = "SIMDEDUP_LOG_FORMAT", default_value = "human", value_parser = ["human", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the worker pipeline on the bundled sample: a private redis-server on a free port (or --redis-url), produce, one worker, print the verdicts.
    Demo(DemoArgs),
    /// Check JSONL articles ({"id","text",["title"],["ts"]}) in order, in memory; one verdict per line on stdout.
    Scan(ScanArgs),
    /// Print the fingerprint of one text as JSON.
    Fingerprint(FingerprintArgs),
    /// Explain the verdict on text B against an earlier text A: signal, distance and bound, overlap, shared clauses, numbers.
    Explain(ExplainArgs),
    /// IDF tables.
    #[command(subcommand)]
    Idf(IdfCommand),
    /// Scan a labelled stream and score it (recall / precision) against its truth file.
    Eval(EvalArgs),
    /// Run a stream worker: read simdedup:{NS}:in, write one verdict per entry to simdedup:{NS}:out.
    Worker(WorkerArgs),
    /// Add JSONL articles to the input stream (pipelined XADD).
    Produce(ProduceArgs),
    /// Show lag, pending entries and consumers of a namespace.
    Stats(RedisCommon),
    /// Show what the index holds about an article: fingerprint, verdict, cluster.
    Inspect(InspectArgs),
    /// Print the effective configuration (file ← environment ← flags), secrets redacted.
    Config(RedisCommon),
    /// Measure the Redis index at scale and the workers end to end, on a private redis-server.
    #[command(
        long_about = "Measure the Redis index at scale and the workers end to end (issue 6).\n\n\
            Starts its own redis-server on a free port (no persistence, maxmemory capped, stopped at the \
            end and on Ctrl-C; needs `redis-server` on PATH or REDIS_SERVER_BIN). Then:\n\
            1. end to end on an empty index: K articles XADDed to simdedup:{bench}:in, W `simdedup worker` \
            processes, timed from the first worker's start until every entry has its output;\n\
            2. for each size: the index filled with seeded synthetic fingerprints over the last 48 h, Redis \
            bytes per article (INFO memory), M check-and-insert calls through the real path (client p50/p99, \
            Redis µs per check from INFO commandstats, Redis CPU per check), and the end-to-end runs again.\n\n\
            Prints a Markdown table on stdout; --write-docs puts it, with the machine and the targets of \
            issues 3, 4 and 6, between the `<!-- simdedup bench: begin/end -->` markers of a file.\n\n\
            Examples:\n  simdedup bench --quick                       # a few minutes: 100 k articles\n  \
            simdedup bench --sizes 1000000 --write-docs docs/benchmarks.md\n  \
            simdedup bench --corpus ../shared/data/cctv-news-2022-2025.jsonl --no-index-sizes\n\n\
            10 M articles take about 4-5 GB of Redis memory and 30-60 minutes on 2 cores."
    )]
    Bench(BenchArgs),
}

/// Settings of every command that talks to Redis.
#[derive(Args, Debug)]
struct RedisCommon {
    /// Redis URL, e.g. redis://user:password@host:6379/0, or rediss://… for TLS (a private CA: set SSL_CERT_FILE).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Namespace: keys are simdedup:{NS}:*.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Option<String>,
    #[command(flatten)]
    common: Common,
}

impl RedisCommon {
    fn settings(&self) -> Result<Settings> {
        let mut s = self.common.settings()?;
        if let Some(u) = &self.redis_url {
            s.redis_url = u.clone();
        }
        if let Some(n) = &self.namespace {
            s.namespace = n.clone();
        }
        s.validate()?;
        Ok(s)
    }
}

#[derive(Args, Debug)]
struct WorkerArgs {
    #[command(flatten)]
    redis: RedisCommon,
    /// Index to decide with: `redis` (shared, default) or `embedded` (in-process, one worker only).
    #[arg(long, value_name = "KIND", value_parser = ["redis", "embedded"])]
    index: Option<String>,
    /// Consumer name (default: <hostname>-<pid>-<random>).
    #[arg(long)]
    consumer: Option<String>,
    /// Address for /metrics, /healthz, /readyz; empty string disables.
    #[arg(long, value_name = "ADDR")]
    http_addr: Option<String>,
    /// Entries per read (commits go 16 entries per script call).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Entries read and not yet committed, at most.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Index calls of a batch in flight at once, in order; a check waits for the
    /// earlier ones it could meet (1-256; default 16; 1: one at a time).
    #[arg(long, value_name = "N")]
    pipeline: Option<usize>,
    /// Nice steps the fingerprinting threads run below the Redis I/O (0-19, Linux; default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=19))]
    fingerprint_nice: Option<u8>,
    /// TTL of the worker's liveness key; peers take over a dead worker's
    /// entries once it expires (milliseconds; default 3000).
    #[arg(long, value_name = "MS")]
    liveness_ttl_ms: Option<u64>,
    /// How often to look for dead workers' entries (milliseconds; default 1000).
    #[arg(long, value_name = "MS")]
    claim_interval_ms: Option<u64>,
    /// Dead-letter an entry delivered more than this many times.
    #[arg(long)]
    max_deliveries: Option<u64>,
    /// XREADGROUP BLOCK (milliseconds).
    #[arg(long, value_name = "MS")]
    block_ms: Option<u64>,
    /// On SIGTERM/SIGINT, wait at most this long for in-flight entries (milliseconds).
    #[arg(long, value_name = "MS")]
    shutdown_timeout_ms: Option<u64>,
}

#[derive(Args, Debug)]
struct BenchArgs {
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
    /// `decision.lookup_signatures` setting, 1-12; default 4): fewer mean fewer
    /// Redis reads and writes per check and less memory, and lower recall on
    /// rewrites (docs/benchmarks.md, "Leaner profiles").
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
          default_value_t = simdedup::bench::DEFAULT_PACED_RATE)]
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
    #[arg(long, value_name = "N")]
    pipeline: Option<usize>,
    /// Give up on an end-to-end run after this many seconds.
    #[arg(long, default_value_t = 900, value_name = "SECONDS")]
    e2e_timeout: u64,
    /// No progress on stderr.
    #[arg(long)]
    no_progress: bool,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Use this Redis instead of starting a private redis-server (the sample is produced into it).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Namespace to produce into: keys are simdedup:{NS}:*.
    #[arg(long, short = 'n', value_name = "NS", default_value = simdedup::demo::DEFAULT_NAMESPACE)]
    namespace: String,
}

#[derive(Args, Debug)]
struct ProduceArgs {
    /// JSONL articles ({"id","text",["title"],["ts"],["op"]}); `-` for standard input.
    file: PathBuf,
    /// XADD commands per round trip.
    #[arg(long, default_value_t = 500)]
    pipeline: usize,
    /// Produce at most this many articles per second, as a steady feed (round
    /// trips of ~10 ms' worth each), instead of as fast as Redis takes them.
    #[arg(long, value_name = "PER_SECOND", value_parser = parse_rate)]
    rate: Option<f64>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    redis: RedisCommon,
}

#[derive(Args, Debug)]
struct InspectArgs {
    /// Article id.
    id: String,
    #[command(flatten)]
    redis: RedisCommon,
}

/// Settings shared by every command that fingerprints.
#[derive(Args, Debug)]
struct Common {
    /// TOML configuration file (flags beat SIMDEDUP_* environment variables beat the file).
    #[arg(long, short = 'c', env = "SIMDEDUP_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Custom IDF table (`word idf` lines, from `simdedup idf build`) instead of jieba's.
    #[arg(long, value_name = "FILE")]
    idf: Option<PathBuf>,
    /// SimHash distance that alone makes a duplicate (0-3).
    #[arg(long, value_name = "K")]
    max_distance: Option<u32>,
    /// SimHash distance allowed when the sketches say all text is shared (scaled down by the estimated overlap).
    #[arg(long, value_name = "D")]
    sentence_max_distance: Option<u32>,
    /// Compare only articles whose timestamps are within this many hours.
    #[arg(long, value_name = "HOURS")]
    window_hours: Option<f64>,
    /// Reject texts longer than this many bytes.
    #[arg(long, value_name = "BYTES")]
    max_text_bytes: Option<usize>,
}

impl Common {
    fn settings(&self) -> Result<Settings> {
        let mut s = Settings::load(self.config.as_deref())?;
        if let Some(p) = &self.idf {
            s.idf_path = Some(p.clone());
        }
        if let Some(k) = self.max_distance {
            s.decision.max_distance = k;
        }
        if let Some(d) = self.sentence_max_distance {
            s.decision.sentence_max_distance = d;
        }
        if let Some(h) = self.window_hours {
            if !(h > 0.0 && h.is_finite()) {
                bail!("--window-hours must be a positive number of hours, got {h}");
            }
            s.decision.window_ms = (h * 3_600_000.0) as u64;
        }
        if let Some(b) = self.max_text_bytes {
            s.max_text_bytes = b;
        }
        s.validate()?;
        Ok(s)
    }
}

#[derive(Args, Debug)]
struct ScanArgs {
    /// JSONL input; standard input when absent or `-`.
    file: Option<PathBuf>,
    /// Write verdicts here instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct FingerprintArgs {
    /// The text; `-` or absent reads standard input.
    text: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// File holding the earlier text; `-` reads standard input.
    a: PathBuf,
    /// File holding the text judged against A; `-` reads standard input.
    b: PathBuf,
    /// Print JSON instead of a report for people.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum IdfCommand {
    /// Build an IDF table from your own articles (JSONL with a `text` field).
    Build {
        /// JSONL corpus; `-` for standard input.
        corpus: PathBuf,
        /// Where to write the table.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: PathBuf,
        /// Leave out words seen in fewer documents than this (they get the median IDF).
        #[arg(long, default_value_t = 2)]
        min_df: u64,
    },
}

#[derive(Args, Debug)]
struct EvalArgs {
    /// Labelled stream (JSONL {"id","text"} in arrival order).
    #[arg(long)]
    stream: PathBuf,
    /// Truth file (JSONL {"id","best_j","kind"}).
    #[arg(long)]
    truth: PathBuf,
    /// Also write the verdicts in the reference scorer's format ({"id","duplicate","dup_of"}).
    #[arg(long, value_name = "FILE")]
    verdicts: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

fn init_tracing(format: &str, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SIMDEDUP_LOG")
        .unwrap_or_else(|_| default_level.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The worker is a service: its lifecycle belongs in the log by default.
    let level = if matches!(cli.command, Command::Worker(_)) {
        "info"
    } else {
        "warn"
    };
    init_tracing(&cli.log_format, level);
    let result = match cli.command {
        Command::Demo(args) => run_demo(args),
        Command::Scan(args) => run_scan(args),
        Command::Fingerprint(args) => run_fingerprint(args),
        Command::Explain(args) => args
            .common
            .settings()
            .and_then(|settings| simdedup::explain::run(&settings, &args.a, &args.b, args.json)),
        Command::Idf(IdfCommand::Build {
            corpus,
            output,
            min_df,
        }) => run_idf_build(&corpus, &output, min_df),
        Command::Eval(args) => run_eval(args),
        Command::Worker(args) => run_worker(args),
        Command::Produce(args) => run_produce(args),
        Command::Stats(args) => run_stats(args),
        Command::Inspect(args) => run_inspect(args),
        Command::Config(args) => run_config(args),
        Command::Bench(args) => run_bench(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simdedup: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `--rate`: a positive number of articles per second.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "'{s}' is not a rate: give articles per second, a number above 0 (e.g. 1000)"
        )),
    }
}

fn open_input(path: Option<&Path>) -> Result<(Box<dyn BufRead + Send>, Option<u64>)> {
    match path {
        None => Ok((Box::new(BufReader::new(std::io::stdin())), None)),
        Some(p) if p == Path::new("-") => Ok((Box::new(BufReader::new(std::io::stdin())), None)),
        Some(p) => {
            let f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            let len = f.metadata().ok().map(|m| m.len());
            Ok((Box::new(BufReader::with_capacity(1 << 20, f)), len))
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn run_demo(args: DemoArgs) -> Result<()> {
    let options = simdedup::demo::DemoOptions {
        redis_url: args.redis_url,
        namespace: args.namespace,
        ..Default::default()
    };
    simdedup::demo::run(
        &options,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )?;
    Ok(())
}

fn run_scan(args: ScanArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let fingerprinter = settings.fingerprinter()?;
    let index = EmbeddedIndex::new(settings.decision.clone());
    let (input, total_bytes) = open_input(args.file.as_deref())?;
    let output: Box<dyn Write> = match &args.output {
        Some(p) => {
            Box::new(File::create(p).with_context(|| format!("cannot create {}", p.display()))?)
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let options = ScanOptions {
        max_text_bytes: settings.max_text_bytes,
        default_ts_ms: now_ms(),
        total_bytes,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
    };
    let summary = scan(input, output, &fingerprinter, &index, &options)?;
    eprintln!("simdedup: {summary}");
    Ok(())
}

fn run_fingerprint(args: FingerprintArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let text = match args.text.as_deref() {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading standard input (it must be UTF-8 text)")?;
            s
        }
        Some(t) => t.to_owned(),
    };
    validate_text(&text, settings.max_text_bytes)?;
    let fp = settings.fingerprinter()?.fingerprint(&text);
    let json = serde_json::json!({
        "version": simdedup::fingerprint::FINGERPRINT_VERSION,
        "simhash": fp.simhash_hex(),
        "content": simdedup::simhash::to_hex(fp.content),
        "signatures": fp.signatures.iter().map(|s| format!("{s:08x}")).collect::<Vec<_>>(),
        "numbers": fp.numbers.iter().map(|n| format!("{n:04x}")).collect::<Vec<_>>(),
        "words": fp.words,
        "empty": fp.is_empty(),
    });
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(())
}

fn run_idf_build(corpus: &Path, output: &Path, min_df: u64) -> Result<()> {
    let (input, _) = open_input(Some(corpus))?;
    let mut builder = IdfBuilder::new(Tokenizer::new(false));
    let mut skipped = 0u64;
    for (n, line) in input.split(b'\n').enumerate() {
        let line = line.with_context(|| format!("reading {}", corpus.display()))?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_json_line(&line, usize::MAX) {
            Ok(article) => builder.add_normalized(&normalize(&article.text)),
            Err(why) => {
                skipped += 1;
                tracing::warn!("{}:{}: skipped: {why}", corpus.display(), n + 1);
            }
        }
    }
    if builder.documents() == 0 {
        bail!(
            "{} has no usable articles (JSONL lines with `id` and `text`)",
            corpus.display()
        );
    }
    let table = builder.build(min_df);
    let file =
        File::create(output).with_context(|| format!("cannot create {}", output.display()))?;
    write_table(&table, std::io::BufWriter::new(file)).context("writing the IDF table")?;
    eprintln!(
        "simdedup: IDF table of {} words from {} documents ({} lines skipped) written to {}",
        table.len(),
        builder.documents(),
        skipped,
        output.display()
    );
    Ok(())
}

fn run_eval(args: EvalArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let fingerprinter = settings.fingerprinter()?;
    let index = EmbeddedIndex::new(settings.decision.clone());
    let truth = Truth::read(BufReader::new(
        File::open(&args.truth).with_context(|| format!("cannot open {}", args.truth.display()))?,
    ))
    .map_err(anyhow::Error::msg)?;
    let (input, total_bytes) = open_input(Some(&args.stream))?;
    let mut verdict_lines = Vec::new();
    let options = ScanOptions {
        max_text_bytes: settings.max_text_bytes,
        default_ts_ms: now_ms(),
        total_bytes,
        progress: std::io::stderr().is_terminal(),
    };
    let summary = scan(input, &mut verdict_lines, &fingerprinter, &index, &options)?;
    let mut flagged = HashMap::new();
    let mut scorer_lines = String::new();
    for line in verdict_lines
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
    {
        let v: serde_json::Value = serde_json::from_slice(line)?;
        let Some(id) = v["id"].as_str() else { continue };
        let dup = v["verdict"] == "duplicate";
        flagged.insert(id.to_owned(), dup);
        scorer_lines.push_str(
            &serde_json::json!({"id": id, "duplicate": dup, "dup_of": v["dup_of"]}).to_string(),
        );
        scorer_lines.push('\n');
    }
    if let Some(path) = &args.verdicts {
        std::fs::write(path, scorer_lines)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let s = score(&truth, &flagged);
    eprintln!("simdedup: {summary}");
    println!("{}", serde_json::to_string_pretty(&s)?);
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn run_worker(args: WorkerArgs) -> Result<()> {
    let mut s = args.redis.settings()?;
    let w = &mut s.worker;
    if let Some(v) = args.consumer {
        w.consumer = v;
    }
    if let Some(v) = args.http_addr {
        w.http_addr = v;
    }
    if let Some(v) = args.batch_size {
        w.batch_size = v;
    }
    if let Some(v) = args.max_in_flight {
        w.max_in_flight = v;
    }
    if let Some(v) = args.pipeline {
        w.pipeline = v;
    }
    if let Some(v) = args.fingerprint_nice {
        w.fingerprint_nice = v;
    }
    if let Some(v) = args.liveness_ttl_ms {
        w.liveness_ttl_ms = v;
    }
    if let Some(v) = args.claim_interval_ms {
        w.claim_interval_ms = v;
    }
    if let Some(v) = args.max_deliveries {
        w.max_deliveries = v;
    }
    if let Some(v) = args.block_ms {
        w.block_ms = v;
    }
    if let Some(v) = args.shutdown_timeout_ms {
        w.shutdown_timeout_ms = v;
    }
    if let Some(kind) = args.index.as_deref() {
        s.index = if kind == "embedded" {
            IndexKind::Embedded
        } else {
            IndexKind::Redis
        };
    }
    s.validate()?;
    runtime()?.block_on(async {
        let (trigger, _) = ShutdownTrigger::new();
        tokio::spawn(on_signals(trigger.clone()));
        let summary = match s.index {
            IndexKind::Embedded => {
                tracing::warn!("embedded index: correct for ONE worker only; its state is lost on exit");
                let index = Arc::new(EmbeddedIndex::new(s.decision.clone()));
                service::run(&s, index, trigger).await?
            }
            IndexKind::Redis => {
                let Some(index) = service::connect_redis_index(&s, trigger.subscribe()).await?
                else {
                    return Ok(());
                };
                service::run(&s, Arc::new(index), trigger).await?
            }
        };
        eprintln!(
            "simdedup: worker stopped: {} outputs written, {} more committed after the shutdown bound, {} already done elsewhere, {} left pending",
            summary.emitted, summary.settled_after_bound, summary.skipped, summary.abandoned
        );
        Ok(())
    })
}

async fn connect(s: &Settings) -> Result<Conn> {
    let options = ConnectOptions {
        response_timeout: std::time::Duration::from_millis(s.worker.command_timeout_ms),
        ..ConnectOptions::default()
    };
    Conn::connect(&s.redis_url, &options)
        .await
        .map_err(|e| anyhow::anyhow!(simdedup::settings::with_connection_advice(e)))
}

fn run_produce(args: ProduceArgs) -> Result<()> {
    let s = args.redis.settings()?;
    let (input, total) = open_input(Some(&args.file))?;
    let bar = if !args.no_progress && std::io::stderr().is_terminal() {
        let bar = match total {
            Some(t) => indicatif::ProgressBar::new(t),
            None => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} producing [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )?
            .progress_chars("=> "),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let keys = Keys::new(&s.namespace);
    let started = std::time::Instant::now();
    let summary = runtime()?.block_on(async {
        let mut conn = connect(&s).await?;
        anyhow::Ok(tools::produce(&mut conn, &keys, input, args.pipeline, args.rate, &bar).await?)
    })?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "simdedup: {} entries added to {} in {:.2}s ({:.0}/s), {} lines skipped",
        summary.added,
        keys.input_stream(),
        secs,
        summary.added as f64 / secs.max(1e-9),
        summary.skipped
    );
    Ok(())
}

fn run_stats(args: RedisCommon) -> Result<()> {
    let s = args.settings()?;
    let keys = Keys::new(&s.namespace);
    let stats = runtime()?.block_on(async {
        let mut conn = connect(&s).await?;
        anyhow::Ok(tools::stats(&mut conn, &keys, &s.worker.group).await?)
    })?;
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}

fn run_inspect(args: InspectArgs) -> Result<()> {
    let s = args.redis.settings()?;
    if s.index == IndexKind::Embedded {
        bail!("`inspect` reads the shared Redis index; an embedded index lives only inside its worker");
    }
    let report = runtime()?.block_on(async {
        let (_trigger, shutdown) = ShutdownTrigger::new();
        // No retries for a one-shot tool: fail fast when Redis is unreachable.
        drop(_trigger);
        let index = tokio::time::timeout(
            std::time::Duration::from_millis(s.worker.command_timeout_ms.max(1000) * 2),
            service::connect_redis_index(&s, shutdown),
        )
        .await
        .map_err(|_| anyhow::anyhow!("cannot reach Redis at {}", redact_url(&s.redis_url)))??
        .context("Redis index unavailable")?;
        let stored = index.locate(&args.id).await?;
        let inspection = tools::inspect(&index, &args.id).await?;
        anyhow::Ok((inspection, stored))
    })?;
    let (inspection, location) = report;
    let mut json = serde_json::to_value(&inspection)?;
    if let Some(st) = &inspection.stored {
        json["simhash"] = serde_json::Value::String(st.fingerprint.simhash_hex());
    }
    if let Some((bucket, handle)) = location {
        json["bucket"] = serde_json::Value::String(bucket);
        json["handle"] = serde_json::Value::from(handle);
    }
    println!("{}", serde_json::to_string_pretty(&json)?);
    if inspection.stored.is_none() {
        eprintln!(
            "simdedup: {} is not in the index (never seen, deleted, or outside the window)",
            args.id
        );
    }
    Ok(())
}

fn run_config(args: RedisCommon) -> Result<()> {
    let s = args.settings()?;
    print!("{}", s.to_redacted_toml());
    Ok(())
}

fn run_bench(args: BenchArgs) -> Result<()> {
    let exe = std::env::current_exe().context("finding the simdedup binary for the workers")?;
    let mut o = simdedup::bench::BenchOptions::new(exe);
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
    o.pipeline = args.pipeline;
    o.e2e_timeout = std::time::Duration::from_secs(args.e2e_timeout);
    o.bucket_hours = args.bucket_hours;
    o.lookup_signatures = args.lookup_signatures;
    o.progress = !args.no_progress;
    o.command_line = std::iter::once("simdedup".to_owned())
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
    let report = runtime()?.block_on(simdedup::bench::run(&o))?;
    print!("{}", simdedup::bench::report::markdown(&report));
    if let Some(path) = &args.write_docs {
        simdedup::bench::report::write_docs(path, &report)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("simdedup bench: results written to {}", path.display());
    }
    Ok(())
}
