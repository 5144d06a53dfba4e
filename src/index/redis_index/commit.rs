//! The commit: what `lua/commit.lua` is told, and what its answer means.
//!
//! [`CommitArgs`] names every argument; [`CommitArgs::argv`] is the one place
//! that lays them out in the order the script reads them (a test pins it).

use super::codec::encode_recent;
use crate::fingerprint::Fingerprint;
use crate::index::meet;
use crate::index::IndexError;
use crate::keys::{id_hash_hex, FLAG_SET, LAYOUT};

/// One commit of an article decided from a worker's view.
#[derive(Debug, Clone)]
pub(super) struct CommitArgs<'a> {
    /// The namespace's key prefix.
    pub prefix: &'a str,
    pub id: &'a str,
    /// The article's bucket: label and start (unix ms).
    pub label: &'a str,
    pub start: i64,
    /// How long a bucket's keys live after it starts (bucket length + window).
    pub retention_ms: u64,
    pub fingerprint: &'a Fingerprint,
    /// The article's `a:` element ([`super::codec::encode_article`]): its
    /// packed fingerprint and meta, as the commit stores it and its receipt
    /// names it.
    pub article: Vec<u8>,
    /// Lookup sketch hashes per article (`decision.lookup_signatures`).
    pub lookup_signatures: usize,
    /// A duplicate's cluster root.
    pub root: Option<&'a str>,
    /// Shape bits of a new bucket with no older one to size it by.
    pub default_shape: u32,
    /// '1' per block position whose set may be empty in the own bucket (the
    /// insert then gives it its expiry); "" when unknown.
    pub empty_sets: &'a str,
    /// What to validate: the view's buckets, or nothing (a bulk preload).
    pub validate: Validate,
    /// The history token of the view that decided ([`super::view::Origin`]):
    /// under another one, the commit is refused and the view loaded again.
    pub token: &'a str,
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
    /// The view may hold this id in the bucket (its filter of id hashes
    /// says so): the commit looks it up there even if nothing was inserted
    /// since.
    pub may_hold_id: bool,
    /// '1' per list the check looked up that was full in the view (the
    /// content list, then each lookup sketch hash's): a full list is never
    /// appended to, so an insert meeting the article only through it
    /// changes nothing the check found. Worth: without the flags a
    /// boilerplate sketch hash shared by thousands of articles sent about
    /// 3 % of checks back to decide again for nothing, 1.03 commit calls
    /// per check instead of 1.00 (`simdedup bench --corpus
    /// ../shared/data/cctv-news-2022-2025.jsonl --no-progress`, 1 M and 10 M
    /// articles; 8bc07fa against its parent).
    pub full: String,
}

/// Per-key flags as the commit script reads them: one byte per key,
/// [`FLAG_SET`] where the flag is set, `'0'` where it is not.
pub(super) fn flags(set: impl IntoIterator<Item = bool>) -> String {
    set.into_iter()
        .map(|f| if f { char::from(FLAG_SET) } else { '0' })
        .collect()
}

impl CommitArgs<'_> {
    /// The script's ARGV, in its order (`lua/commit.lua` names them).
    pub fn argv(&self) -> Vec<Vec<u8>> {
        let fp = self.fingerprint;
        let keys = meet::CandidateKeys::of(fp, self.lookup_signatures);
        let expire_at = (self.start as u64 + self.retention_ms).div_ceil(1000);
        let root = self.root.unwrap_or("");
        let root_hash = if root.is_empty() {
            String::new()
        } else {
            id_hash_hex(root)
        };
        let text = |s: &str| s.as_bytes().to_vec();
        let mut argv = vec![
            text(self.prefix),
            text(self.id),
            text(&id_hash_hex(self.id)),
            text(self.label),
            text(&self.start.to_string()),
            text(&self.retention_ms.to_string()),
            text(&expire_at.to_string()),
            text(&format!("{:016x}", fp.simhash)),
            self.article.clone(),
            text(if keys.is_some() { "1" } else { "0" }),
            text(root),
            text(&root_hash),
            text(&self.default_shape.to_string()),
            text(&keys.map_or(0, |k| k.lookup.len()).to_string()),
            text(self.empty_sets),
            encode_recent(self.id, fp),
            text(self.token),
        ];
        match &self.validate {
            Validate::Nothing => argv.push(text("-1")),
            Validate::Since(buckets) => {
                for b in buckets {
                    argv.push(text(&b.label));
                    argv.push(if b.counter == 0 {
                        Vec::new()
                    } else {
                        text(&b.counter.to_string())
                    });
                    argv.push(text(if b.in_range { "1" } else { "0" }));
                    argv.push(text(&b.full));
                    argv.push(text(if b.may_hold_id { "1" } else { "0" }));
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
    /// The root the verdict names is no longer stored (deleted, or its
    /// bucket expired): decide again without it.
    RootGone,
    /// Something inserted since the view can change the decision, or Redis
    /// holds another history than the view (the reason).
    Retry(String),
}

/// Read commit.lua's reply; a bucket of another key layout is refused.
pub(super) fn parse_reply(reply: Vec<String>, prefix: &str) -> Result<Committed, IndexError> {
    let bad = || IndexError::Backend(format!("unexpected reply from commit.lua: {reply:?}"));
    let word = |i: usize| reply.get(i).map(String::as_str);
    Ok(match (word(0), word(1)) {
        (Some("ok"), Some(handle)) => Committed::Ok(handle.parse().map_err(|_| bad())?),
        (Some("expired"), _) => Committed::Expired,
        (Some("replay"), _) => Committed::Replay,
        (Some("root_gone"), _) => Committed::RootGone,
        (Some("retry"), why) => Committed::Retry(why.unwrap_or_default().to_owned()),
        (Some("layout"), label) => return Err(old_layout(prefix, label.unwrap_or_default())),
        _ => return Err(bad()),
    })
}

/// The refusal of a bucket written with another key layout (field `l` of its
/// `n:` hash, [`LAYOUT`]), which this version neither reads nor extends.
pub(super) fn old_layout(prefix: &str, label: &str) -> IndexError {
    IndexError::Config(format!(
        "bucket {label} ({prefix}n:{label}) was written with another key layout \
         (its field l is not {LAYOUT}); this version cannot share it: \
         use a new namespace, or stop the old workers and let the namespace's keys \
         expire (bucket length + window, 72 h by default) before starting these \
         (docs/operations.md, \"Upgrading a namespace\")"
    ))
}

#[cfg(test)]
mod tests {
    use super::super::codec::{encode_article, encode_fingerprint};
    use super::*;

    fn args<'a>(fp: &'a Fingerprint, validate: Validate) -> CommitArgs<'a> {
        CommitArgs {
            prefix: "simdedup:{news}:",
            id: "article-1",
            label: "2025010500",
            start: 1_736_035_200_000,
            retention_ms: 72 * 3_600_000,
            fingerprint: fp,
            article: encode_article(&encode_fingerprint(fp), "5|100|d|2|h|1|r"),
            lookup_signatures: 2,
            root: Some("r"),
            default_shape: 13,
            empty_sets: "0100",
            validate,
            token: "t0k",
        }
    }

    #[test]
    fn the_arguments_are_laid_out_as_commit_lua_reads_them() {
        let fp = Fingerprint {
            simhash: 0x0123_4567_89ab_cdef,
            content: 7,
            signatures: vec![3, 4, 5],
            words: 100,
            numbers: Vec::new(),
            ..Default::default()
        };
        let views = vec![
            BucketCheck {
                label: "2025010400".into(),
                counter: 0,
                in_range: true,
                full: "000".into(),
                may_hold_id: false,
            },
            BucketCheck {
                label: "2025010500".into(),
                counter: 41,
                in_range: true,
                full: "010".into(),
                may_hold_id: true,
            },
        ];
        let argv = args(&fp, Validate::Since(views)).argv();
        let text: Vec<String> = argv
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(
            &text[..8],
            [
                "simdedup:{news}:",
                "article-1",
                "897cad",
                "2025010500",
                "1736035200000",
                "259200000",
                "1736294400",
                "0123456789abcdef",
            ]
        );
        let mut article = vec![34, 0];
        article.extend(encode_fingerprint(&fp));
        article.extend(b"5|100|d|2|h|1|r");
        assert_eq!(argv[8], article);
        assert_eq!(
            &text[9..],
            [
                "1",
                "r",
                &id_hash_hex("r"),
                "13",
                "2",
                "0100",
                &String::from_utf8_lossy(&encode_recent("article-1", &fp)),
                "t0k",
                "2025010400",
                "",
                "1",
                "000",
                "0",
                "2025010500",
                "41",
                "1",
                "010",
                "1",
            ]
        );
        let preload = args(&fp, Validate::Nothing).argv();
        assert_eq!(preload.len(), 18);
        assert_eq!(preload[15], encode_recent("article-1", &fp));
        assert_eq!(preload[17], b"-1");
        // An empty fingerprint is not indexed and looks nothing up.
        let empty = Fingerprint {
            words: 0,
            ..fp.clone()
        };
        let argv = args(&empty, Validate::Nothing).argv();
        assert_eq!((&argv[9][..], &argv[13][..]), (&b"0"[..], &b"0"[..]));
    }

    #[test]
    fn an_old_layout_is_refused_with_what_to_do() {
        let reply = vec!["layout".to_owned(), "2025010500".to_owned()];
        let err = parse_reply(reply, "simdedup:{news}:").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, IndexError::Config(_)));
        assert!(
            text.contains("simdedup:{news}:n:2025010500") && text.contains("new namespace"),
            "{text}"
        );
    }
}
