//! Block handles, block trailers and the table footer.
//!
//! Every block in a table file is followed by a 5-byte trailer (compression
//! type, masked CRC32C of contents and type), and the file ends with a
//! fixed-size footer that locates the metaindex and index blocks. The byte
//! layout is specified in `docs/format/sstable.md`.

#![deny(clippy::indexing_slicing)]

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::coding::{
    decode_fixed32, decode_fixed64, get_varint64, masked_crc, masked_crc2, put_fixed32,
    put_fixed64, put_varint64,
};
use crate::error::{Error, Result};

/// Per-block compression of SSTable blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is.
    None = 0,
    /// LZ4 (a block is stored compressed only if that saves at least 1/8).
    Lz4 = 1,
}

/// Current table format version, stored in the footer.
pub const TABLE_FORMAT_VERSION: u32 = 1;

/// Bytes after every block: compression type (1) + masked CRC32C (4).
pub const BLOCK_TRAILER_LEN: usize = 5;

/// Longest encoding of a [`BlockHandle`] (two 10-byte varints).
pub const MAX_BLOCK_HANDLE_LEN: usize = 20;

/// Bytes of the footer's handle area (two handles, zero padded).
pub const FOOTER_HANDLES_LEN: usize = 2 * MAX_BLOCK_HANDLE_LEN;

/// Total footer length: handles (40) + version (4) + CRC (4) + magic (8).
pub const FOOTER_LEN: usize = FOOTER_HANDLES_LEN + 4 + 4 + 8;

/// Last 8 bytes of every table file ("STRATA" followed by 0x0001).
pub const TABLE_MAGIC: u64 = 0x5354_5241_5441_0001;

/// Compression type byte: contents stored as is.
pub const BLOCK_TYPE_NONE: u8 = 0;
/// Compression type byte: contents are `fixed32 raw_len ‖ LZ4 block`.
pub const BLOCK_TYPE_LZ4: u8 = 1;

/// Where a block lives in its table: `size` excludes the trailer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct BlockHandle {
    /// Offset of the block in the file.
    pub offset: u64,
    /// Size of the block contents, without the trailer.
    pub size: u64,
}

impl BlockHandle {
    /// The handle of the block at `offset` of `size` bytes.
    pub fn new(offset: u64, size: u64) -> Self {
        BlockHandle { offset, size }
    }

    /// Appends `varint64(offset) ‖ varint64(size)`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    /// Decodes a handle, advancing `src`; `Error::Corruption` if truncated.
    pub fn decode_from(src: &mut &[u8]) -> Result<BlockHandle> {
        let offset =
            get_varint64(src).ok_or_else(|| Error::corruption("block handle offset truncated"))?;
        let size =
            get_varint64(src).ok_or_else(|| Error::corruption("block handle size truncated"))?;
        Ok(BlockHandle { offset, size })
    }

    /// The encoded handle as a new vector.
    pub fn encoded(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(MAX_BLOCK_HANDLE_LEN);
        self.encode_to(&mut v);
        v
    }

    /// Decodes a handle that must occupy all of `bytes`.
    pub fn decode_exact(bytes: &[u8]) -> Result<BlockHandle> {
        let mut src = bytes;
        let h = BlockHandle::decode_from(&mut src)?;
        if !src.is_empty() {
            return Err(Error::corruption("trailing bytes after block handle"));
        }
        Ok(h)
    }
}

/// The fixed-size record at the end of a table file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// The metaindex block.
    pub metaindex: BlockHandle,
    /// The index block.
    pub index: BlockHandle,
}

impl Footer {
    /// Exactly [`FOOTER_LEN`] bytes: handles padded to 40 bytes, fixed32
    /// version, fixed32 masked CRC32C of the first 44 bytes, fixed64 magic.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        self.metaindex.encode_to(&mut v);
        self.index.encode_to(&mut v);
        v.resize(FOOTER_HANDLES_LEN, 0);
        put_fixed32(&mut v, TABLE_FORMAT_VERSION);
        let crc = masked_crc(&v);
        put_fixed32(&mut v, crc);
        put_fixed64(&mut v, TABLE_MAGIC);
        debug_assert_eq!(v.len(), FOOTER_LEN);
        v
    }

    /// Decodes and verifies a footer read from `file` (named in errors).
    pub fn decode(buf: &[u8], file: &str) -> Result<Footer> {
        let bad = |what: &str| Error::corruption(format!("table {file}: footer {what}"));
        if buf.len() != FOOTER_LEN {
            return Err(bad(&format!("is {} bytes, want {FOOTER_LEN}", buf.len())));
        }
        let part = |range: std::ops::Range<usize>| buf.get(range).ok_or_else(|| bad("truncated"));
        let magic =
            decode_fixed64(part(FOOTER_LEN - 8..FOOTER_LEN)?).ok_or_else(|| bad("truncated"))?;
        if magic != TABLE_MAGIC {
            return Err(bad(&format!(
                "has bad magic {magic:#018x} (not a table file)"
            )));
        }
        let stored_crc = decode_fixed32(part(FOOTER_HANDLES_LEN + 4..FOOTER_LEN)?)
            .ok_or_else(|| bad("truncated"))?;
        if masked_crc(part(0..FOOTER_HANDLES_LEN + 4)?) != stored_crc {
            return Err(bad("checksum mismatch"));
        }
        let version = decode_fixed32(part(FOOTER_HANDLES_LEN..FOOTER_LEN)?)
            .ok_or_else(|| bad("truncated"))?;
        if version != TABLE_FORMAT_VERSION {
            return Err(bad(&format!(
                "has unsupported format version {version} (this build reads version {TABLE_FORMAT_VERSION})"
            )));
        }
        let mut src = part(0..FOOTER_HANDLES_LEN)?;
        let metaindex =
            BlockHandle::decode_from(&mut src).map_err(|_| bad("metaindex handle is malformed"))?;
        let index =
            BlockHandle::decode_from(&mut src).map_err(|_| bad("index handle is malformed"))?;
        Ok(Footer { metaindex, index })
    }
}

/// Compresses block contents for writing. Returns the stored bytes and the
/// type byte; LZ4 output is used only if it saves at least 1/8 of the size.
pub fn compress_block(raw: &[u8], compression: Compression) -> (Cow<'_, [u8]>, u8) {
    match compression {
        Compression::None => (Cow::Borrowed(raw), BLOCK_TYPE_NONE),
        Compression::Lz4 => {
            let c = lz4_flex::block::compress_prepend_size(raw);
            if c.len() < raw.len() - raw.len() / 8 {
                (Cow::Owned(c), BLOCK_TYPE_LZ4)
            } else {
                (Cow::Borrowed(raw), BLOCK_TYPE_NONE)
            }
        }
    }
}

/// The 5-byte trailer of a block whose stored bytes are `contents`.
pub fn block_trailer(contents: &[u8], block_type: u8) -> [u8; BLOCK_TRAILER_LEN] {
    let crc = masked_crc2(contents, &[block_type]).to_le_bytes();
    [block_type, crc[0], crc[1], crc[2], crc[3]]
}

/// Verifies the trailer checksum of a block read from disk (`raw` is the
/// stored contents followed by the trailer); returns the length of the
/// stored contents and the compression type byte. Errors name the block's
/// size; the caller adds the file and offset.
pub fn verify_block(raw: &[u8], handle: BlockHandle) -> Result<(usize, u8)> {
    let bad = |what: &str| Error::corruption(format!("block of {} bytes: {what}", handle.size));
    let Some(n) = raw.len().checked_sub(BLOCK_TRAILER_LEN) else {
        return Err(bad("shorter than its trailer"));
    };
    let (checked, stored) = raw.split_at(n + 1); // n + 1 <= raw.len(): the trailer is 5 bytes
    let Some(&block_type) = checked.last() else {
        return Err(bad("trailer truncated"));
    };
    let stored = decode_fixed32(stored).ok_or_else(|| bad("trailer truncated"))?;
    if masked_crc(checked) != stored {
        return Err(bad("checksum mismatch"));
    }
    Ok((n, block_type))
}

/// Verifies and decompresses a block read from disk. `raw` is exactly the
/// stored contents followed by the trailer (`handle.size + 5` bytes).
pub fn decode_block(mut raw: Vec<u8>, handle: BlockHandle) -> Result<Vec<u8>> {
    // The caller adds the file and `handle.offset`.
    let bad = |what: &str| Error::corruption(format!("block of {} bytes: {what}", handle.size));
    let (n, block_type) = match verify_block(&raw, handle) {
        Ok(v) => v,
        Err(e) => {
            crate::io::recycle(raw);
            return Err(e);
        }
    };
    raw.truncate(n);
    match block_type {
        BLOCK_TYPE_NONE => Ok(raw),
        BLOCK_TYPE_LZ4 => {
            let want = decode_fixed32(&raw).ok_or_else(|| bad("LZ4 size prefix truncated"))?;
            // LZ4 cannot expand more than ~255x; refuse absurd sizes before
            // allocating for them.
            if (want as u64) > (raw.len() as u64).saturating_mul(255) + 64 {
                return Err(bad("LZ4 size prefix is implausible"));
            }
            let out = lz4_flex::block::decompress_size_prepended(&raw)
                .map_err(|e| bad(&format!("LZ4 decompression failed: {e}")))?;
            crate::io::recycle(raw);
            if out.len() != want as usize {
                return Err(bad("LZ4 output length differs from its prefix"));
            }
            Ok(out)
        }
        t => Err(bad(&format!("unknown compression type {t}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_roundtrip_and_truncation() {
        let h = BlockHandle::new(1 << 40, 4096);
        let enc = h.encoded();
        assert_eq!(BlockHandle::decode_exact(&enc).unwrap(), h);
        for cut in 0..enc.len() {
            assert!(BlockHandle::decode_from(&mut &enc[..cut]).is_err());
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(BlockHandle::decode_exact(&long).is_err());
        let max = BlockHandle::new(u64::MAX, u64::MAX).encoded();
        assert_eq!(max.len(), MAX_BLOCK_HANDLE_LEN);
    }

    #[test]
    fn footer_roundtrip_and_every_flip_detected() {
        let f = Footer {
            metaindex: BlockHandle::new(12345, 67),
            index: BlockHandle::new(12417, 890),
        };
        let enc = f.encode();
        assert_eq!(enc.len(), FOOTER_LEN);
        assert_eq!(Footer::decode(&enc, "t").unwrap(), f);
        for i in 0..enc.len() {
            for bit in 0..8 {
                let mut b = enc.clone();
                b[i] ^= 1 << bit;
                let e = Footer::decode(&b, "t").unwrap_err();
                assert!(e.is_corruption());
            }
        }
        assert!(Footer::decode(&enc[1..], "t").is_err());
    }

    #[test]
    fn footer_rejects_other_version() {
        let f = Footer {
            metaindex: BlockHandle::new(1, 2),
            index: BlockHandle::new(3, 4),
        };
        let mut enc = f.encode();
        enc[FOOTER_HANDLES_LEN..FOOTER_HANDLES_LEN + 4].copy_from_slice(&2u32.to_le_bytes());
        let crc = masked_crc(&enc[..FOOTER_HANDLES_LEN + 4]);
        enc[FOOTER_HANDLES_LEN + 4..FOOTER_HANDLES_LEN + 8].copy_from_slice(&crc.to_le_bytes());
        let e = Footer::decode(&enc, "000007.sst").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unsupported format version 2"), "{msg}");
        assert!(msg.contains("000007.sst"), "{msg}");
    }

    #[test]
    fn block_trailer_roundtrip_both_compressions() {
        let raw: Vec<u8> = (0..4000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Lz4] {
            let (stored, t) = compress_block(&raw, c);
            if c == Compression::Lz4 {
                assert_eq!(t, BLOCK_TYPE_LZ4);
                assert!(stored.len() < raw.len());
            }
            let mut file = stored.to_vec();
            file.extend_from_slice(&block_trailer(&stored, t));
            let h = BlockHandle::new(0, stored.len() as u64);
            assert_eq!(decode_block(file.clone(), h).unwrap(), raw);
            for i in 0..file.len().min(64) {
                let mut b = file.clone();
                b[i] ^= 0x40;
                assert!(decode_block(b, h).is_err());
            }
            assert!(decode_block(file[..3].to_vec(), h).is_err());
        }
    }
}
