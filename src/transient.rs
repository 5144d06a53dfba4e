//! Transient Redis errors, and how a caller waits them out.
//!
//! A transient error says the server, or the way to it, cannot serve *now* but
//! will: it is full (`OOM` under `maxmemory noeviction`), loading its data
//! after a restart, busy with a script, failing over (`READONLY`, `MASTERDOWN`,
//! `TRYAGAIN`, `CLUSTERDOWN`), or unreachable (refused, reset, timed out). It is
//! never the fault of the article being worked on: the caller keeps what it
//! holds and retries the same call after a [`Backoff`]. Every other error (a
//! script error, a reply of the wrong shape, a refused permission) is a fault
//! of the call itself, and retrying it unchanged would only repeat it.
//!
//! This is the one place that draws the line: the index maps transient errors
//! to `IndexError::Unavailable`, the worker to "not ready, retrying".

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use redis::RedisError;

/// Error codes (the first word of the reply) of a server that cannot serve now
/// but will, without anything about the command changing.
pub const TRANSIENT_CODES: [&str; 7] = [
    "OOM",
    "LOADING",
    "BUSY",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
];

/// Whether `e` is transient: retry the same call later, and blame nobody.
pub fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || transient_code(e).is_some()
}

/// The first of the server's answers in `e` that `f` picks, given each
/// answer's code and detail: `e`'s own, then, for a pipeline or transaction
/// that failed, each failed command's. redis-rs gives a failed pipeline the
/// code of its first failed command only where it knows the code (`LOADING`
/// yes, `BUSY` no), so the commands' own answers are read.
fn find_answer<T>(e: &RedisError, f: impl Fn(&str, &str) -> Option<T>) -> Option<T> {
    let own = e.code().and_then(|c| f(c, e.detail().unwrap_or("")));
    own.or_else(|| {
        e.clone()
            .into_server_errors()?
            .iter()
            .find_map(|(_, s)| f(s.code(), s.details().unwrap_or("")))
    })
}

/// The transient code among the server's answers in `e`, if any.
fn transient_code(e: &RedisError) -> Option<&'static str> {
    find_answer(e, |code, _| {
        TRANSIENT_CODES.into_iter().find(|c| *c == code)
    })
}

/// Whether `e` is a command the user's ACL refuses: `NOPERM`, or the error
/// a script gets when it calls such a command ("The user executing the
/// script can't run this command"), alone or in a pipeline. It stays
/// refused until an operator changes the ACL: never transient.
pub fn is_refused_by_acl(e: &RedisError) -> bool {
    find_answer(e, |code, detail| {
        (code == "NOPERM"
            || detail.contains("The user executing the script can't run this command"))
        .then_some(())
    })
    .is_some()
}

/// What to do about an ACL refusal: the user's role and where its ACL is.
/// Added where an error is shown (`cli::advice`).
pub const ACL_ADVICE: &str =
    "give the user the ACL of its role in docs/redis-keys.md (\"ACL per role\")";

/// A short name for the kind of a transient error, for `/readyz` and logs:
/// the server's code (`OOM`, `LOADING`, ...) or `unreachable`.
pub fn reason(e: &RedisError) -> &'static str {
    transient_code(e).unwrap_or("unreachable")
}

/// Delays between attempts of one call: exponential from 25 ms up to a bound,
/// with full jitter (so workers that failed together do not retry together),
/// never giving up. Make one per call being retried.
#[derive(Debug)]
pub struct Backoff(ExponentialBackoff);

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        let max = max.max(Duration::from_millis(1));
        Backoff(
            ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(25).min(max))
                .with_max_delay(max)
                .with_jitter()
                .without_max_times()
                .build(),
        )
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.0.next().unwrap_or(Duration::from_millis(25))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::ErrorKind;

    fn server_error(code: &str) -> RedisError {
        redis::parse_redis_value(format!("-{code} some detail\r\n").as_bytes())
            .and_then(|v| v.extract_error())
            .expect_err("an error reply")
    }

    /// The codes are written out here, not taken from `TRANSIENT_CODES`: a
    /// code dropped from the list fails this test.
    #[test]
    fn the_server_cannot_serve_now_is_transient() {
        for code in [
            "OOM",
            "LOADING",
            "BUSY",
            "READONLY",
            "MASTERDOWN",
            "TRYAGAIN",
            "CLUSTERDOWN",
        ] {
            let e = server_error(code);
            assert!(is_transient(&e), "{code}: {e:?}");
            assert_eq!(reason(&e), code);
        }
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
        ] {
            let io = RedisError::from(std::io::Error::from(kind));
            assert!(is_transient(&io), "{kind:?}");
            assert_eq!(reason(&io), "unreachable");
        }
    }

    /// A refused permission (`NOPERM`, an ACL that lacks a command or a key)
    /// stays refused until an operator changes the ACL: retrying it would
    /// hide the misconfiguration behind "not ready" forever.
    #[test]
    fn faults_of_the_call_are_not() {
        for code in [
            "ERR",
            "WRONGTYPE",
            "NOSCRIPT",
            "NOPERM",
            "NOGROUP",
            "NOAUTH",
        ] {
            assert!(!is_transient(&server_error(code)), "{code}");
        }
        let shape = RedisError::from((ErrorKind::UnexpectedReturnType, "reply"));
        assert!(!is_transient(&shape));
    }

    /// A connection that answers every command with `reply`.
    struct Answers(&'static [u8]);

    impl redis::ConnectionLike for Answers {
        fn req_packed_command(&mut self, _: &[u8]) -> redis::RedisResult<redis::Value> {
            redis::parse_redis_value(self.0)
        }
        fn req_packed_commands(
            &mut self,
            _: &[u8],
            _: usize,
            count: usize,
        ) -> redis::RedisResult<Vec<redis::Value>> {
            (0..count)
                .map(|_| redis::parse_redis_value(self.0))
                .collect()
        }
        fn get_db(&self) -> i64 {
            0
        }
        fn check_connection(&mut self) -> bool {
            true
        }
        fn is_open(&self) -> bool {
            true
        }
    }

    /// The error of a one-command pipeline whose command got `reply`.
    fn pipeline_error(reply: &'static [u8]) -> RedisError {
        redis::pipe()
            .cmd("GET")
            .arg("k")
            .query::<redis::Value>(&mut Answers(reply))
            .expect_err("an error reply")
    }

    /// A pipeline whose command the server answered `BUSY` (a script
    /// running) is transient like the command alone, and one refused by the
    /// ACL is refused: redis-rs reports either under no code of its own.
    #[test]
    fn a_pipeline_that_met_a_transient_error_is_transient() {
        let e = pipeline_error(b"-BUSY Redis is busy running a script.\r\n");
        assert!(is_transient(&e) && reason(&e) == "BUSY", "{e:?}");
        let e = pipeline_error(b"-WRONGTYPE Operation against a key\r\n");
        assert!(!is_transient(&e) && !is_refused_by_acl(&e), "{e:?}");
        let e =
            pipeline_error(b"-NOPERM this user has no permissions to run the 'get' command\r\n");
        assert!(is_refused_by_acl(&e) && !is_transient(&e), "{e:?}");
    }

    /// What Redis 7.0 answers when the ACL refuses a command, called
    /// directly or from a script.
    #[test]
    fn an_acl_refusal_is_told_apart() {
        let direct = server_error("NOPERM");
        let scripted = redis::parse_redis_value(
            b"-ERR The user executing the script can't run this command or subcommand script: 702b, on @user_script:165.\r\n",
        )
        .and_then(|v| v.extract_error())
        .expect_err("an error reply");
        for e in [&direct, &scripted] {
            assert!(is_refused_by_acl(e) && !is_transient(e), "{e:?}");
        }
        assert!(!is_refused_by_acl(&server_error("ERR")));
        assert!(!is_refused_by_acl(&server_error("NOAUTH")));
    }

    /// Delays grow from 25 ms to the bound and stay there, with jitter of up
    /// to one more delay: never the end of the sequence (an exhausted
    /// backoff would fall back to 25 ms), never above twice the bound.
    #[test]
    fn backoff_is_bounded_and_never_gives_up() {
        let max = Duration::from_millis(200);
        let mut b = Backoff::new(max);
        let delays: Vec<Duration> = (0..1000).map(|_| b.next_delay()).collect();
        for (n, d) in delays.iter().enumerate() {
            assert!(*d <= 2 * max, "delay {n}: {d:?}");
            // 25, 50, 100 ms, then the bound.
            if n >= 3 {
                assert!(*d >= max, "delay {n}: {d:?} (given up?)");
            }
        }
        assert!(delays[0] >= Duration::from_millis(25) && delays[0] < Duration::from_millis(50));
    }
}
