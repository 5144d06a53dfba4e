//! `simdedup idf build`: an IDF table from your own articles.

use std::fs::File;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use super::open_input;
use crate::article::parse_json_line;
use crate::idf::{write_table, IdfBuilder};
use crate::normalize::normalize;
use crate::tokenize::Tokenizer;

#[derive(Subcommand, Debug)]
pub enum IdfCommand {
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

pub fn run(command: IdfCommand) -> Result<()> {
    let IdfCommand::Build {
        corpus,
        output,
        min_df,
    } = command;
    let (input, _) = open_input(Some(&corpus))?;
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
        File::create(&output).with_context(|| format!("cannot create {}", output.display()))?;
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
