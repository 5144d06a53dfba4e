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

    /// Liveness key of consumer `consumer` of group `group`: a worker keeps
    /// it while it runs (a short TTL, refreshed), so its peers take over its
    /// pending entries soon after it dies (`src/worker/liveness.rs`).
    pub fn alive(&self, group: &str, consumer: &str) -> String {
        format!("{}alive:{group}:{consumer}", self.prefix)
    }

    /// STRING: the fingerprint version the namespace is written with (set by
    /// the first worker; see [`crate::version_stamp`]).
    pub fn fingerprint_version(&self) -> String {
        format!("{}version", self.prefix)
    }

    // ---- The Redis index (see `docs/redis-keys.md`). `label` is a bucket label
    // from [`bucket_label`]; `handle` is an article's number inside its bucket;
    // `bits` is the bucket's shape (field `k` of its counter hash, see
    // [`shape_bits`]). The Lua scripts in `lua/` build the same names from the
    // prefix: keep the two in step (the Redis tests read keys through these builders).

    /// ZSET of live time buckets: member = label, score = bucket start (unix ms).
    pub fn buckets(&self) -> String {
        format!("{}buckets", self.prefix)
    }

    /// STREAM of deleted articles (fields `b` = bucket label, `h` = handle),
    /// so that every worker's view forgets them; entries older than the
    /// retention are trimmed, and the key expires with the newest bucket a
    /// deletion touched.
    pub fn deletions(&self) -> String {
        format!("{}deleted", self.prefix)
    }

    /// HASH of bucket `label`: field `n` = handle counter (HINCRBY), field `k` =
    /// the bucket's shape bits, `r` = its retention (ms after its start), `l` =
    /// [`LAYOUT`], the key layout this version reads and writes (a bucket with
    /// another `l`, or none, was written by an earlier layout and is refused:
    /// `docs/operations.md`).
    pub fn counter(&self, label: &str) -> String {
        format!("{}n:{label}", self.prefix)
    }

    /// HASH article id → `<simhash 16 hex>:<handle>` (id → SimHash, as `redis-cli` readers expect),
    /// the part of bucket `label` holding `id`: split by the top `bits` bits of
    /// [`id_hash`]`(id)`, so each stays a compact
    /// listpack (one hash of a million ids would be a hash table, ~90 bytes per
    /// entry more).
    pub fn ids(&self, label: &str, bits: u32, id: &str) -> String {
        format!(
            "{}i:{label}:{}",
            self.prefix,
            top_bits_hex(id_hash(id), 64, bits)
        )
    }

    /// LIST of the stored articles of handles `100·c … 100·c+99`, handle `h`
    /// at index [`slot`]`(h)` (chunk 0 starts with an empty element: no
    /// article has handle 0); each element [`encode_article`]: the packed
    /// fingerprint and the meta. Handles are taken in order by the commit
    /// script, so an insert is one `RPUSH`; the list's elements sit in
    /// listpacks with 2–3 bytes of overhead each (a hash of 81-byte values is
    /// a hash table, ~60 bytes per entry more). The key is the handle without
    /// its last two decimal digits, the index those two digits.
    ///
    /// [`encode_article`]: crate::index::redis_index::codec::encode_article
    pub fn articles(&self, label: &str, handle: u64) -> String {
        format!("{}a:{label}:{}", self.prefix, handle / HANDLES_PER_CHUNK)
    }

    /// STRING of the recent records of bucket `label`'s newest
    /// [`RECENT_SLOTS`] handles, [`RECENT_STRIDE`] bytes each, handle `h` at
    /// slot `h % RECENT_SLOTS` (what a commit reads back). A commit reads the
    /// records of the inserts since its view with one `GETRANGE` and one byte
    /// search per key, and looks its id up among those inserts (`HEXISTS`)
    /// only where a record carries the id's hash; 17 KB a bucket. Worth,
    /// against reading back the inserts' packed fingerprints (one `HMGET`
    /// value per handle) and an `HEXISTS` per commit: 54 instead of 62 µs of
    /// Redis time per check at 1 M (medians of 5 alternated pairs, pair ratio
    /// 0.86; `simdedup-bench --sizes 1000000 --no-e2e --no-paced`, 330363d
    /// against 50619d1).
    pub fn recent(&self, label: &str) -> String {
        format!("{}r:{label}", self.prefix)
    }

    /// HASH root handle → its linked duplicates (`<label>:<handle>` tokens,
    /// space-separated), the first [`LINKS_INLINE_BYTES`] or so of them;
    /// field [`slot`]`(handle)`.
    pub fn links(&self, label: &str, handle: u64) -> String {
        format!("{}d:{label}:{}", self.prefix, handle / HANDLES_PER_CHUNK)
    }

    /// STRING of the links of root `handle` beyond those in its [`links`]
    /// field, each a space then `<label>:<handle>`, appended (`APPEND`).
    ///
    /// [`links`]: Keys::links
    pub fn more_links(&self, label: &str, handle: u64) -> String {
        format!("{}:{}", self.links(label, handle), slot(handle))
    }

    /// SET of the handles (in bucket `label`) of the articles having the 16-bit
    /// value `value` as block number `position` (0-3, most significant first):
    /// integers, which Redis keeps as an intset (2-4 bytes a member), that name
    /// articles ([`Keys::articles`]). A deleted article's handle stays (its
    /// `a:` element is empty) until the bucket expires. Buckets shaped below
    /// [`POSITIONAL_BLOCK_BITS`] share one set among the four positions
    /// (`b:L:XXXX`: a quarter of the keys, which matters when sets are small);
    /// larger ones have a set per position (`b:L:P:XXXX`: a lookup by hand,
    /// `simdedup inspect --block`, reads 4× fewer members; the extra keys cost
    /// little per article). `lua/prelude.lua`'s `block_key` builds the same
    /// names.
    pub fn block(&self, label: &str, bits: u32, position: usize, value: u16) -> String {
        if bits >= POSITIONAL_BLOCK_BITS {
            format!("{}b:{label}:{position}:{value:04x}", self.prefix)
        } else {
            format!("{}b:{label}:{value:04x}", self.prefix)
        }
    }
}

/// The index of `handle` in its `a:` chunk, its field in its `d:` chunk: its
/// last two decimal digits (`lua/prelude.lua`'s `find_id` computes the same).
pub fn slot(handle: u64) -> u64 {
    handle % HANDLES_PER_CHUNK
}

/// Handles per article list and link hash: small enough that each link hash
/// stays in Redis's compact listpack encoding (≤ `hash-max-listpack-entries`
/// fields: 512 by default, 128 where it is tuned down), decimal so a person
/// can find a handle's key by dropping its last two digits.
pub const HANDLES_PER_CHUNK: u64 = 100;

/// Articles per `i:` key a bucket's shape aims at; a key holds between half
/// and all of it. Each key costs Redis
/// ≈ 130 bytes of its own (dict entries, name, expiry), so fewer, fuller keys
/// save memory (128 instead of 48: ≈ 17 B per article at 1 M), while a lookup scans the
/// listpack linearly, so longer ones cost a little CPU per `HGET`. Well under
/// `hash-max-listpack-entries` (512 by default), so the hashes stay listpacks
/// even if a bucket gets 2.5 times the articles it was shaped for; a server
/// tuned below 320 gets a warning at connect.
pub const ARTICLES_PER_KEY: u64 = 128;

/// Handles whose recent records a bucket's `r:` string holds (the newest
/// ones): a commit reads back the records of the handles inserted since its
/// view from there, and a view further behind in a bucket it searched
/// catches up first (`lua/commit.lua`).
pub const RECENT_SLOTS: u64 = 256;

/// Sketch hashes a recent record holds: the default sketch size. An article
/// with a longer sketch gets a record marked as such, and a commit reads its
/// packed fingerprint instead.
pub const RECENT_SKETCH: usize = 12;

/// The layout of a recent record (`encode_recent` in
/// `src/index/redis_index/codec.rs` writes it, `lua/commit.lua` reads it), byte
/// offsets from its start: the head byte (1 + the sketch's length,
/// [`RECENT_UNBOUNDED`] or [`RECENT_DELETED`]), then the id hash's top 3
/// bytes, then the packed fingerprint's first bytes: SimHash (u64 LE),
/// content hash (u64 LE), up to [`RECENT_SKETCH`] sketch hashes (u32 LE).
pub const RECENT_ID_AT: usize = 1;
pub const RECENT_SIMHASH_AT: usize = 4;
pub const RECENT_CONTENT_AT: usize = RECENT_SIMHASH_AT + 8;
pub const RECENT_SKETCH_AT: usize = RECENT_CONTENT_AT + 8;

/// Bytes per recent record.
pub const RECENT_STRIDE: usize = RECENT_SKETCH_AT + 4 * RECENT_SKETCH;

/// The head byte of a record whose sketch did not fit: a commit reads the
/// article's packed fingerprint instead.
pub const RECENT_UNBOUNDED: u8 = 255;

/// The head byte of a deleted article's record.
pub const RECENT_DELETED: u8 = 0;

/// The byte of a flag that is set, in the strings of per-key flags a check
/// sends its commit (the full lists, the sets that may be empty): `'1'`,
/// else `'0'` (`flags` in `src/index/redis_index/commit.rs`).
pub const FLAG_SET: u8 = b'1';

/// Where a packed fingerprint's sketch starts: after its SimHash and content
/// hash (`encode_fingerprint` in `src/index/redis_index/codec.rs`).
pub const PACKED_SKETCH_AT: usize = 16;

/// Where a packed fingerprint's sketch count is, in bytes from its end (1:
/// the last byte): what `lua/prelude.lua` reads to find the end of its
/// sketch (`encode_fingerprint` in `src/index/redis_index/codec.rs`).
pub const PACKED_SKETCH_COUNT_AT: usize = 3;

/// Bytes of links a root's field of its `d:` hash holds (three or four
/// links); further links are appended to the root's own string
/// ([`Keys::more_links`]). A field is rewritten whole when a link is added:
/// unbounded, the thousandth copy of a story would rewrite 999 links. At
/// Redis's default `hash-max-listpack-value` (64) the `d:` hashes stay
/// compact listpacks, and most roots, which have a few duplicates, need no
/// key of their own (a key costs about 100 bytes).
pub const LINKS_INLINE_BYTES: usize = 64;

/// The key layout a bucket is written with (field `l` of its `n:` hash);
/// a bucket of another layout is refused (`docs/operations.md`, "Upgrading a
/// namespace").
pub const LAYOUT: &str = "4";

/// Buckets of this shape or more (sized for more than about 2 M articles:
/// `128 · 2^14`) have one block set per block position, see [`Keys::block`].
pub const POSITIONAL_BLOCK_BITS: u32 = 15;

/// Largest shape (at most 24 bits: the Lua scripts compute top bits from the
/// first 6 hex digits of a hash).
pub const MAX_SHAPE_BITS: u32 = 22;

/// The constants the Lua scripts share with this module, as Lua source: the
/// index scripts are loaded with this text in front of them
/// (`src/index/redis_index.rs`), so no number is written twice.
pub fn lua_constants() -> String {
    format!(
        "local HANDLES_PER_CHUNK = {HANDLES_PER_CHUNK}\n\
         local ARTICLES_PER_KEY = {ARTICLES_PER_KEY}\n\
         local POSITIONAL_BLOCK_BITS = {POSITIONAL_BLOCK_BITS}\n\
         local MAX_SHAPE_BITS = {MAX_SHAPE_BITS}\n\
         local RECENT_SLOTS = {RECENT_SLOTS}\n\
         local RECENT_STRIDE = {RECENT_STRIDE}\n\
         local LAYOUT = '{LAYOUT}'\n\
         local PACKED_SKETCH_COUNT_AT = {PACKED_SKETCH_COUNT_AT}\n\
         local PACKED_SKETCH_AT = {PACKED_SKETCH_AT}\n\
         local LINKS_INLINE_BYTES = {LINKS_INLINE_BYTES}\n\
         local RECENT_ID_AT = {RECENT_ID_AT}\n\
         local RECENT_SIMHASH_AT = {RECENT_SIMHASH_AT}\n\
         local RECENT_CONTENT_AT = {RECENT_CONTENT_AT}\n\
         local RECENT_SKETCH_AT = {RECENT_SKETCH_AT}\n\
         local RECENT_UNBOUNDED = {RECENT_UNBOUNDED}\n\
         local RECENT_DELETED = {RECENT_DELETED}\n\
         local FLAG_SET = {FLAG_SET}\n"
    )
}

/// The shape of a bucket expected to hold `articles`: `i:` keys are split by
/// the top `bits` bits of the id's hash, so that each holds about
/// [`ARTICLES_PER_KEY`] entries (between half and all of it).
/// `lua/commit.lua` computes the same when it opens a bucket.
pub fn shape_bits(articles: u64) -> u32 {
    let per_key = articles.div_ceil(ARTICLES_PER_KEY).max(1);
    (u64::BITS - (per_key - 1).leading_zeros()).min(MAX_SHAPE_BITS)
}

/// The first 64 bits of the SHA-1 of `id`'s UTF-8 bytes: what picks an id's
/// `i:` hash. SHA-1 because Lua scripts have it (`redis.sha1hex`) and so does a
/// shell (`printf %s ID | sha1sum`); nothing here needs it to be secure.
pub fn id_hash(id: &str) -> u64 {
    let digest = sha1_smol::Sha1::from(id).digest().bytes();
    u64::from_be_bytes(digest[..8].try_into().expect("SHA-1 has 20 bytes"))
}

/// The first 6 hex digits of the SHA-1 of `id` (its top 24 bits of
/// [`id_hash`]): what `lua/commit.lua` is given to name the id's `i:` hash
/// (shapes have at most 22 bits), since computing it there costs more.
pub fn id_hash_hex(id: &str) -> String {
    format!("{:06x}", id_hash(id) >> 40)
}

/// The top `bits` bits of a `width`-bit value in hex, zero-padded to
/// `ceil(bits / 4)` digits (at least one).
pub fn top_bits_hex(value: u64, width: u32, bits: u32) -> String {
    let top = if bits == 0 {
        0
    } else {
        value >> (width - bits)
    };
    let digits = bits.div_ceil(4).max(1) as usize;
    format!("{top:0digits$x}")
}

/// The label of the time bucket starting at `start_ms` (unix ms, UTC):
/// `YYYYMMDDHH`, readable in `redis-cli` and sorted like time.
pub fn bucket_label(start_ms: i64) -> String {
    let secs = start_ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let hour = secs.rem_euclid(86_400) / 3600;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}{m:02}{d:02}{hour:02}")
}

/// Start (unix ms) of the bucket labelled `label` (inverse of [`bucket_label`]).
pub fn bucket_start_of(label: &str) -> Option<i64> {
    if label.len() != 10 || !label.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| label[r].parse::<i64>().ok();
    let (y, m, d, h) = (num(0..4)?, num(4..6)?, num(6..8)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 {
        return None;
    }
    // H. Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600) * 1000)
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
        for t in [
            0,
            1_736_085_600_000,
            951_782_400_000,
            -3_600_000,
            4_102_444_800_000,
        ] {
            assert_eq!(bucket_start_of(&bucket_label(t)), Some(t));
        }
        assert_eq!(bucket_start_of("2025013"), None);
        assert_eq!(k.buckets(), "simdedup:{news}:buckets");
        assert_eq!(k.counter("2025010500"), "simdedup:{news}:n:2025010500");
        // printf %s article-1 | sha1sum → 897cadf9…; top 14 bits of 0x897cad = 0x225f.
        assert_eq!(id_hash("article-1") >> 40, 0x89_7cad);
        assert_eq!(
            k.ids("2025010500", 14, "article-1"),
            "simdedup:{news}:i:2025010500:225f"
        );
        assert_eq!(k.articles("L", 12_345), "simdedup:{news}:a:L:123");
        assert_eq!(k.articles("L", 99), "simdedup:{news}:a:L:0");
        assert_eq!(k.links("L", 100), "simdedup:{news}:d:L:1");
        assert_eq!(k.more_links("L", 1234), "simdedup:{news}:d:L:12:34");
        assert_eq!(k.recent("L"), "simdedup:{news}:r:L");
        assert_eq!((slot(12_345), slot(99), slot(100)), (45, 99, 0));
        assert_eq!(k.block("L", 14, 2, 0xab), "simdedup:{news}:b:L:00ab");
        assert_eq!(k.block("L", 15, 2, 0xab), "simdedup:{news}:b:L:2:00ab");
    }

    #[test]
    fn shapes_keep_keys_small() {
        assert_eq!(shape_bits(0), 0);
        assert_eq!(shape_bits(128), 0);
        assert_eq!(shape_bits(129), 1);
        assert_eq!(shape_bits(500_000), 12);
        assert_eq!(shape_bits(u64::MAX), MAX_SHAPE_BITS);
        for n in [1_000u64, 77_777, 500_000, 5_000_000] {
            let per_key = n as f64 / (1u64 << shape_bits(n)) as f64;
            assert!(per_key <= ARTICLES_PER_KEY as f64 && per_key > ARTICLES_PER_KEY as f64 / 2.0);
        }
        assert_eq!(top_bits_hex(0xfedc_ba98_7654_3210, 64, 13), "1fdb");
        assert_eq!(top_bits_hex(0xfedc_ba98, 32, 8), "fe");
        assert_eq!(top_bits_hex(0xfedc_ba98, 32, 0), "0");
    }

    #[test]
    fn lua_gets_the_constants_from_here() {
        let lua = lua_constants();
        assert!(lua.contains("local HANDLES_PER_CHUNK = 100\n"), "{lua}");
        assert!(lua.contains("local POSITIONAL_BLOCK_BITS = 15\n"), "{lua}");
        assert!(lua.contains("local RECENT_STRIDE = 68\n"), "{lua}");
        assert!(lua.contains("local LAYOUT = '4'\n"), "{lua}");
        assert!(lua.contains("local PACKED_SKETCH_COUNT_AT = 3\n"), "{lua}");
        assert!(lua.contains("local LINKS_INLINE_BYTES = 64\n"), "{lua}");
        assert!(lua.contains("local RECENT_SKETCH_AT = 20\n"), "{lua}");
        assert!(lua.contains("local FLAG_SET = 49\n"), "{lua}");
        assert_eq!(lua.lines().count(), 17);
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
