//! How an article is packed into Redis values — the ONE place that knows it.
//!
//! If [`Fingerprint`] or the verdict gains a field, change the pairs here (and
//! their tests); nothing else reads or writes these bytes.
//!
//! - **article** (`a:` lists, one element per handle): `packed length u16 LE ·
//!   packed fingerprint · meta` ([`encode_article`]); an empty element is a
//!   deleted article (or handle 0, which no article has).
//! - **fingerprint** (binary, little-endian): `simhash u64 · content
//!   u64 · signatures u32 × n · numbers u16 × m · m u8`, 17 + 4n + 2m bytes (81
//!   for the default 12-hash sketch and 8-hash number sketch). The clause sketch
//!   follows the content hash directly because `lua/commit.lua` reads its
//!   lookup hashes at byte 17 on; the number count comes last so both sketches
//!   can vary in length. The timestamp and word count live in the meta.
//! - **recent record** (`r:` strings, binary, [`RECENT_STRIDE`] bytes):
//!   `1 + n u8` (n sketch hashes; 255 when the sketch has more than
//!   [`RECENT_SKETCH`]: the record holds the first ones, and `lua/commit.lua`
//!   reads the packed fingerprint) · the top 24 bits of the id's hash, big-endian ·
//!   `simhash u64 · content u64 · signatures u32 × n` little-endian as in the
//!   fingerprint · zeros. What a commit reads back of an article inserted
//!   since a worker's view: the keys it meets others through. A deleted
//!   article's first byte is 0.
//! - **meta** (text): `<ts offset>|<words>|u|<id>` for a kept
//!   article; for a duplicate `<ts offset>|<words>|d|<distance>|<signal>|<len
//!   dup_of>|<dup_of><id>` when it matched its cluster's root itself, else
//!   `…|D|<distance>|<signal>|<len matched>|<len dup_of>|<matched><dup_of><id>`
//!   (ts offset = ms since the bucket start; signal `e`xact, `h` SimHash
//!   (Hamming), `s`entence, followed by the estimated overlap in hundredths,
//!   `h83`, `e100`; lengths in bytes, so ids may contain any character). A
//!   signal letter without digits reads as a verdict whose overlap is not
//!   known.
//! - **ids value** (`i:` hash, text): `<simhash, 16 hex>:<handle>`. The Lua
//!   scripts read the handle at byte 18 of it: keep the SimHash at 16 digits.
//! - **SimHash as a set member** (`b:` sets): the SimHash as a signed 64-bit
//!   decimal ([`simhash_member`]), which Redis stores as a plain integer (intset:
//!   8 bytes).

use crate::decision::Signal;
use crate::fingerprint::Fingerprint;
use crate::index::{Duplicate, Verdict};
use crate::keys::{id_hash, RECENT_SKETCH, RECENT_STRIDE};

const FIXED: usize = 16;

/// Pack a fingerprint's hashes (not its word count: see [`encode_meta`]).
pub fn encode_fingerprint(fp: &Fingerprint) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED + 4 * fp.signatures.len() + 2 * fp.numbers.len() + 1);
    out.extend_from_slice(&fp.simhash.to_le_bytes());
    out.extend_from_slice(&fp.content.to_le_bytes());
    for s in &fp.signatures {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for n in &fp.numbers {
        out.extend_from_slice(&n.to_le_bytes());
    }
    // The number sketch holds at most NUMBER_SKETCH (8) hashes.
    out.push(u8::try_from(fp.numbers.len()).expect("number sketch fits a byte"));
    out
}

/// The recent record of article `id` (see the module's notes).
pub fn encode_recent(id: &str, fp: &Fingerprint) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECENT_STRIDE);
    let n = fp.signatures.len();
    out.push(if n <= RECENT_SKETCH { 1 + n as u8 } else { 255 });
    out.extend_from_slice(&id_hash(id).to_be_bytes()[..3]);
    out.extend_from_slice(&fp.simhash.to_le_bytes());
    out.extend_from_slice(&fp.content.to_le_bytes());
    for s in fp.signatures.iter().take(RECENT_SKETCH) {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.resize(RECENT_STRIDE, 0);
    out
}

/// A packed fingerprint's parts, read in place: SimHash, content hash, and the
/// bytes of the clause sketch (u32 LE each) and of the number sketch (u16 LE
/// each).
pub(crate) fn packed_parts(bytes: &[u8]) -> Option<(u64, u64, &[u8], &[u8])> {
    let (&m, body) = bytes.split_last()?;
    let end = body
        .len()
        .checked_sub(2 * usize::from(m))
        .filter(|&end| end >= FIXED && (end - FIXED) % 4 == 0)?;
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
    Some((u64_at(0), u64_at(8), &body[FIXED..end], &body[end..]))
}

pub(crate) fn u32s(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

pub(crate) fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes(c.try_into().expect("2 bytes")))
}

/// Unpack what [`encode_fingerprint`] packed; `words` comes from the meta.
pub fn decode_fingerprint(bytes: &[u8], words: u32) -> Result<Fingerprint, String> {
    let (simhash, content, sketch, numbers) = packed_parts(bytes)
        .ok_or_else(|| format!("packed fingerprint has {} bytes", bytes.len()))?;
    Ok(Fingerprint {
        simhash,
        content,
        words,
        signatures: u32s(sketch).collect(),
        numbers: u16s(numbers).collect(),
    })
}

/// What the meta of a stored article says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub id: String,
    pub verdict: Verdict,
    /// Milliseconds since the start of the article's bucket.
    pub ts_offset: u32,
    pub words: u32,
}

/// Text of an article's time, word count, id and verdict.
pub fn encode_meta(id: &str, verdict: &Verdict, ts_offset: u32, words: u32) -> String {
    match verdict {
        Verdict::Unique => format!("{ts_offset}|{words}|u|{id}"),
        // The usual duplicate matched its cluster's root itself: name it once.
        Verdict::Duplicate(d) if d.matched == d.dup_of => format!(
            "{ts_offset}|{words}|d|{}|{}|{}|{}{id}",
            d.distance,
            signal_field(d),
            d.dup_of.len(),
            d.dup_of
        ),
        Verdict::Duplicate(d) => format!(
            "{ts_offset}|{words}|D|{}|{}|{}|{}|{}{}{id}",
            d.distance,
            signal_field(d),
            d.matched.len(),
            d.dup_of.len(),
            d.matched,
            d.dup_of
        ),
    }
}

/// One letter per signal keeps a duplicate's meta within Redis's 64-byte
/// listpack value limit for ids of up to ~20 characters.
fn signal_letter(signal: Signal) -> char {
    match signal {
        Signal::Exact => 'e',
        Signal::Simhash => 'h',
        Signal::Sentence => 's',
    }
}

/// The signal letter and the overlap's hundredths, when known: `h83`.
fn signal_field(d: &Duplicate) -> String {
    let mut field = signal_letter(d.signal).to_string();
    if let Some(overlap) = d.overlap {
        field.push_str(&overlap.to_string());
    }
    field
}

/// Read what [`signal_field`] wrote.
fn read_signal_field(field: &str) -> Option<(Signal, Option<u8>)> {
    let (letter, digits) = field.split_at_checked(1)?;
    let signal = match letter {
        "e" => Signal::Exact,
        "h" => Signal::Simhash,
        "s" => Signal::Sentence,
        _ => return None,
    };
    let overlap = match digits {
        "" => None,
        d if d.bytes().all(|b| b.is_ascii_digit()) => Some(d.parse().ok().filter(|&h| h <= 100)?),
        _ => return None,
    };
    Some((signal, overlap))
}

/// Unpack what [`encode_meta`] wrote.
pub fn decode_meta(bytes: &[u8]) -> Result<Meta, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "meta is not UTF-8".to_owned())?;
    let mut head = text.splitn(3, '|');
    let mut num = || -> Result<u32, String> {
        head.next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("meta {text:?} has no time and word count"))
    };
    let (ts_offset, words) = (num()?, num()?);
    let rest = head
        .next()
        .ok_or_else(|| format!("meta {text:?} is short"))?;
    let meta = |id: &str, verdict| Meta {
        id: id.to_owned(),
        verdict,
        ts_offset,
        words,
    };
    if let Some(id) = rest.strip_prefix("u|") {
        return Ok(meta(id, Verdict::Unique));
    }
    let (same, rest) = if let Some(r) = rest.strip_prefix("d|") {
        (true, r)
    } else if let Some(r) = rest.strip_prefix("D|") {
        (false, r)
    } else {
        return Err(format!("meta {text:?} has no kind"));
    };
    let mut parts = rest.splitn(if same { 4 } else { 5 }, '|');
    let mut next = || {
        parts
            .next()
            .ok_or_else(|| format!("meta {text:?} is short"))
    };
    let distance: u32 = next()?
        .parse()
        .map_err(|_| format!("bad distance in {text:?}"))?;
    let (signal, overlap) =
        read_signal_field(next()?).ok_or_else(|| format!("bad signal in {text:?}"))?;
    let mut len = || -> Result<usize, String> {
        next()?
            .parse()
            .map_err(|_| format!("bad length in {text:?}"))
    };
    let matched_len = if same { None } else { Some(len()?) };
    let root_len = len()?;
    let ids = next()?;
    fn split(s: &str, n: usize) -> Option<(&str, &str)> {
        s.get(..n).zip(s.get(n..))
    }
    let bad = || format!("bad ids in {text:?}");
    let (matched, ids) = match matched_len {
        Some(n) => split(ids, n).ok_or_else(bad)?,
        None => ("", ids),
    };
    let (dup_of, id) = split(ids, root_len).ok_or_else(bad)?;
    Ok(meta(
        id,
        Verdict::Duplicate(Duplicate {
            dup_of: dup_of.to_owned(),
            matched: if same { dup_of } else { matched }.to_owned(),
            distance,
            signal,
            overlap,
        }),
    ))
}

/// After a duplicate's distance and signal: its `lengths` ids' lengths, then
/// the ids, this article's last.
fn skip_ids(rest: &str, lengths: usize) -> Option<&str> {
    let mut parts = rest.splitn(3 + lengths, '|').skip(2);
    let mut skip = 0;
    for _ in 0..lengths {
        skip += parts.next()?.parse::<usize>().ok()?;
    }
    parts.next()?.get(skip..)
}

/// The word count and id of a meta ([`encode_meta`]), its verdict unread:
/// what a view files, without the allocations of [`decode_meta`].
pub(crate) fn meta_words_and_id(bytes: &[u8]) -> Result<(u32, &str), String> {
    let bad = || format!("meta {:?} is malformed", String::from_utf8_lossy(bytes));
    let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
    let mut fields = text.splitn(4, '|');
    let (_, words, kind, rest) = (fields.next(), fields.next(), fields.next(), fields.next());
    let words = words.and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let id = match (kind, rest) {
        (Some("u"), Some(id)) => Some(id),
        (Some("d"), Some(rest)) => skip_ids(rest, 1),
        (Some("D"), Some(rest)) => skip_ids(rest, 2),
        _ => None,
    };
    Ok((words, id.ok_or_else(bad)?))
}

/// An `a:` list element: the packed fingerprint ([`encode_fingerprint`])
/// after its length, then the meta ([`encode_meta`]).
pub fn encode_article(packed: &[u8], meta: &str) -> Vec<u8> {
    let len = u16::try_from(packed.len()).expect("a packed fingerprint is under 64 KiB");
    let mut out = Vec::with_capacity(2 + packed.len() + meta.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(packed);
    out.extend_from_slice(meta.as_bytes());
    out
}

/// An article's packed fingerprint and meta, as an `a:` element holds them.
pub type ArticleParts<'a> = (&'a [u8], &'a [u8]);

/// Split an `a:` list element into its packed fingerprint and its meta;
/// `None` for an empty one (a deleted article), an error for a malformed one.
pub fn decode_article(bytes: &[u8]) -> Result<Option<ArticleParts<'_>>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let len = bytes
        .get(..2)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
        .filter(|&len| 2 + len <= bytes.len())
        .ok_or_else(|| format!("article record of {} bytes is cut short", bytes.len()))?;
    Ok(Some((&bytes[2..2 + len], &bytes[2 + len..])))
}

/// The meta and fingerprint of an `a:` list element; `None` for an empty
/// one (a deleted article).
pub fn decode_stored(bytes: &[u8]) -> Result<Option<(Meta, Fingerprint)>, String> {
    let Some((packed, meta)) = decode_article(bytes)? else {
        return Ok(None);
    };
    let meta = decode_meta(meta)?;
    let fingerprint = decode_fingerprint(packed, meta.words)?;
    Ok(Some((meta, fingerprint)))
}

/// Unpack an `i:` hash value (the SimHash in 16 hex digits, `:`, the
/// handle; `lua/commit.lua` writes it): `(simhash, handle)`.
pub fn decode_id_value(bytes: &[u8]) -> Result<(u64, u64), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "ids value is not UTF-8".to_owned())?;
    let (hex, handle) = text
        .split_once(':')
        .ok_or_else(|| format!("ids value {text:?} has no ':'"))?;
    let simhash = u64::from_str_radix(hex, 16).map_err(|_| format!("bad simhash in {text:?}"))?;
    let handle = handle
        .parse()
        .map_err(|_| format!("bad handle in {text:?}"))?;
    Ok((simhash, handle))
}

/// A SimHash as Redis stores it in the block sets: the
/// decimal of the same 64 bits read as a signed integer, so Redis keeps it as an
/// 8-byte integer instead of a string.
pub fn simhash_member(hash: u64) -> String {
    (hash as i64).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_article_record_splits_into_what_was_packed() {
        let packed = encode_fingerprint(&fp(12));
        let meta = encode_meta("id|with|bars", &Verdict::Unique, 17, 350);
        let record = encode_article(&packed, &meta);
        assert_eq!(record.len(), 2 + 81 + meta.len());
        let (p, m) = decode_article(&record).unwrap().unwrap();
        assert_eq!((p, m), (&packed[..], meta.as_bytes()));
        assert_eq!(decode_article(b"").unwrap(), None);
        assert!(decode_article(&record[..40]).is_err());
        assert!(decode_article(b"\x51").is_err());
    }

    fn fp(n: usize) -> Fingerprint {
        Fingerprint {
            simhash: 0xfedc_ba98_7654_3210,
            content: u64::MAX,
            signatures: (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect(),
            words: 4_000_000_000,
            numbers: (0..n.min(8) as u16)
                .map(|i| i.wrapping_mul(0x9e37))
                .collect(),
        }
    }

    #[test]
    fn fingerprint_round_trips() {
        for n in 0..=12 {
            let bytes = encode_fingerprint(&fp(n));
            assert_eq!(bytes.len(), 17 + 4 * n + 2 * n.min(8));
            assert_eq!(decode_fingerprint(&bytes, fp(n).words).unwrap(), fp(n));
        }
        assert_eq!(encode_fingerprint(&fp(12)).len(), 81);
        assert!(decode_fingerprint(&[0; 16], 0).is_err());
        assert!(decode_fingerprint(&[], 0).is_err());
        // A number count the bytes cannot hold, or a sketch cut mid-hash.
        assert!(decode_fingerprint(&[[0; 16].as_slice(), &[9]].concat(), 0).is_err());
        assert!(decode_fingerprint(&[[0; 18].as_slice(), &[0]].concat(), 0).is_err());
        // Both sketches empty.
        assert!(decode_fingerprint(&[0; 17], 0)
            .unwrap()
            .signatures
            .is_empty());
    }

    #[test]
    fn recent_records_hold_the_keys_at_fixed_offsets() {
        let packed = encode_fingerprint(&fp(12));
        let r = encode_recent("article-1", &fp(12));
        assert_eq!(r.len(), RECENT_STRIDE);
        // printf %s article-1 | sha1sum → 897cad…
        assert_eq!((r[0], &r[1..4]), (13, &[0x89, 0x7c, 0xad][..]));
        assert_eq!(&r[4..], &packed[..64]);
        let short = encode_recent("article-1", &fp(3));
        assert_eq!(short[0], 4);
        assert_eq!(&short[4..32], &encode_fingerprint(&fp(3))[..28]);
        assert!(short[32..].iter().all(|&b| b == 0));
        // A sketch longer than a record holds: marked, cut.
        let mut long = fp(12);
        long.signatures.push(7);
        let r = encode_recent("article-1", &long);
        assert_eq!((r[0], r.len()), (255, RECENT_STRIDE));
    }

    #[test]
    fn meta_round_trips_with_any_id() {
        let dup = Verdict::Duplicate(Duplicate {
            dup_of: "root|with|bars".into(),
            matched: "中文 id".into(),
            distance: 12,
            signal: Signal::Sentence,
            overlap: Some(42),
        });
        let direct = Verdict::Duplicate(Duplicate {
            dup_of: "r|1".into(),
            matched: "r|1".into(),
            distance: 0,
            signal: Signal::Exact,
            overlap: Some(100),
        });
        for (id, v) in [
            ("plain", Verdict::Unique),
            ("a|b", Verdict::Unique),
            ("", Verdict::Unique),
            ("x|y|z", dup.clone()),
            ("q|", direct.clone()),
        ] {
            let text = encode_meta(id, &v, 86_399_999, 7);
            assert_eq!(meta_words_and_id(text.as_bytes()), Ok((7, id)));
            assert_eq!(
                decode_meta(text.as_bytes()).unwrap(),
                Meta {
                    id: id.to_owned(),
                    verdict: v,
                    ts_offset: 86_399_999,
                    words: 7
                }
            );
        }
        assert_eq!(
            encode_meta("c", &dup, 5, 40),
            "5|40|D|12|s42|9|14|中文 idroot|with|barsc"
        );
        assert_eq!(encode_meta("c", &direct, 5, 40), "5|40|d|0|e100|3|r|1c");
        // A signal without an overlap: a verdict whose overlap is not known.
        let Verdict::Duplicate(unknown) = decode_meta(b"5|40|d|0|e|3|r|1c").unwrap().verdict else {
            panic!("a duplicate's meta");
        };
        assert_eq!((unknown.signal, unknown.overlap), (Signal::Exact, None));
        assert!(decode_meta(b"1|2|d|1|h101|1|ab").is_err());
        assert!(decode_meta(b"1|2|d|1|h+5|1|ab").is_err());
        assert!(decode_meta(b"1|2|D|1|h|9|1|ab").is_err());
        assert!(decode_meta(b"1|2|d|1|simhash|1|ab").is_err());
        assert!(decode_meta(b"1|2|x|1").is_err());
        assert!(decode_meta(b"u|a").is_err());
    }

    #[test]
    fn id_values_and_members_read_as_written() {
        assert_eq!(decode_id_value(b"00000000000000ab:17"), Ok((0xab, 17)));
        assert!(decode_id_value(b"00ab").is_err());
        assert_eq!(simhash_member(0x0123_4567_89ab_cdef), "81985529216486895");
        assert_eq!(simhash_member(u64::MAX), "-1");
        for h in [0, 1, u64::MAX, 1 << 63, 0x0123_4567_89ab_cdef] {
            assert_eq!(simhash_member(h).parse::<i64>().map(|v| v as u64), Ok(h));
        }
    }
}
