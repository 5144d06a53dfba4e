//! The commit: what `lua/commit.lua` is told, and what its answers mean.
//!
//! One script call commits a batch: [`Batch::header`], then each article's
//! [`CommitArgs::argv`]. These are the one place that lays the arguments out
//! in the order the script reads them (a test pins it).

use ::redis::Value;

use super::codec::{encode_fingerprint, simhash_member};
use super::{array, bad_reply, int, string};
use crate::fingerprint::Fingerprint;
use crate::index::meet;
use crate::index::IndexError;
use crate::keys::id_hash_hex;

/// What every article of a batch shares.
#[derive(Debug, Clone)]
pub(super) struct Batch<'a> {
    /// The namespace's key prefix.
    pub prefix: &'a str,
    /// How long a bucket's keys live after it starts (bucket length + window).
    pub retention_ms: u64,
}

impl Batch<'_> {
    /// The script's first arguments; the articles' follow.
    pub fn header(&self) -> Vec<Vec<u8>> {
        vec![
            self.prefix.as_bytes().to_vec(),
            self.retention_ms.to_string().into_bytes(),
        ]
    }
}

/// One article decided from a worker's view, to commit.
#[derive(Debug, Clone)]
pub(super) struct CommitArgs<'a> {
    pub id: &'a str,
    /// The article's bucket: label and start (unix ms).
    pub label: &'a str,
    pub start: i64,
    /// How long a bucket's keys live after it starts (bucket length + window).
    pub retention_ms: u64,
    pub fingerprint: &'a Fingerprint,
    /// The article's meta ([`super::codec::encode_meta`]).
    pub meta: &'a str,
    /// Lookup sketch hashes per article (`decision.lookup_signatures`).
    pub lookup_signatures: usize,
    /// A duplicate's cluster root, and the bucket to look for it in first.
    pub root: Option<(&'a str, Option<&'a str>)>,
    /// The shape bits the article's bucket gets if this commit opens it.
    pub new_shape: u32,
    /// '1' per block position whose set may be empty in the own bucket (the
    /// insert then gives it its expiry); "" when unknown.
    pub empty_sets: &'a str,
    /// What to validate: the view's buckets, or nothing (a bulk preload).
    pub validate: Validate,
}

/// What a commit validates.
#[derive(Debug, Clone)]
pub(super) enum Validate {
    /// Benchmarks only: store without any check ([`super::RedisIndex::preload`]).
    Nothing,
    /// Every live bucket the view holds, oldest first.
    Since(Vec<BucketCheck>),
}

/// One live bucket as the view that decided held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BucketCheck {
    pub label: String,
    /// Handles the view holds (`1..=counter`).
    pub counter: u64,
    /// Searched for candidates: inserts since are tested, not only the id.
    pub in_range: bool,
    /// '1' per list the check looked up that was full in the view (the
    /// content list, then each lookup sketch hash's): a full list is never
    /// appended to, so an insert meeting the article only through it
    /// changes nothing the check found.
    pub full: String,
}

impl CommitArgs<'_> {
    /// The article's part of the script's ARGV, in its order (`lua/commit.lua`
    /// names them).
    pub fn argv(&self) -> Vec<Vec<u8>> {
        let fp = self.fingerprint;
        let keys = meet::Keys::of(fp, self.lookup_signatures);
        let expire_at = (self.start as u64 + self.retention_ms).div_ceil(1000);
        let (root, hint) = self.root.unwrap_or(("", None));
        let root_hash = if root.is_empty() {
            String::new()
        } else {
            id_hash_hex(root)
        };
        let text = |s: &str| s.as_bytes().to_vec();
        let mut argv = vec![
            text(self.id),
            text(&id_hash_hex(self.id)),
            text(self.label),
            text(&self.start.to_string()),
            text(&expire_at.to_string()),
            text(&format!("{:016x}", fp.simhash)),
            text(&simhash_member(fp.simhash)),
            encode_fingerprint(fp),
            text(self.meta),
            text(if keys.is_some() { "1" } else { "0" }),
            text(root),
            text(&root_hash),
            text(hint.unwrap_or("")),
            text(&keys.map_or(0, |k| k.lookup.len()).to_string()),
            text(&self.new_shape.to_string()),
            text(self.empty_sets),
        ];
        match &self.validate {
            Validate::Nothing => argv.push(text("-1")),
            Validate::Since(buckets) => {
                argv.push(text(&buckets.len().to_string()));
                for b in buckets {
                    argv.push(text(&b.label));
                    argv.push(if b.counter == 0 {
                        Vec::new()
                    } else {
                        text(&b.counter.to_string())
                    });
                    argv.push(text(if b.in_range { "1" } else { "0" }));
                    argv.push(text(&b.full));
                }
            }
        }
        argv
    }
}

/// commit.lua's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Committed {
    /// Stored, under this handle of the article's bucket.
    Ok(u64),
    /// Past its retention: decided, stored nowhere.
    Expired,
    /// The id is stored already.
    Replay,
    /// Something inserted since the view can change the decision (the reason).
    Retry(String),
}

/// Read commit.lua's answers to a batch of `n` articles; a bucket of another
/// key layout is refused.
pub(super) fn parse_replies(
    reply: Value,
    prefix: &str,
    n: usize,
) -> Result<Vec<Result<Committed, IndexError>>, IndexError> {
    let replies = array(reply)?;
    if replies.len() != n {
        return Err(bad_reply(&format!(
            "{} answers to {n} commits",
            replies.len()
        )));
    }
    Ok(replies
        .into_iter()
        .map(|r| parse_reply(r, prefix))
        .collect())
}

fn parse_reply(reply: Value, prefix: &str) -> Result<Committed, IndexError> {
    let mut it = array(reply)?.into_iter();
    Ok(match string(it.next())?.as_str() {
        "ok" => Committed::Ok(
            u64::try_from(int(it.next())?).map_err(|_| bad_reply("a negative handle"))?,
        ),
        "expired" => Committed::Expired,
        "replay" => Committed::Replay,
        "retry" => Committed::Retry(string(it.next()).unwrap_or_default()),
        "layout" => return Err(old_layout(prefix, &string(it.next()).unwrap_or_default())),
        other => return Err(bad_reply(other)),
    })
}

/// The refusal of a bucket written with the lookup lists (`h:`, `c:`, `s:`)
/// of an earlier key layout, which this version neither reads nor writes.
pub(super) fn old_layout(prefix: &str, label: &str) -> IndexError {
    IndexError::Config(format!(
        "bucket {label} ({prefix}n:{label}) was written with an earlier key layout \
         (lookup lists h:/c:/s:, no field l = 0); this version cannot share it: \
         use a new namespace, or stop the old workers and let the namespace's keys \
         expire (bucket length + window, 72 h by default) before starting these \
         (docs/operations.md, \"Upgrading a namespace\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(fp: &'a Fingerprint, validate: Validate) -> CommitArgs<'a> {
        CommitArgs {
            id: "article-1",
            label: "2025010500",
            start: 1_736_035_200_000,
            retention_ms: 72 * 3_600_000,
            fingerprint: fp,
            meta: "5|100|d|2|h|1|r",
            lookup_signatures: 2,
            root: Some(("r", Some("2025010400"))),
            new_shape: 12,
            empty_sets: "0100",
            validate,
        }
    }

    fn text(argv: &[Vec<u8>]) -> Vec<String> {
        argv.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn the_arguments_are_laid_out_as_commit_lua_reads_them() {
        let batch = Batch {
            prefix: "simdedup:{news}:",
            retention_ms: 72 * 3_600_000,
        };
        assert_eq!(text(&batch.header()), ["simdedup:{news}:", "259200000"]);
        let fp = Fingerprint {
            simhash: 0x0123_4567_89ab_cdef,
            content: 7,
            signatures: vec![3, 4, 5],
            words: 100,
            numbers: Vec::new(),
        };
        let views = vec![
            BucketCheck {
                label: "2025010400".into(),
                counter: 0,
                in_range: true,
                full: "000".into(),
            },
            BucketCheck {
                label: "2025010500".into(),
                counter: 41,
                in_range: true,
                full: "010".into(),
            },
        ];
        let argv = args(&fp, Validate::Since(views)).argv();
        let text = text(&argv);
        assert_eq!(
            &text[..7],
            [
                "article-1",
                "897cad",
                "2025010500",
                "1736035200000",
                "1736294400",
                "0123456789abcdef",
                "81985529216486895",
            ]
        );
        assert_eq!(argv[7], encode_fingerprint(&fp));
        assert_eq!(
            &text[8..],
            [
                "5|100|d|2|h|1|r",
                "1",
                "r",
                &id_hash_hex("r"),
                "2025010400",
                "2",
                "12",
                "0100",
                "2",
                "2025010400",
                "",
                "1",
                "000",
                "2025010500",
                "41",
                "1",
                "010",
            ]
        );
        let preload = args(&fp, Validate::Nothing).argv();
        assert_eq!(preload.len(), 17);
        assert_eq!(preload[16], b"-1");
        // An empty fingerprint is not indexed and looks nothing up.
        let empty = Fingerprint {
            words: 0,
            ..fp.clone()
        };
        let argv = args(&empty, Validate::Nothing).argv();
        assert_eq!((&argv[9][..], &argv[13][..]), (&b"0"[..], &b"0"[..]));
    }

    #[test]
    fn each_answer_of_a_batch_is_read_and_an_old_layout_is_refused() {
        let answer = |words: &[&str]| {
            Value::Array(
                words
                    .iter()
                    .map(|w| Value::BulkString(w.as_bytes().to_vec()))
                    .collect(),
            )
        };
        let reply = Value::Array(vec![
            answer(&["ok", "42"]),
            answer(&["retry", "block"]),
            answer(&["layout", "2025010500"]),
        ]);
        let mut answers = parse_replies(reply.clone(), "simdedup:{news}:", 3)
            .unwrap()
            .into_iter();
        assert_eq!(answers.next().unwrap().unwrap(), Committed::Ok(42));
        assert_eq!(
            answers.next().unwrap().unwrap(),
            Committed::Retry("block".into())
        );
        let err = answers.next().unwrap().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, IndexError::Config(_)));
        assert!(
            text.contains("simdedup:{news}:n:2025010500") && text.contains("new namespace"),
            "{text}"
        );
        assert!(parse_replies(reply, "simdedup:{news}:", 2).is_err());
    }
}
