//! Redis key names. Every key of namespace `NS` starts with `simdedup:{NS}:`: the
//! braces are a Redis Cluster hash tag, so all of a namespace's keys live on one
//! node and one Lua script may touch any of them. Documented in `docs/redis-keys.md`.

/// The key builder for one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys for namespace `ns`. Namespaces are validated by [`validate_namespace`].
    pub fn new(ns: &str) -> Keys {
        Keys {
            prefix: format!("simdedup:{{{ns}}}:"),
        }
    }

    /// `simdedup:{NS}:`, the prefix of every key of the namespace.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Input stream producers `XADD` articles to.
    pub fn input_stream(&self) -> String {
        format!("{}in", self.prefix)
    }

    /// Output stream: exactly one verdict entry per input entry.
    pub fn output_stream(&self) -> String {
        format!("{}out", self.prefix)
    }

    /// Dead-letter stream: entries that could not be processed, with the reason.
    pub fn dead_stream(&self) -> String {
        format!("{}dead", self.prefix)
    }

    // ---- The Redis index (see `docs/redis-keys.md`). `label` is a bucket label
    // from [`bucket_label`]; `handle` is an article's number inside its bucket.
    // The Lua scripts in `lua/` build the same names from the prefix: keep the two
    // in step (the Redis tests read keys through these builders).

    /// ZSET of live time buckets: member = label, score = bucket start (unix ms).
    pub fn buckets(&self) -> String {
        format!("{}buckets", self.prefix)
    }

    /// STRING counter allocating handles inside bucket `label`.
    pub fn counter(&self, label: &str) -> String {
        format!("{}n:{label}", self.prefix)
    }

    /// HASH article id → `<simhash 16 hex>:<handle>` (the card's id → SimHash).
    pub fn ids(&self, label: &str) -> String {
        format!("{}i:{label}", self.prefix)
    }

    /// HASH handle → packed fingerprint, for handles `100·c … 100·c+99`.
    pub fn fingerprints(&self, label: &str, handle: u64) -> String {
        format!("{}f:{label}:{}", self.prefix, handle / HANDLES_PER_CHUNK)
    }

    /// HASH handle → article id and verdict, chunked like [`Keys::fingerprints`].
    pub fn metas(&self, label: &str, handle: u64) -> String {
        format!("{}m:{label}:{}", self.prefix, handle / HANDLES_PER_CHUNK)
    }

    /// HASH root handle → its linked duplicates (`<label>:<handle>` tokens).
    pub fn links(&self, label: &str, handle: u64) -> String {
        format!("{}d:{label}:{}", self.prefix, handle / HANDLES_PER_CHUNK)
    }

    /// SET of handles whose SimHash has `value` as 16-bit block `position` (0 = high).
    pub fn block(&self, label: &str, position: usize, value: u16) -> String {
        format!("{}b:{label}:{position}:{value:04x}", self.prefix)
    }

    /// (HASH key, field) holding the handles with content hash `hash`.
    pub fn content(&self, label: &str, hash: u64) -> (String, String) {
        let hex = format!("{hash:016x}");
        (
            format!("{}c:{label}:{}", self.prefix, &hex[..3]),
            hex[3..].to_owned(),
        )
    }

    /// (HASH key, field) holding the handles with sentence hash `hash`.
    pub fn sentence(&self, label: &str, hash: u64) -> (String, String) {
        let hex = format!("{hash:016x}");
        (
            format!("{}s:{label}:{}", self.prefix, &hex[..4]),
            hex[4..].to_owned(),
        )
    }
}

/// Handles per fingerprint/meta/link hash: small enough that each hash stays in
/// Redis's compact listpack encoding (≤ 128 fields, values ≤ 64 bytes), decimal so
/// a person can find a handle's hash by dropping its last two digits.
pub const HANDLES_PER_CHUNK: u64 = 100;

/// The label of the time bucket starting at `start_ms` (unix ms, UTC):
/// `YYYYMMDDHH`, readable in `redis-cli` and sorted like time.
pub fn bucket_label(start_ms: i64) -> String {
    let secs = start_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let hour = secs.rem_euclid(86_400) / 3600;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}{m:02}{d:02}{hour:02}")
}

/// Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A namespace is 1–64 characters of `[A-Za-z0-9_.-]` (readable in `redis-cli`,
/// and free of the `{}` that would break the hash tag).
pub fn validate_namespace(ns: &str) -> Result<(), String> {
    let ok = !ns.is_empty()
        && ns.len() <= 64
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "namespace {ns:?} is invalid: use 1-64 characters of letters, digits, `_`, `.` or `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_hash_tag() {
        let k = Keys::new("news");
        assert_eq!(k.input_stream(), "simdedup:{news}:in");
        assert_eq!(k.output_stream(), "simdedup:{news}:out");
        assert_eq!(k.dead_stream(), "simdedup:{news}:dead");
    }

    #[test]
    fn index_key_names() {
        let k = Keys::new("news");
        assert_eq!(bucket_label(0), "1970010100");
        assert_eq!(bucket_label(1_736_085_600_000), "2025010514");
        assert_eq!(bucket_label(951_782_400_000), "2000022900");
        assert_eq!(bucket_label(-3_600_000), "1969123123");
        assert_eq!(k.buckets(), "simdedup:{news}:buckets");
        assert_eq!(k.counter("2025010500"), "simdedup:{news}:n:2025010500");
        assert_eq!(k.ids("2025010500"), "simdedup:{news}:i:2025010500");
        assert_eq!(k.fingerprints("L", 12_345), "simdedup:{news}:f:L:123");
        assert_eq!(k.metas("L", 99), "simdedup:{news}:m:L:0");
        assert_eq!(k.links("L", 100), "simdedup:{news}:d:L:1");
        assert_eq!(k.block("L", 2, 0xab), "simdedup:{news}:b:L:2:00ab");
        assert_eq!(
            k.content("L", 0x0123_4567_89ab_cdef),
            ("simdedup:{news}:c:L:012".into(), "3456789abcdef".into())
        );
        assert_eq!(
            k.sentence("L", 0x0123_4567_89ab_cdef),
            ("simdedup:{news}:s:L:0123".into(), "456789abcdef".into())
        );
    }

    #[test]
    fn namespace_rules() {
        assert!(validate_namespace("default").is_ok());
        assert!(validate_namespace("a.b-c_1").is_ok());
        assert!(validate_namespace("").is_err());
        assert!(validate_namespace("x{y}").is_err());
        assert!(validate_namespace(&"a".repeat(65)).is_err());
    }
}
