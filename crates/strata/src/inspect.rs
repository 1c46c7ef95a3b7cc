//! Decoding of the index blocks that tables carry, for inspection tools
//! (`strata sst`): what a NEXT directory block says about its table.

use strata_lsm::error::{Error, Result};

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

/// Decodes a NEXT directory block (the bytes of meta block
/// `next.<id>.dir`). `Error::Corruption` if it is not one.
pub fn next_directory(block: &[u8]) -> Result<NextDirectory> {
    let ty = match block.get(1) {
        Some(1) => KeyType::I64,
        Some(2) => KeyType::F64,
        Some(3) => KeyType::String,
        Some(4) => KeyType::Point,
        Some(5) => KeyType::Rect,
        _ => return Err(Error::corruption("bad NEXT directory block: key type")),
    };
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

/// The blocks of the side files of table `table` (of `table_size` bytes)
/// in the database directory `dir` (an online build's per-table index
/// files, `docs/format/sidefile.md`), each checked: per file, its name and
/// its (block name, bytes), in name order.
#[allow(clippy::type_complexity)]
pub fn side_file_blocks(
    dir: &std::path::Path,
    table: u64,
    table_size: u64,
) -> Result<Vec<(String, Vec<(String, Vec<u8>)>)>> {
    use crate::index::sidefile::{parse_name, SideFile};
    let fs: std::sync::Arc<dyn strata_lsm::io::Fs> = std::sync::Arc::new(strata_lsm::io::RealFs);
    let names = fs
        .list_dir(dir)
        .map_err(|e| Error::io(format!("list {}", dir.display()), e))?;
    let mut out = Vec::new();
    let mut names: Vec<String> = names
        .into_iter()
        .filter_map(|n| n.to_str().map(str::to_string))
        .collect();
    names.sort();
    for name in names {
        let Some((t, id)) = parse_name(&name) else {
            continue;
        };
        if t != table {
            continue;
        }
        let f = SideFile::open(&fs, dir, table, table_size, id)?;
        let mut blocks = Vec::new();
        for b in f.names() {
            if let Some(bytes) = f.block(&b)? {
                blocks.push((b, bytes));
            }
        }
        out.push((name, blocks));
    }
    Ok(out)
}
