//! Stream entries: Redis replies → raw entries (fields kept as bytes) → requests
//! or specific rejections.
//!
//! Fields are read as bytes, never as `String`: a producer may send anything,
//! and a non-UTF-8 `text` must become a `rejected` verdict for that entry, not a
//! decode error that fails the whole batch.

use redis::Value;

use crate::article::{
    parse_ts, validate_id, validate_text, validate_title_len, Article, Rejection,
};

/// One input stream entry as Redis returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The stream entry id (`<ms>-<seq>`).
    pub id: String,
    /// Field/value pairs in order; `None` when the entry was deleted from the
    /// stream while still pending (Redis returns it with nil fields).
    pub fields: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// How many times the group delivered it (1 for a first delivery).
    pub deliveries: u64,
}

impl RawEntry {
    /// The value of field `name`. A field given more than once counts by its
    /// last value, as in `scan`'s JSON lines (`docs/protocol.md`).
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .as_ref()?
            .iter()
            .rfind(|(k, _)| k == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    /// The entry's own time (the `<ms>` part of its id): the default event
    /// time, when it is plausible (see the worker's `entry_time`).
    pub fn stream_time_ms(&self) -> Option<i64> {
        self.id.split('-').next()?.parse().ok()
    }
}

/// Add to `entries` (claimed entries) those of `deleted`: ids still pending
/// whose entries were deleted from the stream (XDEL, trimming), without
/// fields, so that they are answered `entry_deleted`; then put all in stream
/// order.
pub fn add_deleted(entries: &mut Vec<RawEntry>, deleted: impl IntoIterator<Item = String>) {
    entries.extend(deleted.into_iter().map(|id| RawEntry {
        id,
        fields: None,
        deliveries: 1,
    }));
    entries.sort_by_key(|e| super::order::StreamId::parse(&e.id));
}

/// What an input entry asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `op` = `check` (default): decide and record.
    Check(Article),
    /// `op` = `query`: decide without recording.
    Query(Article),
    /// `op` = `delete`: remove the article `id` from the index (`text` not needed).
    Delete { id: String },
}

impl Request {
    pub fn id(&self) -> &str {
        match self {
            Request::Check(a) | Request::Query(a) => &a.id,
            Request::Delete { id } => id,
        }
    }

    pub fn op(&self) -> &'static str {
        match self {
            Request::Check(_) => "check",
            Request::Query(_) => "query",
            Request::Delete { .. } => "delete",
        }
    }
}

fn utf8_field(entry: &RawEntry, name: &'static str) -> Result<Option<String>, Rejection> {
    match entry.field(name) {
        None => Ok(None),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Some(s.to_owned())),
            Err(e) => Err(Rejection::InvalidUtf8Field {
                field: name,
                valid_up_to: e.valid_up_to(),
            }),
        },
    }
}

/// Turn an entry's fields into a request, or say specifically why not.
///
/// Without a `ts` field the article's `ts_ms` is `None`: the worker then
/// takes the entry's stream time, if plausible, so that articles without one
/// are compared by when they were produced. Sizes are checked on the raw
/// bytes, before anything is decoded or copied.
pub fn parse_entry(entry: &RawEntry, max_text_bytes: usize) -> Result<Request, Rejection> {
    if entry.fields.is_none() {
        return Err(Rejection::EntryDeleted);
    }
    let op = match entry.field("op") {
        None => "check".to_owned(),
        Some(b) => String::from_utf8_lossy(b).into_owned(),
    };
    if !matches!(op.as_str(), "check" | "query" | "delete") {
        return Err(Rejection::UnknownOp(op.chars().take(40).collect()));
    }
    let id = utf8_field(entry, "id")?.ok_or(Rejection::MissingField("id"))?;
    validate_id(&id)?;
    if op == "delete" {
        return Ok(Request::Delete { id });
    }
    // Check the size before decoding: an oversized text is rejected without
    // copying it, and without caring whether it is UTF-8.
    let raw_text = entry.field("text").ok_or(Rejection::MissingField("text"))?;
    if raw_text.len() > max_text_bytes {
        return Err(Rejection::TextTooLarge {
            len: raw_text.len(),
            limit: max_text_bytes,
        });
    }
    if let Some(raw_title) = entry.field("title") {
        validate_title_len(raw_title.len())?;
    }
    let text = utf8_field(entry, "text")?.unwrap_or_default();
    validate_text(&text, max_text_bytes)?;
    let title = utf8_field(entry, "title")?;
    let ts_ms = match utf8_field(entry, "ts") {
        Ok(Some(ts)) => Some(parse_ts(&ts)?),
        Ok(None) => None,
        Err(_) => {
            return Err(Rejection::BadTimestamp(
                String::from_utf8_lossy(entry.field("ts").unwrap_or_default())
                    .chars()
                    .take(40)
                    .collect(),
            ))
        }
    };
    let article = Article {
        id,
        text,
        title,
        ts_ms,
    };
    Ok(if op == "query" {
        Request::Query(article)
    } else {
        Request::Check(article)
    })
}

/// Errors decoding a Redis reply we expected to be stream entries.
#[derive(Debug, thiserror::Error)]
#[error("unexpected Redis reply shape: {0}")]
pub struct ReplyError(pub String);

/// A reply of the wrong shape, as the Redis error the caller returns.
pub(super) fn reply_error(e: ReplyError) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "stream reply", e.0))
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    into_bytes(v.clone())
}

/// A reply value's bytes, moved out of it (a field may be megabytes).
fn into_bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

fn string(v: &Value) -> Option<String> {
    bytes(v).and_then(|b| String::from_utf8(b).ok())
}

/// The start of a reply shown in an error: never a whole entry.
fn shown(v: &Value) -> String {
    let mut text = format!("{v:?}");
    if text.len() > 200 {
        let mut end = 200;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// One `[id, [f, v, ...]]` element.
pub fn parse_raw_entry(v: &Value) -> Result<RawEntry, ReplyError> {
    take_raw_entry(v.clone())
}

/// [`parse_raw_entry`], moving the fields out of the reply rather than
/// copying them.
fn take_raw_entry(v: Value) -> Result<RawEntry, ReplyError> {
    let Value::Array(pair) = v else {
        return Err(ReplyError(format!("entry is not an array: {}", shown(&v))));
    };
    let mut pair = pair.into_iter();
    let id = pair
        .next()
        .and_then(into_bytes)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| ReplyError("entry without an id".into()))?;
    let fields = match pair.next() {
        None | Some(Value::Nil) => None,
        Some(Value::Array(kv)) => {
            let mut kv = kv.into_iter();
            let mut fields = Vec::with_capacity(kv.len() / 2);
            while let (Some(k), Some(v)) = (kv.next(), kv.next()) {
                if let (Some(k), Some(v)) = (into_bytes(k), into_bytes(v)) {
                    fields.push((k, v));
                }
            }
            Some(fields)
        }
        Some(Value::Map(kv)) => Some(
            kv.into_iter()
                .filter_map(|(k, v)| Some((into_bytes(k)?, into_bytes(v)?)))
                .collect(),
        ),
        Some(other) => return Err(ReplyError(format!("entry fields: {}", shown(&other)))),
    };
    Ok(RawEntry {
        id,
        fields,
        deliveries: 1,
    })
}

pub fn parse_entry_list(v: &Value) -> Result<Vec<RawEntry>, ReplyError> {
    take_entry_list(v.clone())
}

fn take_entry_list(v: Value) -> Result<Vec<RawEntry>, ReplyError> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(items) => items.into_iter().map(take_raw_entry).collect(),
        other => Err(ReplyError(format!("entry list: {}", shown(&other)))),
    }
}

/// An `XREADGROUP` reply for one stream (nil on timeout), taken apart: the
/// entries' fields are moved, not copied, so a batch is held once.
pub fn parse_xreadgroup(v: Value) -> Result<Vec<RawEntry>, ReplyError> {
    match v {
        Value::Nil => Ok(Vec::new()),
        // RESP2: [[stream, entries]]
        Value::Array(streams) => {
            let mut out = Vec::new();
            for s in streams {
                match s {
                    Value::Array(pair) if pair.len() == 2 => {
                        let entries = pair.into_iter().nth(1).expect("two elements");
                        out.extend(take_entry_list(entries)?)
                    }
                    other => {
                        return Err(ReplyError(format!("XREADGROUP stream: {}", shown(&other))))
                    }
                }
            }
            Ok(out)
        }
        // RESP3: {stream: entries}
        Value::Map(streams) => {
            let mut out = Vec::new();
            for (_, entries) in streams {
                out.extend(take_entry_list(entries)?);
            }
            Ok(out)
        }
        other => Err(ReplyError(format!("XREADGROUP: {}", shown(&other)))),
    }
}

/// An `XPENDING key group start end count [consumer]` reply: `(id, deliveries)`.
pub fn parse_xpending_range(v: &Value) -> Result<Vec<(String, u64)>, ReplyError> {
    let Value::Array(rows) = v else {
        return Err(ReplyError(format!("XPENDING: {v:?}")));
    };
    rows.iter()
        .map(|row| match row {
            Value::Array(r) if r.len() >= 4 => {
                let id = string(&r[0]).ok_or_else(|| ReplyError("XPENDING id".into()))?;
                let n = match &r[3] {
                    Value::Int(n) => *n as u64,
                    other => string(other)
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| ReplyError("XPENDING count".into()))?,
                };
                Ok((id, n))
            }
            other => Err(ReplyError(format!("XPENDING row: {other:?}"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&str, &[u8])]) -> RawEntry {
        RawEntry {
            id: "1700000000000-0".into(),
            fields: Some(
                fields
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec()))
                    .collect(),
            ),
            deliveries: 1,
        }
    }

    fn code(fields: &[(&str, &[u8])]) -> &'static str {
        parse_entry(&entry(fields), 10).unwrap_err().code()
    }

    #[test]
    fn valid_entries() {
        let r = parse_entry(&entry(&[("id", b"a"), ("text", b"hello")]), 10).unwrap();
        let Request::Check(a) = r else { panic!() };
        assert_eq!(a.ts_ms, None, "the worker chooses the default");
        let r = parse_entry(
            &entry(&[("id", b"a"), ("text", b"x"), ("ts", b"5"), ("op", b"query")]),
            10,
        )
        .unwrap();
        assert!(matches!(r, Request::Query(Article { ts_ms: Some(5), .. })));
        let r = parse_entry(&entry(&[("id", b"a"), ("op", b"delete")]), 10).unwrap();
        assert_eq!(r, Request::Delete { id: "a".into() });
    }

    #[test]
    fn a_field_given_twice_counts_by_its_last_value() {
        let fields: &[(&str, &[u8])] = &[
            ("id", b"first"),
            ("text", b"one"),
            ("id", b"last"),
            ("text", b"two"),
        ];
        let Request::Check(a) = parse_entry(&entry(fields), 10).unwrap() else {
            panic!()
        };
        assert_eq!((a.id.as_str(), a.text.as_str()), ("last", "two"));
    }

    #[test]
    fn an_oversized_title_has_its_own_code() {
        let title = vec![b'x'; crate::article::MAX_TITLE_BYTES + 1];
        let why = parse_entry(
            &entry(&[("id", b"a"), ("text", b"x"), ("title", &title)]),
            10,
        )
        .unwrap_err();
        assert_eq!(why.code(), "title_too_large", "{why}");
        let title = vec![b'x'; crate::article::MAX_TITLE_BYTES];
        assert!(parse_entry(
            &entry(&[("id", b"a"), ("text", b"x"), ("title", &title)]),
            10
        )
        .is_ok());
    }

    #[test]
    fn each_bad_input_has_its_reason() {
        assert_eq!(code(&[("text", b"x")]), "missing_field");
        assert_eq!(code(&[("id", b"a")]), "missing_field");
        assert_eq!(code(&[("id", b""), ("text", b"x")]), "empty_id");
        assert_eq!(code(&[("id", b"a"), ("text", b"\xff\xfe")]), "invalid_utf8");
        assert_eq!(code(&[("id", b"\xff"), ("text", b"x")]), "invalid_utf8");
        assert_eq!(
            code(&[("id", b"a"), ("text", b"0123456789x")]),
            "text_too_large"
        );
        assert_eq!(
            code(&[("id", b"a"), ("text", b"x"), ("op", b"merge")]),
            "unknown_op"
        );
        assert_eq!(
            code(&[("id", b"a"), ("text", b"x"), ("ts", b"-4")]),
            "bad_timestamp"
        );
        assert_eq!(
            code(&[("id", b"a"), ("text", b"x"), ("ts", b"\xff")]),
            "bad_timestamp"
        );
        let deleted = RawEntry {
            id: "1-0".into(),
            fields: None,
            deliveries: 2,
        };
        assert_eq!(
            parse_entry(&deleted, 10).unwrap_err().code(),
            "entry_deleted"
        );
    }

    #[test]
    fn parses_replies() {
        let e = Value::Array(vec![
            Value::BulkString(b"1-0".to_vec()),
            Value::Array(vec![
                Value::BulkString(b"id".to_vec()),
                Value::BulkString(b"\xff".to_vec()),
            ]),
        ]);
        let reply = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"s".to_vec()),
            Value::Array(vec![e]),
        ])]);
        let got = parse_xreadgroup(reply).unwrap();
        assert_eq!(got[0].field("id"), Some(&b"\xff"[..]));
        assert!(parse_xreadgroup(Value::Nil).unwrap().is_empty());
    }
}
