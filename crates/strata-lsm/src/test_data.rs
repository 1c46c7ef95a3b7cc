//! Deterministic test bytes shared by unit tests of several layers (below
//! all of them, so no test makes one layer depend on another).

/// Deterministic test payload of `len` bytes, distinct per `seed`.
pub(crate) fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
