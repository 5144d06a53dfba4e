//! The index's connection: a [`crate::connect::Conn`] (single node, Redis
//! Cluster or Sentinel) opened with the index's options.

use std::time::Duration;

use ::redis::RedisResult;
use ::redis::Value;

pub(crate) use crate::connect::Conn;
use crate::connect::{ConnectError, ConnectOptions};

use super::Topology;
use crate::index::IndexError;

impl Conn {
    /// Connect to `seeds`, the comma-separated parts of the URL setting.
    pub(crate) async fn open(
        seeds: &[&str],
        topology: Topology,
        response_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<Conn, IndexError> {
        let options = ConnectOptions {
            topology,
            response_timeout,
            connection_timeout,
        };
        Conn::connect(&seeds.join(","), &options)
            .await
            .map_err(|e| match e {
                ConnectError::Config { .. } => IndexError::Config(e.to_string()),
                ConnectError::Unavailable { .. } => IndexError::Unavailable {
                    reason: crate::settings::with_connection_advice(&e),
                    source: match e {
                        ConnectError::Unavailable { source, .. } => Some(source),
                        ConnectError::Config { .. } => None,
                    },
                },
            })
    }

    /// A server setting of the primary holding the namespace (all of its keys
    /// share the hash tag in `prefix`, hence one slot and one primary).
    pub(crate) async fn config_get(&mut self, prefix: &str, name: &str) -> RedisResult<String> {
        let mut cmd = ::redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let reply: Value = self.query_on_primary_of(prefix, cmd).await?;
        let pairs: Vec<String> = ::redis::from_redis_value(match reply {
            Value::Map(m) => Value::Array(m.into_iter().flat_map(|(k, v)| [k, v]).collect()),
            v => v,
        })?;
        Ok(pairs.get(1).cloned().unwrap_or_default())
    }
}
