//! `simdedup delete`: remove articles from the shared Redis index, as an
//! `op=delete` entry does, so that every worker's view forgets them.

use anyhow::{bail, Result};
use clap::Args;

use super::args::RedisCommon;
use super::{runtime, shared_index};
use crate::index::Index;

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// Ids of the articles to remove. Exit status 1 when any was not in the
    /// index (the others are removed all the same).
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
    #[command(flatten)]
    redis: RedisCommon,
}

pub fn run(args: DeleteArgs) -> Result<()> {
    let s = args.redis.settings()?;
    let rt = runtime()?;
    let index = rt.block_on(shared_index(&s, "delete"))?;
    let mut missing = Vec::new();
    for id in &args.ids {
        if rt.block_on(index.delete(id))?.found {
            super::print_stdout(&format!("deleted {id}\n"))?;
        } else {
            missing.push(id.as_str());
        }
    }
    if !missing.is_empty() {
        bail!(
            "not in the index (never seen, deleted, or outside the window): {}",
            missing.join(", ")
        );
    }
    Ok(())
}
