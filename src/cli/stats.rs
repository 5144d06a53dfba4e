//! `simdedup stats`: lag, pending entries and consumers of a namespace.

use anyhow::Result;

use super::args::RedisTarget;
use super::{connect, runtime};
use crate::keys::Keys;
use crate::worker::tools;

pub fn run(args: RedisTarget) -> Result<()> {
    let s = args.settings()?;
    let keys = Keys::new(&s.namespace);
    let stats = runtime()?.block_on(async {
        let mut conn = connect(&s).await?;
        anyhow::Ok(tools::stats(&mut conn, &keys, &s.worker.group).await?)
    })?;
    super::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&stats)?))?;
    Ok(())
}
