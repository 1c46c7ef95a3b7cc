//! The persistent validation table's file (PERSEID §4.3; format:
//! `docs/format/perseid.md`, "Table files").
//!
//! The paper keeps primary key → (latest sequence number, physical count)
//! in a hash table on persistent memory, updated in place. Without
//! persistent memory, an in-place table costs a page write per changed
//! key at every flush; instead the table is an immutable hashed file,
//! `perseid-<n>.pkt`, read through a mapping, plus the changes since it
//! was written (the *delta*, in RAM and in the page log's Pk records).
//! When the delta has grown to a fraction of the table, a flush merges
//! both into a new file (one sequential pass in hash order) and the log
//! records the switch. A reopen maps the newest file instead of reading
//! every key into RAM.
//!
//! Layout: entries sorted by (hash, key), a directory of bucket offsets
//! (bucket = the hash's top `bits` bits; about eight entries a bucket),
//! and a footer. The whole file is checksummed; the checksum and length
//! are also recorded in the log record that refers to the file, so a
//! stale or torn file is detected at open.
//!
//! Invariants: a table file is written completely and made durable (file
//! and directory synced) before any log group refers to it; it is never
//! modified; it is removed only once a newer committed group refers to
//! another table.

#![deny(clippy::indexing_slicing)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use strata_lsm::coding::masked_crc;
use strata_lsm::error::{Error, Result};
use strata_lsm::io::{Fs, RandomRead};

use strata_lsm::key::SeqNo;

/// A persistent-table value (`validation`): a key's latest sequence
/// number, its physical count and whether its latest version has an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PEntry {
    pub seq: SeqNo,
    pub n: u32,
    pub has_entry: bool,
}

const MAGIC: &[u8; 8] = b"PSTABLE\0";
/// Version of the table file's layout.
const VERSION: u32 = 1;
const FOOTER_LEN: usize = 40;

pub(crate) fn table_name(n: u64) -> String {
    format!("perseid-{n:06}.pkt")
}

pub(crate) fn parse_table_name(name: &str) -> Option<u64> {
    name.strip_prefix("perseid-")?
        .strip_suffix(".pkt")?
        .parse()
        .ok()
}

/// The table's hash of a primary key: 64-bit FNV-1a of its bytes, then
/// the murmur3 finalizer (so that the top bits, which pick the bucket,
/// depend on every byte). Part of the file format: never change it
/// without a new version.
pub(crate) fn key_hash(pk: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in pk {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn bucket(h: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        (h >> (64 - bits)) as usize
    }
}

/// Bucket bits for about `count` entries: about eight a bucket, at most
/// 2^28 buckets.
fn bits_for(count: u64) -> u32 {
    let buckets = (count / 8).max(1);
    (64 - (buckets - 1).leading_zeros()).min(28)
}

/// What the page log records of a table file (record kind Table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableRef {
    pub number: u64,
    /// Keys in the table.
    pub count: u64,
    /// Bytes of the file.
    pub len: u64,
    /// Masked CRC32C of the file's entries and directory.
    pub crc: u32,
}

/// An open table file.
pub(crate) struct PkTable {
    pub r: TableRef,
    bits: u32,
    /// Offset of the directory (= bytes of the entries).
    dir_at: u64,
    file: Arc<dyn RandomRead>,
}

fn encode_entry(buf: &mut Vec<u8>, pk: &[u8], e: &PEntry) {
    buf.extend_from_slice(&(pk.len() as u32).to_le_bytes());
    buf.extend_from_slice(pk);
    buf.extend_from_slice(&e.seq.to_le_bytes());
    buf.extend_from_slice(&e.n.to_le_bytes());
    buf.push(e.has_entry as u8);
}

/// The next entry of `b` at `*at`; `None` if cut short.
fn next_entry<'a>(b: &'a [u8], at: &mut usize) -> Option<(&'a [u8], PEntry)> {
    let rest = b.get(*at..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let pk = rest.get(4..4 + len)?;
    let t = rest.get(4 + len..4 + len + 13)?;
    let e = PEntry {
        seq: u64::from_le_bytes(t.get(..8)?.try_into().ok()?),
        n: u32::from_le_bytes(t.get(8..12)?.try_into().ok()?),
        has_entry: *t.get(12)? != 0,
    };
    *at += 4 + len + 13;
    Some((pk, e))
}

/// Writes a new table file from entries given in (hash, key) order.
pub(crate) struct TableWriter {
    buf: Vec<u8>,
    dir: Vec<u64>,
    bits: u32,
    count: u64,
    last: Option<u64>,
}

impl TableWriter {
    /// A writer for at most about `expected` keys (sizes the directory).
    pub fn new(expected: u64) -> TableWriter {
        let bits = bits_for(expected);
        TableWriter {
            buf: Vec::with_capacity((expected as usize).saturating_mul(36)),
            dir: Vec::with_capacity((1usize << bits) + 1),
            bits,
            count: 0,
            last: None,
        }
    }

    /// Appends one key; `h` must be `key_hash(pk)` and not below the
    /// previous key's hash.
    pub fn push(&mut self, h: u64, pk: &[u8], e: &PEntry) {
        debug_assert!(self.last.is_none_or(|l| l <= h), "table keys out of order");
        self.last = Some(h);
        let b = bucket(h, self.bits);
        while self.dir.len() <= b {
            self.dir.push(self.buf.len() as u64);
        }
        encode_entry(&mut self.buf, pk, e);
        self.count += 1;
    }

    /// Writes the file `number` in `dir` durably (file and directory
    /// synced) and opens it.
    pub fn finish(
        mut self,
        fs: &Arc<dyn Fs>,
        dir: &Path,
        number: u64,
        key_type: u8,
    ) -> Result<PkTable> {
        let dir_at = self.buf.len() as u64;
        while self.dir.len() <= 1usize << self.bits {
            self.dir.push(dir_at);
        }
        for off in &self.dir {
            self.buf.extend_from_slice(&off.to_le_bytes());
        }
        let crc = masked_crc(&self.buf);
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(MAGIC);
        footer.extend_from_slice(&VERSION.to_le_bytes());
        footer.push(key_type);
        footer.push(self.bits as u8);
        footer.extend_from_slice(&[0, 0]);
        footer.extend_from_slice(&number.to_le_bytes());
        footer.extend_from_slice(&self.count.to_le_bytes());
        footer.extend_from_slice(&crc.to_le_bytes());
        let fcrc = masked_crc(&footer);
        footer.extend_from_slice(&fcrc.to_le_bytes());
        self.buf.extend_from_slice(&footer);
        let path = dir.join(table_name(number));
        let mut f = fs
            .create(&path, true)
            .map_err(|e| Error::io(format!("create perseid table {}", path.display()), e))?;
        f.write_all(&self.buf)
            .and_then(|_| f.flush())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io(format!("write perseid table {}", path.display()), e))?;
        drop(f);
        fs.sync_dir(dir)
            .map_err(|e| Error::io(format!("sync perseid directory {}", dir.display()), e))?;
        let r = TableRef {
            number,
            count: self.count,
            len: self.buf.len() as u64,
            crc,
        };
        let file: Arc<dyn RandomRead> = Arc::from(fs.open_mapped(&path)?);
        Ok(PkTable {
            r,
            bits: self.bits,
            dir_at,
            file,
        })
    }
}

impl PkTable {
    /// Opens the file `r` names, checks it against `r` (length, checksum,
    /// footer, every entry decodes) and calls `f` for every key, in file
    /// order.
    pub fn open(
        fs: &Arc<dyn Fs>,
        dir: &Path,
        r: TableRef,
        key_type: u8,
        mut f: impl FnMut(&[u8], PEntry),
    ) -> Result<PkTable> {
        let path = dir.join(table_name(r.number));
        let bad =
            |what: &str| Error::corruption(format!("perseid table {}: {what}", path.display()));
        let size = fs
            .file_size(&path)
            .map_err(|e| Error::io(format!("size of perseid table {}", path.display()), e))?;
        if size != r.len || (size as usize) < FOOTER_LEN {
            return Err(bad(&format!("{size} bytes, the log expects {}", r.len)));
        }
        let file: Arc<dyn RandomRead> = Arc::from(fs.open_mapped(&path)?);
        let all = file.read_at(0, size as usize)?;
        let (body, footer) = all
            .split_at_checked(size as usize - FOOTER_LEN)
            .ok_or_else(|| bad("short"))?;
        let fcrc = footer
            .get(FOOTER_LEN - 4..)
            .and_then(|c| c.try_into().ok())
            .map(u32::from_le_bytes);
        let head = footer.get(..FOOTER_LEN - 4).unwrap_or_default();
        if fcrc != Some(masked_crc(head)) {
            return Err(bad("footer fails its checksum"));
        }
        let u64_at = |b: &[u8], i: usize| {
            b.get(i..i + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let ok = head.get(..8) == Some(MAGIC.as_slice())
            && head.get(8..12) == Some(VERSION.to_le_bytes().as_slice())
            && head.get(12) == Some(&key_type)
            && u64_at(head, 16) == Some(r.number)
            && u64_at(head, 24) == Some(r.count)
            && head.get(32..36) == Some(r.crc.to_le_bytes().as_slice());
        if !ok {
            return Err(bad("footer does not match the log's record"));
        }
        let bits = u32::from(*head.get(13).unwrap_or(&255));
        if bits > 28 || masked_crc(body) != r.crc {
            return Err(bad("fails its checksum"));
        }
        let dir_len = ((1usize << bits) + 1) * 8;
        let dir_at = body
            .len()
            .checked_sub(dir_len)
            .ok_or_else(|| bad("directory cut short"))?;
        let (entries, directory) = body.split_at(dir_at);
        // Every bucket's range lies within the entries, in order, and
        // holds whole entries.
        let mut at = 0usize;
        let mut count = 0u64;
        for b in 0..1usize << bits {
            let (Some(start), Some(end)) = (u64_at(directory, b * 8), u64_at(directory, b * 8 + 8))
            else {
                return Err(bad("directory cut short"));
            };
            if start as usize != at || end < start || end as usize > entries.len() {
                return Err(bad(&format!("bucket {b} out of place")));
            }
            while at < end as usize {
                let (pk, e) = next_entry(entries, &mut at).ok_or_else(|| bad("entry cut short"))?;
                f(pk, e);
                count += 1;
            }
            if at != end as usize {
                return Err(bad(&format!("bucket {b} ends inside an entry")));
            }
        }
        if at != entries.len() || count != r.count {
            return Err(bad("entries do not match the directory"));
        }
        Ok(PkTable {
            r,
            bits,
            dir_at: dir_at as u64,
            file,
        })
    }

    /// The entries of bucket `b`, as bytes.
    fn bucket_bytes(&self, b: usize) -> Result<Vec<u8>> {
        let d = self.file.read_at(self.dir_at + b as u64 * 8, 16)?;
        let at = |i: usize| {
            d.get(i..i + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let (Some(start), Some(end)) = (at(0), at(8)) else {
            return Err(Error::corruption("perseid table: directory cut short"));
        };
        if end < start || end > self.dir_at {
            return Err(Error::corruption(format!(
                "perseid table {}: bucket {b} out of place",
                self.r.number
            )));
        }
        self.file.read_at(start, (end - start) as usize)
    }

    /// The value of `pk`, if the table has it.
    pub fn get(&self, pk: &[u8]) -> Result<Option<PEntry>> {
        let b = self.bucket_bytes(bucket(key_hash(pk), self.bits))?;
        let mut at = 0;
        while at < b.len() {
            let (k, e) = next_entry(&b, &mut at).ok_or_else(|| {
                Error::corruption(format!("perseid table {}: entry cut short", self.r.number))
            })?;
            if k == pk {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Every key in (hash, key) order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], PEntry)) -> Result<()> {
        for b in 0..1usize << self.bits {
            let bytes = self.bucket_bytes(b)?;
            let mut at = 0;
            while at < bytes.len() {
                let (k, e) = next_entry(&bytes, &mut at).ok_or_else(|| {
                    Error::corruption(format!("perseid table {}: entry cut short", self.r.number))
                })?;
                f(k, e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_lsm::io::RealFs;

    fn e(seq: u64, n: u32) -> PEntry {
        PEntry {
            seq,
            n,
            has_entry: true,
        }
    }

    #[test]
    fn a_table_round_trips_and_fails_its_checks_when_changed() {
        let dir = tempfile::tempdir().unwrap();
        let fs: Arc<dyn Fs> = Arc::new(RealFs);
        let mut keys: Vec<(u64, Vec<u8>)> = (0..1000u32)
            .map(|i| format!("key{i}").into_bytes())
            .map(|k| (key_hash(&k), k))
            .collect();
        keys.sort();
        let mut w = TableWriter::new(keys.len() as u64);
        for (i, (h, k)) in keys.iter().enumerate() {
            w.push(*h, k, &e(i as u64, 1 + (i % 3) as u32));
        }
        let t = w.finish(&fs, dir.path(), 7, 2).unwrap();
        for (i, (_, k)) in keys.iter().enumerate() {
            assert_eq!(t.get(k).unwrap(), Some(e(i as u64, 1 + (i % 3) as u32)));
        }
        assert_eq!(t.get(b"absent").unwrap(), None);
        let mut seen = Vec::new();
        let r = t.r;
        PkTable::open(&fs, dir.path(), r, 2, |k, _| seen.push(k.to_vec())).unwrap();
        let mut order = Vec::new();
        t.for_each(|k, _| order.push(k.to_vec())).unwrap();
        assert_eq!(seen, order);
        assert_eq!(
            order,
            keys.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>()
        );
        // The wrong key type, number or checksum: refused.
        assert!(PkTable::open(&fs, dir.path(), r, 1, |_, _| {}).is_err());
        assert!(PkTable::open(
            &fs,
            dir.path(),
            TableRef {
                crc: r.crc ^ 1,
                ..r
            },
            2,
            |_, _| {}
        )
        .is_err());
        // One flipped byte anywhere: refused.
        let path = dir.path().join(table_name(7));
        let good = std::fs::read(&path).unwrap();
        for i in [0, good.len() / 2, good.len() - 30, good.len() - 1] {
            let mut b = good.clone();
            b[i] ^= 0x10;
            std::fs::write(&path, &b).unwrap();
            assert!(
                PkTable::open(&fs, dir.path(), r, 2, |_, _| {}).is_err(),
                "byte {i}"
            );
        }
        // An empty table works too.
        let t = TableWriter::new(0).finish(&fs, dir.path(), 8, 2).unwrap();
        assert_eq!(t.get(b"x").unwrap(), None);
        PkTable::open(&fs, dir.path(), t.r, 2, |_, _| panic!("no keys")).unwrap();
    }
}
