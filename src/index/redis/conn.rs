//! One connection type over a single Redis node or a Redis Cluster.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use ::redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::{backend, Topology};
use crate::index::IndexError;

/// A multiplexed, self-reconnecting connection: cheap to clone, one per task.
#[derive(Clone)]
pub(crate) enum Conn {
    /// [`ConnectionManager`] reconnects with backoff after a dropped connection.
    Single(ConnectionManager),
    /// Routes each command by key slot and follows MOVED/ASK redirections.
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) async fn open(
        seeds: &[&str],
        topology: Topology,
        response_timeout: Duration,
        connection_timeout: Duration,
    ) -> Result<Conn, IndexError> {
        let cluster = match topology {
            Topology::Standalone => false,
            Topology::Cluster => true,
            Topology::Auto => {
                let client = ::redis::Client::open(seeds[0]).map_err(config)?;
                let mut c = tokio::time::timeout(
                    connection_timeout,
                    client.get_multiplexed_async_connection(),
                )
                .await
                .map_err(|_| IndexError::Unavailable {
                    reason: format!("connecting to {} timed out", redact(seeds[0])),
                    source: None,
                })?
                .map_err(backend)?;
                let info: String = ::redis::cmd("INFO")
                    .arg("cluster")
                    .query_async(&mut c)
                    .await
                    .map_err(backend)?;
                info.lines().any(|l| l.trim() == "cluster_enabled:1")
            }
        };
        if cluster {
            let client = ClusterClient::builder(seeds.iter().copied())
                .response_timeout(response_timeout)
                .connection_timeout(connection_timeout)
                .build()
                .map_err(config)?;
            Ok(Conn::Cluster(
                client.get_async_connection().await.map_err(backend)?,
            ))
        } else {
            if seeds.len() > 1 {
                return Err(IndexError::Config(
                    "several Redis URLs are only meaningful for a cluster".into(),
                ));
            }
            let client = ::redis::Client::open(seeds[0]).map_err(config)?;
            let cfg = ConnectionManagerConfig::new()
                .set_response_timeout(Some(response_timeout))
                .set_connection_timeout(Some(connection_timeout));
            Ok(Conn::Single(
                ConnectionManager::new_with_config(client, cfg)
                    .await
                    .map_err(backend)?,
            ))
        }
    }

    /// `maxmemory-policy` of the node holding the namespace (all of its keys share
    /// the hash tag in `prefix`, hence one slot and one master).
    pub(crate) async fn config_get(&mut self, prefix: &str, name: &str) -> RedisResult<String> {
        let mut cmd = ::redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let reply = match self {
            Conn::Single(c) => cmd.query_async::<Value>(c).await?,
            Conn::Cluster(c) => {
                let route = Route::new(key_slot(prefix.as_bytes()), SlotAddr::Master);
                c.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await?
            }
        };
        let pairs: Vec<String> = ::redis::from_redis_value(match reply {
            Value::Map(m) => Value::Array(m.into_iter().flat_map(|(k, v)| [k, v]).collect()),
            v => v,
        })?;
        Ok(pairs.get(1).cloned().unwrap_or_default())
    }
}

fn config(e: ::redis::RedisError) -> IndexError {
    IndexError::Config(format!("bad Redis URL: {e}"))
}

/// A URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Reference values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"simdedup:{foo}:in"), 12182);
        assert_eq!(key_slot(b"a{}b"), key_slot(b"a{}b"));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1/"), "redis://***@h:1/");
        assert_eq!(redact("redis://h:1/"), "redis://h:1/");
    }
}
