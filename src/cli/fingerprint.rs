//! `simdedup fingerprint`: the fingerprint of one text, as JSON.

use std::io::Read;

use anyhow::{Context, Result};
use clap::Args;

use super::args::Common;
use crate::article::validate_text;
use crate::fingerprint::FINGERPRINT_VERSION;
use crate::simhash::to_hex;

#[derive(Args, Debug)]
pub struct FingerprintArgs {
    /// The text; `-` or absent reads standard input.
    text: Option<String>,
    #[command(flatten)]
    common: Common,
}

pub fn run(args: FingerprintArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let text = match args.text {
        None => read_stdin()?,
        Some(t) if t == "-" => read_stdin()?,
        Some(t) => t,
    };
    validate_text(&text, settings.max_text_bytes)?;
    let fp = settings.fingerprinter()?.fingerprint(&text);
    let json = serde_json::json!({
        "version": FINGERPRINT_VERSION,
        "simhash": fp.simhash_hex(),
        "content": to_hex(fp.content),
        "signatures": fp.signatures.iter().map(|s| format!("{s:08x}")).collect::<Vec<_>>(),
        "words": fp.words,
        "numbers": fp.numbers.iter().map(|n| format!("{n:04x}")).collect::<Vec<_>>(),
        "shingles": fp.shingles.iter().map(|v| format!("{v:04x}")).collect::<Vec<_>>(),
        "size": fp.size,
        "empty": fp.is_empty(),
    });
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(())
}

fn read_stdin() -> Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("reading standard input (it must be UTF-8 text)")?;
    Ok(s)
}
