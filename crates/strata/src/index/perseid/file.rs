//! The page log: where the PS-Tree and the changes to the persistent
//! validation table live on disk, and which table file (`table`) holds
//! the rest of that table (format: `docs/format/perseid.md`).
//!
//! Our machines have no persistent memory, so the paper's mapped PM pool
//! becomes pages cached in RAM and a file written through the engine's
//! [`Fs`] (fault injection and simulated power loss reach it), with an
//! explicit flush (write + fsync) as the persistence barrier. The file is
//! a log of checksummed records in *groups*: `Begin` (with the length of
//! the page section and of the rest), the pages, a PageDir record locating
//! them, freed pages, SKey-layer and persistent-table records (a key's
//! value, or a Table record naming the table file that replaces all of
//! them), then `Commit` with the checkpoint (every primary write at or
//! below it is in the group or before), written after a barrier. A group
//! takes effect only if its `Commit` is read back intact; a *full* group
//! (a snapshot of everything) replaces all state before it. Nothing is
//! written between flushes, so a crash loses exactly the changes since
//! the last commit, which the primary's WAL still holds.
//!
//! Files are `perseid-<n>.log`, read in order of `n`. A flush appends a
//! delta group to the active file, or, when the log has grown to 1.5
//! times the live size (or after a torn tail, an error, or a rebuild), writes a
//! full group to a new file and then removes the older ones. A new file
//! is fsynced and its directory too before the flush returns.
//!
//! Pages are not read at open (open skips each group's page section): the
//! PageDir record yields each page's location ([`Loc`]), and
//! [`PageReader`] reads the record back (checksum verified) when the page
//! cache (`pkey`) needs it; a page that fails its checks leaves a marker
//! that makes the next open rebuild the index. The files a full group replaces
//! are removed only after the new locations are installed
//! ([`Store::retire`]), so a reader never looks for a page in a removed
//! file.

#![deny(clippy::indexing_slicing)]

use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use strata_lsm::coding::masked_crc;
use strata_lsm::error::{Error, Result};
use strata_lsm::io::{Fs, RandomRead, WritableFile};
use strata_lsm::key::SeqNo;

use super::pkey::{Loc, Mapping, Page, PageId, PageKind, PageRef, PageSource, Ptr};
use super::table::{parse_table_name, table_name, write_marker, PEntry, TableRef, MARKER};

const MAGIC: &[u8; 8] = b"PERSEID\0";
/// Version of the file format; a file of another version fails its
/// checks (and the index is rebuilt from the primary).
pub(crate) const FORMAT_VERSION: u32 = 3;

const K_HEADER: u8 = 1;
const K_BEGIN: u8 = 2;
const K_PAGE: u8 = 3;
const K_FREE: u8 = 4;
const K_SKEY: u8 = 5;
const K_PK: u8 = 6;
const K_COMMIT: u8 = 7;
const K_TABLE: u8 = 8;
const K_PAGE_DIR: u8 = 9;

/// What a `Commit` record carries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Commit {
    /// Every primary write with a sequence number at or below it is
    /// reflected in the state up to this group.
    pub checkpoint: SeqNo,
    /// Entries in the PKey layer (live and obsolete) in that state.
    pub entries: u64,
    /// Largest rectangle half-extents indexed (spatial queries).
    pub extent: [f64; 2],
}

/// One decoded record of a group.
pub(crate) enum Rec {
    /// A page record met where a group's records are decoded (pages are
    /// located by the page directory and read in place when needed).
    Page(PageId),
    /// A page read at open: its capacity and where its record is (the
    /// contents are read when needed).
    PageAt(PageId, usize, Loc),
    Free(PageId),
    /// A secondary key (bytes of [`GroupRead::rest`]) and its head.
    SKey(Range<usize>, Option<Ptr>),
    /// A primary key (bytes of [`GroupRead::rest`]) and its value.
    Pk(Range<usize>, Option<PEntry>),
    /// The persistent table is this file; Pk records before it no longer
    /// count.
    Table(TableRef),
}

/// A committed group read back: full or delta, its records, its commit.
pub(crate) struct GroupRead {
    pub full: bool,
    pub records: Vec<Rec>,
    pub commit: Commit,
    /// The bytes read after the page section, which key records point
    /// into (no allocation per record).
    pub rest: Vec<u8>,
}

impl GroupRead {
    /// The bytes a key record names.
    pub fn key(&self, r: &Range<usize>) -> Result<&[u8]> {
        self.rest
            .get(r.clone())
            .ok_or_else(|| Error::corruption("perseid: a key record outside its group"))
    }
}

/// Bytes of a Begin record: frame (8) ‖ kind ‖ full u8 ‖ pages u64 ‖ rest u64.
const BEGIN_LEN: usize = 8 + 1 + 1 + 16;

/// Bytes of a Commit record: frame (8) ‖ kind ‖ checkpoint u64 ‖ extent
/// 2 × f64 ‖ entries u64 ‖ records u32.
const COMMIT_LEN: usize = 8 + 1 + 36;

/// Bytes of a PageDir entry: page id u32 ‖ capacity u32 ‖ offset u64 ‖
/// record length u32.
const DIR_ENTRY_LEN: usize = 20;

/// Encodes one group's records: the Page records first (their section is
/// skipped at open), then the PageDir record locating them, then the
/// other records, then Commit.
pub(crate) struct GroupWriter {
    full: bool,
    /// Room for the Begin record (`BEGIN_LEN` bytes, filled by
    /// [`GroupWriter::commit`]), then the Page records: the group's body
    /// is built in place, each page copied once.
    pages: Vec<u8>,
    dir: Vec<u8>,
    page_count: u32,
    /// The Table record, if any: the first record after the page
    /// directory, wherever [`GroupWriter::table`] was called (its file is
    /// written while the others are encoded).
    table: Vec<u8>,
    rest: Vec<u8>,
    records: u32,
}

/// An encoded group, written in two steps: `body` (Begin to the last
/// record before Commit) made durable first, then `commit`, so that a
/// Commit read back intact vouches for page records that open does not
/// read.
pub(crate) struct EncodedGroup {
    pub body: Vec<u8>,
    pub commit: Vec<u8>,
}

fn frame(buf: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    frame_with(buf, kind, |b| b.extend_from_slice(payload));
}

/// Appends one record whose payload `payload` appends to `buf`, framed in
/// place (length and checksum filled in once the payload is there: no
/// copy of it). Returns the record's length, frame included.
fn frame_with(buf: &mut Vec<u8>, kind: u8, payload: impl FnOnce(&mut Vec<u8>)) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[0; 8]);
    buf.push(kind);
    payload(buf);
    let (head, body) = buf.split_at_mut(at + 8);
    let crc = masked_crc(body);
    let body_len = body.len() as u32;
    if let Some(h) = head.get_mut(at..at + 4) {
        h.copy_from_slice(&body_len.to_le_bytes());
    }
    if let Some(h) = head.get_mut(at + 4..at + 8) {
        h.copy_from_slice(&crc.to_le_bytes());
    }
    buf.len() - at
}

/// Bytes of the Page record of a page whose used part is `data_len`
/// bytes: frame (8), kind (1), id (4), page kind (1), capacity (4),
/// length-prefixed data.
pub(crate) fn page_record_len(data_len: usize) -> usize {
    8 + 1 + 4 + 1 + 4 + 4 + data_len
}

fn put_bytes(p: &mut Vec<u8>, b: &[u8]) {
    p.extend_from_slice(&(b.len() as u32).to_le_bytes());
    p.extend_from_slice(b);
}

impl GroupWriter {
    pub fn new(full: bool) -> GroupWriter {
        GroupWriter {
            full,
            pages: vec![0; BEGIN_LEN],
            dir: Vec::new(),
            page_count: 0,
            table: Vec::new(),
            rest: Vec::new(),
            records: 0,
        }
    }

    /// Makes room for `pages` more Page records of `bytes` bytes in all
    /// (a page's record takes [`page_record_len`] bytes) and for the rest
    /// of the group as encoded so far, so that the body is not copied as
    /// it grows ([`GroupWriter::commit`] appends the rest to it).
    pub fn reserve_pages(&mut self, pages: usize, bytes: usize) {
        let dir = (self.page_count as usize + pages) * 20 + 16;
        self.pages
            .reserve(bytes + dir + self.table.len() + self.rest.len() + 64);
    }

    /// Adds a page; returns the record's offset in the group and length.
    pub fn page(&mut self, id: PageId, page: PageRef<'_>) -> (u64, u32) {
        let at = self.pages.len();
        let len = frame_with(&mut self.pages, K_PAGE, |p| {
            p.extend_from_slice(&id.to_le_bytes());
            p.push(page.kind as u8);
            p.extend_from_slice(&(page.cap as u32).to_le_bytes());
            put_bytes(p, page.data);
        }) as u32;
        debug_assert_eq!(len as usize, page_record_len(page.data.len()));
        self.dir.extend_from_slice(&id.to_le_bytes());
        self.dir.extend_from_slice(&(page.cap as u32).to_le_bytes());
        self.dir.extend_from_slice(&(at as u64).to_le_bytes());
        self.dir.extend_from_slice(&len.to_le_bytes());
        self.page_count += 1;
        self.records += 1;
        (at as u64, len)
    }

    pub fn free(&mut self, id: PageId) {
        frame(&mut self.rest, K_FREE, &id.to_le_bytes());
        self.records += 1;
    }

    pub fn skey(&mut self, skey: &[u8], ptr: Option<Ptr>) {
        let mut p = Vec::with_capacity(skey.len() + 13);
        put_bytes(&mut p, skey);
        p.push(ptr.is_some() as u8);
        p.extend_from_slice(&ptr.unwrap_or(0).to_le_bytes());
        frame(&mut self.rest, K_SKEY, &p);
        self.records += 1;
    }

    pub fn pk(&mut self, pk: &[u8], e: Option<PEntry>) {
        let mut p = Vec::with_capacity(pk.len() + 18);
        put_bytes(&mut p, pk);
        p.push(e.is_some() as u8);
        let e = e.unwrap_or(PEntry::with_flags(0, 0, 0));
        p.extend_from_slice(&e.seq.to_le_bytes());
        p.extend_from_slice(&e.n.to_le_bytes());
        p.push(e.flags());
        frame(&mut self.rest, K_PK, &p);
        self.records += 1;
    }

    /// Names the table file (at most once a group).
    pub fn table(&mut self, r: &TableRef) {
        debug_assert!(self.table.is_empty(), "two Table records in a group");
        let mut p = Vec::with_capacity(28);
        p.extend_from_slice(&r.number.to_le_bytes());
        p.extend_from_slice(&r.count.to_le_bytes());
        p.extend_from_slice(&r.len.to_le_bytes());
        p.extend_from_slice(&r.crc.to_le_bytes());
        frame(&mut self.table, K_TABLE, &p);
        self.records += 1;
    }

    /// Closes the group.
    pub fn commit(self, c: &Commit) -> EncodedGroup {
        let mut dir = Vec::with_capacity(self.dir.len() + 4);
        dir.extend_from_slice(&self.page_count.to_le_bytes());
        dir.extend_from_slice(&self.dir);
        let mut tail = Vec::with_capacity(dir.len() + 16 + self.table.len() + self.rest.len());
        frame(&mut tail, K_PAGE_DIR, &dir);
        tail.extend_from_slice(&self.table);
        tail.extend_from_slice(&self.rest);
        let mut p = Vec::with_capacity(36);
        p.extend_from_slice(&c.checkpoint.to_le_bytes());
        p.extend_from_slice(&c.extent[0].to_le_bytes());
        p.extend_from_slice(&c.extent[1].to_le_bytes());
        p.extend_from_slice(&c.entries.to_le_bytes());
        p.extend_from_slice(&self.records.to_le_bytes());
        let mut commit = Vec::with_capacity(COMMIT_LEN);
        frame(&mut commit, K_COMMIT, &p);
        let mut begin = Vec::with_capacity(17);
        begin.push(self.full as u8);
        begin.extend_from_slice(&((self.pages.len() - BEGIN_LEN) as u64).to_le_bytes());
        begin.extend_from_slice(&((tail.len() + commit.len()) as u64).to_le_bytes());
        let mut head = Vec::with_capacity(BEGIN_LEN);
        frame(&mut head, K_BEGIN, &begin);
        debug_assert_eq!(head.len(), BEGIN_LEN);
        let mut body = self.pages;
        if let Some(b) = body.get_mut(..BEGIN_LEN) {
            b.copy_from_slice(&head);
        }
        body.extend_from_slice(&tail);
        EncodedGroup { body, commit }
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

/// Decodes a record's payload `p`, found at byte `base` of its buffer
/// (key records name their key by its range in that buffer).
fn decode(kind: u8, p: &[u8], base: usize) -> Option<Rec> {
    let mut c = Cur(p);
    let range = |c: &Cur<'_>, len: usize| {
        let end = base + (p.len() - c.0.len());
        end - len..end
    };
    let rec = match kind {
        K_PAGE => {
            let id = c.u32()?;
            PageKind::from_u8(c.u8()?).ok()?;
            c.u32()?;
            c.bytes()?;
            Rec::Page(id)
        }
        K_FREE => Rec::Free(c.u32()?),
        K_SKEY => {
            let n = c.bytes()?.len();
            let sk = range(&c, n);
            let present = c.u8()? != 0;
            let ptr = c.u64()?;
            Rec::SKey(sk, present.then_some(ptr))
        }
        K_PK => {
            let n = c.bytes()?.len();
            let pk = range(&c, n);
            let present = c.u8()? != 0;
            let e = PEntry::with_flags(c.u64()?, c.u32()?, c.u8()?);
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

/// A PageDir record's payload as the locations of the group's pages
/// (`start`: the group's offset in file `file`); `None` if it does not
/// decode or names a record outside the page section (`pages` bytes
/// after the Begin record).
fn page_dir(p: &[u8], file: u64, start: u64, pages: u64) -> Option<Vec<Rec>> {
    let mut c = Cur(p);
    let n = c.u32()? as usize;
    if c.0.len() != n.checked_mul(DIR_ENTRY_LEN)? {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let id = c.u32()?;
        let cap = c.u32()? as usize;
        let offset = c.u64()?;
        let len = c.u32()?;
        let end = offset.checked_add(u64::from(len))?;
        if offset < BEGIN_LEN as u64 || end > BEGIN_LEN as u64 + pages {
            return None;
        }
        out.push(Rec::PageAt(
            id,
            cap,
            Loc {
                file: page_file_number(file).ok()?,
                offset: start + offset,
                len,
            },
        ));
    }
    Some(out)
}

/// Reads pages back from the files of one index (the page cache's
/// [`PageSource`]), keeping one open handle per file.
pub(crate) struct PageReader {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    handles: Mutex<HashMap<u32, Mapping>>,
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
            h.retain(|&n, _| keep.contains(&u64::from(n)));
        }
    }

    /// The open handle of `file`; a new one (mapping the file as it is
    /// now) with `fresh`.
    fn handle(&self, file: u32, fresh: bool) -> Result<Mapping> {
        let mut h = self
            .handles
            .lock()
            .map_err(|_| Error::invalid("perseid: page reader lock poisoned"))?;
        if let Some(f) = h.get(&file).filter(|_| !fresh) {
            return Ok(f.clone());
        }
        let path = self.dir.join(file_name(u64::from(file)));
        // Through a read-only mapping where the file system maps (no
        // system call per page read; `pread` otherwise). Mapping is safe
        // here: a page file is only ever appended to, never rewritten or
        // truncated, and is unlinked (which leaves a mapping intact) once
        // a full group in a newer file replaced it.
        let f: Mapping = Arc::new(self.fs.open_mapped(&path)?);
        // Lookups touch its pages at random: on huge pages where the
        // system allows (the pages a fault reads; those the appends left
        // in the page cache stay as they are).
        f.advise_huge_pages();
        h.insert(file, f.clone());
        Ok(f)
    }

    /// The error for page `id`'s record at `loc` failing its checks; the
    /// next open rebuilds the index (pages are verified only when read,
    /// not at open). Writing the marker is best effort: the error reaches
    /// the caller either way.
    fn bad(&self, id: PageId, loc: Loc) -> Error {
        let msg = format!(
            "perseid file {}: page {id} at byte {} fails its checks",
            loc.file, loc.offset
        );
        let _ = write_marker(&*self.fs, &self.dir, &msg);
        Error::corruption(msg)
    }
}

/// Offset of the page kind in a Page record: after the frame (length,
/// checksum), the record kind and the page id (u32); then come the
/// capacity (u32), the data's length (u32) and the data.
const PAGE_KIND_AT: usize = 8 + 1 + 4;
/// Offset of the data in a Page record.
const PAGE_DATA_AT: usize = PAGE_KIND_AT + 1 + 4 + 4;

/// The page in `rec`, exactly one Page record. With `id`, the record is
/// checked first: its checksum, its kind, its page id and its layout;
/// without, it is only parsed (a record checked before).
fn page_in_record(rec: &[u8], id: Option<PageId>) -> Option<PageRef<'_>> {
    if let Some(id) = id {
        let mut at = 0;
        let (kind, p) = next_record(rec, &mut at)?;
        let mut c = Cur(p);
        if kind != K_PAGE || at != rec.len() || c.u32()? != id {
            return None;
        }
    }
    let mut c = Cur(rec.get(PAGE_KIND_AT..)?);
    let kind = PageKind::from_u8(c.u8()?).ok()?;
    let cap = c.u32()? as usize;
    let data = c.bytes()?;
    c.end()?;
    Some(PageRef { kind, cap, data })
}

impl PageSource for PageReader {
    fn read(&self, id: PageId, loc: Loc) -> Result<Page> {
        // A mapping covers the file as it was when mapped: a record a
        // later flush appended lies past it, so a failed read maps the
        // file again once before it counts as corruption.
        let len = loc.len as usize;
        let mut page = None;
        let mut decode_page = |bytes: &[u8]| {
            page = page_in_record(bytes, Some(id)).map(PageRef::to_page);
        };
        if self
            .handle(loc.file, false)?
            .read_with(loc.offset, len, &mut decode_page)
            .is_err()
        {
            self.handle(loc.file, true)?
                .read_with(loc.offset, len, &mut decode_page)?;
        }
        page.ok_or_else(|| self.bad(id, loc))
    }

    fn map(&self, id: PageId, loc: Loc) -> Result<Option<Mapping>> {
        let record = |f: &Mapping| -> Option<Option<bool>> {
            let m = f.mapped()?;
            let start = usize::try_from(loc.offset).ok()?;
            let r = start
                .checked_add(loc.len as usize)
                .and_then(|end| m.get(start..end));
            Some(r.map(|r| page_in_record(r, Some(id)).is_some()))
        };
        let mut f = self.handle(loc.file, false)?;
        let mut checked = record(&f);
        if checked == Some(None) {
            // Past the end of the mapping: the file grew since it was mapped.
            f = self.handle(loc.file, true)?;
            checked = record(&f);
        }
        match checked {
            None => Ok(None),
            Some(Some(true)) => Ok(Some(f)),
            Some(_) => Err(self.bad(id, loc)),
        }
    }

    fn view<'m>(&self, mapped: &'m [u8], loc: Loc) -> Option<PageRef<'m>> {
        let start = usize::try_from(loc.offset).ok()?;
        let end = start.checked_add(loc.len as usize)?;
        page_in_record(mapped.get(start..end)?, None)
    }

    fn view_data<'m>(&self, mapped: &'m [u8], loc: Loc) -> Option<&'m [u8]> {
        // A checked record's data ends it, after a fixed header (the
        // layout `page_in_record` checked): its header is not read again.
        let start = usize::try_from(loc.offset).ok()?;
        let end = start.checked_add(loc.len as usize)?;
        mapped.get(start.checked_add(PAGE_DATA_AT)?..end)
    }
}

/// How one file read back.
pub(crate) struct FileRead {
    pub groups: Vec<GroupRead>,
    /// Bytes after the last committed group that do not form one (a flush
    /// cut by a crash).
    pub torn: bool,
}

/// Bytes of a Header record.
const HEADER_LEN: usize = 8 + 1 + 8 + 4 + 1 + 8;

/// Reads one file of `size` bytes through `src`: its header must name
/// this format, `key_type` and `number`; then every committed group.
/// Page records are not read (their section is skipped: the PageDir
/// record locates them and they are verified when read back).
pub(crate) fn read_file(
    src: &dyn RandomRead,
    size: u64,
    key_type: u8,
    number: u64,
) -> Result<FileRead> {
    let read = |at: u64, len: usize| -> Result<Vec<u8>> {
        src.read_at(at, len).map_err(|e| {
            Error::corruption(format!(
                "perseid file {number}: read {len} bytes at {at}: {e}"
            ))
        })
    };
    let header_ok = if size >= HEADER_LEN as u64 {
        let b = read(0, HEADER_LEN)?;
        let mut at = 0;
        next_record(&b, &mut at).and_then(|(kind, p)| {
            let mut c = Cur(p);
            (kind == K_HEADER
                && c.take(8)? == MAGIC
                && c.u32()? == FORMAT_VERSION
                && c.u8()? == key_type
                && c.u64()? == number)
                .then_some(())
        })
    } else {
        None
    };
    if header_ok.is_none() {
        // A file is created and its header written in one flush: a bad
        // header is a torn creation (an empty file), or a foreign one.
        return Ok(FileRead {
            groups: Vec::new(),
            torn: size > 0,
        });
    }
    let mut groups = Vec::new();
    let mut committed = HEADER_LEN as u64;
    while committed + BEGIN_LEN as u64 <= size {
        let start = committed;
        let b = read(start, BEGIN_LEN)?;
        let mut at = 0;
        let Some((kind, p)) = next_record(&b, &mut at) else {
            break;
        };
        if kind != K_BEGIN {
            return Err(Error::corruption(format!(
                "perseid file {number}: record of kind {kind} outside a group"
            )));
        }
        let mut c = Cur(p);
        let (full, pages, rest) = (|| {
            let full = c.u8()? != 0;
            let pages = c.u64()?;
            let rest = c.u64()?;
            c.end()?;
            Some((full, pages, rest))
        })()
        .ok_or_else(|| Error::corruption(format!("perseid file {number}: bad begin record")))?;
        let Some(end) = (start + BEGIN_LEN as u64)
            .checked_add(pages)
            .and_then(|e| e.checked_add(rest))
            .filter(|&e| e <= size)
        else {
            break; // cut short: a torn tail
        };
        let b = read(end - rest, rest as usize)?;
        let mut at = 0;
        let Some((kind, p)) = next_record(&b, &mut at) else {
            break;
        };
        if kind != K_PAGE_DIR {
            return Err(Error::corruption(format!(
                "perseid file {number}: group at byte {start} has no page directory"
            )));
        }
        let mut records = page_dir(p, number, start, pages).ok_or_else(|| {
            Error::corruption(format!(
                "perseid file {number}: bad page directory at byte {start}"
            ))
        })?;
        let mut commit = None;
        while let Some((kind, p)) = next_record(&b, &mut at) {
            if kind == K_COMMIT {
                let mut c = Cur(p);
                let n = records.len();
                commit = Some(
                    (|| {
                        let checkpoint = c.u64()?;
                        let extent = [c.f64()?, c.f64()?];
                        let entries = c.u64()?;
                        let count = c.u32()?;
                        c.end()?;
                        (count as usize == n).then_some(Commit {
                            checkpoint,
                            extent,
                            entries,
                        })
                    })()
                    .ok_or_else(|| {
                        Error::corruption(format!("perseid file {number}: bad commit record"))
                    })?,
                );
                break;
            }
            // The payload's offset in `b` (key records point into it).
            let base = p.as_ptr() as usize - b.as_ptr() as usize;
            let rec = decode(kind, p, base).ok_or_else(|| {
                Error::corruption(format!(
                    "perseid file {number}: bad record of kind {kind} in the group at byte {start}"
                ))
            })?;
            records.push(rec);
        }
        let Some(commit) = commit else {
            break; // the Commit (written last) is missing or torn
        };
        if at != b.len() {
            return Err(Error::corruption(format!(
                "perseid file {number}: bytes after the commit of the group at byte {start}"
            )));
        }
        groups.push(GroupRead {
            full,
            records,
            commit,
            rest: b,
        });
        committed = end;
    }
    Ok(FileRead {
        groups,
        torn: committed < size,
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
        let marker = dir.join(MARKER);
        if fs.exists(&marker) {
            let why = fs
                .open_random(&marker, false)
                .and_then(|f| {
                    let len = fs.file_size(&marker).unwrap_or(0).min(4096) as usize;
                    f.read_at(0, len)
                })
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("(reason unreadable: {e})"));
            failed = Some(Error::corruption(format!(
                "perseid: a page failed its checks when read: {why}"
            )));
        }
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
                .and_then(|f| read_file(&*f, size, key_type, n));
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
    pub fn write_group(&mut self, group: &EncodedGroup, full: bool) -> Result<(u32, u64)> {
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

    /// Two barriers: the body (Begin to the record before Commit) is
    /// durable before the Commit is written, so a Commit read back intact
    /// means every page record of its group is on disk (open does not
    /// read them).
    fn try_write(&mut self, group: &EncodedGroup, full: bool) -> Result<(u32, u64)> {
        if full || self.active.is_none() {
            let n = self.next_number;
            // A page's location names its file in 32 bits (`Loc`): no
            // group goes to a file whose pages could not be located.
            let n32 = page_file_number(n)?;
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
                .and_then(|_| f.write_all(&group.body))
                .and_then(|_| f.flush())
                .and_then(|_| f.sync_all())
                .and_then(|_| f.write_all(&group.commit))
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
            let size = (header.len() + group.body.len() + group.commit.len()) as u64;
            if full {
                // Every page was read (and verified) for this group.
                let marker = self.dir.join(MARKER);
                if self.fs.exists(&marker) {
                    let _ = self.fs.remove_file(&marker);
                }
                // The new file alone holds the state: the older ones go
                // (at `retire`).
                self.retired
                    .extend(std::mem::take(&mut self.files).into_iter().map(|(n, _)| n));
                self.last_full = size;
                self.needs_full = false;
            }
            self.files.push((n, size));
            self.active = Some(f);
            return Ok((n32, header.len() as u64));
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
        f.write_all(&group.body)
            .and_then(|_| f.flush())
            .and_then(|_| f.sync_data())
            .and_then(|_| f.write_all(&group.commit))
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
            last.1 += (group.body.len() + group.commit.len()) as u64;
        }
        // The active file's number was checked when it was created.
        Ok((page_file_number(at.0)?, at.1))
    }
}

/// File number `n` as a page location holds it ([`Loc::file`]).
fn page_file_number(n: u64) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| Error::invalid(format!("perseid: page file number {n} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file held in memory.
    struct Bytes(Vec<u8>);

    impl RandomRead for Bytes {
        fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
            let at = offset as usize;
            self.0
                .get(at..at + len)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| Error::corruption("short read"))
        }
    }

    fn read(b: &[u8], key_type: u8, number: u64) -> Result<FileRead> {
        read_file(&Bytes(b.to_vec()), b.len() as u64, key_type, number)
    }

    fn header(key_type: u8, number: u64) -> Vec<u8> {
        let mut file = Vec::new();
        let mut p = MAGIC.to_vec();
        p.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        p.push(key_type);
        p.extend_from_slice(&number.to_le_bytes());
        frame(&mut file, K_HEADER, &p);
        assert_eq!(file.len(), HEADER_LEN);
        file
    }

    #[test]
    fn groups_round_trip_and_torn_tails_are_dropped() {
        let mut g = GroupWriter::new(true);
        let page = |b: u8| Page {
            kind: PageKind::Normal,
            cap: 4096,
            data: vec![b; 100],
        };
        let at3 = g.page(3, page(1).view());
        g.skey(b"k", Some(7));
        let at9 = g.page(9, page(2).view());
        g.pk(
            b"p",
            Some(PEntry {
                seq: 9,
                n: 2,
                has_entry: true,
                shared: true,
            }),
        );
        g.free(4);
        let commit = Commit {
            checkpoint: 42,
            extent: [0.5, 0.25],
            entries: 17,
        };
        let group = g.commit(&commit);
        let mut file = header(2, 5);
        let start = file.len() as u64;
        file.extend_from_slice(&group.body);
        file.extend_from_slice(&group.commit);
        let r = read(&file, 2, 5).unwrap();
        assert!(!r.torn);
        assert_eq!(r.groups.len(), 1);
        assert_eq!(r.groups[0].commit, commit);
        assert!(r.groups[0].full);
        assert_eq!(r.groups[0].records.len(), 5);
        // Key records name their keys in the group's bytes.
        let g = &r.groups[0];
        let keys: Vec<(u8, Vec<u8>)> = g
            .records
            .iter()
            .filter_map(|r| match r {
                Rec::SKey(k, Some(7)) => Some((5, g.key(k).unwrap().to_vec())),
                Rec::Pk(k, Some(e)) if e.seq == 9 && e.n == 2 => {
                    Some((6, g.key(k).unwrap().to_vec()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(keys, vec![(5, b"k".to_vec()), (6, b"p".to_vec())]);
        // The pages are located, not read; each location holds its page.
        let locs: Vec<(PageId, Loc)> = r.groups[0]
            .records
            .iter()
            .filter_map(|r| match r {
                Rec::PageAt(id, 4096, loc) => Some((*id, *loc)),
                _ => None,
            })
            .collect();
        assert_eq!(locs.len(), 2);
        for ((id, loc), (at, len), b) in [(locs[0], at3, 1u8), (locs[1], at9, 2)] {
            assert_eq!((loc.file, loc.offset, loc.len), (5, start + at, len));
            let rec = &file[loc.offset as usize..(loc.offset + loc.len as u64) as usize];
            let mut i = 0;
            let (kind, p) = next_record(rec, &mut i).unwrap();
            assert!(matches!(decode(kind, p, 0), Some(Rec::Page(pid)) if pid == id));
            let pg = page_in_record(rec, Some(id)).unwrap();
            assert_eq!(pg.data, &vec![b; 100][..]);
            assert_eq!(page_in_record(rec, None).unwrap().data, pg.data);
            // Another page's id, or any byte changed: the checks fail.
            assert!(page_in_record(rec, Some(id + 1)).is_none());
            let mut bad = rec.to_vec();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert!(page_in_record(&bad, Some(id)).is_none());
        }
        // Wrong key type or number: not this index's file.
        assert!(read(&file, 1, 5).unwrap().groups.is_empty());
        assert!(read(&file, 2, 6).unwrap().groups.is_empty());
        // A second group cut anywhere is dropped; the first survives.
        let mut g = GroupWriter::new(false);
        g.page(3, page(3).view());
        g.skey(b"k", None);
        let second = g.commit(&Commit {
            checkpoint: 50,
            extent: [0.0, 0.0],
            entries: 0,
        });
        let second = [second.body, second.commit].concat();
        for cut in 1..second.len() {
            let mut f = file.clone();
            f.extend_from_slice(&second[..cut]);
            let r = read(&f, 2, 5).unwrap();
            assert!(r.torn, "cut at {cut}");
            assert_eq!(r.groups.len(), 1);
        }
        let mut f = file.clone();
        f.extend_from_slice(&second);
        let r = read(&f, 2, 5).unwrap();
        assert!(!r.torn);
        assert_eq!(r.groups.len(), 2);
        // A flipped byte in a record open reads (here the last group's
        // Commit): the group is lost.
        let mut f = file.clone();
        let i = file.len() - 3;
        f[i] ^= 1;
        let r = read(&f, 2, 5).unwrap();
        assert!(r.torn && r.groups.is_empty());
        // A flipped byte in a page record is not seen at open; the record
        // fails its checksum when the page is read back.
        let mut f = file.clone();
        let i = (start + at9.0) as usize + 40;
        f[i] ^= 1;
        let r = read(&f, 2, 5).unwrap();
        assert_eq!(r.groups.len(), 1);
        let rec = &f[i - 40..i - 40 + at9.1 as usize];
        assert!(next_record(rec, &mut 0).is_none());
    }
}
