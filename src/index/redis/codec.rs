//! How an article is packed into Redis values — the ONE place that knows it.
//!
//! If [`Fingerprint`] or the verdict gains a field, change the pairs here (and
//! their tests); nothing else reads or writes these bytes.
//!
//! - **fingerprint** (`f:` hashes, binary, little-endian): `simhash u64 · content
//!   u64 · ts offset u32 (ms since the bucket start) · words u32 · signatures u32 × n`.
//!   24 + 4n bytes. Up to 10 signatures this fits Redis's `hash-max-listpack-value`
//!   (64), keeping the hashes in the compact listpack encoding; longer sketches
//!   still work, those hashes just take the larger hashtable encoding.
//! - **meta** (`m:` hashes, text): `u|<id>` for a kept article, or
//!   `d|<distance>|<signal>|<len matched>|<len dup_of>|<matched><dup_of><id>` for a
//!   duplicate (lengths in bytes, so ids may contain any character).
//! - **ids value** (`i:` hashes, text): `<simhash, 16 hex>:<handle>`. The Lua
//!   scripts read the handle at byte 18 of it: keep the SimHash at 16 digits.

use crate::decision::Signal;
use crate::fingerprint::Fingerprint;
use crate::index::{Duplicate, Verdict};

const FIXED: usize = 24;

/// Pack a fingerprint and its timestamp (relative to its bucket's start).
pub fn encode_fingerprint(fp: &Fingerprint, ts_ms: i64, bucket_start_ms: i64) -> Vec<u8> {
    let offset = u32::try_from(ts_ms - bucket_start_ms)
        .expect("a bucket is shorter than 2^32 ms (checked by RedisIndexOptions)");
    let mut out = Vec::with_capacity(FIXED + 4 * fp.signatures.len());
    out.extend_from_slice(&fp.simhash.to_le_bytes());
    out.extend_from_slice(&fp.content.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&fp.words.to_le_bytes());
    for s in &fp.signatures {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

/// Unpack what [`encode_fingerprint`] packed: the fingerprint and its timestamp.
pub fn decode_fingerprint(
    bytes: &[u8],
    bucket_start_ms: i64,
) -> Result<(Fingerprint, i64), String> {
    if bytes.len() < FIXED || (bytes.len() - FIXED) % 4 != 0 {
        return Err(format!("packed fingerprint has {} bytes", bytes.len()));
    }
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let fp = Fingerprint {
        simhash: u64_at(0),
        content: u64_at(8),
        words: u32_at(20),
        signatures: (FIXED..bytes.len()).step_by(4).map(u32_at).collect(),
    };
    Ok((fp, bucket_start_ms + i64::from(u32_at(16))))
}

/// Text of an article's id and verdict.
pub fn encode_meta(id: &str, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Unique => format!("u|{id}"),
        Verdict::Duplicate(d) => format!(
            "d|{}|{}|{}|{}|{}{}{id}",
            d.distance,
            d.signal,
            d.matched.len(),
            d.dup_of.len(),
            d.matched,
            d.dup_of
        ),
    }
}

/// Unpack what [`encode_meta`] wrote: `(id, verdict)`.
pub fn decode_meta(bytes: &[u8]) -> Result<(String, Verdict), String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "meta is not UTF-8".to_owned())?;
    if let Some(id) = text.strip_prefix("u|") {
        return Ok((id.to_owned(), Verdict::Unique));
    }
    let rest = text
        .strip_prefix("d|")
        .ok_or_else(|| format!("meta {text:?} has no kind"))?;
    let mut parts = rest.splitn(5, '|');
    let mut next = || {
        parts
            .next()
            .ok_or_else(|| format!("meta {text:?} is short"))
    };
    let distance: u32 = next()?
        .parse()
        .map_err(|_| format!("bad distance in {text:?}"))?;
    let signal = Signal::parse(next()?).ok_or_else(|| format!("bad signal in {text:?}"))?;
    let matched_len: usize = next()?
        .parse()
        .map_err(|_| format!("bad length in {text:?}"))?;
    let root_len: usize = next()?
        .parse()
        .map_err(|_| format!("bad length in {text:?}"))?;
    let ids = next()?;
    fn split(s: &str, n: usize) -> Option<(&str, &str)> {
        s.get(..n).zip(s.get(n..))
    }
    let bad = || format!("bad ids in {text:?}");
    let (matched, ids) = split(ids, matched_len).ok_or_else(bad)?;
    let (dup_of, id) = split(ids, root_len).ok_or_else(bad)?;
    Ok((
        id.to_owned(),
        Verdict::Duplicate(Duplicate {
            dup_of: dup_of.to_owned(),
            matched: matched.to_owned(),
            distance,
            signal,
        }),
    ))
}

/// The `i:` hash value: the SimHash in 16 hex digits, then the handle.
pub fn encode_id_value(simhash: u64, handle: u64) -> String {
    format!("{simhash:016x}:{handle}")
}

/// Unpack an `i:` hash value: `(simhash, handle)`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: usize) -> Fingerprint {
        Fingerprint {
            simhash: 0xfedc_ba98_7654_3210,
            content: u64::MAX,
            signatures: (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect(),
            words: 4_000_000_000,
        }
    }

    #[test]
    fn fingerprint_round_trips_and_fits_a_listpack_value() {
        for n in 0..=5 {
            let bytes = encode_fingerprint(&fp(n), 1_700_000_123_456, 1_700_000_000_000);
            assert_eq!(bytes.len(), 24 + 8 * n);
            let (back, ts) = decode_fingerprint(&bytes, 1_700_000_000_000).unwrap();
            assert_eq!((back, ts), (fp(n), 1_700_000_123_456));
        }
        assert_eq!(encode_fingerprint(&fp(5), 0, 0).len(), 64);
        assert!(decode_fingerprint(&[0; 23], 0).is_err());
        assert!(decode_fingerprint(&[0; 25], 0).is_err());
    }

    #[test]
    fn meta_round_trips_with_any_id() {
        let dup = Verdict::Duplicate(Duplicate {
            dup_of: "root|with|bars".into(),
            matched: "中文 id".into(),
            distance: 12,
            signal: Signal::Sentence,
        });
        for (id, v) in [
            ("plain", Verdict::Unique),
            ("a|b", Verdict::Unique),
            ("", Verdict::Unique),
            ("x|y|z", dup.clone()),
        ] {
            let text = encode_meta(id, &v);
            assert_eq!(decode_meta(text.as_bytes()).unwrap(), (id.to_owned(), v));
        }
        assert_eq!(
            encode_meta("c", &dup),
            "d|12|sentence|9|14|中文 idroot|with|barsc"
        );
        assert!(decode_meta(b"d|1|simhash|9|1|ab").is_err());
        assert!(decode_meta(b"x|1").is_err());
    }

    #[test]
    fn id_value_round_trips() {
        let v = encode_id_value(0xab, 17);
        assert_eq!(v, "00000000000000ab:17");
        assert_eq!(decode_id_value(v.as_bytes()).unwrap(), (0xab, 17));
        assert!(decode_id_value(b"00ab").is_err());
    }
}
