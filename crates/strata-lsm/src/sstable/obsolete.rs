//! Obsolete-entry bitmaps: an immutable bitmap written with a table that
//! marks entries every reader must treat as absent (Luo & Carey, PVLDB
//! 2019, §4.4, "immutable bitmap").
//!
//! A table observer may report, when its table is finished, entries of that
//! table that are already obsolete ([`crate::hooks::TableObserver::obsolete_entries`]).
//! The builder stores them in the meta block [`OBSOLETE_BLOCK_NAME`]; every
//! read of the table (point lookups, batched lookups, iterators, and so
//! compaction, which therefore removes the entries physically at the
//! table's next merge) skips a marked entry as if it were not there.
//!
//! An entry is identified by its data block (the block's file offset) and
//! its ordinal in that block. Blocks restart prefix compression exactly
//! every `restart_interval` entries (see [`super::block`]), so a reader
//! positioned at restart point `i` knows it is at ordinal
//! `i × restart_interval`. Only blocks with at least one marked entry are
//! stored. Layout (`docs/format/sstable.md`, "Obsolete bitmap"):
//!
//! ```text
//! u8 version = 1 ‖ varint32 restart_interval ‖ varint32 num_blocks
//! ‖ num_blocks × (varint64 block offset ‖ varint32 n ‖ n bytes of bits)
//! ```
//!
//! Bit `j` of a block (byte `j / 8`, bit `j % 8`, least significant first)
//! marks the block's entry of ordinal `j`. Offsets are strictly increasing.

#![deny(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::Arc;

use crate::coding::{get_varint32, get_varint64, put_varint32, put_varint64};
use crate::error::{Error, Result};

/// Metaindex name of the obsolete-entry bitmap block.
pub const OBSOLETE_BLOCK_NAME: &str = "strata.obsolete";
const VERSION: u8 = 1;

/// The marks of one data block.
#[derive(Debug, Clone)]
pub struct BlockMarks {
    /// Bit `i` (LSB first) set: the block's `i`-th entry is obsolete.
    pub bits: Arc<[u8]>,
    /// Entries between restart points in the table's blocks.
    pub restart_interval: usize,
}

impl BlockMarks {
    /// Is the entry of ordinal `i` marked?
    pub fn is_marked(&self, i: usize) -> bool {
        self.bits
            .get(i / 8)
            .is_some_and(|b| b & (1 << (i % 8)) != 0)
    }
}

/// The obsolete-entry bitmap of one table.
#[derive(Debug, Clone, Default)]
pub struct ObsoleteMap {
    restart_interval: usize,
    blocks: HashMap<u64, Arc<[u8]>>,
    marked: u64,
}

impl ObsoleteMap {
    /// Builds the map from `(block offset, ordinal in block)` marks
    /// (duplicates are harmless).
    pub fn from_marks(restart_interval: usize, marks: &[(u64, u32)]) -> ObsoleteMap {
        let mut blocks: HashMap<u64, Vec<u8>> = HashMap::new();
        for &(off, i) in marks {
            let i = i as usize;
            let bits = blocks.entry(off).or_default();
            if bits.len() <= i / 8 {
                bits.resize(i / 8 + 1, 0);
            }
            if let Some(byte) = bits.get_mut(i / 8) {
                *byte |= 1 << (i % 8);
            }
        }
        let marked = blocks
            .values()
            .map(|b| b.iter().map(|x| x.count_ones() as u64).sum::<u64>())
            .sum();
        ObsoleteMap {
            restart_interval: restart_interval.max(1),
            blocks: blocks.into_iter().map(|(k, v)| (k, v.into())).collect(),
            marked,
        }
    }

    /// Number of marked entries.
    pub fn marked(&self) -> u64 {
        self.marked
    }

    /// True if no entry is marked.
    pub fn is_empty(&self) -> bool {
        self.marked == 0
    }

    /// The marks of the data block at `offset`, if it has any.
    pub fn block(&self, offset: u64) -> Option<BlockMarks> {
        self.blocks.get(&offset).map(|bits| BlockMarks {
            bits: Arc::clone(bits),
            restart_interval: self.restart_interval,
        })
    }

    /// The encoding stored in the table's obsolete-bitmap meta block.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        put_varint32(&mut out, self.restart_interval as u32);
        let mut blocks: Vec<_> = self.blocks.iter().collect();
        blocks.sort_unstable_by_key(|&(off, _)| *off);
        put_varint32(&mut out, blocks.len() as u32);
        for (&off, bits) in blocks {
            put_varint64(&mut out, off);
            put_varint32(&mut out, bits.len() as u32);
            out.extend_from_slice(bits);
        }
        out
    }

    /// Decodes [`ObsoleteMap::encode`]'s output; `Error::Corruption` if it
    /// is truncated, has trailing bytes or an unknown version.
    pub fn decode(bytes: &[u8]) -> Result<ObsoleteMap> {
        let bad = |what: &str| Error::corruption(format!("obsolete bitmap: {what}"));
        let (&version, mut src) = bytes.split_first().ok_or_else(|| bad("empty"))?;
        if version != VERSION {
            return Err(bad(&format!("unknown version {version}")));
        }
        let restart_interval =
            get_varint32(&mut src).ok_or_else(|| bad("truncated header"))? as usize;
        if restart_interval == 0 {
            return Err(bad("restart interval 0"));
        }
        let n = get_varint32(&mut src).ok_or_else(|| bad("truncated header"))?;
        let mut blocks = HashMap::new();
        let mut marked = 0u64;
        let mut prev: Option<u64> = None;
        for _ in 0..n {
            let off = get_varint64(&mut src).ok_or_else(|| bad("truncated block offset"))?;
            if prev.is_some_and(|p| off <= p) {
                return Err(bad("block offsets out of order"));
            }
            prev = Some(off);
            let len = get_varint32(&mut src).ok_or_else(|| bad("truncated length"))? as usize;
            if len > src.len() {
                return Err(bad("truncated bits"));
            }
            let (bits, rest) = src.split_at(len);
            marked += bits.iter().map(|x| x.count_ones() as u64).sum::<u64>();
            blocks.insert(off, Arc::from(bits));
            src = rest;
        }
        if !src.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(ObsoleteMap {
            restart_interval,
            blocks,
            marked,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_lookup() {
        let m = ObsoleteMap::from_marks(16, &[(4096, 0), (4096, 9), (0, 3), (4096, 9)]);
        assert_eq!(m.marked(), 3);
        let d = ObsoleteMap::decode(&m.encode()).unwrap();
        assert_eq!(d.marked(), 3);
        let b = d.block(4096).unwrap();
        assert_eq!(b.restart_interval, 16);
        assert!(b.is_marked(0) && b.is_marked(9));
        assert!(!b.is_marked(1) && !b.is_marked(8) && !b.is_marked(1000));
        assert!(d.block(0).unwrap().is_marked(3));
        assert!(d.block(8192).is_none());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = ObsoleteMap::from_marks(16, &[(1 << 40, 7), (5, 1)]).encode();
        for n in 0..bytes.len() {
            assert!(ObsoleteMap::decode(&bytes[..n]).is_err(), "prefix {n}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(ObsoleteMap::decode(&extra).is_err());
        let mut v2 = bytes;
        v2[0] = 2;
        assert!(ObsoleteMap::decode(&v2).is_err());
    }
}
