//! Acking a batch: calls of `lua/ack_and_emit.lua`, which acks a batch's
//! input entries and, for each entry actually acked, writes the output entry
//! (and the dead letter), at most [`ENTRIES_PER_CALL`] entries per call. It
//! acks an entry only where the index write its verdict rests on can be read
//! back ([`Emit::receipt`]): one whose write the server lacks (lost in a
//! failover) is left pending, to be decided again.
//!
//! This is where "exactly one output entry per input entry" is enforced; the
//! argument is written out in `docs/protocol.md`. The script is idempotent: a
//! retried call (say, after the reply was lost with the connection) writes
//! nothing for entries the first attempt already acked. So callers may retry it
//! freely.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, Value};

use crate::index::Receipt;
use crate::keys::Keys;

static SCRIPT_SOURCE: &str = include_str!("../../lua/ack_and_emit.lua");

/// Entries per ack-and-emit call. A script holds Redis for its whole run, and
/// every other client's command waits behind it: a batch of 128 news articles
/// in one call held Redis for 0.85 ms (median, up to 1.6 ms; `SLOWLOG`), which
/// lands on other checks' latency. 16 entries hold it for about an eighth of
/// that (estimated by the entries: 16 of 128); the extra calls cost a few
/// microseconds each.
pub const ENTRIES_PER_CALL: usize = 16;

/// What to write for one input entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emit {
    /// The input entry id (acked; `source` of the output).
    pub source: String,
    /// Output entry fields.
    pub output: Vec<(&'static str, Vec<u8>)>,
    /// Dead-letter fields (the original fields plus reason), if the entry is dead-lettered.
    pub dead: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Where the index write the verdict rests on can be read back: the
    /// entry is acked only on a server that holds it.
    pub receipt: Option<Receipt>,
}

/// Trimming and cleanup options of the ack-and-emit calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckOptions {
    pub group: String,
    /// Approximate MAXLEN of the output stream (0: untrimmed).
    pub output_maxlen: u64,
    /// Approximate MAXLEN of the dead-letter stream (0: untrimmed).
    pub dead_maxlen: u64,
    /// XDEL input entries once processed.
    pub delete_processed: bool,
    /// Replicas that must acknowledge a call (`WAIT`) before it counts as
    /// done; 0: none asked.
    pub wait_replicas: u32,
    /// How long one `WAIT` waits for them, milliseconds.
    pub wait_timeout_ms: u64,
}

/// What one ack-and-emit call did with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Acked, its output written.
    Written,
    /// Acked before (by another consumer, or an earlier attempt of the
    /// call): nothing written.
    Skipped,
    /// The server lacks the index write of its verdict (its
    /// [`Emit::receipt`]): left pending, nothing written.
    Lost,
}

/// What one ack-and-emit call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    /// Per entry.
    pub entries: Vec<Ack>,
    /// Replicas that acknowledged the call within `wait_timeout_ms`, when
    /// `wait_replicas` asked for some.
    pub replicas: Option<u32>,
}

impl Acked {
    /// Whether as many replicas as asked for hold the call's writes.
    pub fn replicated(&self, wanted: u32) -> bool {
        self.replicas.is_none_or(|n| n >= wanted)
    }
}

/// The loaded ack-and-emit script and the keys it works on.
#[derive(Debug, Clone)]
pub struct AckScript {
    script: Script,
    keys: [String; 3],
    options: AckOptions,
}

impl AckScript {
    pub fn new(keys: &Keys, options: AckOptions) -> AckScript {
        AckScript {
            script: Script::new(SCRIPT_SOURCE),
            keys: [
                keys.input_stream(),
                keys.output_stream(),
                keys.dead_stream(),
            ],
            options,
        }
    }

    /// Load the script (so the first batch does not pay for it). `invoke` also
    /// reloads on NOSCRIPT, e.g. after a Redis restart or `SCRIPT FLUSH`.
    pub async fn load<C: ConnectionLike + Send>(&self, conn: &mut C) -> RedisResult<String> {
        self.script.prepare_invoke().load_async(conn).await
    }

    /// Ack `batch` and write the outputs of the entries acked now; with
    /// `wait_replicas`, then `WAIT` for that many replicas in the same
    /// pipeline, so on the same connection and the same node (on a cluster:
    /// the primary of the namespace's slot, where the script ran).
    pub async fn ack_and_emit<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        batch: &[Emit],
    ) -> RedisResult<Acked> {
        if batch.is_empty() {
            return Ok(Acked {
                entries: Vec::new(),
                replicas: None,
            });
        }
        let mut call = redis::cmd("EVALSHA");
        call.arg(self.script.get_hash()).arg(self.keys.len());
        for k in &self.keys {
            call.arg(k);
        }
        let o = &self.options;
        call.arg(&o.group)
            .arg(o.output_maxlen)
            .arg(o.dead_maxlen)
            .arg(if o.delete_processed { "1" } else { "0" })
            .arg(batch.len());
        for e in batch {
            call.arg(&e.source);
            match &e.receipt {
                Some(r) => call.arg(&r.key).arg(r.index).arg(r.element.as_slice()),
                None => call.arg("").arg(0).arg(""),
            };
            call.arg(e.output.len() * 2);
            for (k, v) in &e.output {
                call.arg(*k).arg(v.as_slice());
            }
            match &e.dead {
                None => {
                    call.arg(0);
                }
                Some(fields) => {
                    call.arg(fields.len() * 2);
                    for (k, v) in fields {
                        call.arg(k.as_slice()).arg(v.as_slice());
                    }
                }
            }
        }
        let mut pipe = redis::pipe();
        pipe.add_command(call);
        if o.wait_replicas > 0 {
            pipe.cmd("WAIT").arg(o.wait_replicas).arg(o.wait_timeout_ms);
        }
        let replies: Vec<Value> = match pipe.query_async(conn).await {
            // Not loaded (a restart, `SCRIPT FLUSH`, a node new to the
            // namespace): load it, and send the call again.
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.load(conn).await?;
                pipe.query_async(conn).await?
            }
            r => r?,
        };
        let mut replies = replies.into_iter();
        let flags: Vec<i64> = redis::from_redis_value(replies.next().unwrap_or(Value::Nil))?;
        let replicas = match replies.next() {
            Some(v) => Some(redis::from_redis_value::<u32>(v)?),
            None => None,
        };
        let entries = flags
            .into_iter()
            .map(|f| match f {
                1 => Ack::Written,
                2 => Ack::Lost,
                _ => Ack::Skipped,
            })
            .collect();
        Ok(Acked { entries, replicas })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_server::RedisServer;

    /// The script on a real server: an entry whose receipt holds (its
    /// element, or an emptied one) is acked and answered; one whose receipt
    /// does not is left pending, and the entries after it go on; one no
    /// longer pending, or without its group, is skipped whatever its receipt.
    #[tokio::test]
    async fn an_entry_is_acked_only_where_its_receipt_holds() {
        let server = RedisServer::start().expect("these tests start their own redis-server");
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys = Keys::new("ack");
        let stream = keys.input_stream();
        let mut ids = Vec::new();
        for _ in 0..4 {
            let id: String = redis::cmd("XADD")
                .arg(&stream)
                .arg("*")
                .arg("id")
                .arg("x")
                .query_async(&mut conn)
                .await
                .unwrap();
            ids.push(id);
        }
        let list = format!("{}a:test", keys.prefix());
        let _: () = redis::pipe()
            .cmd("XGROUP")
            .arg("CREATE")
            .arg(&stream)
            .arg("g")
            .arg("0")
            .ignore()
            .cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg("c")
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .ignore()
            .cmd("RPUSH")
            .arg(&list)
            .arg("a")
            .arg("")
            .arg("b")
            .ignore()
            .query_async(&mut conn)
            .await
            .unwrap();
        let emit = |i: usize, receipt: Option<(u64, &str)>| Emit {
            source: ids[i].clone(),
            output: vec![("n", i.to_string().into_bytes())],
            dead: None,
            receipt: receipt.map(|(index, element)| Receipt {
                key: list.clone(),
                index,
                element: element.into(),
            }),
        };
        let script = AckScript::new(
            &keys,
            AckOptions {
                group: "g".into(),
                output_maxlen: 0,
                dead_maxlen: 0,
                delete_processed: false,
                wait_replicas: 0,
                wait_timeout_ms: 0,
            },
        );
        let batch = [
            emit(0, None),
            emit(1, Some((1, "deleted since"))),
            emit(2, Some((2, "lost"))),
            emit(3, Some((0, "a"))),
        ];
        let acked = script.ack_and_emit(&mut conn, &batch).await.unwrap();
        use Ack::*;
        assert_eq!(acked.entries, [Written, Written, Lost, Written]);
        let pending: Vec<redis::Value> = redis::cmd("XPENDING")
            .arg(&stream)
            .arg("g")
            .arg("-")
            .arg("+")
            .arg(10)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(pending.len(), 1, "the lost entry stays pending");

        // Acked by another consumer meanwhile: skipped, not lost.
        let _: () = redis::cmd("XACK")
            .arg(&stream)
            .arg("g")
            .arg(&ids[2])
            .query_async(&mut conn)
            .await
            .unwrap();
        let again = script.ack_and_emit(&mut conn, &batch[2..3]).await.unwrap();
        assert_eq!(again.entries, [Skipped]);
        // No group (a flush, a restart without the data): skipped too.
        let _: () = redis::cmd("DEL")
            .arg(&stream)
            .query_async(&mut conn)
            .await
            .unwrap();
        let gone = script.ack_and_emit(&mut conn, &batch[2..3]).await.unwrap();
        assert_eq!(gone.entries, [Skipped]);
        let out: usize = redis::cmd("XLEN")
            .arg(keys.output_stream())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(out, 3);
    }
}
