//! Liveness-based recovery: a worker's pending entries are taken over soon
//! after it dies, and never while it lives, however slow it is.
//!
//! Each worker keeps a liveness key (`simdedup:{NS}:alive:GROUP:CONSUMER`,
//! TTL `worker.liveness_ttl_ms`, refreshed three times per TTL by a task of
//! its own, independent of how busy its batches are). Every
//! `worker.claim_interval_ms` a worker lists the group's consumers and, for
//! each other one that holds entries or has been idle a TTL, runs
//! `lua/reclaim.lua`: if the consumer's key is gone, its entries are claimed
//! (a batch at a time) and, once it holds none, it is removed from the group.
//! A dead worker's entries thus move on within TTL + claim interval (3 s + 1 s
//! by default). Idle time (`XINFO CONSUMERS`) alone cannot tell a dead worker
//! from a live one busy with a long batch, whose reader sends nothing while
//! all its permits are taken; the key can.
//!
//! A worker judges others only after a whole TTL in which Redis served it
//! without a transient error ([`super::Health::available_for`]): after an
//! outage during which nobody could refresh a key, every live peer has had
//! time to refresh its own before anyone is judged dead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, Value};

use crate::index::Index;
use crate::keys::Keys;
use crate::transient;

use super::health::Trouble;
use super::order::{oldest_of, StreamId};
use super::shared::Shared;
use super::stream::{add_deleted, parse_entry_list, reply_error, RawEntry, ReplyError};

static RECLAIM_SOURCE: &str = include_str!("../../lua/reclaim.lua");

/// One worker's liveness key and its view of the others'.
#[derive(Debug, Clone)]
pub struct Liveness {
    stream: String,
    group: String,
    consumer: String,
    key: String,
    keys: Keys,
    ttl_ms: u64,
    reclaim: Script,
}

/// What [`Liveness::reclaim`] did about one consumer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reclaimed {
    /// Its key exists: nothing done.
    Alive,
    /// Dead and holding nothing: removed from the group.
    Removed,
    /// Dead: these of its entries are now ours, in stream order; those
    /// deleted from the stream meanwhile come without fields (still pending
    /// on the dead consumer until their rejection is committed).
    Claimed(Vec<RawEntry>),
}

/// A consumer of the group as `XINFO CONSUMERS` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    pub name: String,
    pub pending: u64,
    pub idle_ms: u64,
}

impl Liveness {
    pub fn new(keys: &Keys, group: &str, consumer: &str, ttl_ms: u64) -> Liveness {
        Liveness {
            stream: keys.input_stream(),
            group: group.to_owned(),
            consumer: consumer.to_owned(),
            key: keys.alive(group, consumer),
            keys: keys.clone(),
            ttl_ms,
            reclaim: Script::new(RECLAIM_SOURCE),
        }
    }

    /// How often the key is refreshed: three times per TTL, so that two
    /// refreshes may fail or come late before peers take over.
    pub fn beat_interval(&self) -> Duration {
        Duration::from_millis((self.ttl_ms / 3).max(1))
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Refresh this worker's key.
    pub async fn beat<C: ConnectionLike + Send>(&self, conn: &mut C) -> RedisResult<()> {
        redis::cmd("SET")
            .arg(&self.key)
            .arg(1)
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async(conn)
            .await
    }

    /// This worker stops: drop its key (peers take what it leaves at once)
    /// and, when it holds nothing, leave the group.
    pub async fn end<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        holding: usize,
    ) -> RedisResult<()> {
        redis::cmd("DEL")
            .arg(&self.key)
            .query_async::<()>(conn)
            .await?;
        if holding == 0 {
            redis::cmd("XGROUP")
                .arg("DELCONSUMER")
                .arg(&self.stream)
                .arg(&self.group)
                .arg(&self.consumer)
                .query_async::<()>(conn)
                .await?;
        }
        Ok(())
    }

    /// The group's other consumers that may be dead: holding entries, or idle
    /// for a TTL (a live worker reads at least every `block_ms`).
    pub async fn suspects<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> RedisResult<Vec<Consumer>> {
        let reply: Value = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&self.stream)
            .arg(&self.group)
            .query_async(conn)
            .await?;
        let consumers = parse_xinfo_consumers(&reply).map_err(reply_error)?;
        let mut suspects: Vec<Consumer> = consumers
            .into_iter()
            .filter(|c| c.name != self.consumer && (c.pending > 0 || c.idle_ms >= self.ttl_ms))
            .collect();
        // Oldest entry first: a take-over moves the entries every later
        // batch waits for ([`super::order`]), not those of whichever
        // consumer sorts first by name.
        let holding: Vec<String> = suspects
            .iter()
            .filter(|c| c.pending > 0)
            .map(|c| c.name.clone())
            .collect();
        if holding.len() < 2 {
            return Ok(suspects);
        }
        let firsts = oldest_of(conn, &self.stream, &self.group, &holding).await?;
        let oldest: HashMap<String, StreamId> = holding
            .into_iter()
            .zip(firsts)
            .filter_map(|(name, first)| Some((name, first?)))
            .collect();
        suspects.sort_by_key(|c| oldest.get(&c.name).copied().unwrap_or(StreamId::MAX));
        Ok(suspects)
    }

    /// If `consumer`'s key is gone, claim up to `count` of its entries for
    /// this worker, or remove it from the group when it holds none.
    pub async fn reclaim<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        consumer: &str,
        count: usize,
    ) -> RedisResult<Reclaimed> {
        let reply: Value = self
            .reclaim
            .key(&self.stream)
            .key(self.keys.alive(&self.group, consumer))
            .arg(&self.group)
            .arg(consumer)
            .arg(&self.consumer)
            .arg(count)
            .invoke_async(conn)
            .await?;
        parse_reclaim(&reply).map_err(reply_error)
    }
}

/// Refresh the liveness key every third of its TTL until aborted. A refresh
/// that fails is not retried: the next beat comes soon, and two may fail
/// before peers take over. A transient failure makes the worker not ready
/// like any other (so `/readyz` shows an outage even with no traffic).
pub(super) async fn heartbeat<I: Index>(shared: Arc<Shared<I>>, liveness: Liveness) {
    let mut trouble: Option<Trouble> = None;
    let mut tick = tokio::time::interval(liveness.beat_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut c = shared.conn.clone();
        match liveness.beat(&mut c).await {
            Ok(()) => trouble = None,
            Err(e) if transient::is_transient(&e) => {
                shared.metrics.redis_errors.inc();
                shared.failing(&mut trouble, transient::reason(&e));
            }
            Err(e) => {
                shared.metrics.redis_errors.inc();
                tracing::warn!(error = %e, "refreshing the liveness key failed");
            }
        }
    }
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// An `XINFO CONSUMERS` reply (RESP2 flat field lists or RESP3 maps).
pub fn parse_xinfo_consumers(v: &Value) -> Result<Vec<Consumer>, ReplyError> {
    let Value::Array(rows) = v else {
        return Err(ReplyError(format!("XINFO CONSUMERS: {v:?}")));
    };
    rows.iter()
        .map(|row| {
            let pairs: Vec<(&Value, &Value)> = match row {
                Value::Array(kv) => kv
                    .chunks(2)
                    .filter_map(|c| Some((c.first()?, c.get(1)?)))
                    .collect(),
                Value::Map(kv) => kv.iter().map(|(k, v)| (k, v)).collect(),
                other => return Err(ReplyError(format!("XINFO CONSUMERS row: {other:?}"))),
            };
            let field = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| text(k).as_deref() == Some(name))
                    .map(|(_, v)| *v)
            };
            Ok(Consumer {
                name: field("name")
                    .and_then(text)
                    .ok_or_else(|| ReplyError("XINFO CONSUMERS without a name".into()))?,
                pending: field("pending").and_then(int).unwrap_or(0),
                idle_ms: field("idle").and_then(int).unwrap_or(0),
            })
        })
        .collect()
}

/// The reply of `lua/reclaim.lua`.
fn parse_reclaim(v: &Value) -> Result<Reclaimed, ReplyError> {
    let Value::Array(parts) = v else {
        return Err(ReplyError(format!("reclaim: {v:?}")));
    };
    match parts.first().and_then(int) {
        Some(0) => Ok(Reclaimed::Alive),
        Some(1) => Ok(Reclaimed::Removed),
        Some(2) => {
            let mut entries = parts
                .get(1)
                .map(parse_entry_list)
                .transpose()?
                .unwrap_or_default();
            if let Some(Value::Array(deleted)) = parts.get(2) {
                add_deleted(&mut entries, deleted.iter().filter_map(text));
            }
            Ok(Reclaimed::Claimed(entries))
        }
        _ => Err(ReplyError(format!("reclaim: {v:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn parses_consumers_and_reclaim_replies() {
        let row = Value::Array(vec![
            bulk("name"),
            bulk("w-1"),
            bulk("pending"),
            Value::Int(3),
            bulk("idle"),
            Value::Int(4200),
            bulk("inactive"),
            Value::Int(4200),
        ]);
        let map = Value::Map(vec![
            (bulk("name"), bulk("w-2")),
            (bulk("pending"), Value::Int(0)),
            (bulk("idle"), Value::Int(7)),
        ]);
        assert_eq!(
            parse_xinfo_consumers(&Value::Array(vec![row, map])).unwrap(),
            vec![
                Consumer {
                    name: "w-1".into(),
                    pending: 3,
                    idle_ms: 4200
                },
                Consumer {
                    name: "w-2".into(),
                    pending: 0,
                    idle_ms: 7
                },
            ]
        );
        let alive = Value::Array(vec![Value::Int(0), Value::Array(vec![])]);
        assert_eq!(parse_reclaim(&alive).unwrap(), Reclaimed::Alive);
        let entry = Value::Array(vec![bulk("1-0"), Value::Array(vec![bulk("id"), bulk("a")])]);
        let claimed = Value::Array(vec![
            Value::Int(2),
            Value::Array(vec![entry]),
            Value::Array(vec![bulk("0-5")]),
        ]);
        let Reclaimed::Claimed(entries) = parse_reclaim(&claimed).unwrap() else {
            panic!("claimed");
        };
        assert_eq!(entries[0].id, "0-5", "in stream order");
        assert!(entries[0].fields.is_none(), "deleted from the stream");
        assert_eq!(entries[1].field("id"), Some(&b"a"[..]));
    }
}
