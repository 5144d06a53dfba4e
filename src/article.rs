//! Articles as they arrive, and why one may be rejected.
//!
//! Every input path (JSONL for `scan`, stream entries for the worker) turns raw
//! bytes into an [`Article`] here or into a [`Rejection`] with a specific reason,
//! so a bad article never stops the others.

use serde::Deserialize;
use serde_json::Value;

/// Default cap on an article's text (bytes of UTF-8).
pub const DEFAULT_MAX_TEXT_BYTES: usize = 1 << 20;

/// A valid article.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Article {
    pub id: String,
    pub text: String,
    /// Accepted and carried along, not fingerprinted: headlines are what rewriters
    /// change first, and identical bodies under new headlines are still copies.
    pub title: Option<String>,
    /// Event time, unix milliseconds, when the producer gave one.
    pub ts_ms: Option<i64>,
}

/// Why an article was rejected. The `Display` text is the `reason` users see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("invalid UTF-8 at byte {valid_up_to}")]
    InvalidUtf8 { valid_up_to: usize },
    #[error("malformed JSON: {0}")]
    MalformedJson(String),
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("field `id` is empty")]
    EmptyId,
    #[error("field `id` is {len} characters, over the {limit}-character limit")]
    IdTooLong { len: usize, limit: usize },
    #[error("text is {len} bytes, over the {limit}-byte limit (max_text_bytes)")]
    TextTooLarge { len: usize, limit: usize },
    #[error("field `title` is {len} bytes, over the {limit}-byte limit")]
    TitleTooLarge { len: usize, limit: usize },
    #[error("field `ts` must be unix milliseconds (a non-negative integer), found {0:?}")]
    BadTimestamp(String),
    #[error("unknown op {0:?}: expected check, query or delete")]
    UnknownOp(String),
    #[error("text has no words after normalization (empty, markup-only or punctuation-only)")]
    NoContent,
    /// A stream field (the worker reads fields as bytes) is not UTF-8.
    #[error("field `{field}` is not valid UTF-8 (invalid at byte {valid_up_to})")]
    InvalidUtf8Field {
        field: &'static str,
        valid_up_to: usize,
    },
    /// The worker gave up on an entry that kept coming back (a worker died or
    /// failed on it each time): a poison-pill guard, not a judgement on the text.
    #[error("delivered {deliveries} times, over the limit of {limit} (max_deliveries)")]
    TooManyDeliveries { deliveries: u64, limit: u64 },
    /// The entry was deleted from the input stream before it was processed.
    #[error("the entry was deleted from the input stream before it was processed")]
    EntryDeleted,
    /// `ts` read in milliseconds is far off, but read in another unit it is
    /// inside the window: a producer's unit mistake.
    #[error("`ts` {ts} looks like {unit}: expected unix milliseconds")]
    TsWrongUnit { ts: i64, unit: &'static str },
    /// `ts` is later than the worker's clock by more than the allowed skew.
    #[error("`ts` {ts} is {ahead_s} s ahead of the worker's clock, over the {skew_s} s allowed (worker.max_clock_skew_ms): expected the event's unix milliseconds")]
    TsInFuture { ts: i64, ahead_s: i64, skew_s: u64 },
    /// `ts` is older than the window: nothing it could be a copy of is kept.
    #[error("`ts` {ts} is {age_h} h old, older than the {window_h} h window (decision.window_ms): expected the event's unix milliseconds")]
    TsTooOld { ts: i64, age_h: i64, window_h: u64 },
}

impl Rejection {
    /// A short stable code for metrics and tests (`reason` is for people).
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::InvalidUtf8 { .. } => "invalid_utf8",
            Rejection::MalformedJson(_) => "malformed_json",
            Rejection::NotAnObject(_) => "not_an_object",
            Rejection::MissingField(_) => "missing_field",
            Rejection::WrongType { .. } => "wrong_type",
            Rejection::EmptyId => "empty_id",
            Rejection::IdTooLong { .. } => "id_too_long",
            Rejection::TextTooLarge { .. } => "text_too_large",
            Rejection::TitleTooLarge { .. } => "title_too_large",
            Rejection::BadTimestamp(_) => "bad_timestamp",
            Rejection::UnknownOp(_) => "unknown_op",
            Rejection::NoContent => "no_content",
            Rejection::InvalidUtf8Field { .. } => "invalid_utf8",
            Rejection::TooManyDeliveries { .. } => "too_many_deliveries",
            Rejection::EntryDeleted => "entry_deleted",
            Rejection::TsWrongUnit { .. } => "ts_wrong_unit",
            Rejection::TsInFuture { .. } => "ts_in_future",
            Rejection::TsTooOld { .. } => "ts_too_old",
        }
    }
}

/// Ids of more characters than this are rejected: an id is stored with its
/// article, and named by every verdict linked to it. Characters, not bytes,
/// so that the contract's JSON Schema (`maxLength`) says exactly what the
/// worker takes.
pub const MAX_ID_CHARS: usize = 512;

/// The most bytes a valid id takes (4 per character in UTF-8): where a dead
/// letter or a verdict cuts an id that is too long.
pub const MAX_ID_BYTES: usize = 4 * MAX_ID_CHARS;

/// Titles longer than this are rejected: a title is carried along, never
/// fingerprinted, and no headline needs more.
pub const MAX_TITLE_BYTES: usize = 4096;

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Check an id: non-empty, not too long.
pub fn validate_id(id: &str) -> Result<(), Rejection> {
    if id.is_empty() {
        return Err(Rejection::EmptyId);
    }
    // No more than the limit's bytes can hold more characters than the limit.
    if id.len() > MAX_ID_CHARS {
        let len = id.chars().count();
        if len > MAX_ID_CHARS {
            return Err(Rejection::IdTooLong {
                len,
                limit: MAX_ID_CHARS,
            });
        }
    }
    Ok(())
}

/// Check a text's size.
pub fn validate_text(text: &str, max_text_bytes: usize) -> Result<(), Rejection> {
    if text.len() > max_text_bytes {
        return Err(Rejection::TextTooLarge {
            len: text.len(),
            limit: max_text_bytes,
        });
    }
    Ok(())
}

/// Check a title's size (in bytes, before decoding).
pub fn validate_title_len(len: usize) -> Result<(), Rejection> {
    if len > MAX_TITLE_BYTES {
        return Err(Rejection::TitleTooLarge {
            len,
            limit: MAX_TITLE_BYTES,
        });
    }
    Ok(())
}

/// Parse a `ts` given as text (stream fields are strings): a non-negative
/// decimal integer written plainly, as the contract's schema has it (no
/// sign, space or leading zero).
pub fn parse_ts(s: &str) -> Result<i64, Rejection> {
    let plain = s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    plain
        .then(|| s.parse::<i64>().ok())
        .flatten()
        .ok_or_else(|| Rejection::BadTimestamp(s.chars().take(40).collect()))
}

/// Which event times a worker accepts: from one window before its clock to
/// `max_skew_ms` after it. An article outside is rejected, never filed: one
/// from the future would give its keys (and the bucket registry) a lifetime
/// of however far ahead it is, one older than the window would be compared
/// with nothing and land in a bucket that may have expired already, so that
/// neither it nor its later copies would be found. Inside the bounds every
/// key expires at most one window, one bucket and the skew from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTimeBounds {
    /// The decision window (`decision.window_ms`).
    pub window_ms: u64,
    /// How far ahead of the worker's clock an event may be (producers' clocks
    /// disagree a little).
    pub max_skew_ms: u64,
}

impl EventTimeBounds {
    fn contains(&self, ts: i64, now_ms: i64) -> bool {
        ts >= now_ms.saturating_sub(self.window_ms as i64)
            && ts <= now_ms.saturating_add(self.max_skew_ms as i64)
    }

    /// Refuse a `ts` that is outside the bounds in milliseconds but inside
    /// them read as seconds, microseconds or nanoseconds: a producer's unit
    /// mistake. `scan`, which takes old articles too, applies this rule alone.
    pub fn check_unit(&self, ts: i64, now_ms: i64) -> Result<(), Rejection> {
        if self.contains(ts, now_ms) {
            return Ok(());
        }
        let units = [
            ("seconds", ts.checked_mul(1000)),
            ("microseconds", Some(ts / 1000)),
            ("nanoseconds", Some(ts / 1_000_000)),
        ];
        for (unit, as_ms) in units {
            if as_ms.is_some_and(|t| self.contains(t, now_ms)) {
                return Err(Rejection::TsWrongUnit { ts, unit });
            }
        }
        Ok(())
    }

    /// Accept `ts` (unix ms) at `now_ms`, or say specifically what is wrong,
    /// naming the unit when another one would fit.
    pub fn check(&self, ts: i64, now_ms: i64) -> Result<(), Rejection> {
        if self.contains(ts, now_ms) {
            return Ok(());
        }
        self.check_unit(ts, now_ms)?;
        if ts > now_ms {
            Err(Rejection::TsInFuture {
                ts,
                ahead_s: (ts - now_ms) / 1000,
                skew_s: self.max_skew_ms / 1000,
            })
        } else {
            Err(Rejection::TsTooOld {
                ts,
                age_h: (now_ms - ts) / 3_600_000,
                window_h: self.window_ms / 3_600_000,
            })
        }
    }
}

/// The id of a line that was rejected, if one can be read, so that the rejection
/// can name its article.
pub fn id_hint(line: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(line).ok()?;
    match value.get("id")? {
        Value::String(s) if validate_id(s).is_ok() => Some(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// Parse one JSONL line: `{"id", "text", ["title"], ["ts"]}`. `id` may be a string
/// or an integer; `ts` an integer (or a string of digits).
pub fn parse_json_line(line: &[u8], max_text_bytes: usize) -> Result<Article, Rejection> {
    // The fast validator first; std's says where invalid text goes wrong.
    let line = simdutf8::basic::from_utf8(line)
        .or_else(|_| std::str::from_utf8(line))
        .map_err(|e| Rejection::InvalidUtf8 {
            valid_up_to: e.valid_up_to(),
        })?;
    #[derive(Deserialize)]
    struct Wire {
        id: Option<Value>,
        text: Option<Value>,
        title: Option<Value>,
        ts: Option<Value>,
    }
    /// A line as valid articles have it: an object whose text and title are
    /// strings (or null), each field once. Read straight into the strings,
    /// the fields not named here skipped; any other line fails to read so,
    /// and is read as a whole value below, which names what is wrong.
    #[derive(Deserialize)]
    struct Usual {
        id: Option<Value>,
        text: Option<String>,
        title: Option<String>,
        ts: Option<Value>,
    }
    // (A struct reads from an array too: only an object is read so.)
    let usual = line
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Usual>(line).ok())
        .flatten();
    let wire = match usual {
        Some(u) => Wire {
            id: u.id,
            text: u.text.map(Value::String),
            title: u.title.map(Value::String),
            ts: u.ts,
        },
        None => {
            let value: Value =
                serde_json::from_str(line).map_err(|e| Rejection::MalformedJson(e.to_string()))?;
            if !value.is_object() {
                return Err(Rejection::NotAnObject(type_name(&value)));
            }
            serde_json::from_value(value).map_err(|e| Rejection::MalformedJson(e.to_string()))?
        }
    };
    let id = match wire.id {
        None | Some(Value::Null) => return Err(Rejection::MissingField("id")),
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(other) => {
            return Err(Rejection::WrongType {
                field: "id",
                expected: "a string or an integer",
                found: type_name(&other),
            })
        }
    };
    validate_id(&id)?;
    let text = match wire.text {
        None | Some(Value::Null) => return Err(Rejection::MissingField("text")),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(Rejection::WrongType {
                field: "text",
                expected: "a string",
                found: type_name(&other),
            })
        }
    };
    validate_text(&text, max_text_bytes)?;
    let title = match wire.title {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            validate_title_len(s.len())?;
            Some(s)
        }
        Some(other) => {
            return Err(Rejection::WrongType {
                field: "title",
                expected: "a string",
                found: type_name(&other),
            })
        }
    };
    let ts_ms = match wire.ts {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(
            n.as_i64()
                .filter(|&t| t >= 0)
                .ok_or_else(|| Rejection::BadTimestamp(n.to_string()))?,
        ),
        Some(Value::String(s)) => Some(parse_ts(&s)?),
        Some(other) => return Err(Rejection::BadTimestamp(other.to_string())),
    };
    Ok(Article {
        id,
        text,
        title,
        ts_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Article, Rejection> {
        parse_json_line(s.as_bytes(), 100)
    }

    #[test]
    fn valid_lines() {
        let a = parse(r#"{"id":"a1","text":"hello","title":"T","ts":1700000000000}"#).unwrap();
        assert_eq!(a.id, "a1");
        assert_eq!(a.title.as_deref(), Some("T"));
        assert_eq!(a.ts_ms, Some(1_700_000_000_000));
        assert_eq!(parse(r#"{"id":42,"text":"x","ts":"5"}"#).unwrap().id, "42");
        // A field given twice: the last one, as a JSON value reads it.
        let twice = parse(r#"{"id":"a","text":"one","text":"two","x":[{}]}"#).unwrap();
        assert_eq!(twice.text, "two");
        assert_eq!(
            parse(r#" {"id":"a","text":"x","title":null}"#)
                .unwrap()
                .title,
            None
        );
    }

    #[test]
    fn each_rejection_is_specific() {
        assert_eq!(parse("{not json").unwrap_err().code(), "malformed_json");
        assert_eq!(
            parse("[1,2]").unwrap_err(),
            Rejection::NotAnObject("an array")
        );
        assert_eq!(
            parse(r#"["a","x",null,null]"#).unwrap_err(),
            Rejection::NotAnObject("an array")
        );
        assert_eq!(
            parse(r#"{"text":"x"}"#).unwrap_err(),
            Rejection::MissingField("id")
        );
        assert_eq!(
            parse(r#"{"id":"a"}"#).unwrap_err(),
            Rejection::MissingField("text")
        );
        assert_eq!(
            parse(r#"{"id":"a","text":5}"#).unwrap_err().code(),
            "wrong_type"
        );
        assert_eq!(
            parse(r#"{"id":1.5,"text":"x"}"#).unwrap_err().code(),
            "wrong_type"
        );
        assert_eq!(
            parse(r#"{"id":"","text":"x"}"#).unwrap_err(),
            Rejection::EmptyId
        );
        assert_eq!(
            parse(r#"{"id":"a","text":"x","ts":-1}"#)
                .unwrap_err()
                .code(),
            "bad_timestamp"
        );
        assert_eq!(
            parse(r#"{"id":"a","text":"x","ts":"soon"}"#)
                .unwrap_err()
                .code(),
            "bad_timestamp"
        );
        let big = format!(r#"{{"id":"a","text":"{}"}}"#, "x".repeat(101));
        assert_eq!(
            parse(&big).unwrap_err(),
            Rejection::TextTooLarge {
                len: 101,
                limit: 100
            }
        );
        let title = format!(
            r#"{{"id":"a","text":"x","title":"{}"}}"#,
            "t".repeat(MAX_TITLE_BYTES + 1)
        );
        assert_eq!(parse(&title).unwrap_err().code(), "title_too_large");
        assert_eq!(id_hint(br#"{"id":"x","text":5}"#).as_deref(), Some("x"));
        assert_eq!(id_hint(b"{broken"), None);
        let err = parse_json_line(b"{\"id\":\"a\",\"text\":\"\xff\"}", 100).unwrap_err();
        assert_eq!(err, Rejection::InvalidUtf8 { valid_up_to: 18 });
        assert!(err.to_string().contains("byte 18"));
    }

    /// What the contract's schema says (`docs/schema/input.json`): an id of
    /// 1 to 512 characters whatever their bytes, a `ts` written plainly.
    #[test]
    fn ids_count_characters_and_ts_is_a_plain_decimal() {
        assert_eq!(validate_id(&"新".repeat(MAX_ID_CHARS)), Ok(()));
        assert_eq!(
            validate_id(&"新".repeat(MAX_ID_CHARS + 1)),
            Err(Rejection::IdTooLong {
                len: MAX_ID_CHARS + 1,
                limit: MAX_ID_CHARS
            })
        );
        assert!(validate_id(&"i".repeat(MAX_ID_CHARS + 1)).is_err());
        // The longest valid id, in 4-byte characters.
        let longest = "𝄞".repeat(MAX_ID_CHARS);
        assert_eq!(
            (validate_id(&longest), longest.len()),
            (Ok(()), MAX_ID_BYTES)
        );
        assert_eq!(parse_ts("1767225600000"), Ok(1_767_225_600_000));
        assert_eq!(parse_ts("0"), Ok(0));
        for bad in ["+1767225600000", " 5", "5 ", "007", "-1", "", "1e3", "٣"] {
            assert_eq!(
                parse_ts(bad).unwrap_err().code(),
                "bad_timestamp",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn event_times_outside_the_window_are_rejected_with_the_unit_that_fits() {
        let bounds = EventTimeBounds {
            window_ms: 48 * 3_600_000,
            max_skew_ms: 300_000,
        };
        let now = 1_764_115_200_000;
        for ok in [now, now - 47 * 3_600_000, now + 299_000] {
            assert_eq!(bounds.check(ok, now), Ok(()), "{ok}");
        }
        let seconds = bounds.check(now / 1000, now).unwrap_err();
        assert_eq!(seconds.code(), "ts_wrong_unit");
        assert_eq!(
            seconds.to_string(),
            "`ts` 1764115200 looks like seconds: expected unix milliseconds"
        );
        assert!(bounds
            .check(now * 1000, now)
            .unwrap_err()
            .to_string()
            .contains("microseconds"));
        assert!(bounds
            .check(now * 1_000_000, now)
            .unwrap_err()
            .to_string()
            .contains("nanoseconds"));
        // Year 3000, in milliseconds: no unit fits.
        let future = bounds.check(32_503_680_000_000, now).unwrap_err();
        assert_eq!(future.code(), "ts_in_future", "{future}");
        assert_eq!(
            bounds.check(now + 301_000, now).unwrap_err().code(),
            "ts_in_future"
        );
        let old = bounds.check(now - 49 * 3_600_000, now).unwrap_err();
        assert_eq!(old.code(), "ts_too_old");
        assert!(old.to_string().contains("49 h old"), "{old}");
        assert_eq!(bounds.check(0, now).unwrap_err().code(), "ts_too_old");
    }
}
