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
//! Layout: entries sorted by (hash, key), the hash and value of the
//! entries with `n > 1` (the *volatile section*: what an open needs to
//! rebuild the volatile table, without decoding the rest; the key too if
//! shared), a directory of bucket
//! offsets and checksums (bucket = the hash's top `bits` bits; about
//! eight entries a bucket), and a footer. Open checks the footer, the
//! volatile section and the directory, and decodes only the volatile
//! section; it does not read the entries: each bucket is checked when
//! read (a failure leaves the rebuild marker, as a page's does). The
//! checksum of the volatile section and directory and the file's length
//! are also recorded in the log record that refers to the file, so a
//! stale or torn file is detected at open.
//!
//! Invariants: a table file is written completely and made durable (file
//! and directory synced) before any log group refers to it; it is never
//! modified; it is removed only once a newer committed group refers to
//! another table.

#![deny(clippy::indexing_slicing)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use strata_lsm::coding::{crc_append, mask_crc, masked_crc};
use strata_lsm::error::{Error, Result};
use strata_lsm::io::{Fs, RandomRead, WritableFile};

use strata_lsm::key::SeqNo;

/// A persistent-table value (`validation`): a key's latest sequence
/// number, its physical count, whether its latest version has an entry,
/// and whether another key of the table has had its hash (`shared`:
/// validation then holds it by its bytes, see `volatile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PEntry {
    pub seq: SeqNo,
    pub n: u32,
    pub has_entry: bool,
    pub shared: bool,
}

impl PEntry {
    /// The flags byte of the table file's and the page log's encodings:
    /// bit 0 `has_entry`, bit 1 `shared` (since table format 4).
    pub fn flags(&self) -> u8 {
        u8::from(self.has_entry) | u8::from(self.shared) << 1
    }

    /// The value with the flags byte `f` (other bits ignored).
    pub fn with_flags(seq: SeqNo, n: u32, f: u8) -> PEntry {
        PEntry {
            seq,
            n,
            has_entry: f & 1 != 0,
            shared: f & 2 != 0,
        }
    }
}

const MAGIC: &[u8; 8] = b"PSTABLE\0";
/// Version of the table file's layout. Versions 3 (no `shared` bit in
/// the flags, so none set) and 4 (whole entries in the volatile section)
/// are read as they are.
const VERSION: u32 = 5;
const OLDEST_VERSION: u32 = 3;
const FOOTER_LEN: usize = 56;

/// A file whose presence makes the next open rebuild the index; it holds
/// the reason. Written when a page or a table bucket read back fails its
/// checks (both are verified when read); removed once a full group is
/// durable (writing one reads and verifies every page and writes a new
/// table file).
pub(crate) const MARKER: &str = "perseid.corrupt";

/// Writes the marker with `reason` (file and directory synced).
pub(crate) fn write_marker(fs: &dyn Fs, dir: &Path, reason: &str) -> std::io::Result<()> {
    let path = dir.join(MARKER);
    let mut f = fs.create(&path, false)?;
    f.write_all(reason.as_bytes())?;
    f.flush()?;
    f.sync_all()?;
    fs.sync_dir(dir)
}

pub(crate) fn table_name(n: u64) -> String {
    format!("perseid-{n:06}.pkt")
}

pub(crate) fn parse_table_name(name: &str) -> Option<u64> {
    name.strip_prefix("perseid-")?
        .strip_suffix(".pkt")?
        .parse()
        .ok()
}

/// The table's hash of a primary key: its bytes as little-endian 64-bit
/// words (the last one zero-padded), each xored in and mixed by a
/// multiply and a shift, from a seed that depends on the length; then the
/// murmur3 finalizer (so that the top bits, which pick the bucket and the
/// volatile table's slot, depend on every byte). A word at a time: every
/// write and every validation of a query hashes its key. Part of the file
/// format: never change it without a new version.
#[inline]
pub(crate) fn key_hash(pk: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    #[inline(always)]
    fn mix(h: u64, w: u64) -> u64 {
        let h = (h ^ w).wrapping_mul(K);
        h ^ (h >> 29)
    }
    let mut h = 0xcbf2_9ce4_8422_2325 ^ (pk.len() as u64).wrapping_mul(K);
    // (Whole words by `split_first_chunk`: two instructions a key fewer
    // than through `chunks_exact`, which a lookup pays a dozen times.)
    let mut rest = pk;
    while let Some((w, tail)) = rest.split_first_chunk::<8>() {
        h = mix(h, u64::from_le_bytes(*w));
        rest = tail;
    }
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        if let Some(dst) = b.get_mut(..rest.len()) {
            dst.copy_from_slice(rest);
        }
        h = mix(h, u64::from_le_bytes(b));
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
    /// Masked CRC32C of the file's volatile section and directory (the
    /// entries are checked per bucket when read).
    pub crc: u32,
}

/// An open table file.
pub(crate) struct PkTable {
    pub r: TableRef,
    bits: u32,
    /// Offset of the directory.
    dir_at: u64,
    /// Offset of the volatile section (= bytes of the entries).
    vol_at: u64,
    file: Arc<dyn RandomRead>,
    /// One bit a bucket: set once the bucket passed its checksum (the
    /// file is immutable, so a bucket is checked once per open, as the
    /// block cache holds only checked blocks). A bit lost to a race only
    /// costs a second check.
    checked: Box<[AtomicU64]>,
    /// Where a bucket that fails its checks leaves the marker.
    fs: Arc<dyn Fs>,
    dir: PathBuf,
}

/// The cleared bits of [`PkTable::checked`] for `2^bits` buckets.
fn checked_bits(bits: u32) -> Box<[AtomicU64]> {
    (0..(1usize << bits).div_ceil(64))
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn encode_entry(buf: &mut Vec<u8>, pk: &[u8], e: &PEntry) {
    buf.extend_from_slice(&(pk.len() as u32).to_le_bytes());
    buf.extend_from_slice(pk);
    buf.extend_from_slice(&e.seq.to_le_bytes());
    buf.extend_from_slice(&e.n.to_le_bytes());
    buf.push(e.flags());
}

/// The next entry of `b` at `*at`; `None` if cut short.
fn next_entry<'a>(b: &'a [u8], at: &mut usize) -> Option<(&'a [u8], PEntry)> {
    let rest = b.get(*at..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let pk = rest.get(4..4 + len)?;
    let t = rest.get(4 + len..4 + len + 13)?;
    let e = PEntry::with_flags(
        u64::from_le_bytes(t.get(..8)?.try_into().ok()?),
        u32::from_le_bytes(t.get(8..12)?.try_into().ok()?),
        *t.get(12)?,
    );
    *at += 4 + len + 13;
    Some((pk, e))
}

/// A volatile-section entry: the key's hash and value, and the key
/// itself only if shared (the volatile table holds other keys by hash).
fn encode_vol_entry(buf: &mut Vec<u8>, h: u64, pk: &[u8], e: &PEntry) {
    buf.extend_from_slice(&h.to_le_bytes());
    buf.extend_from_slice(&e.seq.to_le_bytes());
    buf.extend_from_slice(&e.n.to_le_bytes());
    buf.push(e.flags());
    if e.shared {
        buf.extend_from_slice(&(pk.len() as u32).to_le_bytes());
        buf.extend_from_slice(pk);
    }
}

/// The next volatile-section entry of `b` at `*at`; `None` if cut short.
fn next_vol_entry<'a>(b: &'a [u8], at: &mut usize) -> Option<(u64, Option<&'a [u8]>, PEntry)> {
    let t = b.get(*at..*at + 21)?;
    let h = u64::from_le_bytes(t.get(..8)?.try_into().ok()?);
    let e = PEntry::with_flags(
        u64::from_le_bytes(t.get(8..16)?.try_into().ok()?),
        u32::from_le_bytes(t.get(16..20)?.try_into().ok()?),
        *t.get(20)?,
    );
    *at += 21;
    if !e.shared {
        return Some((h, None, e));
    }
    let rest = b.get(*at..)?;
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let pk = rest.get(4..4 + len)?;
    *at += 4 + len;
    Some((h, Some(pk), e))
}

/// The next volatile-section entry of a file of `version` (versions 3
/// and 4 listed whole entries: the hash is computed).
fn next_vol<'a>(
    version: u32,
    b: &'a [u8],
    at: &mut usize,
) -> Option<(u64, Option<&'a [u8]>, PEntry)> {
    if version <= 4 {
        next_entry(b, at).map(|(k, e)| (key_hash(k), Some(k), e))
    } else {
        next_vol_entry(b, at)
    }
}

/// Bytes of entries a [`TableWriter`] holds before it writes them out.
const STAGE_BYTES: usize = 1 << 20;

/// Writes a new table file from entries given in (hash, key) order. The
/// entries go to the file as they come, through a staging buffer of
/// [`STAGE_BYTES`], each bucket's checksum computed as its entries are
/// appended: a merge of a 2 M-key table no longer builds the whole file
/// in a fresh 70 MB buffer, whose page faults were a quarter of the
/// flush thread's merge and page-record work (`docs/benchmarks.md`,
/// session 38).
pub(crate) struct TableWriter {
    file: Box<dyn WritableFile>,
    fs: Arc<dyn Fs>,
    /// The directory of the file (named by `number`).
    dir_path: PathBuf,
    number: u64,
    /// Entries not written out yet.
    buf: Vec<u8>,
    /// Bytes of entries written out.
    written: u64,
    /// The first error writing out; reported by [`TableWriter::finish`].
    err: Option<std::io::Error>,
    /// Start offset of each bucket begun so far.
    dir: Vec<u64>,
    /// Masked checksum of each bucket before the last one begun.
    crcs: Vec<u32>,
    /// Raw checksum of the last bucket begun, so far.
    crc: u32,
    bits: u32,
    count: u64,
    /// The entries with `n > 1`, encoded (the volatile section).
    vol: Vec<u8>,
    vol_count: u64,
    last: Option<u64>,
}

impl TableWriter {
    /// Creates table file `number` in `dir` for at most about `expected`
    /// keys (which sizes the directory).
    pub fn create(fs: &Arc<dyn Fs>, dir: &Path, number: u64, expected: u64) -> Result<TableWriter> {
        let bits = bits_for(expected);
        let path = dir.join(table_name(number));
        let file = fs
            .create(&path, true)
            .map_err(|e| Error::io(format!("create perseid table {}", path.display()), e))?;
        Ok(TableWriter {
            file,
            fs: fs.clone(),
            dir_path: dir.to_path_buf(),
            number,
            buf: Vec::with_capacity(STAGE_BYTES + 4096),
            written: 0,
            err: None,
            dir: Vec::with_capacity((1usize << bits) + 1),
            crcs: Vec::with_capacity(1usize << bits),
            crc: 0,
            bits,
            count: 0,
            vol: Vec::new(),
            vol_count: 0,
            last: None,
        })
    }

    /// Begins the buckets up to `b` at the current offset (each one begun
    /// ends the one before it).
    fn begin_buckets(&mut self, b: usize) {
        let at = self.written + self.buf.len() as u64;
        while self.dir.len() <= b {
            if !self.dir.is_empty() {
                self.crcs.push(mask_crc(self.crc));
                self.crc = 0;
            }
            self.dir.push(at);
        }
    }

    /// Writes out the staged entries (a failure is kept for `finish`).
    fn write_out(&mut self) {
        if self.err.is_none() {
            match self.file.write_all(&self.buf) {
                Ok(()) => self.written += self.buf.len() as u64,
                Err(e) => self.err = Some(e),
            }
        }
        self.buf.clear();
    }

    /// Appends one key; `h` must be `key_hash(pk)` and not below the
    /// previous key's hash.
    pub fn push(&mut self, h: u64, pk: &[u8], e: &PEntry) {
        debug_assert!(self.last.is_none_or(|l| l <= h), "table keys out of order");
        self.last = Some(h);
        self.begin_buckets(bucket(h, self.bits));
        let at = self.buf.len();
        encode_entry(&mut self.buf, pk, e);
        self.crc = crc_append(self.crc, self.buf.get(at..).unwrap_or_default());
        if e.n > 1 {
            encode_vol_entry(&mut self.vol, h, pk, e);
            self.vol_count += 1;
        }
        self.count += 1;
        if self.buf.len() >= STAGE_BYTES {
            self.write_out();
        }
    }

    /// Completes the file durably (file and directory synced) and opens
    /// it.
    pub fn finish(mut self, key_type: u8) -> Result<PkTable> {
        let vol_at = self.written + self.buf.len() as u64;
        self.begin_buckets(1usize << self.bits);
        self.write_out();
        let number = self.number;
        let path = self.dir_path.join(table_name(number));
        let failed = |e| Error::io(format!("write perseid table {}", path.display()), e);
        if let Some(e) = self.err.take() {
            return Err(failed(e));
        }
        // The volatile section and the directory follow the entries in a
        // buffer of their own.
        let mut meta = std::mem::take(&mut self.vol);
        meta.reserve(self.dir.len() * 8 + self.crcs.len() * 4);
        let dir_at = vol_at + meta.len() as u64;
        for off in &self.dir {
            meta.extend_from_slice(&off.to_le_bytes());
        }
        for c in &self.crcs {
            meta.extend_from_slice(&c.to_le_bytes());
        }
        let crc = masked_crc(&meta);
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(MAGIC);
        footer.extend_from_slice(&VERSION.to_le_bytes());
        footer.push(key_type);
        footer.push(self.bits as u8);
        footer.extend_from_slice(&[0, 0]);
        footer.extend_from_slice(&number.to_le_bytes());
        footer.extend_from_slice(&self.count.to_le_bytes());
        footer.extend_from_slice(&self.vol_count.to_le_bytes());
        footer.extend_from_slice(&vol_at.to_le_bytes());
        footer.extend_from_slice(&crc.to_le_bytes());
        let fcrc = masked_crc(&footer);
        footer.extend_from_slice(&fcrc.to_le_bytes());
        let f = &mut self.file;
        f.write_all(&meta)
            .and_then(|_| f.write_all(&footer))
            .and_then(|_| f.flush())
            .and_then(|_| f.sync_all())
            .map_err(failed)?;
        drop(self.file);
        let (fs, dir) = (self.fs, self.dir_path);
        fs.sync_dir(&dir)
            .map_err(|e| Error::io(format!("sync perseid directory {}", dir.display()), e))?;
        let r = TableRef {
            number,
            count: self.count,
            len: vol_at + (meta.len() + footer.len()) as u64,
            crc,
        };
        let file: Arc<dyn RandomRead> = Arc::from(fs.open_mapped(&path)?);
        Ok(PkTable {
            r,
            bits: self.bits,
            dir_at,
            vol_at,
            file,
            checked: checked_bits(self.bits),
            fs,
            dir,
        })
    }
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
}

/// What [`PkTable::open`] calls for each volatile-section entry: its
/// hash, its key if shared (or listed whole), its value.
pub(crate) type VolVisitor<'a> = dyn FnMut(u64, Option<&[u8]>, PEntry) + 'a;

impl PkTable {
    /// RAM held beside the mapping (the checked-bucket bits).
    pub fn memory_bytes(&self) -> usize {
        self.checked.len() * 8
    }

    /// Opens the file `r` names, checks it against `r` (length, footer,
    /// the checksums of the entries and of the volatile section and
    /// directory, a directory whose buckets tile the entries) and calls
    /// `f` for every key with `n > 1`, in file order (after `size_hint` with
    /// their number) with its hash, its bytes if it is shared (a version 3
    /// or 4 file gives every key's) and its value: the entries are checked, not
    /// decoded. On an error `f` may have seen part of the section: the
    /// caller discards what it built.
    pub fn open(
        fs: &Arc<dyn Fs>,
        dir: &Path,
        r: TableRef,
        key_type: u8,
        size_hint: impl FnOnce(usize),
        f: &mut VolVisitor<'_>,
    ) -> Result<PkTable> {
        let path = dir.join(table_name(r.number));
        let bad =
            |what: &str| Error::corruption(format!("perseid table {}: {what}", path.display()));
        let size = fs
            .file_size(&path)
            .map_err(|e| Error::io(format!("size of perseid table {}", path.display()), e))?;
        if size != r.len || size < FOOTER_LEN as u64 {
            return Err(bad(&format!("{size} bytes, the log expects {}", r.len)));
        }
        let file: Arc<dyn RandomRead> = Arc::from(fs.open_mapped(&path)?);
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        file.read_with(size - FOOTER_LEN as u64, FOOTER_LEN, &mut |b| {
            footer.extend_from_slice(b)
        })?;
        let head = footer.get(..FOOTER_LEN - 4).unwrap_or_default();
        if u32_at(&footer, FOOTER_LEN - 4) != Some(masked_crc(head)) {
            return Err(bad("footer fails its checksum"));
        }
        let version = u32_at(head, 8).unwrap_or(0);
        let ok = head.get(..8) == Some(MAGIC.as_slice())
            && (OLDEST_VERSION..=VERSION).contains(&version)
            && head.get(12) == Some(&key_type)
            && u64_at(head, 16) == Some(r.number)
            && u64_at(head, 24) == Some(r.count)
            && u32_at(head, 48) == Some(r.crc);
        if !ok {
            return Err(bad("footer does not match the log's record"));
        }
        let bits = u32::from(*head.get(13).unwrap_or(&255));
        let vol_count = u64_at(head, 32).unwrap_or(u64::MAX);
        let vol_at = u64_at(head, 40).unwrap_or(u64::MAX);
        if bits > 28 {
            return Err(bad("bad bucket bits"));
        }
        size_hint(vol_count.min(r.count) as usize);
        let buckets = 1usize << bits;
        let dir_len = ((buckets + 1) * 8 + buckets * 4) as u64;
        let meta_end = size - FOOTER_LEN as u64;
        let Some(dir_at) = meta_end.checked_sub(dir_len).filter(|&d| d >= vol_at) else {
            return Err(bad("directory out of place"));
        };
        let mut scanned = Err(bad("not read"));
        file.read_with(vol_at, (meta_end - vol_at) as usize, &mut |meta| {
            let layout = Layout {
                dir_off: (dir_at - vol_at) as usize,
                vol_at,
                buckets,
                vol_count,
                version,
            };
            scanned = scan(meta, &r, &layout, f).map_err(|w| bad(&w));
        })?;
        scanned?;
        // The entries are not read: each bucket is checked when read
        // (`with_bucket`), like the pages of the page log.
        Ok(PkTable {
            r,
            bits,
            dir_at,
            vol_at,
            file,
            checked: checked_bits(bits),
            fs: fs.clone(),
            dir: dir.to_path_buf(),
        })
    }

    /// Calls `f` with the entries of bucket `b`, checked against their
    /// checksum.
    fn with_bucket<R>(&self, b: usize, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        let bad = |what: &str| {
            let msg = format!("perseid table {}: bucket {b} {what}", self.r.number);
            // The next open rebuilds the index; best effort, the error
            // reaches the caller either way.
            let _ = write_marker(&*self.fs, &self.dir, &msg);
            Error::corruption(msg)
        };
        let buckets = 1u64 << self.bits;
        let mut range = None;
        self.file
            .read_with(self.dir_at + b as u64 * 8, 16, &mut |d| {
                range = u64_at(d, 0).zip(u64_at(d, 8));
            })?;
        let Some((start, end)) = range else {
            return Err(bad("directory cut short"));
        };
        if end < start || end > self.vol_at {
            return Err(bad("out of place"));
        }
        let (word, bit) = (self.checked.get(b / 64), 1u64 << (b % 64));
        let crc = if word.is_some_and(|w| w.load(Relaxed) & bit != 0) {
            None
        } else {
            let mut crc = None;
            self.file.read_with(
                self.dir_at + (buckets + 1) * 8 + b as u64 * 4,
                4,
                &mut |d| crc = u32_at(d, 0),
            )?;
            Some(crc.ok_or_else(|| bad("directory cut short"))?)
        };
        let mut f = Some(f);
        let mut out = Err(Error::invalid("perseid table: bucket not read"));
        self.file
            .read_with(start, (end - start) as usize, &mut |bytes| {
                out = if crc.is_some_and(|c| masked_crc(bytes) != c) {
                    Err(bad("fails its checksum"))
                } else {
                    if let (Some(_), Some(w)) = (crc, word) {
                        w.fetch_or(bit, Relaxed);
                    }
                    match f.take() {
                        Some(f) => f(bytes),
                        None => Err(Error::invalid("perseid table: bucket read twice")),
                    }
                };
            })?;
        out
    }

    /// The value of `pk`, if the table has it.
    #[cfg(test)]
    pub fn get(&self, pk: &[u8]) -> Result<Option<PEntry>> {
        self.find(key_hash(pk), pk, |_, _| ())
    }

    /// The value of `pk` (whose hash is `h`), if the table has it; if it
    /// has not, `other` is called with each key of the table with hash
    /// `h` (and its value): the keys a new `pk` would share its hash with.
    pub fn find(
        &self,
        h: u64,
        pk: &[u8],
        mut other: impl FnMut(&[u8], PEntry),
    ) -> Result<Option<PEntry>> {
        let number = self.r.number;
        self.with_bucket(bucket(h, self.bits), |b| {
            let mut at = 0;
            while at < b.len() {
                let (k, e) = next_entry(b, &mut at).ok_or_else(|| cut_short(number))?;
                if k == pk {
                    return Ok(Some(e));
                }
            }
            // Absent: hash the bucket's keys (a write of a new key only).
            each_same_hash(b, number, h, pk, &mut other)?;
            Ok(None)
        })
    }

    /// Calls `other` with each key of the table with hash `h` other than
    /// `except` (and its value).
    pub fn same_hash(
        &self,
        h: u64,
        except: &[u8],
        mut other: impl FnMut(&[u8], PEntry),
    ) -> Result<()> {
        let number = self.r.number;
        self.with_bucket(bucket(h, self.bits), |b| {
            each_same_hash(b, number, h, except, &mut other)
        })
    }

    /// Every key in (hash, key) order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], PEntry)) -> Result<()> {
        let number = self.r.number;
        for b in 0..1usize << self.bits {
            self.with_bucket(b, |bytes| {
                let mut at = 0;
                while at < bytes.len() {
                    let (k, e) = next_entry(bytes, &mut at).ok_or_else(|| cut_short(number))?;
                    f(k, e);
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// The error of an entry of table `number` cut short.
fn cut_short(number: u64) -> Error {
    Error::corruption(format!("perseid table {number}: entry cut short"))
}

/// Calls `f` with each entry of bucket bytes `b` (of table `number`)
/// whose key has hash `h` and is not `except`.
fn each_same_hash(
    b: &[u8],
    number: u64,
    h: u64,
    except: &[u8],
    f: &mut impl FnMut(&[u8], PEntry),
) -> Result<()> {
    let mut at = 0;
    while at < b.len() {
        let (k, e) = next_entry(b, &mut at).ok_or_else(|| cut_short(number))?;
        if k != except && key_hash(k) == h {
            f(k, e);
        }
    }
    Ok(())
}

/// Checks the volatile section and directory `meta` (the file from
/// `vol_at` to the footer; the directory starts at `dir_off` in it): its
/// checksum against `r`, bucket offsets that tile the entries
/// `0..vol_at`, and a volatile section of `vol_count` whole entries with
/// `n > 1`. Returns what failed.
/// Where a table file's metadata (volatile section, directory) lies, as
/// its header and footer say.
struct Layout {
    /// Offset of the directory in the metadata.
    dir_off: usize,
    /// Offset of the metadata (the entries' end) in the file.
    vol_at: u64,
    buckets: usize,
    vol_count: u64,
    version: u32,
}

fn scan(
    meta: &[u8],
    r: &TableRef,
    layout: &Layout,
    f: &mut VolVisitor<'_>,
) -> std::result::Result<(), String> {
    let &Layout {
        dir_off,
        vol_at,
        buckets,
        vol_count,
        version,
    } = layout;
    if masked_crc(meta) != r.crc {
        return Err("fails its checksum".into());
    }
    let (vol, directory) = meta
        .split_at_checked(dir_off)
        .ok_or("directory cut short")?;
    let mut prev = 0;
    for b in 0..=buckets {
        let off = u64_at(directory, b * 8).ok_or("directory cut short")?;
        let want_first = b == 0 && off != 0;
        if want_first || off < prev || off > vol_at || (b == buckets && off != vol_at) {
            return Err(format!("bucket {b} out of place"));
        }
        prev = off;
    }
    let (mut at, mut n) = (0, 0u64);
    while at < vol.len() {
        let (h, k, e) = next_vol(version, vol, &mut at).ok_or("volatile section cut short")?;
        if e.n < 2 {
            return Err("volatile section holds a key with n = 1".into());
        }
        // One pass: the bytes passed their checksum; an error found later
        // in the section fails the open, which discards what `f` built.
        f(h, k, e);
        n += 1;
    }
    if n != vol_count {
        return Err("volatile section does not match the footer".into());
    }
    Ok(())
}

/// Keys with a given hash, for tests of shared hashes (`validation`).
#[cfg(test)]
pub(crate) mod collide {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    /// The inverse of odd `a` modulo 2⁶⁴ (Newton's iteration).
    fn inverse(a: u64) -> u64 {
        let mut x = a;
        for _ in 0..6 {
            x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    }

    /// A 16-byte key whose [`super::key_hash`] is `target`, one for each
    /// `salt`: every step of the hash of a 16-byte key is inverted.
    pub(crate) fn key_with_hash(target: u64, salt: u64) -> Vec<u8> {
        let unshift = |x: u64, s: u32| {
            let mut y = x;
            let mut t = x >> s;
            while t != 0 {
                y ^= t;
                t >>= s;
            }
            y
        };
        // Undo the finalizer.
        let mut x = unshift(target, 33);
        x = x.wrapping_mul(inverse(0xc4ce_b9fe_1a85_ec53));
        x = unshift(x, 33);
        x = x.wrapping_mul(inverse(0xff51_afd7_ed55_8ccd));
        x = unshift(x, 33);
        // x = mix(mix(seed, w1), w2), with mix(h, w) = g((h ^ w) · K).
        let mix = |h: u64, w: u64| {
            let h = (h ^ w).wrapping_mul(K);
            h ^ (h >> 29)
        };
        let w1 = salt.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let h1 = mix(0xcbf2_9ce4_8422_2325 ^ 16u64.wrapping_mul(K), w1);
        let w2 = unshift(x, 29).wrapping_mul(inverse(K)) ^ h1;
        let mut key = w1.to_le_bytes().to_vec();
        key.extend_from_slice(&w2.to_le_bytes());
        key
    }

    #[test]
    fn keys_with_a_given_hash_have_it() {
        for (i, k) in [b"a".as_slice(), b"user-000017", b"\0\0\0\0\0\0\0\0"]
            .into_iter()
            .enumerate()
        {
            let h = super::key_hash(k);
            let a = key_with_hash(h, i as u64);
            let b = key_with_hash(h, i as u64 + 100);
            assert_ne!(a, b);
            assert_eq!(super::key_hash(&a), h);
            assert_eq!(super::key_hash(&b), h);
        }
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
            shared: n.is_multiple_of(3),
        }
    }

    /// The hash as first written (`chunks_exact`), the reference the
    /// file format fixed: `key_hash` must give its values for every length.
    fn reference_hash(pk: &[u8]) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        fn mix(h: u64, w: u64) -> u64 {
            let h = (h ^ w).wrapping_mul(K);
            h ^ (h >> 29)
        }
        let mut h = 0xcbf2_9ce4_8422_2325 ^ (pk.len() as u64).wrapping_mul(K);
        let mut words = pk.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            h = mix(h, u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            h = mix(h, u64::from_le_bytes(b));
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    /// Values of the hash (computed independently of this code).
    const PINNED: [u64; 3] = [
        0xefd0_1f60_ba99_2926,
        0x5236_ed74_d21b_f8a8,
        0x5034_3f02_6b5b_7faa,
    ];

    /// The hash is part of the table file (and of the volatile table's
    /// order): its values do not change with its implementation.
    #[test]
    fn the_hash_keeps_its_values() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for len in 0..48 {
            for _ in 0..64 {
                let k: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                assert_eq!(key_hash(&k), reference_hash(&k), "{k:?}");
            }
        }
        assert_eq!(key_hash(b""), PINNED[0]);
        assert_eq!(key_hash(b"0000000000000001"), PINNED[1]);
        assert_eq!(key_hash(b"user:42"), PINNED[2]);
    }

    /// Keys that differ only by zero padding or length hash apart, and
    /// the top bits (bucket and volatile slot) spread sequential keys.
    #[test]
    fn the_hash_separates_padding_and_spreads_the_top_bits() {
        let mut seen = std::collections::HashSet::new();
        for k in [
            &b""[..],
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\0",
        ] {
            assert!(seen.insert(key_hash(k)), "{k:?}");
        }
        let mut top = std::collections::HashSet::new();
        for i in 0..4096u32 {
            top.insert(key_hash(format!("{i:016x}").as_bytes()) >> 52);
        }
        // 4096 keys into 4096 top-12-bit values: about 63% distinct if
        // uniform.
        assert!(top.len() > 2400, "{} distinct", top.len());
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
        let mut w = TableWriter::create(&fs, dir.path(), 7, keys.len() as u64).unwrap();
        for (i, (h, k)) in keys.iter().enumerate() {
            w.push(*h, k, &e(i as u64, 1 + (i % 3) as u32));
        }
        let t = w.finish(2).unwrap();
        for (i, (_, k)) in keys.iter().enumerate() {
            assert_eq!(t.get(k).unwrap(), Some(e(i as u64, 1 + (i % 3) as u32)));
        }
        assert_eq!(t.get(b"absent").unwrap(), None);
        // Open yields the keys with n > 1 (the volatile table's), in file
        // order; `for_each` every key.
        let mut seen = Vec::new();
        let r = t.r;
        PkTable::open(&fs, dir.path(), r, 2, |_| {}, &mut |h, k, e| {
            seen.push((h, k.map(<[u8]>::to_vec), e))
        })
        .unwrap();
        let mut all = Vec::new();
        t.for_each(|k, e| all.push((k.to_vec(), e))).unwrap();
        // With its hash; its bytes if shared.
        assert_eq!(
            seen,
            all.iter()
                .filter(|(_, e)| e.n > 1)
                .map(|(k, e)| (key_hash(k), e.shared.then(|| k.clone()), *e))
                .collect::<Vec<_>>()
        );
        assert_eq!(seen.len(), 1000 - 334);
        assert_eq!(
            all.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            keys.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>()
        );
        // The wrong key type, number or checksum: refused.
        assert!(PkTable::open(&fs, dir.path(), r, 1, |_| {}, &mut |_, _, _| {}).is_err());
        assert!(PkTable::open(
            &fs,
            dir.path(),
            TableRef {
                crc: r.crc ^ 1,
                ..r
            },
            2,
            |_| {},
            &mut |_, _, _| {}
        )
        .is_err());
        // One flipped byte anywhere: refused at open (footer, directory,
        // volatile section) or when its bucket is read (entries, which
        // open does not read).
        let path = dir.path().join(table_name(7));
        let good = std::fs::read(&path).unwrap();
        let vol_at = t.vol_at as usize;
        for i in [
            0,
            vol_at / 2,
            vol_at - 1,
            vol_at + 5,
            good.len() - 30,
            good.len() - 1,
        ] {
            let mut b = good.clone();
            b[i] ^= 0x10;
            std::fs::write(&path, &b).unwrap();
            let opened = PkTable::open(&fs, dir.path(), r, 2, |_| {}, &mut |_, _, _| {});
            assert_eq!(opened.is_ok(), i < vol_at, "byte {i}");
            // The bucket fails its checksum when read, whether changed
            // before open or after (the mapping sees it).
            if i < vol_at {
                let t = opened.unwrap();
                let err = t.for_each(|_, _| {}).unwrap_err();
                assert!(err.to_string().contains("checksum"), "{err}");
                std::fs::write(&path, &good).unwrap();
                let t = PkTable::open(&fs, dir.path(), r, 2, |_| {}, &mut |_, _, _| {}).unwrap();
                std::fs::write(&path, &b).unwrap();
                let err = t.for_each(|_, _| {}).unwrap_err();
                assert!(err.to_string().contains("checksum"), "{err}");
                let failed = keys.iter().filter(|(_, k)| t.get(k).is_err()).count();
                assert!((1..=40).contains(&failed), "{failed} keys fail");
            }
        }
        std::fs::write(&path, &good).unwrap();
        // An empty table works too.
        let t = TableWriter::create(&fs, dir.path(), 8, 0)
            .unwrap()
            .finish(2)
            .unwrap();
        assert_eq!(t.get(b"x").unwrap(), None);
        PkTable::open(&fs, dir.path(), t.r, 2, |_| {}, &mut |_, _, _| {
            panic!("no keys")
        })
        .unwrap();
    }
}
