//! The view's catch-up: bring a process' view of the live articles up to
//! date with Redis (the [`RedisIndex`](super::RedisIndex) methods that do
//! it live here).
//!
//! One script call (`lua/catch_up.lua`) reads the live buckets with their
//! counters and shapes, and the deletion log after the last entry applied;
//! then pipelines read the `a:` elements of the handles inserted since, by
//! whoever, a chunk per `LRANGE`. A cold view loads
//! the whole window this way. A view a little behind is safe: the commit is
//! told its counters, so anything inserted after them that could meet the
//! article makes it catch up and decide again. A view ahead of Redis (Redis
//! lost writes: a failover, a restart, a flush) is loaded again, wholly or a
//! bucket at a time (`View::follow`).

use std::time::Instant;

use super::check::CheckKind;
use super::view::{Deleted, LiveBucket, Origin, View};
use super::{backend, RedisIndex, ViewState, CATCH_UP};
use crate::connect::Conn;
use crate::index::IndexError;
use crate::keys::{slot, HANDLES_PER_CHUNK};

/// How long a copy serves checks before a check brings it up to date again.
/// A check on a copy up to this old is still right (the commit validates it
/// against everything stored since); it only spares most checks the round
/// trip. What it bounds: another process' deletion reaches this one's checks
/// at most this much later (its own deletions, at once). Worth, against a
/// catch-up before every check: 9,394–9,849 instead of 7,394 checks/s and a
/// client p50 of 1.42–1.53 instead of 2.13 ms, round trips saved rather than
/// Redis time (75–78 against 70 µs per check); measured in one change with
/// own-insert filing ([`View::stored`]) and a reworked id check in the
/// commit, by `simdedup bench --sizes 1000000 --checks 50000 --no-e2e
/// --no-progress --replica` (1 M articles, 16 checks in flight; 881f724
/// against 257e5e4).
pub(super) const CATCH_UP_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// Chunks per pipeline when fetching new handles (an `LRANGE` of up to 100
/// articles each).
const FETCH_CHUNKS: usize = 256;
/// Deletion-log entries read per command.
const DELETIONS_PER_READ: usize = 1000;

/// Whether a check brings its copy up to date before deciding from it: a
/// copy of age `age` (`None`: never caught up, or this process deleted an
/// article since), after a conflict (`must`: the copy lacks what caused it),
/// or for a query ([`CheckKind::Query`]: no commit will validate it).
fn stale(age: Option<std::time::Duration>, must: bool, kind: CheckKind) -> bool {
    must || kind == CheckKind::Query || age.is_none_or(|age| age >= CATCH_UP_EVERY)
}

impl RedisIndex {
    fn view_state(&self) -> &ViewState {
        &self.inner.view
    }

    /// The view, locked. It is only a cache of Redis: a panic while filing
    /// cannot leave it worse than stale, which the commit catches.
    pub(super) fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.inner
            .view
            .copy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Bring this process' view of the live articles up to date now (the
    /// first call loads the whole window: call it before serving, so the
    /// first check does not wait for it).
    pub async fn catch_up(&self) -> Result<(), IndexError> {
        let mut conn = self.inner.conn.clone();
        let started = Instant::now();
        self.catch_up_now(&mut conn, true).await?;
        tracing::info!(
            articles = self.view_articles(),
            seconds = started.elapsed().as_secs_f64(),
            "view up to date"
        );
        Ok(())
    }

    /// Articles held in this process' view.
    pub fn view_articles(&self) -> usize {
        self.view().len()
    }

    /// Before a check decides: bring the view up to date if it is
    /// [`stale`].
    pub(super) async fn catch_up_if_stale(
        &self,
        conn: &mut Conn,
        must: bool,
        kind: CheckKind,
    ) -> Result<(), IndexError> {
        if stale(self.copy_age(), must, kind) {
            self.catch_up_now(conn, must).await?;
        }
        Ok(())
    }

    /// One task at a time brings the copy up to date; a task that finds
    /// another doing so waits for it and uses its work, unless that catch-up
    /// may have missed this process' own deletion (`must`: do one anyway). A
    /// copy that is a little behind is safe: the commit validates it.
    async fn catch_up_now(&self, conn: &mut Conn, must: bool) -> Result<(), IndexError> {
        let state = self.view_state();
        let _turn = match state.catching_up.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                let turn = state.catching_up.lock().await;
                if !must && self.copy_age().is_some() {
                    return Ok(());
                }
                turn
            }
        };
        let began = Instant::now();
        let deletes = state
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deletes;
        // Every handle filed now is in Redis, unless Redis loses it.
        self.view().confirm();
        let (live, mut deletions, origin) = self.read_catch_up(conn).await?;
        let (wanted, reset) = self.view().follow(origin, &live);
        if reset {
            // The entries read followed the old history's last one.
            deletions = self.read_catch_up(conn).await?.1;
        }
        self.fetch_handles(conn, &wanted).await?;
        // The deletion log, after the articles: one deleted before they were
        // fetched came without its entries, one deleted after is filed and
        // forgotten here or at the next catch-up.
        loop {
            let full = deletions.len() == DELETIONS_PER_READ;
            {
                let mut copy = self.view();
                for (entry, label, handle) in &deletions {
                    copy.forget(label, *handle);
                    copy.deletions_read.clone_from(entry);
                }
            }
            if !full {
                break;
            }
            deletions = self.read_catch_up(conn).await?.1;
        }
        let mut caught_up = state.caught_up.lock().unwrap_or_else(|e| e.into_inner());
        if caught_up.deletes == deletes {
            caught_up.at = Some(began);
        }
        Ok(())
    }

    /// The live buckets ([`LiveBucket`]), the deletion-log entries after the
    /// last one the view applied, and the history they belong to:
    /// `lua/catch_up.lua`.
    async fn read_catch_up(
        &self,
        conn: &mut Conn,
    ) -> Result<(Vec<LiveBucket>, Vec<Deleted>, Origin), IndexError> {
        let keys = &self.inner.keys;
        let after = self.view().deletions_read.clone();
        let retention_ms = self.inner.bucket_ms as u64 + self.inner.config.window_ms;
        let (live, deleted, token, replid) = CATCH_UP
            .key(keys.buckets())
            .arg(keys.prefix())
            .arg(after)
            .arg(DELETIONS_PER_READ)
            .arg(new_token())
            .arg(retention_ms)
            .invoke_async(conn)
            .await
            .map_err(backend)?;
        Ok((live, deleted, Origin { token, replid }))
    }

    /// How old the copy is: since the start of the last catch-up that
    /// completed (`None`: never caught up, or this process deleted an article
    /// since).
    fn copy_age(&self) -> Option<std::time::Duration> {
        let state = self.view_state();
        state
            .caught_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .at
            .map(|at| at.elapsed())
    }

    /// Fetch and file handles `from..=to` of each bucket in `wanted`, a chunk
    /// (an `a:` `LRANGE`) at a time, pipelined; the next pipeline is in
    /// flight while this one's articles are filed.
    async fn fetch_handles(
        &self,
        conn: &mut Conn,
        wanted: &[(String, u64, u64)],
    ) -> Result<(), IndexError> {
        let keys = &self.inner.keys;
        // (label, first handle, last handle) per chunk.
        let mut chunks: Vec<(&str, u64, u64)> = Vec::new();
        for (label, from, to) in wanted {
            let mut h = *from;
            while h <= *to {
                let last = (*to).min((h / HANDLES_PER_CHUNK + 1) * HANDLES_PER_CHUNK - 1);
                chunks.push((label, h, last));
                h = last + 1;
            }
        }
        let groups: Vec<&[(&str, u64, u64)]> = chunks.chunks(FETCH_CHUNKS).collect();
        let send = |group: &[(&str, u64, u64)]| {
            let mut pipe = redis::pipe();
            for &(label, first, last) in group {
                pipe.cmd("LRANGE")
                    .arg(keys.articles(label, first))
                    .arg(slot(first))
                    .arg(slot(last));
            }
            let mut conn = conn.clone();
            tokio::spawn(async move { pipe.query_async::<Vec<Vec<Vec<u8>>>>(&mut conn).await })
        };
        let started = Instant::now();
        let mut next = groups.first().map(|g| send(g));
        for (n, group) in groups.iter().enumerate() {
            let Some(in_flight) = next.take() else { break };
            let replies = in_flight
                .await
                .map_err(|e| IndexError::Backend(format!("fetching the view: {e}")))?
                .map_err(backend)?;
            next = groups.get(n + 1).map(|g| send(g));
            for (&(label, first, _), reply) in group.iter().zip(replies) {
                self.view()
                    .apply(label, first, &reply)
                    .map_err(|source| IndexError::Corrupt {
                        id: format!("{label}:{first}"),
                        source,
                    })?;
            }
            let done = (n + 1) * FETCH_CHUNKS;
            if chunks.len() > 10_000 && done % 10_000 < FETCH_CHUNKS {
                tracing::info!(
                    articles = self.view_articles(),
                    chunks = done.min(chunks.len()),
                    of = chunks.len(),
                    seconds = started.elapsed().as_secs_f64(),
                    "loading the view"
                );
            }
        }
        Ok(())
    }
}

/// A live bucket as `lua/catch_up.lua` answers it: label, start, handle
/// counter, shape bits.
impl redis::FromRedisValue for LiveBucket {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let (label, start, counter, shape) = redis::FromRedisValue::from_redis_value(v)?;
        Ok(LiveBucket {
            label,
            start,
            counter,
            shape,
        })
    }
}

/// A history token no other process proposes: 64 random bits (the standard
/// library's per-process random keys), the clock and the process id.
fn new_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_copy_is_brought_up_to_date_when_old_or_when_it_must() {
        let ms = |m| Some(Duration::from_millis(m));
        let insert = CheckKind::Insert;
        // Fresh: decide at once.
        assert!(!stale(ms(1), false, insert));
        // Old, never caught up, or with this process' own deletion since.
        assert!(stale(Some(CATCH_UP_EVERY), false, insert));
        assert!(stale(None, false, insert));
        // After a conflict, and for a query (no commit validates it): always.
        assert!(stale(ms(1), true, insert));
        assert!(stale(ms(1), false, CheckKind::Query));
    }
}
