//! The flags several commands share, and how flags become settings.
//!
//! A flag that is a setting carries the setting's own key (by its field name,
//! and its struct's place: `decision.*`, `worker.*`), serializes only when
//! given, and is layered over the file and the environment by
//! [`Settings::load_with`]: defaults ← file ← `SIMDEDUP_*` ← flags, one typed
//! merge, validated once.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::settings::Settings;

/// Settings flags of every command that fingerprints.
#[derive(Args, Debug, Serialize)]
pub struct Common {
    /// TOML configuration file (flags beat SIMDEDUP_* environment variables beat the file).
    #[arg(long, short = 'c', env = "SIMDEDUP_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Custom IDF table (`word idf` lines, from `simdedup idf build`) instead of jieba's.
    #[arg(long = "idf", value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idf_path: Option<PathBuf>,
    /// Reject texts longer than this many bytes.
    #[arg(long, value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_text_bytes: Option<usize>,
    #[command(flatten)]
    pub decision: DecisionFlags,
}

/// The `decision.*` settings that have flags.
#[derive(Args, Debug, Serialize)]
pub struct DecisionFlags {
    /// SimHash distance that alone makes a duplicate (0-3).
    #[arg(long, value_name = "K")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_distance: Option<u32>,
    /// SimHash distance allowed when the sketches say all text is shared (scaled down by the estimated overlap).
    #[arg(long, value_name = "D")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentence_max_distance: Option<u32>,
    /// Compare only articles whose timestamps are within this many hours.
    #[arg(long = "window-hours", value_name = "HOURS", value_parser = hours_as_ms)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
}

/// Where the Redis of a namespace is: the flags of every command that talks
/// to Redis.
#[derive(Args, Debug, Serialize)]
pub struct RedisFlags {
    /// Redis URL: redis://[user:password@]host:6379[/db], or rediss://… for TLS (a private CA:
    /// set SSL_CERT_FILE). A Redis Cluster: any node's URL, or several comma-separated.
    /// Sentinel: redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER_NAME.
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Namespace: keys are simdedup:{NS}:*.
    #[arg(long, short = 'n', value_name = "NS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Settings flags of the commands that talk to Redis and fingerprint or
/// decide (the worker, `inspect`, `config`).
#[derive(Args, Debug, Serialize)]
pub struct RedisCommon {
    #[command(flatten)]
    #[serde(flatten)]
    pub redis: RedisFlags,
    #[command(flatten)]
    #[serde(flatten)]
    pub common: Common,
}

/// Settings flags of the commands that only move entries (`produce`,
/// `stats`): the file and the Redis, no fingerprinting or decision settings.
#[derive(Args, Debug, Serialize)]
pub struct RedisTarget {
    /// TOML configuration file (flags beat SIMDEDUP_* environment variables beat the file).
    #[arg(long, short = 'c', env = "SIMDEDUP_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    pub redis: RedisFlags,
}

impl RedisTarget {
    /// The settings: defaults ← file ← environment ← these flags.
    pub fn settings(&self) -> Result<Settings> {
        self.settings_with(self)
    }

    /// The settings with `flags` (which include these) on top.
    pub fn settings_with(&self, flags: &impl Serialize) -> Result<Settings> {
        Ok(Settings::load_with(self.config.as_deref(), flags)?)
    }
}

/// `command` with each setting flag's help ending in its default
/// (`[default: 256]`), taken from [`Settings::default`] so that it is written
/// once. The flags are options (absent ones leave the file's and the
/// environment's values), so clap itself has no default to show. `demo`'s
/// flags are not settings and keep their own help.
pub fn with_setting_defaults(command: clap::Command) -> clap::Command {
    let defaults = setting_defaults();
    command.mut_subcommands(|sub| {
        if sub.get_name() == "demo" {
            return sub;
        }
        let ids: Vec<String> = sub
            .get_arguments()
            .filter(|a| a.get_default_values().is_empty())
            .map(|a| a.get_id().to_string())
            .filter(|id| defaults.contains_key(id))
            .collect();
        let mut sub = ids.into_iter().fold(sub, |sub, id| {
            let default = &defaults[&id];
            sub.mut_arg(id.as_str(), |a| {
                let help = a.get_help().map(ToString::to_string).unwrap_or_default();
                a.help(format!("{help} [default: {default}]"))
            })
        });
        if sub.has_subcommands() {
            sub = with_setting_defaults(sub);
        }
        sub
    })
}

/// The default of every setting whose name is unique among them (the flags'
/// ids are the settings' field names), as a flag takes it.
fn setting_defaults() -> std::collections::HashMap<String, String> {
    let shape = serde_json::to_value(Settings::default()).unwrap_or_default();
    let mut leaves: Vec<(String, String)> = Vec::new();
    let mut push = |key: &str, value: &serde_json::Value| {
        let shown = match value {
            serde_json::Value::String(s) if s.is_empty() => return,
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null | serde_json::Value::Object(_) => return,
            other => other.to_string(),
        };
        leaves.push((key.to_owned(), shown));
    };
    if let serde_json::Value::Object(top) = &shape {
        for (key, value) in top {
            match value {
                serde_json::Value::Object(section) => {
                    for (k, v) in section {
                        push(k, v);
                    }
                }
                v => push(key, v),
            }
        }
    }
    let mut map = std::collections::HashMap::new();
    let mut seen_twice = Vec::new();
    for (k, v) in leaves {
        if map.insert(k.clone(), v).is_some() {
            seen_twice.push(k);
        }
    }
    for k in seen_twice {
        map.remove(&k);
    }
    // `--window-hours` gives `decision.window_ms` in hours.
    if let Some(ms) = map.get("window_ms").and_then(|v| v.parse::<f64>().ok()) {
        map.insert("window_ms".into(), format!("{}", ms / 3_600_000.0));
    }
    map
}

impl Common {
    /// The settings: defaults ← file ← environment ← these flags.
    pub fn settings(&self) -> Result<Settings> {
        Ok(Settings::load_with(self.config.as_deref(), self)?)
    }
}

impl RedisCommon {
    /// The settings: defaults ← file ← environment ← these flags.
    pub fn settings(&self) -> Result<Settings> {
        self.settings_with(self)
    }

    /// The settings with `flags` (which include these) on top.
    pub fn settings_with(&self, flags: &impl Serialize) -> Result<Settings> {
        Ok(Settings::load_with(self.common.config.as_deref(), flags)?)
    }
}

/// `--window-hours`: a positive number of hours, as milliseconds.
fn hours_as_ms(s: &str) -> Result<u64> {
    match s.parse::<f64>() {
        Ok(h) if h > 0.0 && h.is_finite() => Ok((h * 3_600_000.0) as u64),
        _ => anyhow::bail!("'{s}' is not a window: give a positive number of hours (e.g. 48)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        redis: RedisCommon,
    }

    fn settings(args: &[&str]) -> Settings {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        cli.redis.settings().unwrap()
    }

    #[test]
    fn given_flags_override_and_absent_ones_leave_the_defaults() {
        let defaults = Settings::default();
        let s = settings(&[
            "--namespace",
            "news",
            "--window-hours",
            "1.5",
            "--max-distance",
            "2",
        ]);
        assert_eq!(s.namespace, "news");
        assert_eq!(s.decision.window_ms, 5_400_000);
        assert_eq!(s.decision.max_distance, 2);
        assert_eq!(s.redis_url, defaults.redis_url);
        assert_eq!(
            s.decision.sentence_max_distance,
            defaults.decision.sentence_max_distance
        );
        assert_eq!(settings(&[]), defaults);
    }

    #[test]
    fn a_bad_window_is_refused_with_what_to_give() {
        let err = Cli::try_parse_from(["t", "--window-hours", "0"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("positive number of hours"), "{err}");
    }
}
