//! The page log: where the PS-Tree and the changes to the persistent
//! validation table live on disk, and which table file (`table`) holds
//! the rest of that table (format: `docs/format/perseid.md`).
//!
//! Our machines have no persistent memory, so the paper's mapped PM pool
//! becomes pages cached in RAM and a file written through the engine's
//! [`Fs`] (fault injection and simulated power loss reach it), with an
//! explicit flush (write + fsync) as the persistence barrier. The file is
//! a log of checksummed records in *groups*: `Begin`, then pages, freed
//! pages, SKey-layer and persistent-table records (a key's value, or a
//! Table record naming the table file that replaces all of them), then
//! `Commit` with the
//! checkpoint (every primary write at or below it is in the group or
//! before). A group takes effect only if its `Commit` is read back intact;
//! a *full* group (a snapshot of everything) replaces all state before
//! it. Nothing is written between flushes, so a crash loses exactly the
//! changes since the last commit, which the primary's WAL still holds.
//!
//! Files are `perseid-<n>.log`, read in order of `n`. A flush appends a
//! delta group to the active file, or, when the log has grown to 1.5
//! times the live size (or after a torn tail, an error, or a rebuild), writes a
//! full group to a new file and then removes the older ones. A new file
//! is fsynced and its directory too before the flush returns.
//!
//! Pages are not read at open: a Page record yields its page's location
//! ([`Loc`]), and [`PageReader`] reads the record back (checksum verified)
//! when the page cache (`pkey`) needs it. The files a full group replaces
//! are removed only after the new locations are installed
//! ([`Store::retire`]), so a reader never looks for a page in a removed
//! file.

#![deny(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use strata_lsm::coding::masked_crc;
use strata_lsm::error::{Error, Result};
use strata_lsm::io::{Fs, RandomRead, WritableFile};
use strata_lsm::key::SeqNo;

use super::pkey::{Loc, Page, PageId, PageKind, PageSource, Ptr};
use super::table::{parse_table_name, table_name, PEntry, TableRef};

const MAGIC: &[u8; 8] = b"PERSEID\0";
/// Version of the file format; a file of another version fails its
/// checks (and the index is rebuilt from the primary).
pub(crate) const FORMAT_VERSION: u32 = 2;

const K_HEADER: u8 = 1;
const K_BEGIN: u8 = 2;
const K_PAGE: u8 = 3;
const K_FREE: u8 = 4;
const K_SKEY: u8 = 5;
const K_PK: u8 = 6;
const K_COMMIT: u8 = 7;
const K_TABLE: u8 = 8;

/// What a `Commit` record carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Commit {
    /// Every primary write with a sequence number at or below it is
    /// reflected in the state up to this group.
    pub checkpoint: SeqNo,
    /// Largest rectangle half-extents indexed (spatial queries).
    pub extent: [f64; 2],
}

/// One decoded record of a group.
pub(crate) enum Rec {
    Page(PageId, Page),
    /// A page read at open: its capacity and where its record is (the
    /// contents are read when needed).
    PageAt(PageId, usize, Loc),
    Free(PageId),
    SKey(Vec<u8>, Option<Ptr>),
    Pk(Vec<u8>, Option<PEntry>),
    /// The persistent table is this file; Pk records before it no longer
    /// count.
    Table(TableRef),
}

/// A committed group read back: full or delta, its records, its commit.
pub(crate) struct GroupRead {
    pub full: bool,
    pub records: Vec<Rec>,
    pub commit: Commit,
}

/// Encodes one group's records.
pub(crate) struct GroupWriter {
    buf: Vec<u8>,
    records: u32,
}

fn frame(buf: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    let mut body = Vec::with_capacity(payload.len() + 1);
    body.push(kind);
    body.extend_from_slice(payload);
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&masked_crc(&body).to_le_bytes());
    buf.extend_from_slice(&body);
}

fn put_bytes(p: &mut Vec<u8>, b: &[u8]) {
    p.extend_from_slice(&(b.len() as u32).to_le_bytes());
    p.extend_from_slice(b);
}

impl GroupWriter {
    pub fn new(full: bool) -> GroupWriter {
        let mut g = GroupWriter {
            buf: Vec::new(),
            records: 0,
        };
        frame(&mut g.buf, K_BEGIN, &[full as u8]);
        g
    }

    /// Adds a page; returns the record's offset in the group and length.
    pub fn page(&mut self, id: PageId, page: &Page) -> (u64, u32) {
        let at = self.buf.len();
        let mut p = Vec::with_capacity(page.data.len() + 16);
        p.extend_from_slice(&id.to_le_bytes());
        p.push(page.kind as u8);
        p.extend_from_slice(&(page.cap as u32).to_le_bytes());
        put_bytes(&mut p, &page.data);
        frame(&mut self.buf, K_PAGE, &p);
        self.records += 1;
        (at as u64, (self.buf.len() - at) as u32)
    }

    pub fn free(&mut self, id: PageId) {
        frame(&mut self.buf, K_FREE, &id.to_le_bytes());
        self.records += 1;
    }

    pub fn skey(&mut self, skey: &[u8], ptr: Option<Ptr>) {
        let mut p = Vec::with_capacity(skey.len() + 13);
        put_bytes(&mut p, skey);
        p.push(ptr.is_some() as u8);
        p.extend_from_slice(&ptr.unwrap_or(0).to_le_bytes());
        frame(&mut self.buf, K_SKEY, &p);
        self.records += 1;
    }

    pub fn pk(&mut self, pk: &[u8], e: Option<PEntry>) {
        let mut p = Vec::with_capacity(pk.len() + 18);
        put_bytes(&mut p, pk);
        p.push(e.is_some() as u8);
        let e = e.unwrap_or(PEntry {
            seq: 0,
            n: 0,
            has_entry: false,
        });
        p.extend_from_slice(&e.seq.to_le_bytes());
        p.extend_from_slice(&e.n.to_le_bytes());
        p.push(e.has_entry as u8);
        frame(&mut self.buf, K_PK, &p);
        self.records += 1;
    }

    pub fn table(&mut self, r: &TableRef) {
        let mut p = Vec::with_capacity(28);
        p.extend_from_slice(&r.number.to_le_bytes());
        p.extend_from_slice(&r.count.to_le_bytes());
        p.extend_from_slice(&r.len.to_le_bytes());
        p.extend_from_slice(&r.crc.to_le_bytes());
        frame(&mut self.buf, K_TABLE, &p);
        self.records += 1;
    }

    /// Closes the group.
    pub fn commit(mut self, c: &Commit) -> Vec<u8> {
        let mut p = Vec::with_capacity(28);
        p.extend_from_slice(&c.checkpoint.to_le_bytes());
        p.extend_from_slice(&c.extent[0].to_le_bytes());
        p.extend_from_slice(&c.extent[1].to_le_bytes());
        p.extend_from_slice(&self.records.to_le_bytes());
        frame(&mut self.buf, K_COMMIT, &p);
        self.buf
    }
}

/// A bounds-checked reader of a record's payload.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = self.0.split_at_checked(n)?;
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn f64(&mut self) -> Option<f64> {
        Some(f64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

/// The next record of `b` at `*at`: kind and payload; `None` at the end
/// or at a record that is cut short or fails its checksum.
fn next_record<'a>(b: &'a [u8], at: &mut usize) -> Option<(u8, &'a [u8])> {
    let mut c = Cur(b.get(*at..)?);
    let len = c.u32()? as usize;
    let crc = c.u32()?;
    let body = c.take(len)?;
    if len == 0 || masked_crc(body) != crc {
        return None;
    }
    *at += 8 + len;
    let (&kind, payload) = body.split_first()?;
    Some((kind, payload))
}

fn decode(kind: u8, p: &[u8]) -> Option<Rec> {
    let mut c = Cur(p);
    let rec = match kind {
        K_PAGE => {
            let id = c.u32()?;
            let kind = PageKind::from_u8(c.u8()?).ok()?;
            let cap = c.u32()? as usize;
            let data = c.bytes()?.to_vec();
            Rec::Page(id, Page { kind, cap, data })
        }
        K_FREE => Rec::Free(c.u32()?),
        K_SKEY => {
            let sk = c.bytes()?.to_vec();
            let present = c.u8()? != 0;
            let ptr = c.u64()?;
            Rec::SKey(sk, present.then_some(ptr))
        }
        K_PK => {
            let pk = c.bytes()?.to_vec();
            let present = c.u8()? != 0;
            let e = PEntry {
                seq: c.u64()?,
                n: c.u32()?,
                has_entry: c.u8()? != 0,
            };
            Rec::Pk(pk, present.then_some(e))
        }
        K_TABLE => Rec::Table(TableRef {
            number: c.u64()?,
            count: c.u64()?,
            len: c.u64()?,
            crc: c.u32()?,
        }),
        _ => return None,
    };
    c.end()?;
    Some(rec)
}

/// A Page record's header, checked, as a location (its contents are not
/// copied).
fn page_at(p: &[u8], loc: Loc) -> Option<Rec> {
    let mut c = Cur(p);
    let id = c.u32()?;
    PageKind::from_u8(c.u8()?).ok()?;
    let cap = c.u32()? as usize;
    let used = c.bytes()?.len();
    c.end()?;
    (used <= cap).then_some(Rec::PageAt(id, cap, loc))
}

/// Reads pages back from the files of one index (the page cache's
/// [`PageSource`]), keeping one open handle per file.
pub(crate) struct PageReader {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    handles: Mutex<HashMap<u64, Arc<dyn RandomRead>>>,
}

impl PageReader {
    pub fn new(fs: Arc<dyn Fs>, dir: &Path) -> PageReader {
        PageReader {
            fs,
            dir: dir.to_path_buf(),
            handles: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets the handles of files other than `keep` (after a full group
    /// replaced them).
    pub fn retain(&self, keep: &[u64]) {
        if let Ok(mut h) = self.handles.lock() {
            h.retain(|n, _| keep.contains(n));
        }
    }

    /// The open handle of `file`; a new one (mapping the file as it is
    /// now) with `fresh`.
    fn handle(&self, file: u64, fresh: bool) -> Result<Arc<dyn RandomRead>> {
        let mut h = self
            .handles
            .lock()
            .map_err(|_| Error::invalid("perseid: page reader lock poisoned"))?;
        if let Some(f) = h.get(&file).filter(|_| !fresh) {
            return Ok(f.clone());
        }
        let path = self.dir.join(file_name(file));
        // Through a read-only mapping where the file system maps (no
        // system call per page read; `pread` otherwise). Mapping is safe
        // here: a page file is only ever appended to, never rewritten or
        // truncated, and is unlinked (which leaves a mapping intact) once
        // a full group in a newer file replaced it.
        let f: Arc<dyn RandomRead> = Arc::from(self.fs.open_mapped(&path)?);
        h.insert(file, f.clone());
        Ok(f)
    }
}

impl PageSource for PageReader {
    fn read(&self, id: PageId, loc: Loc) -> Result<Page> {
        // A mapping covers the file as it was when mapped: a record a
        // later flush appended lies past it, so a failed read maps the
        // file again once before it counts as corruption.
        let len = loc.len as usize;
        let bytes = match self.handle(loc.file, false)?.read_at(loc.offset, len) {
            Ok(b) => b,
            Err(_) => self.handle(loc.file, true)?.read_at(loc.offset, len)?,
        };
        let bad = || {
            Error::corruption(format!(
                "perseid file {}: page {id} at byte {} fails its checks",
                loc.file, loc.offset
            ))
        };
        let mut at = 0;
        let (kind, p) = next_record(&bytes, &mut at).ok_or_else(bad)?;
        match decode(kind, p) {
            Some(Rec::Page(pid, page)) if kind == K_PAGE && pid == id && at == bytes.len() => {
                Ok(page)
            }
            _ => Err(bad()),
        }
    }
}

/// How one file read back.
pub(crate) struct FileRead {
    pub groups: Vec<GroupRead>,
    /// Bytes after the last committed group that do not form one (a flush
    /// cut by a crash).
    pub torn: bool,
}

/// Reads one file: its header must name this format, `key_type` and
/// `number`; then every committed group.
pub(crate) fn read_file(b: &[u8], key_type: u8, number: u64) -> Result<FileRead> {
    let mut at = 0;
    let header_ok = next_record(b, &mut at).and_then(|(kind, p)| {
        let mut c = Cur(p);
        (kind == K_HEADER
            && c.take(8)? == MAGIC
            && c.u32()? == FORMAT_VERSION
            && c.u8()? == key_type
            && c.u64()? == number)
            .then_some(())
    });
    if header_ok.is_none() {
        // A file is created and its header written in one flush: a bad
        // header is a torn creation (an empty file), or a foreign one.
        return Ok(FileRead {
            groups: Vec::new(),
            torn: !b.is_empty(),
        });
    }
    let mut groups = Vec::new();
    let mut committed = at;
    'groups: while let Some((kind, p)) = next_record(b, &mut at) {
        if kind != K_BEGIN {
            return Err(Error::corruption(format!(
                "perseid file {number}: record of kind {kind} outside a group"
            )));
        }
        let full = p.first().copied().unwrap_or(0) != 0;
        let mut records = Vec::new();
        loop {
            let start = at;
            let Some((kind, p)) = next_record(b, &mut at) else {
                break 'groups;
            };
            if kind == K_COMMIT {
                let mut c = Cur(p);
                let commit = (|| {
                    let checkpoint = c.u64()?;
                    let extent = [c.f64()?, c.f64()?];
                    let n = c.u32()?;
                    c.end()?;
                    (n as usize == records.len()).then_some(Commit { checkpoint, extent })
                })()
                .ok_or_else(|| {
                    Error::corruption(format!("perseid file {number}: bad commit record"))
                })?;
                groups.push(GroupRead {
                    full,
                    records,
                    commit,
                });
                committed = at;
                break;
            }
            let rec = if kind == K_PAGE {
                page_at(
                    p,
                    Loc {
                        file: number,
                        offset: start as u64,
                        len: (at - start) as u32,
                    },
                )
            } else {
                decode(kind, p)
            };
            let rec = rec.ok_or_else(|| {
                Error::corruption(format!(
                    "perseid file {number}: bad record of kind {kind} at byte {at}"
                ))
            })?;
            records.push(rec);
        }
    }
    Ok(FileRead {
        groups,
        torn: committed < b.len(),
    })
}

fn file_name(n: u64) -> String {
    format!("perseid-{n:06}.log")
}

fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix("perseid-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The files of one index and the active one (appended to).
pub(crate) struct Store {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    key_type: u8,
    /// Live files, by number, with their sizes.
    files: Vec<(u64, u64)>,
    active: Option<Box<dyn WritableFile>>,
    next_number: u64,
    /// The next flush writes a full group to a new file.
    pub needs_full: bool,
    /// Bytes of the last full group (0: none since open).
    last_full: u64,
    /// Files a full group replaced, removed at [`Store::retire`].
    retired: Vec<u64>,
    /// Table files present (`table`), by number, with their sizes.
    tables: Vec<(u64, u64)>,
}

/// The committed groups of an index's files, in order.
pub(crate) struct Recovered {
    pub groups: Vec<GroupRead>,
}

impl Store {
    /// Opens the files in `dir` (created if missing) and reads back every
    /// committed group. A delta group after a torn tail (the state it
    /// builds on may be lost) is corruption.
    /// The outer error is an I/O error listing the files; the inner one a
    /// file that fails its checks (the store is usable either way).
    pub fn open(fs: Arc<dyn Fs>, dir: &Path, key_type: u8) -> Result<(Store, Result<Recovered>)> {
        fs.create_dir_all(dir).map_err(|e| {
            Error::io(
                format!("{} {}", "create perseid directory", dir.display()),
                e,
            )
        })?;
        let names = fs
            .list_dir(dir)
            .map_err(|e| Error::io(format!("{} {}", "list perseid directory", dir.display()), e))?;
        let mut numbers: Vec<u64> = names
            .iter()
            .filter_map(|n| n.to_str().and_then(parse_name))
            .collect();
        numbers.sort_unstable();
        let mut tables = Vec::new();
        for n in names
            .iter()
            .filter_map(|n| n.to_str().and_then(parse_table_name))
        {
            let path = dir.join(table_name(n));
            let size = fs
                .file_size(&path)
                .map_err(|e| Error::io(format!("size of perseid table {}", path.display()), e))?;
            tables.push((n, size));
        }
        let mut files = Vec::new();
        let mut groups = Vec::new();
        let mut torn = false;
        let mut any_torn = false;
        let mut failed: Option<Error> = None;
        for n in numbers {
            let path = dir.join(file_name(n));
            let size = fs
                .file_size(&path)
                .map_err(|e| Error::io(format!("size of perseid file {}", path.display()), e))?;
            files.push((n, size));
            if failed.is_some() {
                continue;
            }
            let read = fs
                .open_random(&path, false)
                .and_then(|f| f.read_at(0, size as usize))
                .and_then(|b| read_file(&b, key_type, n));
            let read = match read {
                Ok(r) => r,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            for g in read.groups {
                if torn && !g.full {
                    failed = Some(Error::corruption(format!(
                        "perseid file {n}: a delta group follows a torn flush"
                    )));
                    break;
                }
                torn = false;
                groups.push(g);
            }
            torn |= read.torn;
            any_torn |= read.torn;
        }
        let next_number = files
            .iter()
            .chain(&tables)
            .map(|(n, _)| n + 1)
            .max()
            .unwrap_or(1);
        Ok((
            Store {
                fs,
                dir: dir.to_path_buf(),
                key_type,
                files,
                active: None,
                next_number,
                needs_full: any_torn || failed.is_some(),
                last_full: 0,
                retired: Vec::new(),
                tables,
            },
            match failed {
                Some(e) => Err(e),
                None => Ok(Recovered { groups }),
            },
        ))
    }

    pub fn fs(&self) -> &Arc<dyn Fs> {
        &self.fs
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of the live page-log files.
    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|(_, s)| s).sum()
    }

    /// Bytes of the table files present.
    pub fn table_bytes(&self) -> u64 {
        self.tables.iter().map(|(_, s)| s).sum()
    }

    /// A number for a new table file (never used by another file of this
    /// index). The file counts as present from now on (so that a file
    /// left by a failed write is removed like the others).
    pub fn new_table(&mut self) -> u64 {
        let n = self.next_number;
        self.next_number += 1;
        self.tables.push((n, 0));
        n
    }

    /// The table file `n` was written with `len` bytes.
    pub fn table_written(&mut self, n: u64, len: u64) {
        if let Some(t) = self.tables.iter_mut().find(|(m, _)| *m == n) {
            t.1 = len;
        }
    }

    /// Removes every table file but `keep` (the one the last committed
    /// group refers to, or none). Call only after that group is durable.
    pub fn remove_tables_except(&mut self, keep: Option<u64>) {
        let fs = &self.fs;
        let dir = &self.dir;
        self.tables.retain(|(n, _)| {
            if Some(*n) == keep {
                return true;
            }
            // A file left behind is removed at a later call (or is
            // harmless: only the file the log names is read).
            fs.remove_file(&dir.join(table_name(*n))).is_err()
        });
    }

    /// True if the next flush should write a full group: asked for, or the
    /// log holds more than 1.5 times the live size (`live`, an estimate,
    /// or the last full group's size) plus 4 MiB.
    pub fn wants_full(&self, live: u64) -> bool {
        self.needs_full || self.file_bytes() > live.max(self.last_full) * 3 / 2 + (4 << 20)
    }

    /// Writes one encoded group durably (see the module doc). On error
    /// the active file is abandoned and the next flush writes a full
    /// group.
    /// Returns the file the group went to and its offset there. After a
    /// full group, the older files stay until [`Store::retire`].
    pub fn write_group(&mut self, group: &[u8], full: bool) -> Result<(u64, u64)> {
        let r = self.try_write(group, full);
        if r.is_err() {
            self.active = None;
            self.needs_full = true;
        }
        r
    }

    /// Removes the files a full group replaced; returns the live ones.
    pub fn retire(&mut self) -> Vec<u64> {
        for old in std::mem::take(&mut self.retired) {
            let _ = self.fs.remove_file(&self.dir.join(file_name(old)));
        }
        self.files.iter().map(|(n, _)| *n).collect()
    }

    fn try_write(&mut self, group: &[u8], full: bool) -> Result<(u64, u64)> {
        if full || self.active.is_none() {
            let n = self.next_number;
            self.next_number += 1;
            let path = self.dir.join(file_name(n));
            let mut f = self.fs.create(&path, true).map_err(|e| {
                Error::io(format!("{} {}", "create perseid file", path.display()), e)
            })?;
            let mut header = Vec::new();
            let mut p = MAGIC.to_vec();
            p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            p.push(self.key_type);
            p.extend_from_slice(&n.to_le_bytes());
            frame(&mut header, K_HEADER, &p);
            f.write_all(&header)
                .and_then(|_| f.write_all(group))
                .and_then(|_| f.flush())
                .and_then(|_| f.sync_all())
                .map_err(|e| {
                    Error::io(format!("{} {}", "write perseid file", path.display()), e)
                })?;
            self.fs.sync_dir(&self.dir).map_err(|e| {
                Error::io(
                    format!("{} {}", "sync perseid directory", self.dir.display()),
                    e,
                )
            })?;
            let size = (header.len() + group.len()) as u64;
            if full {
                // The new file alone holds the state: the older ones go
                // (at `retire`).
                self.retired
                    .extend(std::mem::take(&mut self.files).into_iter().map(|(n, _)| n));
                self.last_full = size;
                self.needs_full = false;
            }
            self.files.push((n, size));
            self.active = Some(f);
            return Ok((n, header.len() as u64));
        }
        let path = self
            .files
            .last()
            .map(|(n, _)| self.dir.join(file_name(*n)))
            .unwrap_or_default();
        let f = self
            .active
            .as_mut()
            .ok_or_else(|| Error::invalid("perseid: no active file"))?;
        f.write_all(group)
            .and_then(|_| f.flush())
            .and_then(|_| f.sync_data())
            .map_err(|e| {
                Error::io(
                    format!("{} {}", "append to perseid file", path.display()),
                    e,
                )
            })?;
        let mut at = (0, 0);
        if let Some(last) = self.files.last_mut() {
            at = (last.0, last.1);
            last.1 += group.len() as u64;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_round_trip_and_torn_tails_are_dropped() {
        let mut g = GroupWriter::new(true);
        g.page(
            3,
            &Page {
                kind: PageKind::Normal,
                cap: 4096,
                data: vec![1, 2, 3],
            },
        );
        g.skey(b"k", Some(7));
        g.pk(
            b"p",
            Some(PEntry {
                seq: 9,
                n: 2,
                has_entry: true,
            }),
        );
        g.free(4);
        let commit = Commit {
            checkpoint: 42,
            extent: [0.5, 0.25],
        };
        let group = g.commit(&commit);
        let mut file = Vec::new();
        let mut p = MAGIC.to_vec();
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        p.push(2);
        p.extend_from_slice(&5u64.to_le_bytes());
        frame(&mut file, K_HEADER, &p);
        file.extend_from_slice(&group);
        let r = read_file(&file, 2, 5).unwrap();
        assert!(!r.torn);
        assert_eq!(r.groups.len(), 1);
        assert_eq!(r.groups[0].commit, commit);
        assert!(r.groups[0].full);
        assert_eq!(r.groups[0].records.len(), 4);
        // Wrong key type or number: not this index's file.
        assert!(read_file(&file, 1, 5).unwrap().groups.is_empty());
        assert!(read_file(&file, 2, 6).unwrap().groups.is_empty());
        // A second group cut anywhere is dropped; the first survives.
        let second = GroupWriter::new(false).commit(&Commit {
            checkpoint: 50,
            extent: [0.0, 0.0],
        });
        for cut in 1..second.len() {
            let mut f = file.clone();
            f.extend_from_slice(&second[..cut]);
            let r = read_file(&f, 2, 5).unwrap();
            assert!(r.torn);
            assert_eq!(r.groups.len(), 1);
        }
        // A flipped byte inside the committed group: the group is lost.
        let mut f = file.clone();
        let i = file.len() - 3;
        f[i] ^= 1;
        let r = read_file(&f, 2, 5).unwrap();
        assert!(r.torn && r.groups.is_empty());
    }
}
