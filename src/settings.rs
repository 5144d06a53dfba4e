//! Settings: defaults, then a TOML file, then `SIMDEDUP_*` environment variables,
//! then command-line flags ([`Settings::load_with`]), each overriding the one before.
//!
//! Nested keys come from the environment with `__`: `SIMDEDUP_DECISION__MAX_DISTANCE=2`,
//! `SIMDEDUP_WORKER__BATCH_SIZE=256`; top-level ones without: `SIMDEDUP_REDIS_URL`,
//! `SIMDEDUP_NAMESPACE`. `SIMDEDUP_CONFIG` (the file) and `SIMDEDUP_LOG*` (tracing)
//! are read by the binary, not here.
//!
//! A setting given a new name keeps its old one for one release ([`OLD_NAMES`]):
//! each layer's old keys are moved to the new ones before the layers are merged,
//! with a warning naming the new key as that layer spells it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::article::DEFAULT_MAX_TEXT_BYTES;
use crate::decision::{DecisionConfig, DecisionConfigError};
use crate::fingerprint::{FingerprintConfig, Fingerprinter};
use crate::idf::{IdfError, IdfTable};
use crate::redact::redact_url;
use crate::tokenize::Tokenizer;
use crate::worker::WorkerConfig;

/// Default Redis server.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// Default namespace (keys `simdedup:{default}:*`).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Environment variables with the `SIMDEDUP_` prefix that are not settings.
const NOT_SETTINGS: [&str; 3] = ["SIMDEDUP_CONFIG", "SIMDEDUP_LOG", "SIMDEDUP_LOG_FORMAT"];

/// A setting's old name, read for one more release as the new one, with a
/// warning.
#[derive(Debug, Clone, Copy)]
struct OldName {
    /// The settings' section (`worker`).
    section: &'static str,
    old: &'static str,
    new: &'static str,
}

/// Settings read under an old name too. `worker.ordered_index_concurrency`
/// bounds the index calls an ordered worker has in flight, as
/// `worker.index_concurrency` bounds any worker's; `pipeline`, its old name,
/// reads as a Redis pipeline, which it is not.
const OLD_NAMES: [OldName; 1] = [OldName {
    section: "worker",
    old: "pipeline",
    new: "ordered_index_concurrency",
}];

/// Where a layer of settings comes from: how its operator spells a key.
#[derive(Debug, Clone, Copy)]
enum Layer<'a> {
    File(&'a Path),
    Environment,
    Flags,
}

impl Layer<'_> {
    /// `key` of `section` as this layer spells it: `worker.pipeline` in
    /// `FILE`, `SIMDEDUP_WORKER__PIPELINE`, `--pipeline`.
    fn spelling(self, section: &str, key: &str) -> String {
        match self {
            Layer::File(path) => format!("{section}.{key} in {}", path.display()),
            Layer::Environment => format!(
                "SIMDEDUP_{}__{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            ),
            Layer::Flags => format!("--{}", key.replace('_', "-")),
        }
    }
}

/// One layer's settings, its old names moved to the new ones.
#[derive(Debug, Clone)]
struct Renamed(config::Map<String, config::Value>);

impl config::Source for Renamed {
    fn clone_into_box(&self) -> Box<dyn config::Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<config::Map<String, config::Value>, config::ConfigError> {
        Ok(self.0.clone())
    }
}

/// The settings of one layer with each key of [`OLD_NAMES`] under its new
/// name, and a warning per old name found. Both names in one layer are
/// refused: which one was meant is unknown.
fn rename_old_keys(
    settings: &config::Config,
    layer: Layer<'_>,
) -> Result<(Renamed, Vec<String>), SettingsError> {
    let mut map = config::Source::collect(settings)?;
    let mut warnings = Vec::new();
    for name in OLD_NAMES {
        let Some(config::Value {
            kind: config::ValueKind::Table(section),
            ..
        }) = map.get_mut(name.section)
        else {
            continue;
        };
        let Some(value) = section.remove(name.old) else {
            continue;
        };
        let (old, new) = (
            layer.spelling(name.section, name.old),
            layer.spelling(name.section, name.new),
        );
        if section.contains_key(name.new) {
            return Err(SettingsError::Invalid(format!(
                "{old} and {new} are one setting, given twice: keep {new} ({old} is its old name)"
            )));
        }
        section.insert(name.new.to_owned(), value);
        warnings.push(format!(
            "{old} is now {new}: the old name is still read in this release, not in the next"
        ));
    }
    Ok((Renamed(map), warnings))
}

/// Which index the worker decides with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// The shared Redis index: any number of workers, state survives restarts.
    Redis,
    /// In-process: one worker only, state lost on restart (tests, trials).
    Embedded,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// A custom IDF table (`word idf` lines, see `simdedup idf build`); jieba's when absent.
    pub idf_path: Option<PathBuf>,
    /// Texts longer than this many bytes are rejected.
    pub max_text_bytes: usize,
    pub fingerprint: FingerprintConfig,
    pub decision: DecisionConfig,
    /// Redis server URL (`redis://[user:password@]host:port[/db]`, `rediss://…` for TLS).
    pub redis_url: String,
    /// Namespace: every key is `simdedup:{NAMESPACE}:...`.
    pub namespace: String,
    /// The index the worker uses.
    pub index: IndexKind,
    /// Accept a Redis `maxmemory-policy allkeys-*`, which may evict index keys
    /// (the Redis index refuses to start under it otherwise).
    pub allow_eviction: bool,
    /// Length of the Redis index's time buckets in hours (default: half the
    /// window, 24 h). A check reads every bucket its window overlaps: 3 with
    /// 24 h buckets, 2 with 48 h ones (≈ 20 % less Redis time per check), but
    /// keys live until bucket end + window, so longer buckets hold more
    /// articles (48 h: ≈ 20 % more memory). Every process of a namespace must
    /// use the same value (the index refuses to start otherwise).
    pub bucket_hours: Option<u32>,
    pub worker: WorkerConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            idf_path: None,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
            fingerprint: FingerprintConfig::default(),
            decision: DecisionConfig::default(),
            redis_url: DEFAULT_REDIS_URL.into(),
            namespace: DEFAULT_NAMESPACE.into(),
            index: IndexKind::Redis,
            allow_eviction: false,
            bucket_hours: None,
            worker: WorkerConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {0}")]
    Invalid(String),
    #[error("configuration: {0}")]
    Decision(#[from] DecisionConfigError),
    #[error(transparent)]
    Idf(#[from] IdfError),
    #[error("configuration: cannot write it as TOML")]
    Show(#[from] toml::ser::Error),
    /// A `SIMDEDUP_*` variable of the environment that names no setting.
    #[error(
        "configuration: the environment variable {name} is not a setting{}: every SIMDEDUP_* \
         variable is read as one (a variable of your own needs another prefix; \
         docs/operations.md, \"Settings from the environment\")",
        did_you_mean(suggestions)
    )]
    UnknownVariable {
        name: String,
        suggestions: Vec<String>,
    },
}

fn did_you_mean(suggestions: &[String]) -> String {
    match suggestions {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        many => format!(" (did you mean one of {}?)", many.join(", ")),
    }
}

impl Settings {
    /// Load defaults ← `file` (if given) ← environment.
    pub fn load(file: Option<&Path>) -> Result<Settings, SettingsError> {
        Self::load_with(file, &serde_json::Map::new())
    }

    /// Load defaults ← `file` (if given) ← environment ← `flags`: anything that
    /// serializes to (part of) the settings' shape, e.g. a command's flags with
    /// the absent ones skipped.
    pub fn load_with(
        file: Option<&Path>,
        flags: &impl Serialize,
    ) -> Result<Settings, SettingsError> {
        let mut warnings = Vec::new();
        let loaded = Self::load_with_warnings(file, flags, &mut warnings);
        // Said whether the settings load or not: an old name may be why not.
        for warning in warnings {
            tracing::warn!("configuration: {warning}");
        }
        loaded
    }

    /// [`Settings::load_with`], adding what it has to tell the operator (an
    /// old name used) to `warnings`.
    fn load_with_warnings(
        file: Option<&Path>,
        flags: &impl Serialize,
        warnings: &mut Vec<String>,
    ) -> Result<Settings, SettingsError> {
        if let Some(path) = file {
            if !path.exists() {
                return Err(SettingsError::Invalid(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
        }
        // Only variables that are settings: `SIMDEDUP_CONFIG` and `SIMDEDUP_LOG`
        // would otherwise be read as unknown keys and refused.
        let env: config::Map<String, String> = std::env::vars()
            .filter(|(k, _)| k.starts_with("SIMDEDUP_") && !NOT_SETTINGS.contains(&k.as_str()))
            .collect();
        check_variables(env.keys())?;
        let mut layers = Vec::new();
        if let Some(path) = file {
            let source = config::File::from(path).format(config::FileFormat::Toml);
            let settings = config::Config::builder().add_source(source).build()?;
            layers.push((settings, Layer::File(path)));
        }
        let source = config::Environment::with_prefix("SIMDEDUP")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(env));
        let settings = config::Config::builder().add_source(source).build()?;
        layers.push((settings, Layer::Environment));
        layers.push((config::Config::try_from(flags)?, Layer::Flags));
        // Each layer is read alone, its old names moved to the new ones, then
        // laid over the layers before it.
        let mut builder = config::Config::builder();
        for (settings, layer) in &layers {
            let (renamed, said) = rename_old_keys(settings, *layer)?;
            builder = builder.add_source(renamed);
            warnings.extend(said);
        }
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.decision.lookup_signatures > self.fingerprint.signatures {
            return Err(SettingsError::Invalid(format!(
                "decision.lookup_signatures = {} but a sketch holds only fingerprint.signatures = {} hashes: use 1 to {}",
                self.decision.lookup_signatures,
                self.fingerprint.signatures,
                self.fingerprint.signatures
            )));
        }
        self.decision.validate()?;
        if self.max_text_bytes == 0 {
            return Err(SettingsError::Invalid(
                "max_text_bytes must be positive".into(),
            ));
        }
        crate::keys::validate_namespace(&self.namespace).map_err(SettingsError::Invalid)?;
        if let Some(h) = self.bucket_hours {
            if h == 0 || h > 720 {
                return Err(SettingsError::Invalid(format!(
                    "bucket_hours = {h}: use 1 to 720 hours (30 days)"
                )));
            }
        }
        self.worker.validate().map_err(SettingsError::Invalid)?;
        Ok(())
    }

    /// These settings as TOML with secrets (the URL's password) redacted, for
    /// `simdedup config`: every effective value, `bucket_hours` as the index
    /// derives it when unset; `idf_path`, which has no value when unset, as a
    /// comment.
    pub fn to_redacted_toml(&self) -> Result<String, SettingsError> {
        let mut shown = self.clone();
        shown.redis_url = redact_url(&self.redis_url);
        shown.bucket_hours = Some(self.effective_bucket_hours());
        let mut text = String::new();
        if self.idf_path.is_none() {
            text.push_str("# idf_path: unset, jieba's built-in IDF table\n");
        }
        text.push_str(&toml::to_string(&shown)?);
        Ok(text)
    }

    /// The Redis index's bucket length in hours: `bucket_hours`, or what the
    /// index derives from the window without it.
    pub fn effective_bucket_hours(&self) -> u32 {
        self.bucket_hours.unwrap_or_else(|| {
            (crate::index::redis_index::default_bucket_ms(self.decision.window_ms) / 3_600_000)
                as u32
        })
    }

    /// The event times a worker with these settings accepts (and whose unit
    /// rule `scan` applies).
    pub fn event_time(&self) -> crate::article::EventTimeBounds {
        crate::article::EventTimeBounds {
            window_ms: self.decision.window_ms,
            max_skew_ms: self.worker.max_clock_skew_ms,
        }
    }

    /// The IDF table these settings name.
    pub fn idf_table(&self) -> Result<Arc<IdfTable>, IdfError> {
        match &self.idf_path {
            Some(path) => Ok(Arc::new(IdfTable::from_file(path)?)),
            None => Ok(IdfTable::builtin()),
        }
    }

    /// A fingerprinter for these settings.
    pub fn fingerprinter(&self) -> Result<Fingerprinter, IdfError> {
        // The segmenter's dictionary and the IDF table each take a few hundred
        // milliseconds to load: load them side by side.
        let (idf, tokenizer) = std::thread::scope(|s| {
            let idf = s.spawn(|| self.idf_table());
            let tokenizer = Tokenizer::new(self.fingerprint.hmm);
            (idf.join(), tokenizer)
        });
        let idf = idf.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        Ok(Fingerprinter::new(tokenizer, idf, self.fingerprint.clone()))
    }
}

/// The environment variable of every setting (`SIMDEDUP_WORKER__BATCH_SIZE`),
/// from the settings' own shape.
pub fn setting_variables() -> Vec<String> {
    fn walk(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, v) in fields {
                    let name = if prefix.is_empty() {
                        key.to_ascii_uppercase()
                    } else {
                        format!("{prefix}__{}", key.to_ascii_uppercase())
                    };
                    walk(&name, v, out);
                }
            }
            _ => out.push(format!("SIMDEDUP_{prefix}")),
        }
    }
    let mut out = Vec::new();
    let shape = serde_json::to_value(Settings::default()).unwrap_or_default();
    walk("", &shape, &mut out);
    out
}

/// Refuse a `SIMDEDUP_*` variable that is no setting, naming it and the
/// settings it is closest to. A misspelt setting that were only warned about
/// would leave a worker on a value its operator meant to change, while every
/// worker of a namespace must agree on its settings.
fn check_variables<'a>(names: impl Iterator<Item = &'a String>) -> Result<(), SettingsError> {
    let known = setting_variables();
    for name in names {
        let upper = name.to_ascii_uppercase();
        let old_name = OLD_NAMES
            .iter()
            .any(|n| Layer::Environment.spelling(n.section, n.old) == upper);
        if known.contains(&upper) || old_name {
            continue;
        }
        let mut near: Vec<(usize, &String)> = known
            .iter()
            .map(|k| (edit_distance(&upper, k), k))
            .filter(|&(d, k)| d <= 3.max(k.len() / 4))
            .collect();
        near.sort();
        let mut suggestions: Vec<String> = near.iter().take(3).map(|(_, k)| (*k).clone()).collect();
        if suggestions.is_empty() {
            // A variable of a section (`SIMDEDUP_WORKER__…`): that section's settings.
            if let Some((section, _)) = upper.split_once("__") {
                let prefix = format!("{section}__");
                suggestions = known
                    .iter()
                    .filter(|k| k.starts_with(&prefix))
                    .cloned()
                    .collect();
            }
        }
        return Err(SettingsError::UnknownVariable {
            name: name.clone(),
            suggestions,
        });
    }
    Ok(())
}

/// Levenshtein distance of two ASCII-ish names, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_shows_no_password() {
        let s = Settings {
            redis_url: "redis://u:hunter2@h/".into(),
            ..Settings::default()
        };
        let shown = s.to_redacted_toml().unwrap();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("[worker]"));
    }

    /// `worker.pipeline`, the old name of `worker.ordered_index_concurrency`,
    /// is read as it from a file and from flags, with a warning naming the new
    /// name as each spells it; both names in one layer are refused.
    #[test]
    fn an_old_name_is_read_as_the_new_one_with_a_warning() {
        let load = |file: Option<&Path>, flags: &serde_json::Value| {
            let mut warnings = Vec::new();
            let loaded = Settings::load_with_warnings(file, flags, &mut warnings);
            (loaded, warnings)
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("simdedup.toml");
        std::fs::write(&file, "[worker]\npipeline = 5\nbatch_size = 64\n").unwrap();
        let file = Some(file.as_path());
        let (s, warnings) = load(file, &serde_json::json!({}));
        let s = s.unwrap();
        assert_eq!(
            (s.worker.ordered_index_concurrency, s.worker.batch_size),
            (5, 64)
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("worker.pipeline in ")
                && warnings[0].contains("is now worker.ordered_index_concurrency in "),
            "{warnings:?}"
        );

        // Flags over the file, each under either name.
        let (s, warnings) = load(file, &serde_json::json!({ "worker": { "pipeline": 3 } }));
        assert_eq!(s.unwrap().worker.ordered_index_concurrency, 3);
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("--pipeline is now --ordered-index-concurrency")),
            "{warnings:?}"
        );
        let new_flag = serde_json::json!({ "worker": { "ordered_index_concurrency": 7 } });
        let (s, _) = load(file, &new_flag);
        assert_eq!(s.unwrap().worker.ordered_index_concurrency, 7);
        let (_, warnings) = load(None, &new_flag);
        assert!(warnings.is_empty(), "{warnings:?}");

        // Said even when the value is refused.
        let (s, warnings) = load(None, &serde_json::json!({ "worker": { "pipeline": 0 } }));
        assert!(s.is_err());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let both = serde_json::json!({
            "worker": { "pipeline": 3, "ordered_index_concurrency": 7 }
        });
        let err = load(None, &both).0.unwrap_err().to_string();
        assert!(err.contains("keep --ordered-index-concurrency"), "{err}");
    }

    #[test]
    fn bucket_hours_must_be_1_to_720() {
        for (hours, ok) in [
            (Some(1), true),
            (Some(48), true),
            (Some(720), true),
            (Some(0), false),
            (Some(721), false),
            (None, true),
        ] {
            let s = Settings {
                bucket_hours: hours,
                ..Settings::default()
            };
            assert_eq!(s.validate().is_ok(), ok, "{hours:?}");
        }
    }

    /// Each `(value, accepted)` set by `set` on the defaults: accepted values
    /// validate, refused ones fail with a message containing `says`.
    fn check_range(set: impl Fn(&mut Settings, usize), cases: &[(usize, bool)], says: &str) {
        for &(n, ok) in cases {
            let mut s = Settings::default();
            set(&mut s, n);
            match s.validate() {
                Ok(()) => assert!(ok, "{n} accepted"),
                Err(e) => {
                    assert!(!ok, "{n} refused: {e}");
                    assert!(e.to_string().contains(says), "{e}");
                }
            }
        }
    }

    #[test]
    fn ranged_settings_refuse_what_is_outside_and_say_the_range() {
        // lookup_signatures: at most the hashes a sketch holds.
        check_range(
            |s, n| s.decision.lookup_signatures = n,
            &[(1, true), (12, true), (13, false), (40, false)],
            "fingerprint.signatures = 12 hashes: use 1 to 12",
        );
        // And at most what a candidate index can tag, whatever the sketch.
        check_range(
            |s, n| {
                s.fingerprint.signatures = 40;
                s.decision.lookup_signatures = n;
            },
            &[(16, true), (17, false)],
            "lookup_signatures = 17 but it must be 1 to 16",
        );
        check_range(
            |s, n| s.worker.ordered_index_concurrency = n,
            &[(0, false), (1, true), (16, true), (256, true), (257, false)],
            "but it is 1 (one index call at a time) to 256",
        );
        check_range(
            |s, n| s.worker.fingerprint_nice = n as u8,
            &[(0, true), (10, true), (19, true), (20, false)],
            "use 0 (same priority) to 19 (lowest)",
        );
    }
}
