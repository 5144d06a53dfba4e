//! Output entries: what the worker writes to `simdedup:{NS}:out` (and to the
//! dead-letter stream) for one input entry. Field names are the producer
//! contract of `docs/protocol.md`.

use crate::article::{Rejection, MAX_ID_BYTES, MAX_TITLE_BYTES};
use crate::decision::hundredths_text;
use crate::index::{Receipt, Verdict};
use crate::simhash::to_hex;

use super::ack::Emit;
use super::stream::RawEntry;

/// How an input entry ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// `check` or `query` decided.
    Decided {
        id: String,
        op: &'static str,
        verdict: Verdict,
        simhash: u64,
        replayed: bool,
        /// Where the index write the verdict rests on can be read back.
        receipt: Option<Receipt>,
    },
    /// `delete`: whether the id was in the index.
    Deleted {
        id: String,
        found: bool,
        /// Where the delete can be read back (`found` only).
        receipt: Option<Receipt>,
    },
    /// Rejected (and dead-lettered).
    Rejected { why: Rejection },
}

impl Resolution {
    /// The `verdict` field value.
    pub fn verdict(&self) -> &'static str {
        match self {
            Resolution::Decided { verdict, .. } if verdict.is_duplicate() => "duplicate",
            Resolution::Decided { .. } => "unique",
            Resolution::Deleted { found: true, .. } => "deleted",
            Resolution::Deleted { found: false, .. } => "not_found",
            Resolution::Rejected { .. } => "rejected",
        }
    }

    /// Where the index write the entry's output rests on can be read back.
    pub fn receipt(&self) -> Option<&Receipt> {
        match self {
            Resolution::Decided { receipt, .. } | Resolution::Deleted { receipt, .. } => {
                receipt.as_ref()
            }
            Resolution::Rejected { .. } => None,
        }
    }

    /// The deciding signal, for duplicates.
    pub fn signal(&self) -> Option<&'static str> {
        match self {
            Resolution::Decided { verdict, .. } => verdict.duplicate().map(|d| d.signal.as_str()),
            _ => None,
        }
    }
}

/// Original fields a dead letter keeps, at most; how many more there were is in
/// its `fields_dropped`. The ack-and-emit script passes a dead letter's values
/// to `XADD` in one Lua call, and Lua 5.1 takes at most about 8,000 values
/// there: an entry with thousands of fields would be acked, then fail to be
/// written, and end with no output at all.
pub const MAX_DEAD_LETTER_FIELDS: usize = 1000;

/// The most of any input field other than `id` and `title` (the text among
/// them) that a dead letter copies, and of any field's name. The id and the
/// title are copied up to their own limits ([`MAX_ID_BYTES`],
/// [`MAX_TITLE_BYTES`]): whole when valid. An entry's memory in the worker
/// ends with the entry; a dead letter stays in Redis until trimmed.
pub const MAX_COPIED_FIELD_BYTES: usize = 1024;

/// How much of field `name`'s value is copied.
fn copy_limit(name: &[u8]) -> usize {
    match name {
        b"id" => MAX_ID_BYTES,
        b"title" => MAX_TITLE_BYTES,
        _ => MAX_COPIED_FIELD_BYTES,
    }
}

/// The first `limit` bytes of `value`, and whether that is all of it.
fn prefix(value: &[u8], limit: usize) -> (&[u8], bool) {
    if value.len() > limit {
        (&value[..limit], true)
    } else {
        (value, false)
    }
}

/// What was cut, for the `truncated` field: `NAME:ORIGINAL_BYTES` per cut
/// field (its name as copied), comma-separated, in field order.
#[derive(Default)]
struct Cuts(Vec<u8>);

impl Cuts {
    fn note(&mut self, name: &[u8], len: usize) {
        if !self.0.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(name);
        self.0.push(b':');
        self.0.extend_from_slice(len.to_string().as_bytes());
    }
}

/// The contract version every output entry carries in its `v` field
/// (`docs/protocol.md`, "Contract version"; `docs/schema/`). Within a version
/// the entries change additively only: new fields, new `code` and `signal`
/// values. Removing or renaming a field or changing a value's meaning makes a
/// new version, so a consumer can refuse what it was not written for.
pub const CONTRACT_VERSION: &str = "1";

/// Build the output entry (and the dead letter of a rejection) for `entry`.
pub fn emit_for(entry: &RawEntry, resolution: &Resolution) -> Emit {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::with_capacity(10);
    let mut dead = None;
    match resolution {
        Resolution::Decided {
            id,
            op,
            verdict,
            simhash,
            replayed,
            ..
        } => {
            out.push(("id", id.clone().into_bytes()));
            out.push(("verdict", resolution.verdict().into()));
            if let Some(d) = verdict.duplicate() {
                out.push(("dup_of", d.dup_of.clone().into_bytes()));
                out.push(("distance", d.distance.to_string().into_bytes()));
                out.push(("signal", d.signal.as_str().into()));
                if let Some(overlap) = d.overlap {
                    out.push(("overlap", hundredths_text(overlap).into_bytes()));
                }
            }
            if let Some(expanded) = verdict.expands() {
                out.push(("expands", expanded.as_bytes().to_vec()));
            }
            out.push(("simhash", to_hex(*simhash).into_bytes()));
            out.push(("op", (*op).into()));
            if *replayed {
                out.push(("replayed", b"1".to_vec()));
            }
        }
        Resolution::Deleted { id, .. } => {
            out.push(("id", id.clone().into_bytes()));
            out.push(("verdict", resolution.verdict().into()));
            out.push(("op", b"delete".to_vec()));
        }
        Resolution::Rejected { why } => {
            // The id as far as it is readable (consumers decode output as
            // UTF-8; the dead letter keeps the original bytes), and at most
            // as long as a valid one.
            let mut id_cut = None;
            if let Some(id) = entry.field("id") {
                let (shown, cut) = prefix(id, MAX_ID_BYTES);
                out.push((
                    "id",
                    String::from_utf8_lossy(shown).into_owned().into_bytes(),
                ));
                id_cut = cut.then_some(id.len());
            }
            out.push(("verdict", b"rejected".to_vec()));
            out.push(("reason", why.to_string().into_bytes()));
            out.push(("code", why.code().into()));
            if let Some(len) = id_cut {
                out.push(("truncated", format!("id:{len}").into_bytes()));
            }
            dead = Some(dead_letter(entry, why));
        }
    }
    out.push(("source", entry.id.clone().into_bytes()));
    out.push(("v", CONTRACT_VERSION.into()));
    Emit {
        source: entry.id.clone(),
        output: out,
        dead,
        receipt: resolution.receipt().cloned(),
    }
}

/// The dead letter of a rejected entry: its original fields, each cut to its
/// bound (a rejected 20 MB text costs its dead letter 1 KiB), then why, how
/// often it was delivered and where it came from.
fn dead_letter(entry: &RawEntry, why: &Rejection) -> Vec<(Vec<u8>, Vec<u8>)> {
    let original = entry.fields.as_deref().unwrap_or_default();
    let kept = original.len().min(MAX_DEAD_LETTER_FIELDS);
    let dropped = original.len() - kept;
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(kept + 6);
    let mut cuts = Cuts::default();
    for (name, value) in &original[..kept] {
        let (name, name_cut) = prefix(name, MAX_COPIED_FIELD_BYTES);
        let (copied, value_cut) = prefix(value, copy_limit(name));
        if name_cut || value_cut {
            cuts.note(name, value.len());
        }
        fields.push((name.to_vec(), copied.to_vec()));
    }
    if dropped > 0 {
        fields.push((b"fields_dropped".to_vec(), dropped.to_string().into_bytes()));
    }
    if !cuts.0.is_empty() {
        fields.push((b"truncated".to_vec(), cuts.0));
    }
    fields.push((b"reason".to_vec(), why.to_string().into_bytes()));
    fields.push((b"code".to_vec(), why.code().into()));
    fields.push((
        b"deliveries".to_vec(),
        entry.deliveries.to_string().into_bytes(),
    ));
    fields.push((b"source".to_vec(), entry.id.clone().into_bytes()));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Signal;
    use crate::index::Duplicate;

    fn decided(overlap: Option<u8>) -> Vec<(&'static str, Vec<u8>)> {
        let entry = RawEntry {
            id: "1-0".into(),
            fields: Some(Vec::new()),
            deliveries: 1,
        };
        let verdict = Verdict::Duplicate(Duplicate {
            dup_of: "a".into(),
            matched: "a".into(),
            distance: 5,
            signal: Signal::Sentence,
            overlap,
        });
        let resolution = Resolution::Decided {
            id: "b".into(),
            op: "check",
            verdict,
            simhash: 7,
            replayed: false,
            receipt: None,
        };
        emit_for(&entry, &resolution).output
    }

    #[test]
    fn oversized_fields_are_copied_as_bounded_prefixes_with_their_length() {
        let big = vec![b'x'; 3 << 20];
        let long_id = vec![b'i'; MAX_ID_BYTES + 1];
        let long_title = vec![b't'; MAX_TITLE_BYTES + 7];
        let entry = RawEntry {
            id: "1-0".into(),
            fields: Some(vec![
                (b"id".to_vec(), long_id.clone()),
                (b"text".to_vec(), big.clone()),
                (b"title".to_vec(), long_title.clone()),
                (b"lang".to_vec(), b"en".to_vec()),
            ]),
            deliveries: 1,
        };
        let why = Rejection::IdTooLong {
            len: long_id.len(),
            limit: MAX_ID_BYTES,
        };
        let emit = emit_for(&entry, &Resolution::Rejected { why });
        let out = |name: &str| {
            emit.output
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(out("id").unwrap().len(), MAX_ID_BYTES);
        assert_eq!(
            out("truncated").unwrap(),
            format!("id:{}", MAX_ID_BYTES + 1).into_bytes()
        );
        let dead = emit.dead.unwrap();
        let field = |name: &[u8]| {
            dead.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(field(b"id").len(), MAX_ID_BYTES);
        assert_eq!(field(b"text").len(), MAX_COPIED_FIELD_BYTES);
        assert_eq!(field(b"title").len(), MAX_TITLE_BYTES);
        assert_eq!(field(b"lang"), b"en");
        assert_eq!(
            String::from_utf8(field(b"truncated")).unwrap(),
            format!(
                "id:{},text:{},title:{}",
                MAX_ID_BYTES + 1,
                3 << 20,
                MAX_TITLE_BYTES + 7
            )
        );
        let total: usize = dead.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(total < 8 * 1024, "a dead letter of {total} bytes");
    }

    #[test]
    fn fields_within_their_bounds_are_copied_whole_without_a_mark() {
        let entry = RawEntry {
            id: "1-0".into(),
            fields: Some(vec![
                (b"id".to_vec(), b"a".to_vec()),
                (b"text".to_vec(), vec![b'x'; MAX_COPIED_FIELD_BYTES]),
            ]),
            deliveries: 1,
        };
        let emit = emit_for(
            &entry,
            &Resolution::Rejected {
                why: Rejection::NoContent,
            },
        );
        assert!(!emit.output.iter().any(|(k, _)| *k == "truncated"));
        let dead = emit.dead.unwrap();
        assert!(!dead.iter().any(|(k, _)| k == b"truncated"));
        assert_eq!(dead[1].1.len(), MAX_COPIED_FIELD_BYTES);
    }

    #[test]
    fn a_duplicate_carries_its_overlap_as_a_share() {
        let field = |out: &[(&str, Vec<u8>)]| {
            out.iter()
                .find(|(k, _)| *k == "overlap")
                .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        };
        assert_eq!(field(&decided(Some(83))).as_deref(), Some("0.83"));
        assert_eq!(field(&decided(Some(100))).as_deref(), Some("1.00"));
        assert_eq!(field(&decided(Some(0))).as_deref(), Some("0.00"));
        // A stored verdict without one is written without the field.
        assert_eq!(field(&decided(None)), None);
    }

    #[test]
    fn a_unique_article_names_the_one_it_expands() {
        let entry = RawEntry {
            id: "1-0".into(),
            fields: Some(Vec::new()),
            deliveries: 1,
        };
        let emitted = |expands: Option<&str>| {
            let resolution = Resolution::Decided {
                id: "story".into(),
                op: "check",
                verdict: Verdict::Unique {
                    expands: expands.map(str::to_owned),
                },
                simhash: 7,
                replayed: false,
                receipt: None,
            };
            emit_for(&entry, &resolution)
                .output
                .into_iter()
                .find(|(k, _)| *k == "expands")
                .map(|(_, v)| String::from_utf8(v).unwrap())
        };
        assert_eq!(emitted(Some("flash")).as_deref(), Some("flash"));
        assert_eq!(emitted(None), None);
    }
}
