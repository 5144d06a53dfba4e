//! SimHash-64 (Charikar 2002) over weighted features, and Hamming distance.
//!
//! Each feature is hashed to 64 bits with SipHash-1-3 under fixed keys over its raw
//! UTF-8 bytes (nothing appended, so any language can reproduce it). Every bit of
//! the hash adds the feature's weight to a per-bit sum when set and subtracts it
//! when clear; the fingerprint's bit is 1 where the sum is positive.
//!
//! Weights are fixed-point integers ([`quantize`]): integer sums do not depend on the
//! order features are added in, so every implementation gets the same bits.

use siphasher::sip::SipHasher13;

/// SipHash key half 0: the ASCII bytes `simdedup` read little-endian.
pub const SIP_KEY_0: u64 = u64::from_le_bytes(*b"simdedup");
/// SipHash key half 1: the ASCII bytes `fprintv1` read little-endian.
pub const SIP_KEY_1: u64 = u64::from_le_bytes(*b"fprintv1");

/// The 64-bit hash used for every feature, sentence and content hash in the fingerprint.
#[inline]
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    SipHasher13::new_with_keys(SIP_KEY_0, SIP_KEY_1).hash(bytes)
}

/// A real weight as the integer SimHash adds: `round(weight × 1000)` (ties away
/// from zero), at least 1 so no feature is silently dropped.
#[inline]
pub fn quantize(weight: f64) -> i64 {
    ((weight * 1000.0).round() as i64).max(1)
}

/// A streaming SipHash-1-3 with the same keys: writing pieces one after another
/// gives [`hash_bytes`] of their concatenation.
pub fn content_hasher() -> SipHasher13 {
    SipHasher13::new_with_keys(SIP_KEY_0, SIP_KEY_1)
}

/// Accumulates weighted features into a SimHash.
///
/// The spec's per-bit sum is `Σ ±w`; it equals `2·S − T`, where `S` sums the
/// weights of the features with that bit set and `T` all weights. Rather than
/// touching up to 64 counters per feature, each feature adds its weight to one
/// bin per 4-bit nibble of its hash (16 adds: bin `value` of nibble `j`), and
/// [`SimHasher::finish`] recovers every `S` from the bins: `S` of bit `4j + t` is
/// the sum of nibble `j`'s bins whose value has bit `t` set. The integers are
/// exactly the same, so is the result.
#[derive(Debug, Clone, Default)]
pub struct SimHasher {
    /// `nibbles[j][v]`: total weight of the features whose nibble `j` is `v`.
    nibbles: [[i64; 16]; 16],
    total: i64,
}

impl SimHasher {
    /// Add a feature with its (real) weight.
    #[inline]
    pub fn add(&mut self, feature: &str, weight: f64) {
        self.add_hash(hash_bytes(feature.as_bytes()), quantize(weight));
    }

    /// Add an already hashed feature with an integer weight.
    #[inline]
    pub fn add_hash(&mut self, hash: u64, weight: i64) {
        self.total += weight;
        for (j, bins) in self.nibbles.iter_mut().enumerate() {
            bins[(hash >> (4 * j)) as usize & 15] += weight;
        }
    }

    /// Bit `i` of the result is 1 where the spec's sum for bit `i`, `2·S − T`, is > 0.
    pub fn finish(&self) -> u64 {
        let mut out = 0u64;
        for (j, bins) in self.nibbles.iter().enumerate() {
            for t in 0..4 {
                let set: i64 = bins
                    .iter()
                    .enumerate()
                    .filter(|(v, _)| v & (1 << t) != 0)
                    .map(|(_, &w)| w)
                    .sum();
                if 2 * set > self.total {
                    out |= 1 << (4 * j + t);
                }
            }
        }
        out
    }
}

/// Number of differing bits.
#[inline]
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// The four 16-bit blocks of a SimHash, most significant first. Two hashes within
/// Hamming distance 3 share at least one block exactly (pigeonhole), which is what
/// the index looks up.
#[inline]
pub fn blocks(hash: u64) -> [u16; 4] {
    [
        (hash >> 48) as u16,
        (hash >> 32) as u16,
        (hash >> 16) as u16,
        hash as u16,
    ]
}

/// Format a hash as 16 lowercase hex digits (the form used on the wire and in Redis).
pub fn to_hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// Parse 16 hex digits.
pub fn from_hex(s: &str) -> Option<u64> {
    (s.len() == 16)
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_documented_ascii() {
        assert_eq!(SIP_KEY_0.to_le_bytes(), *b"simdedup");
        assert_eq!(SIP_KEY_1.to_le_bytes(), *b"fprintv1");
    }

    #[test]
    fn streaming_hash_equals_one_shot() {
        use std::hash::Hasher;
        let mut h = content_hasher();
        h.write(b"abc");
        h.write(b"");
        h.write("中文def".as_bytes());
        assert_eq!(h.finish(), hash_bytes("abc中文def".as_bytes()));
    }

    #[test]
    fn single_feature_simhash_is_its_hash() {
        let mut s = SimHasher::default();
        s.add("hello", 1.0);
        assert_eq!(s.finish(), hash_bytes(b"hello"));
    }

    #[test]
    fn weights_decide_conflicts() {
        let (a, b) = (hash_bytes(b"a"), hash_bytes(b"b"));
        let mut s = SimHasher::default();
        s.add("a", 3.0);
        s.add("b", 1.0);
        assert_eq!(s.finish(), a);
        let mut s = SimHasher::default();
        s.add("a", 1.0);
        s.add("b", 3.0);
        assert_eq!(s.finish(), b);
    }

    #[test]
    fn quantize_rounds_and_keeps_tiny_weights() {
        assert_eq!(quantize(13.900677652), 13901);
        assert_eq!(quantize(0.0004), 1);
        assert_eq!(quantize(2.0005), 2001);
    }

    #[test]
    fn order_does_not_matter() {
        let words = [
            ("alpha", 1.1),
            ("beta", 2.2),
            ("gamma", 3.3),
            ("delta", 0.7),
        ];
        let mut a = SimHasher::default();
        words.iter().for_each(|(w, x)| a.add(w, *x));
        let mut b = SimHasher::default();
        words.iter().rev().for_each(|(w, x)| b.add(w, *x));
        assert_eq!(a.finish(), b.finish());
    }

    #[test]
    fn nibble_bins_equal_per_bit_sums() {
        // The spec's accumulation, literally, against SimHasher on many features.
        let mut sums = [0i64; 64];
        let mut s = SimHasher::default();
        for i in 0..500u64 {
            let h = hash_bytes(&i.to_le_bytes());
            let w = quantize((i % 37) as f64 * 0.731 + 0.0004);
            for (bit, sum) in sums.iter_mut().enumerate() {
                *sum += if h >> bit & 1 == 1 { w } else { -w };
            }
            s.add_hash(h, w);
            let expected = sums
                .iter()
                .enumerate()
                .filter(|(_, &x)| x > 0)
                .fold(0u64, |acc, (bit, _)| acc | 1 << bit);
            assert_eq!(s.finish(), expected, "after {i}");
        }
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(SimHasher::default().finish(), 0);
    }

    #[test]
    fn pigeonhole_blocks() {
        let h = 0x0123_4567_89ab_cdef;
        assert_eq!(blocks(h), [0x0123, 0x4567, 0x89ab, 0xcdef]);
        // Flip 3 bits in 3 different blocks: the fourth still matches.
        let g = h ^ (1 << 63) ^ (1 << 40) ^ (1 << 20);
        assert_eq!(hamming(h, g), 3);
        assert_eq!(blocks(h)[3], blocks(g)[3]);
    }

    #[test]
    fn hex_round_trip() {
        assert_eq!(to_hex(0xab), "00000000000000ab");
        assert_eq!(from_hex("00000000000000ab"), Some(0xab));
        assert_eq!(from_hex("ab"), None);
        assert_eq!(from_hex("zz000000000000ab"), None);
    }
}
