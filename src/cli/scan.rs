//! `simdedup scan`: JSONL articles in, one verdict per line out, in memory.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::args::Common;
use super::{now_ms, open_input};
use crate::index::EmbeddedIndex;
use crate::scan::{scan, ScanOptions};

#[derive(Args, Debug)]
pub struct ScanArgs {
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

pub fn run(args: ScanArgs) -> Result<()> {
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
        event_time: settings.event_time(),
    };
    let summary = scan(input, output, &fingerprinter, &index, &options)?;
    eprintln!("simdedup: {summary}");
    Ok(())
}
