//! How an article is packed into Redis values — the ONE place that knows it.
//!
//! If [`Fingerprint`] or the verdict gains a field, change the pairs here (and
//! their tests); nothing else reads or writes these bytes.
//!
//! - **article** (`a:` lists, one element per handle): `packed length u16 LE ·
//!   packed fingerprint · meta` ([`encode_article`]); an empty element is a
//!   deleted article (or handle 0, which no article has).
//! - **fingerprint** (binary, little-endian): `simhash u64 · content
//!   u64 · signatures u32 × n · numbers u16 × m · shingles · size u16 · w u8 ·
//!   n u8 · m u8 · s u8`, 22 + 4n + 2m + ⌈s·w/8⌉ bytes (about 150 for the
//!   default 12-hash sketch, 8-hash number sketch and 48-value shingle
//!   sample). The shingle sample, cut to [`SAMPLE`] values, is stored as the
//!   gaps between its sorted values (the first from -1), each less one, in
//!   `w` bits (the widest gap's), packed least significant bit first: about
//!   10 bits a value where 16 would hold it plain, 35 bytes an article. The
//!   clause sketch follows the content hash directly because `lua/commit.lua`
//!   reads its lookup hashes at byte 17 on; the counts come last, the
//!   sketch's [`PACKED_SKETCH_COUNT_AT`] bytes from the end, so every part can
//!   vary in length. The timestamp and word count live in the meta.
//! - **recent record** (`r:` strings, binary, [`RECENT_STRIDE`] bytes):
//!   `1 + n u8` (n sketch hashes; 255 when the sketch has more than
//!   [`RECENT_SKETCH`]: the record holds the first ones, and `lua/commit.lua`
//!   reads the packed fingerprint) · the top 24 bits of the id's hash, big-endian ·
//!   `simhash u64 · content u64 · signatures u32 × n` little-endian as in the
//!   fingerprint · zeros. What a commit reads back of an article inserted
//!   since a worker's view: the keys it meets others through. A deleted
//!   article's first byte is 0.
//! - **meta** (text): `<ts offset>|<words>|u|<id>` for a kept
//!   article, `<ts offset>|<words>|x|<len expands>|<expands><id>` for one that
//!   expands an earlier one; for a duplicate `<ts offset>|<words>|d|<distance>|<signal>|<len
//!   dup_of>|<dup_of><id>` when it matched its cluster's root itself, else
//!   `…|D|<distance>|<signal>|<len matched>|<len dup_of>|<matched><dup_of><id>`
//!   (ts offset = ms since the bucket start; signal `e`xact, `h` SimHash
//!   (Hamming), `s`entence, e`x`cerpt, followed by the estimated overlap in hundredths,
//!   `h83`, `e100`; lengths in bytes, so ids may contain any character). A
//!   signal letter without digits reads as a verdict whose overlap is not
//!   known.
//! - **ids value** (`i:` hash, text): `<simhash, 16 hex>:<handle>`. The Lua
//!   scripts read the handle at byte 18 of it: keep the SimHash at 16 digits.

use crate::decision::Signal;
use crate::fingerprint::Fingerprint;
use crate::index::{Duplicate, Verdict};
use crate::keys::{
    id_hash, PACKED_SKETCH_AT, PACKED_SKETCH_COUNT_AT, RECENT_CONTENT_AT, RECENT_ID_AT,
    RECENT_SIMHASH_AT, RECENT_SKETCH, RECENT_SKETCH_AT, RECENT_STRIDE, RECENT_UNBOUNDED,
};
use crate::shingles::SAMPLE;

/// The SimHash and content hash.
const FIXED: usize = PACKED_SKETCH_AT;
// A recent record holds the packed fingerprint's first bytes as they are:
// the commit rebuilds one whose sketch did not fit from them.
const _: () = assert!(RECENT_SKETCH_AT - RECENT_SIMHASH_AT == FIXED);

/// The size, the shingle gaps' width and the three counts after the parts of
/// a packed fingerprint: `size u16 · w u8 · n u8 · m u8 · s u8`, the sketch's
/// count n where the scripts read it.
const TRAILER: usize = 6;
const _: () = assert!(PACKED_SKETCH_COUNT_AT == 3);

/// Pack a fingerprint's hashes and size (not its word count: see
/// [`encode_meta`]); of its shingle sample, the [`SAMPLE`] smallest.
pub fn encode_fingerprint(fp: &Fingerprint) -> Vec<u8> {
    let shingles = &fp.shingles[..fp.shingles.len().min(SAMPLE)];
    let (gaps, width) = encode_gaps(shingles);
    let parts = 4 * fp.signatures.len() + 2 * fp.numbers.len() + gaps.len();
    let mut out = Vec::with_capacity(FIXED + parts + TRAILER);
    out.extend_from_slice(&fp.simhash.to_le_bytes());
    out.extend_from_slice(&fp.content.to_le_bytes());
    for s in &fp.signatures {
        out.extend_from_slice(&s.to_le_bytes());
    }
    for n in &fp.numbers {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&gaps);
    out.extend_from_slice(&fp.size.to_le_bytes());
    let count = |n: usize, what: &str| {
        u8::try_from(n).unwrap_or_else(|_| panic!("a {what} of {n} hashes does not fit a byte"))
    };
    out.push(width);
    // The sketches are at most MAX_SIGNATURES and NUMBER_SKETCH long.
    out.push(count(fp.signatures.len(), "clause sketch"));
    out.push(count(fp.numbers.len(), "number sketch"));
    out.push(count(shingles.len(), "shingle sample"));
    out
}

/// The gaps of sorted, distinct `values` (the first from -1), each less
/// one, packed in the fewest bits that hold the widest, least significant
/// bit first; and that width.
fn encode_gaps(values: &[u16]) -> (Vec<u8>, u8) {
    let gaps = || {
        values.iter().scan(-1i32, |last, &v| {
            let gap = i32::from(v) - *last - 1;
            *last = i32::from(v);
            Some(gap as u32)
        })
    };
    let width = 32 - gaps().max().unwrap_or(0).leading_zeros();
    let mut out = vec![0u8; (values.len() * width as usize).div_ceil(8)];
    for (k, gap) in gaps().enumerate() {
        for bit in 0..width {
            if gap >> bit & 1 == 1 {
                let at = k * width as usize + bit as usize;
                out[at / 8] |= 1 << (at % 8);
            }
        }
    }
    (out, width as u8)
}

/// The `count` values [`encode_gaps`] packed in `width` bits each; `None`
/// when they do not fit 16 bits.
fn decode_gaps(bytes: &[u8], count: usize, width: u8) -> Option<Vec<u16>> {
    let mut values = Vec::with_capacity(count);
    let mut last = -1i32;
    for k in 0..count {
        let mut gap = 0u32;
        for bit in 0..u32::from(width) {
            let at = k * usize::from(width) + bit as usize;
            gap |= u32::from(bytes[at / 8] >> (at % 8) & 1) << bit;
        }
        last += gap as i32 + 1;
        values.push(u16::try_from(last).ok()?);
    }
    Some(values)
}

/// The recent record of article `id` (see the module's notes).
pub fn encode_recent(id: &str, fp: &Fingerprint) -> Vec<u8> {
    let mut out = vec![0; RECENT_STRIDE];
    let n = fp.signatures.len();
    out[0] = if n <= RECENT_SKETCH {
        1 + n as u8
    } else {
        RECENT_UNBOUNDED
    };
    out[RECENT_ID_AT..RECENT_SIMHASH_AT].copy_from_slice(&id_hash(id).to_be_bytes()[..3]);
    out[RECENT_SIMHASH_AT..RECENT_CONTENT_AT].copy_from_slice(&fp.simhash.to_le_bytes());
    out[RECENT_CONTENT_AT..RECENT_SKETCH_AT].copy_from_slice(&fp.content.to_le_bytes());
    for (k, s) in fp.signatures.iter().take(RECENT_SKETCH).enumerate() {
        let at = RECENT_SKETCH_AT + 4 * k;
        out[at..at + 4].copy_from_slice(&s.to_le_bytes());
    }
    out
}

/// A packed fingerprint's parts, read in place: the bytes of the clause
/// sketch (u32 LE each), of the number sketch (u16 LE each), and of the
/// shingle sample's gaps (`shingle_count` of `shingle_width` bits).
pub(crate) struct Packed<'a> {
    pub(crate) simhash: u64,
    pub(crate) content: u64,
    pub(crate) sketch: &'a [u8],
    pub(crate) numbers: &'a [u8],
    pub(crate) shingles: &'a [u8],
    pub(crate) shingle_count: usize,
    pub(crate) shingle_width: u8,
    pub(crate) size: u16,
}

/// Read a packed fingerprint ([`encode_fingerprint`]); `None` when its
/// counts do not fit its length.
pub(crate) fn packed_parts(bytes: &[u8]) -> Option<Packed<'_>> {
    let body = bytes.len().checked_sub(TRAILER)?;
    let [size0, size1, w, n, m, s] = bytes[body..] else {
        return None;
    };
    let sketch_end = FIXED + 4 * usize::from(n);
    let numbers_end = sketch_end + 2 * usize::from(m);
    let gaps = (usize::from(s) * usize::from(w)).div_ceil(8);
    (w <= 16 && numbers_end + gaps == body).then_some(())?;
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    Some(Packed {
        simhash: u64_at(0),
        content: u64_at(8),
        sketch: &bytes[FIXED..sketch_end],
        numbers: &bytes[sketch_end..numbers_end],
        shingles: &bytes[numbers_end..body],
        shingle_count: usize::from(s),
        shingle_width: w,
        size: u16::from_le_bytes([size0, size1]),
    })
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

/// Why a value this module packed cannot be read back: which value, what of
/// it is malformed, and the value (its text, or the length of a binary one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A packed fingerprint whose counts do not fit its length.
    #[error("packed fingerprint of {len} bytes does not hold what its counts say")]
    FingerprintCounts { len: usize },
    /// A packed shingle sample whose gaps sum past a 16-bit value.
    #[error("packed shingle sample runs past 16 bits")]
    ShingleSample,
    /// An `a:` element shorter than the packed fingerprint it announces.
    #[error("article record of {len} bytes is cut short")]
    ArticleCut { len: usize },
    #[error("meta is not UTF-8")]
    MetaNotUtf8,
    /// A meta without its leading time offset and word count.
    #[error("meta {meta:?} has no time and word count")]
    MetaHead { meta: String },
    /// A meta that ends before the fields its kind has.
    #[error("meta {meta:?} is short")]
    MetaShort { meta: String },
    /// A meta whose kind is none of `u`, `x`, `d`, `D`.
    #[error("meta {meta:?} has no kind")]
    MetaKind { meta: String },
    #[error("bad distance in {meta:?}")]
    MetaDistance { meta: String },
    #[error("bad signal in {meta:?}")]
    MetaSignal { meta: String },
    #[error("bad length in {meta:?}")]
    MetaLength { meta: String },
    /// Ids that the lengths before them do not split.
    #[error("bad ids in {meta:?}")]
    MetaIds { meta: String },
    /// A meta whose word count or id cannot be read, as a view reads it
    /// (without telling which).
    #[error("meta {meta:?} is malformed")]
    Meta { meta: String },
    #[error("ids value is not UTF-8")]
    IdsNotUtf8,
    #[error("ids value {value:?} has no ':'")]
    IdsNoColon { value: String },
    #[error("bad simhash in {value:?}")]
    IdsSimhash { value: String },
    #[error("bad handle in {value:?}")]
    IdsHandle { value: String },
}

/// Unpack what [`encode_fingerprint`] packed; `words` comes from the meta.
pub fn decode_fingerprint(bytes: &[u8], words: u32) -> Result<Fingerprint, DecodeError> {
    let p = packed_parts(bytes).ok_or(DecodeError::FingerprintCounts { len: bytes.len() })?;
    Ok(Fingerprint {
        simhash: p.simhash,
        content: p.content,
        words,
        signatures: u32s(p.sketch).collect(),
        numbers: u16s(p.numbers).collect(),
        shingles: decode_gaps(p.shingles, p.shingle_count, p.shingle_width)
            .ok_or(DecodeError::ShingleSample)?,
        size: p.size,
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
        Verdict::Unique { expands: None } => format!("{ts_offset}|{words}|u|{id}"),
        Verdict::Unique {
            expands: Some(expands),
        } => format!("{ts_offset}|{words}|x|{}|{expands}{id}", expands.len()),
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
        Signal::Excerpt => 'x',
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
        "x" => Signal::Excerpt,
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
pub fn decode_meta(bytes: &[u8]) -> Result<Meta, DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::MetaNotUtf8)?;
    let meta = || text.to_owned();
    let mut head = text.splitn(3, '|');
    let mut num = || {
        head.next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| DecodeError::MetaHead { meta: meta() })
    };
    let (ts_offset, words): (u32, u32) = (num()?, num()?);
    let rest = head
        .next()
        .ok_or_else(|| DecodeError::MetaShort { meta: meta() })?;
    let stored = |id: &str, verdict| Meta {
        id: id.to_owned(),
        verdict,
        ts_offset,
        words,
    };
    let bad_ids = || DecodeError::MetaIds { meta: meta() };
    if let Some(id) = rest.strip_prefix("u|") {
        return Ok(stored(id, Verdict::UNIQUE));
    }
    if let Some(rest) = rest.strip_prefix("x|") {
        let (expands, id) = expanded_and_id(rest).ok_or_else(bad_ids)?;
        let expands = Some(expands.to_owned());
        return Ok(stored(id, Verdict::Unique { expands }));
    }
    let (same, rest) = if let Some(r) = rest.strip_prefix("d|") {
        (true, r)
    } else if let Some(r) = rest.strip_prefix("D|") {
        (false, r)
    } else {
        return Err(DecodeError::MetaKind { meta: meta() });
    };
    let mut parts = rest.splitn(if same { 4 } else { 5 }, '|');
    let mut next = || {
        parts
            .next()
            .ok_or_else(|| DecodeError::MetaShort { meta: meta() })
    };
    let distance: u32 = next()?
        .parse()
        .map_err(|_| DecodeError::MetaDistance { meta: meta() })?;
    let (signal, overlap) =
        read_signal_field(next()?).ok_or_else(|| DecodeError::MetaSignal { meta: meta() })?;
    let mut len = || -> Result<usize, DecodeError> {
        next()?
            .parse()
            .map_err(|_| DecodeError::MetaLength { meta: meta() })
    };
    let matched_len = if same { None } else { Some(len()?) };
    let root_len = len()?;
    let ids = next()?;
    fn split(s: &str, n: usize) -> Option<(&str, &str)> {
        s.get(..n).zip(s.get(n..))
    }
    let (matched, ids) = match matched_len {
        Some(n) => split(ids, n).ok_or_else(bad_ids)?,
        None => ("", ids),
    };
    let (dup_of, id) = split(ids, root_len).ok_or_else(bad_ids)?;
    Ok(stored(
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

/// After `x|`: the id of the article expanded and this one's.
fn expanded_and_id(rest: &str) -> Option<(&str, &str)> {
    let (len, ids) = rest.split_once('|')?;
    let len = len.parse::<usize>().ok()?;
    ids.get(..len).zip(ids.get(len..))
}

/// The word count and id of a meta ([`encode_meta`]), its verdict unread:
/// what a view files, without the allocations of [`decode_meta`].
pub(crate) fn meta_words_and_id(bytes: &[u8]) -> Result<(u32, &str), DecodeError> {
    let bad = || DecodeError::Meta {
        meta: String::from_utf8_lossy(bytes).into_owned(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
    let mut fields = text.splitn(4, '|');
    let (_, words, kind, rest) = (fields.next(), fields.next(), fields.next(), fields.next());
    let words = words.and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let id = match (kind, rest) {
        (Some("u"), Some(id)) => Some(id),
        (Some("x"), Some(rest)) => expanded_and_id(rest).map(|(_, id)| id),
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
pub fn decode_article(bytes: &[u8]) -> Result<Option<ArticleParts<'_>>, DecodeError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let len = bytes
        .get(..2)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
        .filter(|&len| 2 + len <= bytes.len())
        .ok_or(DecodeError::ArticleCut { len: bytes.len() })?;
    Ok(Some((&bytes[2..2 + len], &bytes[2 + len..])))
}

/// The meta and fingerprint of an `a:` list element; `None` for an empty
/// one (a deleted article).
pub fn decode_stored(bytes: &[u8]) -> Result<Option<(Meta, Fingerprint)>, DecodeError> {
    let Some((packed, meta)) = decode_article(bytes)? else {
        return Ok(None);
    };
    let meta = decode_meta(meta)?;
    let fingerprint = decode_fingerprint(packed, meta.words)?;
    Ok(Some((meta, fingerprint)))
}

/// Unpack an `i:` hash value (the SimHash in 16 hex digits, `:`, the
/// handle; `lua/commit.lua` writes it): `(simhash, handle)`.
pub fn decode_id_value(bytes: &[u8]) -> Result<(u64, u64), DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| DecodeError::IdsNotUtf8)?;
    let value = || text.to_owned();
    let (hex, handle) = text
        .split_once(':')
        .ok_or_else(|| DecodeError::IdsNoColon { value: value() })?;
    let simhash =
        u64::from_str_radix(hex, 16).map_err(|_| DecodeError::IdsSimhash { value: value() })?;
    let handle = handle
        .parse()
        .map_err(|_| DecodeError::IdsHandle { value: value() })?;
    Ok((simhash, handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_article_record_splits_into_what_was_packed() {
        let packed = encode_fingerprint(&fp(12));
        let meta = encode_meta("id|with|bars", &Verdict::UNIQUE, 17, 350);
        let record = encode_article(&packed, &meta);
        assert_eq!(record.len(), 2 + 140 + meta.len());
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
            shingles: (0..4 * n as u16).map(|i| i * 500).collect(),
            size: 1000 + n as u16,
        }
    }

    #[test]
    fn fingerprint_round_trips() {
        for n in 0..=12 {
            let bytes = encode_fingerprint(&fp(n));
            // Shingle gaps of 499 (and a first of 0): 9 bits each.
            assert_eq!(
                bytes.len(),
                22 + 4 * n + 2 * n.min(8) + (4 * n * 9).div_ceil(8)
            );
            assert_eq!(decode_fingerprint(&bytes, fp(n).words).unwrap(), fp(n));
            // The sketch's count, where the scripts read it.
            assert_eq!(usize::from(bytes[bytes.len() - PACKED_SKETCH_COUNT_AT]), n);
        }
        assert_eq!(encode_fingerprint(&fp(12)).len(), 140);
        // A shingle sample is stored cut to its SAMPLE smallest values.
        let mut long = fp(12);
        long.shingles = (0..100).collect();
        let stored = decode_fingerprint(&encode_fingerprint(&long), long.words).unwrap();
        assert_eq!(stored, long.stored());
        assert_eq!(stored.shingles.len(), SAMPLE);
        assert_eq!(
            decode_fingerprint(&[0; 20], 0),
            Err(DecodeError::FingerprintCounts { len: 20 })
        );
        assert!(decode_fingerprint(&[], 0).is_err());
        // Counts the bytes cannot hold, or a sketch cut mid-hash.
        let trailer = |n: u8, m: u8, s: u8| [[0; 16].as_slice(), &[7, 0, 0, n, m, s]].concat();
        assert!(decode_fingerprint(&trailer(0, 1, 0), 0).is_err());
        let gaps_missing = [[0; 16].as_slice(), &[7, 0, 8, 0, 0, 1]].concat();
        assert!(decode_fingerprint(&gaps_missing, 0).is_err());
        assert!(
            decode_fingerprint(&[[0; 18].as_slice(), &[7, 0, 0, 0, 0, 0]].concat(), 0).is_err()
        );
        // Gaps wider than 16 bits, or summing past 16 bits.
        let wide = [[0; 16].as_slice(), &[0xff; 3], &[7, 0, 17, 0, 0, 1]].concat();
        assert!(decode_fingerprint(&wide, 0).is_err());
        let past = [[0; 16].as_slice(), &[0xff; 4], &[7, 0, 16, 0, 0, 2]].concat();
        assert!(decode_fingerprint(&past, 0).is_err());
        // Every part empty.
        let empty = decode_fingerprint(&trailer(0, 0, 0), 0).unwrap();
        assert!(empty.signatures.is_empty() && empty.shingles.is_empty());
        assert_eq!(empty.size, 7);
    }

    #[test]
    fn shingle_gaps_round_trip_at_every_width() {
        let samples: [&[u16]; 6] = [
            &[],
            &[0],
            &[65535],
            &[0, 65535],
            &[0, 1, 2, 3, 4],
            &[3, 700, 701, 9000, 9001, 40000],
        ];
        for values in samples {
            let (bytes, width) = encode_gaps(values);
            assert_eq!(bytes.len(), (values.len() * usize::from(width)).div_ceil(8));
            assert_eq!(
                decode_gaps(&bytes, values.len(), width).as_deref(),
                Some(values)
            );
        }
        // Consecutive values from 0 need no bits at all.
        assert_eq!(encode_gaps(&[0, 1, 2, 3, 4]), (Vec::new(), 0));
        assert_eq!(encode_gaps(&[0, 65535]).1, 16);
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
            ("plain", Verdict::UNIQUE),
            ("a|b", Verdict::UNIQUE),
            ("", Verdict::UNIQUE),
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
        let fault = |text: &str| decode_meta(text.as_bytes()).unwrap_err();
        for text in [
            "1|2|d|1|h101|1|ab",
            "1|2|d|1|h+5|1|ab",
            "1|2|d|1|simhash|1|ab",
        ] {
            let meta = text.to_owned();
            assert_eq!(fault(text), DecodeError::MetaSignal { meta });
        }
        for text in ["1|2|D|1|h|9|1|ab", "1|2|x|1"] {
            let meta = text.to_owned();
            assert_eq!(fault(text), DecodeError::MetaIds { meta });
        }
        let meta = "u|a".to_owned();
        assert_eq!(fault("u|a"), DecodeError::MetaHead { meta });
        assert_eq!(
            fault("u|a").to_string(),
            r#"meta "u|a" has no time and word count"#
        );
    }

    #[test]
    fn id_values_read_as_written() {
        assert_eq!(decode_id_value(b"00000000000000ab:17"), Ok((0xab, 17)));
        let value = "00ab".to_owned();
        assert_eq!(
            decode_id_value(b"00ab"),
            Err(DecodeError::IdsNoColon { value })
        );
    }
}
