//! `simdedup stats`: lag, pending entries and consumers of a namespace.

use anyhow::Result;

use super::args::RedisCommon;
use super::{connect, runtime};
use crate::keys::Keys;
use crate::worker::tools;

pub fn run(args: RedisCommon) -> Result<()> {
    let s = args.settings()?;
    let keys = Keys::new(&s.namespace);
    let stats = runtime()?.block_on(async {
        let mut conn = connect(&s).await?;
        anyhow::Ok(tools::stats(&mut conn, &keys, &s.worker.group).await?)
    })?;
    println!("{}", serde_json::to_string_pretty(&stats)?);
    Ok(())
}
