//! `simdedup demo`: the worker pipeline on the bundled sample.

use anyhow::Result;
use clap::Args;

use crate::demo::{DemoOptions, DEFAULT_NAMESPACE};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Use this Redis instead of starting a private redis-server (the sample is produced into it).
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Namespace to produce into: keys are simdedup:{NS}:*.
    #[arg(long, short = 'n', value_name = "NS", default_value = DEFAULT_NAMESPACE)]
    namespace: String,
}

pub fn run(args: DemoArgs) -> Result<()> {
    let options = DemoOptions {
        redis_url: args.redis_url,
        namespace: args.namespace,
        ..Default::default()
    };
    crate::demo::run(
        &options,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
    )?;
    Ok(())
}
