//! Little-endian fixed-width integers and LEB128 varints, the primitives of
//! every on-disk format (see `docs/format/`).
//!
//! Decoders take a cursor (`&mut &[u8]`) and advance it; on truncated or
//! overlong input they return `None` and leave the cursor unspecified, so the
//! caller turns that into `Error::Corruption` with its own context.

#![deny(clippy::indexing_slicing)]

/// Appends `v` as 4 little-endian bytes.
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as 8 little-endian bytes.
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// The little-endian `u32` in the first 4 bytes of `src`; `None` if shorter.
#[inline]
pub fn decode_fixed32(src: &[u8]) -> Option<u32> {
    let b: [u8; 4] = src.get(..4)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// The little-endian `u64` in the first 8 bytes of `src`; `None` if shorter.
#[inline]
pub fn decode_fixed64(src: &[u8]) -> Option<u64> {
    let b: [u8; 8] = src.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Appends `v` as a LEB128 varint (1 to 5 bytes).
pub fn put_varint32(dst: &mut Vec<u8>, v: u32) {
    put_varint64(dst, v as u64)
}

/// Appends `v` as a LEB128 varint (1 to 10 bytes).
#[inline]
pub fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        dst.push(v as u8);
        return;
    }
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// Number of bytes `put_varint64(v)` writes.
#[inline]
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Reads a LEB128 varint and advances `src` past it; `None` if truncated
/// or longer than 64 bits.
#[inline]
pub fn get_varint64(src: &mut &[u8]) -> Option<u64> {
    // One byte, the common case of positions and small deltas.
    if let Some((&b, rest)) = src.split_first() {
        if b < 0x80 {
            *src = rest;
            return Some(u64::from(b));
        }
    }
    let mut result: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = src.split_first()?;
        *src = rest;
        let shift = 7 * i;
        if i == 9 && b > 1 {
            return None; // overlong: more than 64 bits
        }
        result |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(result);
        }
    }
    None
}

/// [`get_varint64`], `None` also if the value does not fit in a `u32`.
pub fn get_varint32(src: &mut &[u8]) -> Option<u32> {
    let v = get_varint64(src)?;
    u32::try_from(v).ok()
}

/// Reads a little-endian `u32` and advances `src` past it; `None` if
/// fewer than 4 bytes remain.
pub fn get_fixed32(src: &mut &[u8]) -> Option<u32> {
    let (head, rest) = src.split_first_chunk::<4>()?;
    *src = rest;
    Some(u32::from_le_bytes(*head))
}

/// Reads a little-endian `u64` and advances `src` past it; `None` if
/// fewer than 8 bytes remain.
pub fn get_fixed64(src: &mut &[u8]) -> Option<u64> {
    let (head, rest) = src.split_first_chunk::<8>()?;
    *src = rest;
    Some(u64::from_le_bytes(*head))
}

/// Appends `varint(len) ‖ bytes`.
#[inline]
pub fn put_length_prefixed(dst: &mut Vec<u8>, bytes: &[u8]) {
    put_varint64(dst, bytes.len() as u64);
    dst.extend_from_slice(bytes);
}

/// Reads `varint(len) ‖ bytes`, borrowing the bytes from `src`.
#[inline]
pub fn get_length_prefixed<'a>(src: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(get_varint64(src)?).ok()?;
    let (head, rest) = src.split_at_checked(len)?;
    *src = rest;
    Some(head)
}

/// CRC32C with LevelDB's masking, so that a CRC stored inside checksummed
/// data does not checksum to a fixed point.
pub fn masked_crc(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// The raw (unmasked) CRC32C of `crc`'s data followed by `data`:
/// `crc_append(crc_append(0, a), b)` is the CRC32C of `a ‖ b`, and
/// [`mask_crc`] of it is [`masked_crc`] of `a ‖ b`. For checksums
/// computed as bytes are produced.
pub fn crc_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// CRC32C of the concatenation of `a` and `b`, masked.
pub fn masked_crc2(a: &[u8], b: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(a), b))
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a raw CRC32C (the inverse of [`unmask_crc`]).
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The raw CRC32C of a masked one (the inverse of [`mask_crc`]).
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_and_lengths() {
        let vals = [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &vals {
            let before = buf.len();
            put_varint64(&mut buf, v);
            assert_eq!(buf.len() - before, varint_len(v));
        }
        let mut src = &buf[..];
        for &v in &vals {
            assert_eq!(get_varint64(&mut src), Some(v));
        }
        assert!(src.is_empty());
    }

    #[test]
    fn varint_rejects_truncated_and_overlong() {
        let mut buf = Vec::new();
        put_varint64(&mut buf, u64::MAX);
        for cut in 0..buf.len() {
            let mut src = &buf[..cut];
            assert_eq!(get_varint64(&mut src), None, "cut at {cut}");
        }
        let overlong = [0xffu8; 11];
        assert_eq!(get_varint64(&mut &overlong[..]), None);
        let mut big = Vec::new();
        put_varint64(&mut big, u32::MAX as u64 + 1);
        assert_eq!(get_varint32(&mut &big[..]), None);
    }

    #[test]
    fn length_prefixed_rejects_short_payload() {
        let mut buf = Vec::new();
        put_length_prefixed(&mut buf, b"hello");
        assert_eq!(get_length_prefixed(&mut &buf[..]), Some(&b"hello"[..]));
        assert_eq!(get_length_prefixed(&mut &buf[..buf.len() - 1]), None);
    }

    #[test]
    fn crc_mask_roundtrip() {
        let c = crc32c::crc32c(b"strata");
        assert_ne!(mask_crc(c), c);
        assert_eq!(unmask_crc(mask_crc(c)), c);
        assert_eq!(masked_crc2(b"str", b"ata"), masked_crc(b"strata"));
    }
}
