//! `simdedup config`: the effective configuration, secrets redacted.

use anyhow::Result;

use super::args::RedisCommon;

pub fn run(args: RedisCommon) -> Result<()> {
    super::print_stdout(&args.settings()?.to_redacted_toml()?)?;
    Ok(())
}
