//! `simdedup eval`: scan a labelled stream and score its verdicts against the
//! truth file (recall / precision, as `../shared/eval/score.py` does).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use super::args::Common;
use super::{now_ms, open_input};
use crate::eval::{score, Truth};
use crate::index::EmbeddedIndex;
use crate::scan::{scan_records, ScanOptions};

#[derive(Args, Debug)]
pub struct EvalArgs {
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

/// One line of the reference scorer's verdict file.
#[derive(Serialize)]
struct ScorerVerdict<'a> {
    id: &'a str,
    duplicate: bool,
    dup_of: Option<&'a str>,
}

pub fn run(args: EvalArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let fingerprinter = settings.fingerprinter()?;
    let index = EmbeddedIndex::new(settings.decision.clone());
    let truth_file =
        File::open(&args.truth).with_context(|| format!("cannot open {}", args.truth.display()))?;
    let truth = Truth::read(BufReader::new(truth_file))
        .with_context(|| format!("reading {}", args.truth.display()))?;
    let mut scorer_file = match &args.verdicts {
        Some(p) => Some(BufWriter::new(
            File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => None,
    };
    let (input, total_bytes) = open_input(Some(&args.stream))?;
    let options = ScanOptions {
        max_text_bytes: settings.max_text_bytes,
        default_ts_ms: now_ms(),
        total_bytes,
        progress: std::io::stderr().is_terminal(),
        event_time: settings.event_time(),
    };
    let mut flagged = HashMap::new();
    let summary = scan_records(input, &fingerprinter, &index, &options, |record| {
        let Some(id) = record.id else { return Ok(()) };
        let duplicate = record.verdict == "duplicate";
        if let Some(out) = scorer_file.as_mut() {
            let line = ScorerVerdict {
                id: &id,
                duplicate,
                dup_of: record.dup_of.as_deref(),
            };
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        flagged.insert(id, duplicate);
        Ok(())
    })?;
    if let (Some(out), Some(p)) = (scorer_file.as_mut(), &args.verdicts) {
        out.flush()
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    eprintln!("simdedup: {summary}");
    super::print_stdout(&format!(
        "{}\n",
        serde_json::to_string_pretty(&score(&truth, &flagged))?
    ))?;
    Ok(())
}
