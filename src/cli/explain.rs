//! `simdedup explain A B`: why the decision gives B the verdict it does
//! against an earlier A (the evidence itself is [`crate::explain`]).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::args::Common;

#[derive(Args, Debug)]
pub struct ExplainArgs {
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

pub fn run(args: ExplainArgs) -> Result<()> {
    let settings = args.common.settings()?;
    crate::explain::run(&settings, &args.a, &args.b, args.json)
}
