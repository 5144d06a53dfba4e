//! Settings: defaults, then a TOML file, then `SIMDEDUP_*` environment variables,
//! then command-line flags (applied by the binary), each overriding the one before.
//!
//! Nested keys come from the environment with `__`: `SIMDEDUP_DECISION__MAX_DISTANCE=2`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::article::DEFAULT_MAX_TEXT_BYTES;
use crate::decision::DecisionConfig;
use crate::fingerprint::{FingerprintConfig, Fingerprinter};
use crate::idf::{IdfError, IdfTable};
use crate::tokenize::Tokenizer;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// A custom IDF table (`word idf` lines, see `simdedup idf build`); jieba's when absent.
    pub idf_path: Option<PathBuf>,
    /// Texts longer than this many bytes are rejected.
    pub max_text_bytes: usize,
    pub fingerprint: FingerprintConfig,
    pub decision: DecisionConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            idf_path: None,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
            fingerprint: FingerprintConfig::default(),
            decision: DecisionConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    #[error("configuration: {0}")]
    Invalid(String),
    #[error(transparent)]
    Idf(#[from] IdfError),
}

impl Settings {
    /// Load defaults ← `file` (if given) ← environment.
    pub fn load(file: Option<&Path>) -> Result<Settings, SettingsError> {
        let mut builder = config::Config::builder();
        if let Some(path) = file {
            if !path.exists() {
                return Err(SettingsError::Invalid(format!(
                    "config file {} does not exist",
                    path.display()
                )));
            }
            builder = builder.add_source(config::File::from(path).format(config::FileFormat::Toml));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("SIMDEDUP")
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true),
        );
        let settings: Settings = builder.build()?.try_deserialize()?;
        settings.validate()?;
        Ok(settings)
    }

    pub fn validate(&self) -> Result<(), SettingsError> {
        self.decision.validate().map_err(SettingsError::Invalid)?;
        if self.max_text_bytes == 0 {
            return Err(SettingsError::Invalid(
                "max_text_bytes must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The IDF table these settings name.
    pub fn idf_table(&self) -> Result<Arc<IdfTable>, IdfError> {
        match &self.idf_path {
            Some(path) => Ok(Arc::new(IdfTable::from_file(path)?)),
            None => IdfTable::builtin(),
        }
    }

    /// A fingerprinter for these settings.
    pub fn fingerprinter(&self) -> Result<Fingerprinter, IdfError> {
        Ok(Fingerprinter::new(
            Tokenizer::new(self.fingerprint.hmm),
            self.idf_table()?,
            self.fingerprint.clone(),
        ))
    }
}
