//! Stream order across workers. An article is judged against the articles
//! before it in the stream, so a copy decided before its original keeps the
//! copy and marks the original its duplicate. Three rules keep the index
//! calls in stream order whichever worker holds an entry:
//!
//! - [`Turns`]: a worker's batches decide by their first entry in the stream,
//!   so entries taken over from a dead peer go before those read since;
//! - before its index calls a batch waits until no other consumer holds an
//!   entry before its first ([`oldest_elsewhere`], `wait_for_peers` in the
//!   worker), bounded by two liveness bounds;
//! - [`ReadLog`]: a worker reads new entries only while it has read fewer
//!   than `worker.order_slack` entries past the oldest entry pending on
//!   another consumer, so that it does not fill its window with batches that
//!   all wait for a dead peer's entries.
//!
//! None can wait in a cycle: the oldest entry pending in the group is in a
//! batch that waits for nobody — a live worker's (it finishes, however slowly),
//! one that fails (its worker's scan takes it up again, and it is
//! dead-lettered after `max_deliveries`), or a dead one's (a peer's scan,
//! which goes on while the reader waits, takes it over). A single worker has
//! no other consumer and never waits.

use std::collections::{BTreeSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

/// A stream entry id, `<ms>-<seq>`, in stream order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StreamId(u64, u64);

impl StreamId {
    /// Before every entry.
    pub const MIN: StreamId = StreamId(0, 0);
    /// After every entry.
    pub const MAX: StreamId = StreamId(u64::MAX, u64::MAX);

    pub fn parse(id: &str) -> Option<StreamId> {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        Some(StreamId(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// The ids of the latest new entries this worker read (as many as the slack),
/// oldest first: new entries come in stream order.
#[derive(Debug, Default)]
pub struct ReadLog {
    slack: usize,
    ids: VecDeque<StreamId>,
}

impl ReadLog {
    /// `slack` 0: no bound.
    pub fn new(slack: usize) -> ReadLog {
        ReadLog {
            slack,
            ids: VecDeque::with_capacity(slack),
        }
    }

    /// New entries just read (XREADGROUP `>`), in stream order.
    pub fn record<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        if self.slack == 0 {
            return;
        }
        for id in ids {
            if let Some(id) = StreamId::parse(id) {
                self.ids.push_back(id);
            }
        }
        while self.ids.len() > self.slack {
            self.ids.pop_front();
        }
    }

    /// Whether the bound can hold at all: fewer new entries read than the
    /// slack never reach it (no need to ask Redis).
    pub fn may_hold(&self) -> bool {
        self.slack > 0 && self.ids.len() >= self.slack
    }

    /// Entries read past `oldest` (capped at the slack).
    pub fn ahead_of(&self, oldest: StreamId) -> usize {
        self.ids.iter().rev().take_while(|id| **id > oldest).count()
    }

    /// Whether to read no new entry now, with `oldest` the oldest entry
    /// pending on another consumer (`None`: none).
    pub fn must_wait(&self, oldest: Option<StreamId>) -> bool {
        self.slack > 0 && oldest.is_some_and(|p| self.ahead_of(p) >= self.slack)
    }
}

/// This worker's batches in the order they decide: by their first entry in
/// the stream, not by when they were read, so that entries taken over from a
/// dead peer (older than those in flight) go before the ones read since.
#[derive(Debug, Default)]
pub struct Turns {
    waiting: Mutex<BTreeSet<(StreamId, u64)>>,
    changed: Notify,
    next: AtomicU64,
}

/// One batch's place in [`Turns`]; leaves it when dropped (done, failed or
/// aborted).
#[derive(Debug)]
pub struct Turn {
    turns: Arc<Turns>,
    key: (StreamId, u64),
}

impl Turns {
    fn waiting(&self) -> std::sync::MutexGuard<'_, BTreeSet<(StreamId, u64)>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A turn before every batch, held while entries that may be older than
    /// every batch in flight are being taken over: a batch that has not
    /// started deciding waits until the taken-over batch has entered (or the
    /// hold is dropped because none came).
    pub fn hold(self: &Arc<Self>) -> Turn {
        self.enter(StreamId::MIN)
    }

    /// A batch whose first entry is `first` joins.
    pub fn enter(self: &Arc<Self>, first: StreamId) -> Turn {
        let key = (first, self.next.fetch_add(1, Ordering::Relaxed));
        self.waiting().insert(key);
        Turn {
            turns: self.clone(),
            key,
        }
    }
}

impl Turn {
    /// The batch's first entry.
    pub fn first(&self) -> StreamId {
        self.key.0
    }

    /// Whether no batch of this worker before this one is still to decide.
    pub fn is_first(&self) -> bool {
        self.turns.waiting().first() == Some(&self.key)
    }

    /// Wait until no batch of this worker before this one in the stream is
    /// still to decide.
    pub async fn wait(&self) {
        loop {
            let changed = self.turns.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.turns.waiting().first() == Some(&self.key) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.waiting().remove(&self.key);
        self.turns.changed.notify_waiters();
    }
}

/// How [`wait_for_earlier`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// Nothing before the batch was held elsewhere.
    No,
    /// It waited until nothing before it was.
    Yes,
    /// It waited the whole bound and goes on anyway.
    GaveUp,
}

/// Wait until `turn` is first among this worker's batches and
/// `oldest_elsewhere` (the oldest entry another consumer holds, `None`:
/// none) is not before its first entry, looking again every `poll`, until
/// `give_up` (given the time waited so far) says to go on. A take-over moves entries from another consumer to this
/// worker before they have a turn: it holds one ([`Turns::hold`]) from
/// before the move until their batch has entered, so the answer "nothing
/// held elsewhere" counts only if the turn is still first once it came.
pub async fn wait_for_earlier<F, Fut>(
    turn: &Turn,
    give_up: impl Fn(Duration) -> bool,
    poll: Duration,
    mut oldest_elsewhere: F,
) -> Waited
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<StreamId>>,
{
    let started = Instant::now();
    let mut waited = Waited::No;
    loop {
        turn.wait().await;
        match oldest_elsewhere().await {
            Some(p) if p < turn.first() => {}
            _ if turn.is_first() => return waited,
            _ => continue,
        }
        if give_up(started.elapsed()) {
            return Waited::GaveUp;
        }
        waited = Waited::Yes;
        tokio::time::sleep(poll).await;
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

fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// The consumers other than `me` that hold pending entries, from the summary
/// form of XPENDING (`[count, min, max, [[consumer, count], ...]]`).
pub fn others_holding(summary: &Value, me: &str) -> Vec<String> {
    let Value::Array(parts) = summary else {
        return Vec::new();
    };
    let Some(Value::Array(rows)) = parts.get(3) else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|row| match row {
            Value::Array(pair) if pair.len() == 2 => {
                let name = text(&pair[0])?;
                (name != me && int(&pair[1])? > 0).then(|| name.to_owned())
            }
            _ => None,
        })
        .collect()
}

/// The first id of an `XPENDING key group - + 1 consumer` reply.
fn first_pending(v: &Value) -> Option<StreamId> {
    let Value::Array(rows) = v else { return None };
    let Value::Array(row) = rows.first()? else {
        return None;
    };
    StreamId::parse(text(row.first()?)?)
}

/// The oldest entry pending on a consumer of `group` other than `me`.
pub async fn oldest_elsewhere<C: ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
    group: &str,
    me: &str,
) -> RedisResult<Option<StreamId>> {
    let summary: Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(conn)
        .await?;
    let others = others_holding(&summary, me);
    if others.is_empty() {
        return Ok(None);
    }
    let oldest = oldest_of(conn, stream, group, &others).await?;
    Ok(oldest.into_iter().flatten().min())
}

/// The oldest entry pending on each of `consumers` (`None`: none), in one
/// round trip.
pub async fn oldest_of<C: ConnectionLike + Send>(
    conn: &mut C,
    stream: &str,
    group: &str,
    consumers: &[String],
) -> RedisResult<Vec<Option<StreamId>>> {
    if consumers.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for name in consumers {
        pipe.cmd("XPENDING")
            .arg(stream)
            .arg(group)
            .arg("-")
            .arg("+")
            .arg(1)
            .arg(name);
    }
    let replies: Vec<Value> = pipe.query_async(conn).await?;
    Ok(replies.iter().map(first_pending).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn stream_ids_order_by_time_then_sequence() {
        let id = |s| StreamId::parse(s).unwrap();
        assert!(id("5-10") > id("5-9"));
        assert!(id("6-0") > id("5-99"));
        assert_eq!(id("7"), id("7-0"));
        assert_eq!(StreamId::parse("x-1"), None);
        assert_eq!(id("12-3").to_string(), "12-3");
    }

    #[test]
    fn the_reader_waits_once_it_is_the_slack_past_an_entry_pending_elsewhere() {
        let mut log = ReadLog::new(3);
        let p = StreamId::parse("10-0");
        log.record(["11-0", "12-0"]);
        assert!(!log.may_hold());
        assert!(!log.must_wait(p), "two past it");
        log.record(["13-0"]);
        assert!(log.may_hold());
        assert!(log.must_wait(p), "three past it");
        assert!(!log.must_wait(None), "nothing pending elsewhere");
        assert!(
            !log.must_wait(StreamId::parse("11-0")),
            "two past a later one"
        );
        log.record(["14-0", "15-0", "16-0"]);
        assert_eq!(log.ahead_of(StreamId::parse("0-1").unwrap()), 3, "capped");
        // No bound.
        let mut free = ReadLog::new(0);
        free.record(["11-0", "12-0", "13-0"]);
        assert!(!free.may_hold());
        assert!(!free.must_wait(p));
    }

    #[tokio::test]
    async fn batches_decide_in_stream_order_whatever_order_they_were_read_in() {
        let turns = Arc::new(Turns::default());
        let late = turns.enter(StreamId::parse("20-0").unwrap());
        let early = turns.enter(StreamId::parse("10-0").unwrap());
        let waiter = tokio::spawn(async move {
            late.wait().await;
            late.first()
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the later batch waits");
        early.wait().await;
        drop(early);
        let first = tokio::time::timeout(std::time::Duration::from_secs(60), waiter)
            .await
            .expect("its turn comes")
            .unwrap();
        assert_eq!(first, StreamId::parse("20-0").unwrap());
    }

    /// A take-over that lands between a batch's look at the other consumers
    /// and the answer: the entries it moved are no longer "elsewhere", but
    /// the batch still waits for them, first for the hold, then for their
    /// own batch.
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_waits_for_entries_taken_over_while_it_looked() {
        let id = |s| StreamId::parse(s).unwrap();
        let turns = Arc::new(Turns::default());
        let batch = turns.enter(id("20-0"));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let looks = Arc::new(AtomicU64::new(0));
        let waiter = {
            let (turns, looks) = (turns.clone(), looks.clone());
            tokio::spawn(async move {
                let waited = wait_for_earlier(
                    &batch,
                    |_| false,
                    Duration::from_millis(1),
                    || {
                        let (turns, tx) = (turns.clone(), tx.clone());
                        let look = looks.fetch_add(1, Ordering::SeqCst);
                        async move {
                            if look == 0 {
                                // A dead peer holds "10-0".
                                return Some(StreamId::parse("10-0").unwrap());
                            }
                            if look == 1 {
                                // Meanwhile the reader starts taking it over.
                                tx.send(turns.hold()).unwrap();
                            }
                            None
                        }
                    },
                )
                .await;
                (waited, batch)
            })
        };
        // One thread runs both tasks: the waiter sent the hold from its look
        // and went on in the same poll until it had to wait, so by the time
        // this task runs again it has either finished or is waiting.
        let hold = rx.recv().await.expect("the take-over starts");
        assert!(!waiter.is_finished(), "the batch waits for the take-over");
        let taken_over = turns.enter(id("10-0"));
        drop(hold);
        // The waiter, woken by the hold's end, runs before this task does
        // again, and finds the taken-over entries first.
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "the batch waits for the taken-over entries to decide"
        );
        drop(taken_over);
        let (waited, _batch) = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("its turn comes")
            .unwrap();
        assert_eq!(waited, Waited::Yes);
    }

    #[tokio::test]
    async fn a_batch_gives_up_waiting_after_the_bound() {
        let turns = Arc::new(Turns::default());
        let batch = turns.enter(StreamId::parse("20-0").unwrap());
        let waited = wait_for_earlier(
            &batch,
            |waited| waited >= Duration::from_millis(5),
            Duration::from_millis(1),
            || async { StreamId::parse("10-0") },
        )
        .await;
        assert_eq!(waited, Waited::GaveUp);
        let free = wait_for_earlier(
            &batch,
            |_| true,
            Duration::from_millis(1),
            || async { StreamId::parse("30-0") },
        )
        .await;
        assert_eq!(free, Waited::No);
    }

    #[test]
    fn parses_the_pending_summary_and_a_consumers_oldest_entry() {
        let summary = Value::Array(vec![
            Value::Int(5),
            bulk("1-0"),
            bulk("9-0"),
            Value::Array(vec![
                Value::Array(vec![bulk("me"), bulk("3")]),
                Value::Array(vec![bulk("peer"), bulk("2")]),
                Value::Array(vec![bulk("idle"), bulk("0")]),
            ]),
        ]);
        assert_eq!(others_holding(&summary, "me"), vec!["peer".to_owned()]);
        let empty = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]);
        assert!(others_holding(&empty, "me").is_empty());
        let row = Value::Array(vec![Value::Array(vec![
            bulk("4-2"),
            bulk("peer"),
            Value::Int(10),
            Value::Int(1),
        ])]);
        assert_eq!(first_pending(&row), StreamId::parse("4-2"));
        assert_eq!(first_pending(&Value::Array(vec![])), None);
    }
}
