//! A hint to the processor that a value will be read soon.
//!
//! Fingerprinting reads tables larger than the caches (the dictionary's trie,
//! its words' features, the per-word counts) at indexes nothing predicts.
//! Asking for a line some steps before it is read lets those loads wait on
//! memory together instead of one after another. A hint changes no result.

/// Ask for the cache line holding `value`: on x86-64 a prefetch into every
/// cache level; elsewhere nothing.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 (SSE, which every x86-64 processor has) only hints
    // at an address: it reads no value into the program and never faults.
    // The address is that of a live reference besides.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
