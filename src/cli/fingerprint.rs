//! `simdedup fingerprint`: the fingerprint of one text, as JSON.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::args::Common;
use crate::article::validate_text;
use crate::fingerprint::{Fingerprint, FINGERPRINT_VERSION};
use crate::simhash::to_hex;

#[derive(Args, Debug)]
pub struct FingerprintArgs {
    /// File holding the text; `-` or absent reads standard input.
    file: Option<PathBuf>,
    /// The text itself, given on the command line instead of a file.
    #[arg(long, value_name = "TEXT", conflicts_with = "file")]
    text: Option<String>,
    #[command(flatten)]
    common: Common,
}

pub fn run(args: FingerprintArgs) -> Result<()> {
    let settings = args.common.settings()?;
    let text = match (args.text, args.file) {
        (Some(text), _) => text,
        (None, Some(path)) if path != Path::new("-") => std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (it must be UTF-8 text)", path.display()))?,
        (None, _) => read_stdin()?,
    };
    validate_text(&text, settings.max_text_bytes)?;
    let fp = settings.fingerprinter()?.fingerprint(&text);
    let json = fingerprint_json(&fp);
    super::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
    Ok(())
}

/// A fingerprint as `simdedup fingerprint` and `simdedup inspect` print it:
/// hashes in hex.
pub fn fingerprint_json(fp: &Fingerprint) -> serde_json::Value {
    serde_json::json!({
        "version": FINGERPRINT_VERSION,
        "simhash": fp.simhash_hex(),
        "content": to_hex(fp.content),
        "signatures": fp.signatures.iter().map(|s| format!("{s:08x}")).collect::<Vec<_>>(),
        "words": fp.words,
        "numbers": fp.numbers.iter().map(|n| format!("{n:04x}")).collect::<Vec<_>>(),
        "shingles": fp.shingles.iter().map(|v| format!("{v:04x}")).collect::<Vec<_>>(),
        "size": fp.size,
        "empty": fp.is_empty(),
    })
}

fn read_stdin() -> Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("reading standard input (it must be UTF-8 text)")?;
    Ok(s)
}
