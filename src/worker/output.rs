//! Output entries: what the worker writes to `simdedup:{NS}:out` (and to the
//! dead-letter stream) for one input entry. Field names are the producer
//! contract of `docs/protocol.md`.

use crate::article::Rejection;
use crate::decision::hundredths_text;
use crate::index::Verdict;
use crate::simhash::to_hex;

use super::commit::Emit;
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
    },
    /// `delete`: whether the id was in the index.
    Deleted { id: String, found: bool },
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
            // The id as far as it is readable: consumers decode output as UTF-8;
            // the dead letter keeps the original bytes.
            if let Some(id) = entry.field("id") {
                out.push(("id", String::from_utf8_lossy(id).into_owned().into_bytes()));
            }
            out.push(("verdict", b"rejected".to_vec()));
            out.push(("reason", why.to_string().into_bytes()));
            out.push(("code", why.code().into()));
            let mut fields: Vec<(Vec<u8>, Vec<u8>)> = entry.fields.clone().unwrap_or_default();
            let dropped = fields.len().saturating_sub(MAX_DEAD_LETTER_FIELDS);
            fields.truncate(MAX_DEAD_LETTER_FIELDS);
            if dropped > 0 {
                fields.push((b"fields_dropped".to_vec(), dropped.to_string().into_bytes()));
            }
            fields.push((b"reason".to_vec(), why.to_string().into_bytes()));
            fields.push((b"code".to_vec(), why.code().into()));
            fields.push((
                b"deliveries".to_vec(),
                entry.deliveries.to_string().into_bytes(),
            ));
            fields.push((b"source".to_vec(), entry.id.clone().into_bytes()));
            dead = Some(fields);
        }
    }
    out.push(("source", entry.id.clone().into_bytes()));
    out.push(("v", CONTRACT_VERSION.into()));
    Emit {
        source: entry.id.clone(),
        output: out,
        dead,
    }
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
        };
        emit_for(&entry, &resolution).output
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
