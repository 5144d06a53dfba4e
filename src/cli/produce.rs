//! `simdedup produce`: JSONL articles into the input stream (pipelined XADD).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::args::RedisTarget;
use super::{connect, open_input, parse_rate, runtime};
use crate::keys::Keys;
use crate::worker::tools;

#[derive(Args, Debug)]
pub struct ProduceArgs {
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
    redis: RedisTarget,
}

pub fn run(args: ProduceArgs) -> Result<()> {
    let s = args.redis.settings()?;
    let (input, total) = open_input(Some(&args.file))?;
    let bar = if !args.no_progress && std::io::stderr().is_terminal() {
        let bar = match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::new_spinner(),
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} producing [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )?
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let keys = Keys::new(&s.namespace);
    let started = Instant::now();
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
