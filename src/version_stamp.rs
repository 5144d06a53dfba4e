//! The fingerprint version a namespace is written with.
//!
//! Fingerprints of different versions must not be compared: their distances
//! mean nothing, so duplicates would be missed or invented. The first worker on
//! a namespace stamps it with its [`FINGERPRINT_VERSION`] (`SET … NX`); every
//! worker after it reads the stamp and refuses to start on another version,
//! before it reads a single entry. Upgrading is a new namespace (see
//! `docs/operations.md`, "Upgrading").

use redis::aio::ConnectionLike;
use redis::RedisError;

use crate::fingerprint::FINGERPRINT_VERSION;
use crate::keys::Keys;

/// Why a worker may not use a namespace.
#[derive(Debug, thiserror::Error)]
pub enum StampError {
    /// Redis could not be asked (transient: retry).
    #[error("reading the namespace's fingerprint version: {0}")]
    Redis(#[source] RedisError),
    /// The namespace holds fingerprints of another version.
    #[error(
        "namespace key {key} says its fingerprints are version {stored}, but this binary writes version {ours}: \
         run it on a new namespace (docs/operations.md, Upgrading), or run a binary of version {stored} here"
    )]
    Mismatch {
        key: String,
        stored: String,
        ours: u32,
    },
}

/// Stamp the namespace with this binary's fingerprint version if it has none,
/// and check the stamp it has.
pub async fn claim<C: ConnectionLike + Send>(conn: &mut C, keys: &Keys) -> Result<(), StampError> {
    let key = keys.fingerprint_version();
    let stored: String = redis::pipe()
        .cmd("SET")
        .arg(&key)
        .arg(FINGERPRINT_VERSION)
        .arg("NX")
        .ignore()
        .cmd("GET")
        .arg(&key)
        .query_async::<(String,)>(conn)
        .await
        .map_err(StampError::Redis)?
        .0;
    check(&key, &stored)
}

/// Does the stamp `stored` allow this binary?
fn check(key: &str, stored: &str) -> Result<(), StampError> {
    if stored.trim() == FINGERPRINT_VERSION.to_string() {
        Ok(())
    } else {
        Err(StampError::Mismatch {
            key: key.to_owned(),
            stored: stored.to_owned(),
            ours: FINGERPRINT_VERSION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_version_passes() {
        assert!(check("k", &FINGERPRINT_VERSION.to_string()).is_ok());
        let err = check("k", "1").unwrap_err().to_string();
        assert!(
            err.contains("version 1") && err.contains("new namespace"),
            "{err}"
        );
    }
}
