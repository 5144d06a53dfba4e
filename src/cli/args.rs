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

/// Settings flags of every command that talks to Redis.
#[derive(Args, Debug, Serialize)]
pub struct RedisCommon {
    /// Redis URL, e.g. redis://user:password@host:6379/0, or rediss://… for TLS (a private CA: set SSL_CERT_FILE).
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Namespace: keys are simdedup:{NS}:*.
    #[arg(long, short = 'n', value_name = "NS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub common: Common,
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
fn hours_as_ms(s: &str) -> Result<u64, String> {
    match s.parse::<f64>() {
        Ok(h) if h > 0.0 && h.is_finite() => Ok((h * 3_600_000.0) as u64),
        _ => Err(format!(
            "'{s}' is not a window: give a positive number of hours (e.g. 48)"
        )),
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
