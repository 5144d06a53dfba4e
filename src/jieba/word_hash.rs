//! The index of the built-in IDF table (`idf.bin`): an open-addressing table
//! of the words' rows, which `build.rs` fills and `src/idf.rs` probes in place.
//! Both include this file, so that they hash and pack slots alike.

/// Bits of a slot that hold its row plus one (0: an empty slot); the bits
/// above hold a tag of the word's hash, which rules out most other words
/// without reading them.
pub const ROW_BITS: u32 = 19;

/// A 64-bit hash of `word`, every bit of it usable: the slot to start at is
/// its top bits, the tag its low 32 bits above [`ROW_BITS`].
pub fn word_hash(word: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (word.len() as u64).wrapping_mul(K);
    let mut mix = |piece: &[u8]| {
        let mut b = [0u8; 8];
        b[..piece.len()].copy_from_slice(piece);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(31);
    };
    let mut chunks = word.chunks_exact(8);
    for chunk in &mut chunks {
        mix(chunk);
    }
    if !chunks.remainder().is_empty() {
        mix(chunks.remainder());
    }
    // MurmurHash3's finalizer: each bit of the result depends on every bit.
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    h ^ (h >> 33)
}

/// The slot a word of hash `h` starts at, in a table of `2^bits` slots.
pub fn home_slot(h: u64, bits: u32) -> usize {
    (h >> (64 - bits)) as usize
}

/// The tag a slot of a word of hash `h` carries above its row.
pub fn tag(h: u64) -> u32 {
    (h as u32) >> ROW_BITS
}
