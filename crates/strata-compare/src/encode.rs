//! Order-preserving byte encodings shared by the key-value peers (fjall,
//! RocksDB), whose secondary indexes are keyed by `encoded attribute ‖ pk`.
//!
//! Both encodings are 8 bytes, big-endian, so that comparing the bytes
//! (what an LSM tree does) compares the numbers; they match Strata's own
//! (`docs/format/next.md`):
//! * `i64`: the two's-complement bits with the sign bit flipped;
//! * `f64`: the IEEE bits with all bits flipped for negatives and only the
//!   sign bit flipped otherwise (the standard total-order trick). `-0.0`
//!   sorts just below `+0.0`, so callers normalise zeros (see
//!   [`normalize_zero`]); NaN is never indexed.
//!
//! Both also map onto `u64` ([`i64_to_ordered`], [`f64_to_ordered`]), which
//! the peers use to compute range bounds.

/// `v` as a `u64` whose unsigned order is `v`'s order.
pub fn i64_to_ordered(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// Inverse of [`i64_to_ordered`].
pub fn ordered_to_i64(u: u64) -> i64 {
    (u ^ (1 << 63)) as i64
}

/// `v` as a `u64` whose unsigned order is `v`'s numeric order (for
/// non-NaN values, with `-0.0 < +0.0`).
pub fn f64_to_ordered(v: f64) -> u64 {
    let bits = v.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    }
}

/// Inverse of [`f64_to_ordered`].
pub fn ordered_to_f64(u: u64) -> f64 {
    let bits = if u >> 63 == 1 { u ^ (1 << 63) } else { !u };
    f64::from_bits(bits)
}

/// Big-endian 8-byte encoding of `v` (order-preserving).
pub fn encode_i64(v: i64) -> [u8; 8] {
    i64_to_ordered(v).to_be_bytes()
}

/// Inverse of [`encode_i64`].
pub fn decode_i64(b: [u8; 8]) -> i64 {
    ordered_to_i64(u64::from_be_bytes(b))
}

/// Big-endian 8-byte encoding of `v` (order-preserving for non-NaN values).
pub fn encode_f64(v: f64) -> [u8; 8] {
    f64_to_ordered(v).to_be_bytes()
}

/// Inverse of [`encode_f64`].
pub fn decode_f64(b: [u8; 8]) -> f64 {
    ordered_to_f64(u64::from_be_bytes(b))
}

/// `+0.0` for either zero, `v` otherwise: stored values and query bounds go
/// through this so that `-0.0` and `+0.0` (equal numbers) encode alike.
pub fn normalize_zero(v: f64) -> f64 {
    if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// The first 8 bytes of `b` as a big-endian `u64`, if there are 8.
pub fn be_u64(b: &[u8]) -> Option<u64> {
    let a: [u8; 8] = b.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_order_and_roundtrip() {
        let vals = [
            i64::MIN,
            i64::MIN + 1,
            -1_000_000,
            -1,
            0,
            1,
            42,
            i64::MAX - 1,
            i64::MAX,
        ];
        for w in vals.windows(2) {
            assert!(encode_i64(w[0]) < encode_i64(w[1]), "{w:?}");
        }
        for v in vals {
            assert_eq!(decode_i64(encode_i64(v)), v);
        }
    }

    #[test]
    fn f64_order_and_roundtrip() {
        let vals = [
            f64::NEG_INFINITY,
            f64::MIN,
            -1e300,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1e-300,
            1.0,
            1.5,
            f64::MAX,
            f64::INFINITY,
        ];
        for w in vals.windows(2) {
            assert!(encode_f64(w[0]) < encode_f64(w[1]), "{w:?}");
        }
        for v in vals {
            assert_eq!(decode_f64(encode_f64(v)).to_bits(), v.to_bits());
        }
        assert_eq!(encode_f64(normalize_zero(-0.0)), encode_f64(0.0));
    }
}
