//! What a process checks when it connects: that Redis will not forget
//! articles behind its back, and that the namespace was written by processes
//! configured like this one, with this key layout.

use super::{backend, commit::old_layout, HOUR_MS};
use crate::connect::Conn;
use crate::index::IndexError;
use crate::keys::{Keys, ARTICLES_PER_KEY, LAYOUT};

/// Every check at connect: the eviction policy, the listpack threshold (a
/// warning), the namespace's retention and key layout.
pub(super) async fn check_server(
    conn: &mut Conn,
    keys: &Keys,
    namespace: &str,
    retention_ms: u64,
    allow_eviction: bool,
) -> Result<(), IndexError> {
    match config_get(conn, keys.prefix(), "maxmemory-policy").await {
        Ok(policy) => judge_policy(&policy, allow_eviction)?,
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read maxmemory-policy (CONFIG disabled or denied?); make sure it is noeviction"
        ),
    }
    // Index hashes hold up to 2 × ARTICLES_PER_KEY fields; above
    // hash-max-listpack-entries Redis turns them into hash tables (~3× the
    // memory). Not an error: verdicts are unaffected.
    if let Ok(Ok(entries)) = config_get(conn, keys.prefix(), "hash-max-listpack-entries")
        .await
        .map(|v| v.parse::<u64>())
    {
        if entries < 2 * ARTICLES_PER_KEY + ARTICLES_PER_KEY / 2 {
            tracing::warn!(
                entries,
                "hash-max-listpack-entries is low: index hashes of up to {} fields will become \
                 hash tables and take about 3x the memory; the default, 512, is right",
                2 * ARTICLES_PER_KEY
            );
        }
    }
    check_namespace(conn, keys, namespace, retention_ms).await
}

/// Refuse a namespace whose newest bucket was written with another bucket
/// length or window (its `r` field: bucket length + window, ms), which would
/// file articles into overlapping buckets and compare them over the wrong
/// span, missing duplicates without any error; or with an earlier key layout
/// (field `l` of its counter hash not [`LAYOUT`]), whose buckets this version
/// can neither read nor extend.
async fn check_namespace(
    conn: &mut Conn,
    keys: &Keys,
    namespace: &str,
    retention_ms: u64,
) -> Result<(), IndexError> {
    let newest: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.buckets())
        .arg(-1)
        .arg(-1)
        .query_async(conn)
        .await
        .map_err(backend)?;
    let Some(label) = newest.first() else {
        return Ok(());
    };
    let (stored, layout): (Option<u64>, Option<String>) = redis::cmd("HMGET")
        .arg(keys.counter(label))
        .arg("r")
        .arg("l")
        .query_async(conn)
        .await
        .map_err(backend)?;
    match stored {
        // The counter hash expired meanwhile: nothing left to judge.
        None => Ok(()),
        Some(_) if layout.as_deref() != Some(LAYOUT) => Err(old_layout(keys.prefix(), label)),
        Some(r) if r != retention_ms => Err(IndexError::Config(format!(
            "namespace {:?} keeps its buckets for {} h after they start (bucket length + window; \
             `HGET {} r`), this process {} h: every process of a namespace needs the same \
             bucket_hours and decision.window_ms",
            namespace,
            r as f64 / HOUR_MS as f64,
            keys.counter(label),
            retention_ms as f64 / HOUR_MS as f64
        ))),
        Some(_) => Ok(()),
    }
}

/// A server setting of the primary holding the namespace (all of its keys
/// share the hash tag in `prefix`, hence one slot and one primary).
async fn config_get(conn: &mut Conn, prefix: &str, name: &str) -> redis::RedisResult<String> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg(name);
    let reply: redis::Value = conn.query_on_primary_of(prefix, cmd).await?;
    let pairs: Vec<String> = redis::from_redis_value(match reply {
        redis::Value::Map(m) => {
            redis::Value::Array(m.into_iter().flat_map(|(k, v)| [k, v]).collect())
        }
        v => v,
    })?;
    Ok(pairs.get(1).cloned().unwrap_or_default())
}

/// What the eviction policy means for the index.
fn judge_policy(policy: &str, allow_eviction: bool) -> Result<(), IndexError> {
    if policy.starts_with("allkeys-") {
        if allow_eviction {
            tracing::warn!(
                policy,
                "maxmemory-policy may evict index keys (allowed by option)"
            );
        } else {
            return Err(IndexError::Config(format!(
                "Redis maxmemory-policy is {policy}: under memory pressure it would evict index keys \
                 and silently forget articles. Set it to noeviction (CONFIG SET maxmemory-policy \
                 noeviction), or set allow_eviction = true (SIMDEDUP_ALLOW_EVICTION=true) to accept \
                 the risk"
            )));
        }
    } else if policy.starts_with("volatile-") {
        tracing::warn!(
            policy,
            "maxmemory-policy can evict keys with a TTL, and every index key has one; prefer noeviction"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_policies() {
        assert!(judge_policy("noeviction", false).is_ok());
        assert!(judge_policy("volatile-lru", false).is_ok());
        let err = judge_policy("allkeys-lru", false).unwrap_err().to_string();
        assert!(
            err.contains("allkeys-lru") && err.contains("noeviction"),
            "{err}"
        );
        assert!(judge_policy("allkeys-lru", true).is_ok());
    }
}
