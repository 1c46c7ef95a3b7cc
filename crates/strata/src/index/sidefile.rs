//! Per-table index files: the structures an online build gives a table that
//! existed before its index (NEXT §5, lazy construction), kept beside the
//! table instead of rewriting it.
//!
//! A table written by a flush or compaction carries each index's blocks as
//! meta blocks (the table observer). A table that existed when an index
//! was created gets the same blocks — built by the same
//! [`super::strategy::TableIndexBuilder`] from one read of the table, so
//! NEXT's secondary entries point into the table's existing data blocks —
//! in a file `NNNNNN.idx<id>` beside `NNNNNN.sst`. The file is written,
//! synced, then referenced by a `covered` MANIFEST payload; only referenced
//! files of live tables are opened at recovery, every other one is
//! removed. A side file lives as long as its table: when a version install
//! removes the table, the file is marked obsolete and deleted once no
//! version (no reader) refers to it. Byte format: `docs/format/sidefile.md`.

#![deny(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use strata_lsm::coding::{
    get_length_prefixed, get_varint64, masked_crc, put_length_prefixed, put_varint64,
};
use strata_lsm::error::{Error, Result};
use strata_lsm::io::{Fs, RandomRead};

use super::lock;

/// First and last 8 bytes of a side file.
const MAGIC: &[u8; 8] = b"STRXIDX1";
/// Format version of the file (see `docs/format/sidefile.md`).
const VERSION: u8 = 1;
/// `fixed64 dir_offset ‖ fixed32 dir_len ‖ fixed32 dir_crc ‖ magic`.
const FOOTER: usize = 8 + 4 + 4 + 8;

/// The name of table `table`'s side file for index `index_id`.
pub fn file_name(table: u64, index_id: u32) -> String {
    format!("{table:06}.idx{index_id}")
}

/// `(table, index id)` if `name` is a side file's name.
pub fn parse_name(name: &str) -> Option<(u64, u32)> {
    let (t, i) = name.split_once(".idx")?;
    if t.len() < 6 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if i.is_empty() || !i.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((t.parse().ok()?, i.parse().ok()?))
}

/// Writes the side file of table `table` (of `table_size` bytes) for index
/// `index_id` holding `blocks`, durably (file and directory synced).
/// Returns its size.
pub fn write(
    fs: &dyn Fs,
    dir: &Path,
    table: u64,
    table_size: u64,
    index_id: u32,
    blocks: &[(String, Vec<u8>)],
) -> Result<u64> {
    let path = dir.join(file_name(table, index_id));
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&index_id.to_le_bytes());
    out.extend_from_slice(&table.to_le_bytes());
    out.extend_from_slice(&table_size.to_le_bytes());
    let mut entries = Vec::with_capacity(blocks.len());
    for (name, bytes) in blocks {
        let off = out.len() as u64;
        out.extend_from_slice(bytes);
        out.extend_from_slice(&masked_crc(bytes).to_le_bytes());
        entries.push((name, off, bytes.len() as u64));
    }
    let dir_off = out.len() as u64;
    let mut d = Vec::new();
    put_varint64(&mut d, entries.len() as u64);
    for (name, off, len) in entries {
        put_length_prefixed(&mut d, name.as_bytes());
        put_varint64(&mut d, off);
        put_varint64(&mut d, len);
    }
    out.extend_from_slice(&d);
    out.extend_from_slice(&dir_off.to_le_bytes());
    out.extend_from_slice(&(d.len() as u32).to_le_bytes());
    out.extend_from_slice(&masked_crc(&d).to_le_bytes());
    out.extend_from_slice(MAGIC);
    let io = |what: &str, e: std::io::Error| Error::io(format!("{what} {}", path.display()), e);
    let mut f = fs.create(&path, false).map_err(|e| io("create", e))?;
    f.write_all(&out).map_err(|e| io("write", e))?;
    f.sync_all().map_err(|e| io("sync", e))?;
    drop(f);
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("sync {}", dir.display()), e))?;
    Ok(out.len() as u64)
}

/// An open side file: its directory in RAM, blocks read on demand and
/// checked against their CRC.
pub struct SideFile {
    path: PathBuf,
    fs: Arc<dyn Fs>,
    file: Box<dyn RandomRead>,
    blocks: HashMap<String, (u64, u64)>,
    size: u64,
    /// Set when its table leaves the live set (or its index is dropped):
    /// the file is removed when the last reference goes.
    obsolete: AtomicBool,
}

impl std::fmt::Debug for SideFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideFile")
            .field("path", &self.path)
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl Drop for SideFile {
    fn drop(&mut self) {
        if self.obsolete.load(Relaxed) {
            let _ = self.fs.remove_file(&self.path);
        }
    }
}

impl SideFile {
    /// Opens and checks the side file of `table` (of `table_size` bytes)
    /// for index `index_id`.
    pub fn open(
        fs: &Arc<dyn Fs>,
        dir: &Path,
        table: u64,
        table_size: u64,
        index_id: u32,
    ) -> Result<SideFile> {
        let path = dir.join(file_name(table, index_id));
        let bad = |what: &str| Error::corruption(format!("side file {}: {what}", path.display()));
        let size = fs
            .file_size(&path)
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        let header = 8 + 1 + 4 + 8 + 8;
        if (size as usize) < header + FOOTER {
            return Err(bad("too short"));
        }
        let file = fs.open_random(&path, false)?;
        let head = file.read_at(0, header)?;
        let foot = file.read_at(size - FOOTER as u64, FOOTER)?;
        let fixed = |b: &[u8], at: usize, n: usize| -> Result<u64> {
            let s = b.get(at..at + n).ok_or_else(|| bad("truncated header"))?;
            let mut x = [0u8; 8];
            x.get_mut(..n)
                .ok_or_else(|| bad("bad width"))?
                .copy_from_slice(s);
            Ok(u64::from_le_bytes(x))
        };
        if head.get(..8) != Some(MAGIC.as_slice()) || foot.get(16..24) != Some(MAGIC.as_slice()) {
            return Err(bad("bad magic"));
        }
        if head.get(8) != Some(&VERSION) {
            return Err(bad(&format!("unsupported version {:?}", head.get(8))));
        }
        if fixed(&head, 9, 4)? != u64::from(index_id)
            || fixed(&head, 13, 8)? != table
            || fixed(&head, 21, 8)? != table_size
        {
            return Err(bad("written for another index or table"));
        }
        let dir_off = fixed(&foot, 0, 8)?;
        let dir_len = fixed(&foot, 8, 4)?;
        let dir_crc = fixed(&foot, 12, 4)? as u32;
        if dir_off + dir_len + FOOTER as u64 != size || dir_off < header as u64 {
            return Err(bad("bad directory position"));
        }
        let d = file.read_at(dir_off, dir_len as usize)?;
        if masked_crc(&d) != dir_crc {
            return Err(bad("directory checksum mismatch"));
        }
        let mut src = d.as_slice();
        let n = get_varint64(&mut src).ok_or_else(|| bad("bad block count"))?;
        let mut blocks = HashMap::new();
        for _ in 0..n {
            let name = get_length_prefixed(&mut src).ok_or_else(|| bad("bad block name"))?;
            let name = std::str::from_utf8(name)
                .map_err(|_| bad("block name is not UTF-8"))?
                .to_string();
            let off = get_varint64(&mut src).ok_or_else(|| bad("bad block offset"))?;
            let len = get_varint64(&mut src).ok_or_else(|| bad("bad block length"))?;
            if off < header as u64 || off + len + 4 > dir_off {
                return Err(bad(&format!("block {name} out of bounds")));
            }
            blocks.insert(name, (off, len));
        }
        if !src.is_empty() {
            return Err(bad("trailing bytes in the directory"));
        }
        Ok(SideFile {
            path,
            fs: fs.clone(),
            file,
            blocks,
            size,
            obsolete: AtomicBool::new(false),
        })
    }

    /// The named block, checked (`None` if the file has no such block).
    pub fn block(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(&(off, len)) = self.blocks.get(name) else {
            return Ok(None);
        };
        let mut b = self.file.read_at(off, len as usize + 4)?;
        let crc_at = len as usize;
        let crc = b
            .get(crc_at..crc_at + 4)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| Error::corruption("side file block truncated"))?;
        b.truncate(crc_at);
        if masked_crc(&b) != crc {
            return Err(Error::corruption(format!(
                "side file {}: checksum mismatch in block {name}",
                self.path.display()
            )));
        }
        Ok(Some(b))
    }

    /// The names of its blocks, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.blocks.keys().cloned().collect();
        v.sort();
        v
    }

    /// Bytes of the whole file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Marks the file for removal once the last reference goes.
    pub fn retire(&self) {
        self.obsolete.store(true, Relaxed);
    }
}

/// The open side files, by (index id, table number): filled at recovery
/// from the MANIFEST's `covered` payloads and by online builds, read by the
/// strategies when a table lacks their meta blocks.
#[derive(Default)]
pub struct SideFiles {
    map: Mutex<HashMap<(u32, u64), Arc<SideFile>>>,
}

impl SideFiles {
    pub fn get(&self, index_id: u32, table: u64) -> Option<Arc<SideFile>> {
        lock(&self.map).get(&(index_id, table)).cloned()
    }

    pub fn insert(&self, index_id: u32, table: u64, f: Arc<SideFile>) {
        if let Some(old) = lock(&self.map).insert((index_id, table), f) {
            old.retire();
        }
    }

    /// Forgets every side file of `table` (it left the live set): each is
    /// removed once no version refers to it.
    pub fn table_removed(&self, table: u64) {
        lock(&self.map).retain(|(_, t), f| {
            let keep = *t != table;
            if !keep {
                f.retire();
            }
            keep
        });
    }

    /// Forgets every side file of index `index_id` (dropped).
    pub fn index_dropped(&self, index_id: u32) {
        lock(&self.map).retain(|(i, _), f| {
            let keep = *i != index_id;
            if !keep {
                f.retire();
            }
            keep
        });
    }

    /// True if `(index_id, table)` has an open side file.
    pub fn contains(&self, index_id: u32, table: u64) -> bool {
        lock(&self.map).contains_key(&(index_id, table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(file_name(12, 3), "000012.idx3");
        assert_eq!(parse_name("000012.idx3"), Some((12, 3)));
        assert_eq!(parse_name("1234567.idx10"), Some((1234567, 10)));
        assert_eq!(parse_name("000012.sst"), None);
        assert_eq!(parse_name("000012.idx"), None);
        assert_eq!(parse_name("12.idx1"), None);
    }

    #[test]
    fn roundtrip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        let blocks = vec![
            ("next.4.dir".to_string(), b"directory".to_vec()),
            ("next.4.0".to_string(), vec![7u8; 5000]),
        ];
        let n = write(&*fs, dir.path(), 9, 1234, 4, &blocks).unwrap();
        let f = SideFile::open(&fs, dir.path(), 9, 1234, 4).unwrap();
        assert_eq!(f.size(), n);
        assert_eq!(f.block("next.4.dir").unwrap().unwrap(), b"directory");
        assert_eq!(f.block("next.4.0").unwrap().unwrap(), vec![7u8; 5000]);
        assert_eq!(f.block("next.4.1").unwrap(), None);
        // Wrong table size, wrong index: refused.
        assert!(SideFile::open(&fs, dir.path(), 9, 1235, 4).is_err());
        // A flipped byte in a block fails its checksum; in the directory,
        // the open.
        let path = dir.path().join(file_name(9, 4));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let f = SideFile::open(&fs, dir.path(), 9, 1234, 4).unwrap();
        assert!(f.block("next.4.dir").is_err() || f.block("next.4.0").is_err());
        bytes[40] ^= 1;
        let at = bytes.len() - FOOTER - 3;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(SideFile::open(&fs, dir.path(), 9, 1234, 4).is_err());
        // Truncated: refused.
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(SideFile::open(&fs, dir.path(), 9, 1234, 4).is_err());
    }

    #[test]
    fn retired_files_are_removed_with_the_last_reference() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(strata_lsm::io::RealFs);
        write(&*fs, dir.path(), 5, 10, 1, &[]).unwrap();
        let f = Arc::new(SideFile::open(&fs, dir.path(), 5, 10, 1).unwrap());
        let reg = SideFiles::default();
        reg.insert(1, 5, f.clone());
        reg.table_removed(5);
        assert!(!reg.contains(1, 5));
        let path = dir.path().join(file_name(5, 1));
        assert!(path.exists(), "a reader still holds it");
        drop(f);
        assert!(!path.exists());
    }
}
