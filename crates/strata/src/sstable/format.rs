//! Block handles, block trailers and the table footer.

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Current table format version, stored in the footer.
pub const TABLE_FORMAT_VERSION: u32 = 1;

/// Bytes after every block: compression type (1) + masked CRC32C (4).
pub const BLOCK_TRAILER_LEN: usize = 5;

/// Where a block lives in its table: `size` excludes the trailer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    pub fn new(offset: u64, size: u64) -> Self {
        BlockHandle { offset, size }
    }

    /// Appends `varint64(offset) ‖ varint64(size)`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        let _ = dst;
        todo!("sstable helper")
    }

    /// Decodes a handle, advancing `src`; `Error::Corruption` if truncated.
    pub fn decode_from(src: &mut &[u8]) -> Result<BlockHandle> {
        let _ = src;
        todo!("sstable helper")
    }
}
