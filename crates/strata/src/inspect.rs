//! Decoding of the index blocks that tables carry, for inspection tools
//! (`strata sst`): what a NEXT directory block and an Embedded index block
//! say about their table.

use strata_lsm::error::{Error, Result};

use crate::index::embedded::{self, Zone};
use crate::index::next::table::{decode_dir, Envelope};
use crate::index::{IndexValue, KeyType};

/// What a NEXT directory block (meta block `next.<index id>.dir`) holds.
#[derive(Debug, Clone, PartialEq)]
pub struct NextDirectory {
    /// Type of the index's attribute.
    pub key_type: KeyType,
    /// Format version of the table's NEXT blocks.
    pub version: u8,
    /// Data blocks of the table that hold at least one indexed entry.
    pub data_blocks: usize,
    /// Secondary index blocks (`next.<index id>.<n>`).
    pub secondary_blocks: u32,
    /// One entry per run of secondary entries: the secondary block it
    /// lies in and the values it covers, `[lo, hi]` (spatial: the corners
    /// of the bounding rectangle, as points).
    pub ranges: Vec<(u32, IndexValue, IndexValue)>,
}

/// Key type of an index block's type byte (the same numbering in NEXT and
/// Embedded blocks).
fn key_type_of(byte: Option<&u8>, what: &str) -> Result<KeyType> {
    match byte {
        Some(1) => Ok(KeyType::I64),
        Some(2) => Ok(KeyType::F64),
        Some(3) => Ok(KeyType::String),
        Some(4) => Ok(KeyType::Point),
        Some(5) => Ok(KeyType::Rect),
        _ => Err(Error::corruption(format!("bad {what}: key type"))),
    }
}

/// Decodes a NEXT directory block (the bytes of meta block
/// `next.<id>.dir`). `Error::Corruption` if it is not one.
pub fn next_directory(block: &[u8]) -> Result<NextDirectory> {
    let ty = key_type_of(block.get(1), "NEXT directory block")?;
    let t = decode_dir(block, ty)?;
    let mut ranges = Vec::with_capacity(t.entries.len());
    for e in &t.entries {
        let (lo, hi) = match &e.env {
            Envelope::Scalar(lo, hi) => (IndexValue::decode(ty, lo)?, IndexValue::decode(ty, hi)?),
            Envelope::Rect([x1, y1, x2, y2]) => {
                (IndexValue::Point([*x1, *y1]), IndexValue::Point([*x2, *y2]))
            }
        };
        ranges.push((e.sec_block, lo, hi));
    }
    Ok(NextDirectory {
        key_type: ty,
        version: t.version,
        data_blocks: t.handles.len(),
        secondary_blocks: t.sec_blocks,
        ranges,
    })
}

/// One data block's entry in an Embedded index block.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedBlock {
    /// File offset of the data block.
    pub offset: u64,
    /// Indexed values in the block (every version of every record).
    pub values: u32,
    /// The block's zone map: `[min, max]` (spatial: the corners of the
    /// bounding rectangle, as points).
    pub zone: (IndexValue, IndexValue),
    /// Bytes of the block's Bloom filter (`None`: no filter).
    pub filter_bytes: Option<usize>,
    /// The block's first key continues the previous block.
    pub continues: bool,
}

/// What an Embedded index block (meta block `embedded.<index id>`) holds.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedZones {
    /// Type of the index's attribute.
    pub key_type: KeyType,
    /// Indexed values in the table.
    pub values: u64,
    /// The table's zone map (`None` when nothing in it is indexed).
    pub zone: Option<(IndexValue, IndexValue)>,
    /// The data blocks holding at least one indexed value, in file order.
    pub blocks: Vec<EmbeddedBlock>,
}

fn zone_bounds(ty: KeyType, z: &Zone) -> Result<(IndexValue, IndexValue)> {
    Ok(match z {
        Zone::Scalar(lo, hi) => (IndexValue::decode(ty, lo)?, IndexValue::decode(ty, hi)?),
        Zone::Rect([x1, y1, x2, y2]) => {
            (IndexValue::Point([*x1, *y1]), IndexValue::Point([*x2, *y2]))
        }
    })
}

/// Decodes an Embedded index block (the bytes of meta block
/// `embedded.<id>`), with every check the engine makes when it opens the
/// table. `Error::Corruption` if it is not one.
pub fn embedded_zones(block: &[u8]) -> Result<EmbeddedZones> {
    let ty = key_type_of(block.get(1), "embedded index block")?;
    let t = embedded::decode(block, ty, "inspected block")?;
    let zone = t.zone.as_ref().map(|z| zone_bounds(ty, z)).transpose()?;
    let mut blocks = Vec::with_capacity(t.blocks.len());
    for b in &t.blocks {
        blocks.push(EmbeddedBlock {
            offset: b.handle.offset,
            values: b.values,
            zone: zone_bounds(ty, &b.zone)?,
            filter_bytes: b.bloom.as_ref().map(|f| f.size()),
            continues: b.continues,
        });
    }
    Ok(EmbeddedZones {
        key_type: ty,
        values: t.values,
        zone,
        blocks,
    })
}
