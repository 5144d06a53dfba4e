//! The `simdedup` command line: parses arguments, sets up tracing, and calls
//! the subcommand's `run` in the library (`simdedup::cli`).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use simdedup::cli::args::{with_setting_defaults, RedisCommon, RedisTarget};
use simdedup::cli::delete::DeleteArgs;
use simdedup::cli::demo::DemoArgs;
use simdedup::cli::eval::EvalArgs;
use simdedup::cli::explain::ExplainArgs;
use simdedup::cli::fingerprint::FingerprintArgs;
use simdedup::cli::idf::IdfCommand;
use simdedup::cli::inspect::InspectArgs;
use simdedup::cli::produce::ProduceArgs;
use simdedup::cli::scan::ScanArgs;
use simdedup::cli::worker::WorkerArgs;
use simdedup::cli::{self, LogFormat};

/// mimalloc instead of the system allocator: the worker's per-article work
/// (tokenizing, candidates, Redis replies) is many small allocations, on which
/// glibc's malloc and free spend a quarter of a check's CPU.
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
    /// Log format on stderr.
    #[arg(long, global = true, env = "SIMDEDUP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
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
    Stats(RedisTarget),
    /// Show what the index holds about an article (fingerprint, verdict, cluster), or which articles have a SimHash block.
    Inspect(InspectArgs),
    /// Remove articles from the index, as an op=delete entry does: every worker's view forgets them.
    Delete(DeleteArgs),
    /// Print the effective configuration (file ← environment ← flags), secrets redacted.
    Config(RedisCommon),
}

fn main() -> std::process::ExitCode {
    let matches = with_setting_defaults(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The worker is a service: its lifecycle belongs in the log by default.
    let level = if matches!(cli.command, Command::Worker(_)) {
        "info"
    } else {
        "warn"
    };
    cli::init_tracing(cli.log_format, level);
    let result = match cli.command {
        Command::Demo(args) => cli::demo::run(args),
        Command::Scan(args) => cli::scan::run(args),
        Command::Fingerprint(args) => cli::fingerprint::run(args),
        Command::Explain(args) => cli::explain::run(args),
        Command::Idf(command) => cli::idf::run(command),
        Command::Eval(args) => cli::eval::run(args),
        Command::Worker(args) => cli::worker::run(args),
        Command::Produce(args) => cli::produce::run(args),
        Command::Stats(args) => cli::stats::run(args),
        Command::Inspect(args) => cli::inspect::run(args),
        Command::Delete(args) => cli::delete::run(args),
        Command::Config(args) => cli::config::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of standard output went away (`… | head`): the output
        // is no longer wanted, which is no failure, as in ripgrep.
        Err(e) if cli::is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simdedup: error: {}", cli::error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
