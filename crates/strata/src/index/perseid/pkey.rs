//! The PKey layer of the PS-Tree (PERSEID §4.2.1–4.2.2): pages of PKey
//! groups, appended log-structured, regrouped and garbage-collected when a
//! page splits.
//!
//! A page is a byte string of groups laid end to end. A *group* holds the
//! entries of one secondary key: `prev (u64) ‖ n (u32) ‖ skey_len (u32) ‖
//! skey ‖ n entries`, where `prev` points to the next older group of the
//! same secondary key ([`NULL`] at the end of the chain). An *entry* is
//! `pk_len (u32) ‖ word (u64: bit 63 obsolete, bits 0–62 sequence number)
//! ‖ pk ‖ geometry` (the exact geometry, 16 or 32 bytes, for points and
//! rectangles, whose secondary key is a Hilbert cell; empty for scalars).
//! Unlike the paper, a group carries its secondary key: a split then
//! regroups a page without consulting the SKey layer.
//!
//! Invariants (outside a call that holds the layer mutably):
//! * every chain is ordered newest first (sequence numbers decrease along
//!   it) — a freshly appended group is newer than all before it, and
//!   regrouping sorts; a scan build, which applies records out of order,
//!   ends with [`PsTree::reorganize`];
//! * a page holds at most one contiguous *section* of any chain in the
//!   usual case; [`PsTree::split`] finds every section of every chain that
//!   enters the page and redirects the pointer into it (the SKey layer or
//!   the `prev` of the group before it), so no pointer dangles;
//! * `Normal` pages take appends; `Overflow` pages hold one group (the
//!   older entries of one large chain, written by a split) and are never
//!   appended to; one is freed when a later split absorbs its group (the
//!   lazy rule for groups spilling over pages: when more than half its
//!   entries are collectable).
//!
//! Garbage collection removes an entry only if it is obsolete and the
//! version that replaced it is at or below the oldest snapshot any reader
//! may use (`horizon`), so no live snapshot loses an entry it needs.
//!
//! Page cache (our stand-in for the paper's PM-resident pages, which take
//! no DRAM): a page whose current contents are in the page file (*clean*:
//! its latest Page record's location is known, [`Loc`]) may be evicted
//! from RAM. Readers then use it in place in the mapped page file, as
//! PERSEID reads PM: the first access since the page was written checks
//! its record (checksum, id, layout) and keeps the mapping in the page's
//! slot and the place of its data in a dense array beside the slots
//! (8 bytes a page: a chain walk reads that, not the slot); later
//! accesses use that place, or parse the record's header; where the
//! file system does not map, the page is read back into RAM, checked, instead
//! ([`PageSource`]). Writers copy a page into RAM before changing it.
//! Dirty pages (changed since the last flush) stay resident. Eviction is
//! a clock over the resident pages (a referenced bit per page, set on
//! every access), run by writers and flushes, and by a query that left
//! the cache over its budget; resident bytes (page capacities) are
//! counted exactly. A reopen loads no page: they are read on demand.

#![deny(clippy::indexing_slicing)]

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex, OnceLock};

use strata_lsm::error::{Error, Result};
use strata_lsm::io::RandomRead;
use strata_lsm::key::SeqNo;

use super::skey::SKeyLayer;
use super::validation::{Validation, Verdict};
use crate::index::fxhash::FastMap;
use crate::index::inline_key::InlineKey;

/// Nominal page size: a split writes pages of this capacity; one group
/// larger than a page gets a page of its own size.
pub(crate) const PAGE_SIZE: usize = 4096;
/// A regrouped chain keeps at most this many bytes of its newest entries
/// in a normal page; the rest goes to overflow pages.
const HEAD_MAX: usize = PAGE_SIZE / 4;
/// A split fills each new normal page up to this many bytes.
const FILL: usize = PAGE_SIZE / 2;

pub(crate) type PageId = u32;
pub(crate) use super::skey::Ptr;
pub(crate) const NULL: Ptr = u64::MAX;

const GROUP_HEADER: usize = 16;
const ENTRY_HEADER: usize = 12;
const OBSOLETE: u64 = 1 << 63;
/// Largest sequence number an entry can hold.
pub(crate) const MAX_SEQ: SeqNo = OBSOLETE - 1;

/// Bits of a packed direct entry that hold the address (user-space
/// addresses of x86_64 and aarch64 mappings fit); the length is above.
const DIRECT_ADDR_BITS: u32 = 48;
const DIRECT_ADDR_MASK: u64 = (1 << DIRECT_ADDR_BITS) - 1;

/// `data` (bytes of a mapping) packed as [`PsTree`]'s `direct` holds it:
/// address, and length above it; 0 (none) where either does not fit.
fn pack_direct(data: &[u8]) -> u64 {
    let addr = data.as_ptr().expose_provenance() as u64;
    let len = data.len() as u64;
    if addr == 0 || addr > DIRECT_ADDR_MASK || len >> (64 - DIRECT_ADDR_BITS) != 0 {
        return 0;
    }
    addr | len << DIRECT_ADDR_BITS
}

pub(crate) fn ptr(page: PageId, off: usize) -> Ptr {
    ((page as u64) << 32) | (off as u64 & 0xffff_ffff)
}

pub(crate) fn ptr_page(p: Ptr) -> PageId {
    (p >> 32) as PageId
}

fn ptr_off(p: Ptr) -> usize {
    (p & 0xffff_ffff) as usize
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PageKind {
    Normal = 0,
    Overflow = 1,
}

impl PageKind {
    pub fn from_u8(b: u8) -> Result<PageKind> {
        match b {
            0 => Ok(PageKind::Normal),
            1 => Ok(PageKind::Overflow),
            _ => Err(Error::corruption(format!("perseid: bad page kind {b}"))),
        }
    }
}

/// One page: its kind, capacity, and the bytes used (`data.len()`).
#[derive(Debug)]
pub(crate) struct Page {
    pub kind: PageKind,
    pub cap: usize,
    pub data: Vec<u8>,
}

/// A copy with room for the whole page (a copy is made to be written).
impl Clone for Page {
    fn clone(&self) -> Page {
        self.view().to_page()
    }
}

impl Page {
    pub fn view(&self) -> PageRef<'_> {
        PageRef {
            kind: self.kind,
            cap: self.cap,
            data: &self.data,
        }
    }
}

/// A page as read: resident in RAM, or in place in a mapped page file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageRef<'a> {
    pub kind: PageKind,
    pub cap: usize,
    pub data: &'a [u8],
}

impl PageRef<'_> {
    /// An owned copy with room for the whole page (for a page about to
    /// change, or a read-back copy).
    pub fn to_page(self) -> Page {
        let mut data = Vec::with_capacity(self.cap.max(self.data.len()));
        data.extend_from_slice(self.data);
        Page {
            kind: self.kind,
            cap: self.cap,
            data,
        }
    }
}

/// Where a clean page's latest record is: file number, byte offset of
/// the record in the file, record length (frame included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub offset: u64,
    pub file: u32,
    pub len: u32,
}

/// A page file as mapped ([`RandomRead::mapped`]), shared by the pages
/// read in place in it (a thin pointer: one word in each page's slot).
pub(crate) type Mapping = Arc<Box<dyn RandomRead>>;

/// Reads a page back from the page file (`file::PageReader`).
pub(crate) trait PageSource: Send + Sync {
    /// The page `id` whose record is at `loc`, checksum verified (a copy).
    fn read(&self, id: PageId, loc: Loc) -> Result<Page>;
    /// A mapping of the file that holds page `id`'s record at `loc`,
    /// covering the record, whose checks the record passed; `None` where
    /// the file is not mapped (then [`PageSource::read`] copies).
    fn map(&self, _id: PageId, _loc: Loc) -> Result<Option<Mapping>> {
        Ok(None)
    }
    /// The page in its record at `loc` of `mapped`, a mapping that
    /// [`PageSource::map`] returned for that record (checked then, so not
    /// again); `None` if it does not parse.
    fn view<'m>(&self, _mapped: &'m [u8], _loc: Loc) -> Option<PageRef<'m>> {
        None
    }
    /// The data of [`PageSource::view`]'s page, without decoding the
    /// record's header again (readers of chains need only the bytes).
    fn view_data<'m>(&self, mapped: &'m [u8], loc: Loc) -> Option<&'m [u8]> {
        self.view(mapped, loc).map(|p| p.data)
    }
}

/// One page of the layer: its capacity (known without its contents),
/// where its current contents are in the file (`None`: dirty, only in
/// RAM), the contents when resident, and the mapping that holds the
/// contents at `loc` once a reader verified them there.
///
/// Invariant: `map` is set only while `loc` is `Some`, and only to a
/// mapping in which the record at `loc` passed its checks; whoever changes
/// `loc` clears it (`&mut`: no reader holds a view then). `data` is shared
/// only with a flush encoding the page outside the tree's lock
/// ([`PsTree::resident_page`]): a writer changes a copy then.
///
/// 64 bytes (`slot_bytes` counts them: the page table is DRAM too).
struct Slot {
    cap: u32,
    loc: Option<Loc>,
    data: OnceLock<Arc<Page>>,
    map: OnceLock<Mapping>,
    referenced: AtomicBool,
    /// In [`PsTree`]'s eviction queue (or its `loaded` list).
    queued: AtomicBool,
    /// Changed since the last [`PsTree::take_dirty`] (and listed in
    /// `PsTree::dirty`).
    dirty: bool,
}

impl Slot {
    fn cap(&self) -> usize {
        self.cap as usize
    }

    fn resident(page: Page) -> Slot {
        Slot {
            cap: page.cap as u32,
            loc: None,
            data: OnceLock::from(Arc::new(page)),
            map: OnceLock::new(),
            referenced: AtomicBool::new(true),
            queued: AtomicBool::new(false),
            dirty: false,
        }
    }
}

/// Counters of the page cache (exact).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheStats {
    /// Accesses that found the page resident, or in place and checked.
    pub hits: u64,
    /// Accesses that checked its record in the file (in place, or read
    /// back into RAM).
    pub misses: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Bytes (capacities) of the resident pages.
    pub resident_bytes: u64,
    /// The budget eviction keeps the clean pages within.
    pub budget_bytes: u64,
}

fn corrupt(what: &str) -> Error {
    Error::corruption(format!("perseid page: {what}"))
}

/// A decoded group header.
pub(crate) struct Group<'a> {
    pub prev: Ptr,
    pub n: u32,
    pub skey: &'a [u8],
    /// Offset of the first entry.
    pub entries: usize,
}

/// One entry as stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryRef<'a> {
    pub seq: SeqNo,
    pub obsolete: bool,
    pub pk: &'a [u8],
    pub geom: &'a [u8],
}

/// An entry a reader may see, to be validated: its primary key, sequence
/// number and the key's [`key_hash`](super::table::key_hash).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate<'a> {
    pub pk: &'a [u8],
    pub seq: SeqNo,
    pub hash: u64,
}

impl Candidate<'static> {
    /// A placeholder (for arrays of candidates).
    pub const EMPTY: Candidate<'static> = Candidate {
        pk: &[],
        seq: 0,
        hash: 0,
    };
}

/// An owned entry (for regrouping). The key inline where it is short:
/// a page split copies every entry of its page, and a heap key each was
/// most of the index's allocations on a write (heaptrack).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub seq: SeqNo,
    pub obsolete: bool,
    pub pk: InlineKey,
    pub geom: Vec<u8>,
}

impl Entry {
    fn size(&self) -> usize {
        ENTRY_HEADER + self.pk.len() + self.geom.len()
    }
}

pub(crate) fn group_at(page: &[u8], off: usize) -> Result<Group<'_>> {
    let Some((head, rest)) = page
        .get(off..)
        .and_then(<[u8]>::split_first_chunk::<GROUP_HEADER>)
    else {
        return Err(corrupt("truncated field"));
    };
    let (prev, rest_head) = head.split_at(8);
    let (n, sl) = rest_head.split_at(4);
    let (Ok(prev), Ok(n), Ok(sl)) = (
        <[u8; 8]>::try_from(prev),
        <[u8; 4]>::try_from(n),
        <[u8; 4]>::try_from(sl),
    ) else {
        return Err(corrupt("truncated field"));
    };
    let sl = u32::from_le_bytes(sl) as usize;
    let skey = rest
        .get(..sl)
        .ok_or_else(|| corrupt("truncated secondary key"))?;
    Ok(Group {
        prev: u64::from_le_bytes(prev),
        n: u32::from_le_bytes(n),
        skey,
        entries: off + GROUP_HEADER + sl,
    })
}

/// The entry at `off` and the offset after it. (One bounds check for the
/// header, one for the key and geometry: a lookup reads a dozen entries.)
#[inline(always)]
pub(crate) fn entry_at(page: &[u8], off: usize, geom_len: usize) -> Result<(EntryRef<'_>, usize)> {
    let Some((head, rest)) = page
        .get(off..)
        .and_then(<[u8]>::split_first_chunk::<ENTRY_HEADER>)
    else {
        return Err(corrupt("truncated field"));
    };
    let (len, word) = head.split_at(4);
    let (Ok(len), Ok(word)) = (<[u8; 4]>::try_from(len), <[u8; 8]>::try_from(word)) else {
        return Err(corrupt("truncated field"));
    };
    let pk_len = u32::from_le_bytes(len) as usize;
    let word = u64::from_le_bytes(word);
    let Some((pk, geom)) = rest
        .get(..pk_len.saturating_add(geom_len))
        .and_then(|b| b.split_at_checked(pk_len))
    else {
        return Err(corrupt("truncated primary key"));
    };
    Ok((
        EntryRef {
            seq: word & MAX_SEQ,
            obsolete: word & OBSOLETE != 0,
            pk,
            geom,
        },
        off + ENTRY_HEADER + pk_len + geom_len,
    ))
}

/// Offset just past the group at `off`.
fn group_end(page: &[u8], off: usize, geom_len: usize) -> Result<usize> {
    let g = group_at(page, off)?;
    let mut at = g.entries;
    for _ in 0..g.n {
        at = entry_at(page, at, geom_len)?.1;
    }
    Ok(at)
}

fn encode_group(out: &mut Vec<u8>, prev: Ptr, skey: &[u8], entries: &[Entry]) {
    out.extend_from_slice(&prev.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&(skey.len() as u32).to_le_bytes());
    out.extend_from_slice(skey);
    for e in entries {
        encode_entry(out, e);
    }
}

fn encode_entry(out: &mut Vec<u8>, e: &Entry) {
    out.extend_from_slice(&(e.pk.len() as u32).to_le_bytes());
    let word = e.seq | if e.obsolete { OBSOLETE } else { 0 };
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(&e.pk);
    out.extend_from_slice(&e.geom);
}

fn group_size(skey: &[u8], entries: &[Entry]) -> usize {
    GROUP_HEADER + skey.len() + entries.iter().map(Entry::size).sum::<usize>()
}

/// Where the pointer to a section lives.
#[derive(Clone, Copy, Debug)]
enum Referrer {
    /// The SKey layer's head pointer of the secondary key.
    Head,
    /// The `prev` field of the group at this pointer.
    Prev(Ptr),
}

/// The page whose checked record `loc` names in the mapping `m`.
fn in_place<'m>(
    source: &dyn PageSource,
    m: &'m Mapping,
    id: PageId,
    loc: Loc,
) -> Result<PageRef<'m>> {
    m.mapped()
        .and_then(|bytes| source.view(bytes, loc))
        .ok_or_else(|| corrupt(&format!("page {id}'s mapped record does not parse")))
}

/// A page read back from the file has the capacity its slot says.
fn sized(slot: &Slot, id: PageId, page: PageRef<'_>) -> Result<()> {
    if page.cap != slot.cap() || page.data.len() > page.cap {
        return Err(corrupt(&format!(
            "page {id} read back with capacity {} (expected {})",
            page.cap,
            slot.cap()
        )));
    }
    Ok(())
}

/// The PS-Tree: PKey pages and the SKey layer over them.
pub(crate) struct PsTree {
    pub geom_len: usize,
    pages: Vec<Option<Slot>>,
    /// Page id → the data of its page in place in a mapping of the page
    /// file, packed by [`pack_direct`] (0: none): what a chain walk needs
    /// of a checked page, 8 bytes a page instead of its 64-byte slot, so
    /// that a lookup finds it in cache more often (the slot was one of
    /// the dependent cache misses of an index-only lookup).
    ///
    /// Invariant (what makes [`PsTree::direct`] sound): an entry is
    /// nonzero only while its page's slot has `data` unset and `map` set
    /// to the mapping the packed bytes lie in, the page's checked record
    /// at `loc`. It is set under `&self` only from that state (a reader
    /// that checked the record); whatever changes the slot's `map`,
    /// `data` or `loc`, or replaces the slot, holds `&mut self` and
    /// clears the entry first ([`PsTree::clear_direct`]).
    direct: Vec<AtomicU64>,
    free: Vec<PageId>,
    pub skeys: SKeyLayer,
    /// Pages changed or created since the last flush (those whose slot
    /// has `dirty` set; an id may be listed twice, or after its page was
    /// freed: [`PsTree::take_dirty`] keeps those whose slot is marked,
    /// once), and their number. A set searched on every write was 8% of
    /// an upsert load's writer (perf, 2 M records).
    dirty: Vec<PageId>,
    dirty_count: usize,
    /// Pages freed since the last flush.
    pub freed: BTreeSet<PageId>,
    /// Bytes of all pages' capacities (in the file or in RAM).
    page_bytes: usize,
    /// Bytes of the resident pages' capacities.
    resident: AtomicUsize,
    /// Eviction keeps the resident bytes at or below it (dirty pages
    /// excepted).
    budget: usize,
    /// Reads evicted pages back (none: nothing is evicted).
    source: Option<Arc<dyn PageSource>>,
    /// Eviction candidates in clock order: every page that became clean
    /// and resident (a flush wrote it) since it was last taken from the
    /// queue, once (`Slot::queued`); entries whose page became dirty,
    /// left RAM or was freed since are dropped when reached. Only clean
    /// resident pages can be evicted, so [`PsTree::evict`] visits these
    /// instead of every slot: between two flushes most resident pages are
    /// dirty, and a sweep of all slots after every write batch was 32–41%
    /// of an upsert ingest (perf, 200 k and 1 M records).
    clock: VecDeque<PageId>,
    /// Pages readers loaded back (they hold the tree shared, so they
    /// cannot push to `clock`); `evict` moves them there.
    loaded: Mutex<Vec<PageId>>,
    /// Queue entries `evict` examined (exact; tests bound its work).
    swept: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: u64,
}

/// What one split or reorganization did.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct SplitStats {
    /// Obsolete entries removed.
    pub collected: u64,
}

impl PsTree {
    pub fn new(geom_len: usize) -> PsTree {
        PsTree {
            geom_len,
            pages: Vec::new(),
            direct: Vec::new(),
            free: Vec::new(),
            skeys: SKeyLayer::default(),
            dirty: Vec::new(),
            dirty_count: 0,
            freed: BTreeSet::new(),
            page_bytes: 0,
            resident: AtomicUsize::new(0),
            budget: usize::MAX,
            source: None,
            clock: VecDeque::new(),
            loaded: Mutex::new(Vec::new()),
            swept: 0,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: 0,
        }
    }

    /// Lets clean pages be evicted beyond `budget` bytes, read back by
    /// `source`.
    pub fn set_cache(&mut self, budget: usize, source: Arc<dyn PageSource>) {
        self.budget = budget;
        self.source = Some(source);
    }

    /// Bytes of the pages (their capacities), resident or not.
    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    /// Bytes of the resident pages' capacities (the DRAM they take).
    pub fn resident_bytes(&self) -> usize {
        self.resident.load(Relaxed)
    }

    /// True if resident pages exceed the budget.
    pub fn over_budget(&self) -> bool {
        self.source.is_some() && self.resident_bytes() > self.budget
    }

    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            evictions: self.evictions,
            resident_bytes: self.resident_bytes() as u64,
            budget_bytes: self.budget.min(u64::MAX as usize) as u64,
        }
    }

    #[cfg(test)]
    pub fn page_count(&self) -> usize {
        self.pages.iter().filter(|p| p.is_some()).count()
    }

    /// True if page `id` exists (resident or not).
    pub fn has_page(&self, id: PageId) -> bool {
        matches!(self.pages.get(id as usize), Some(Some(_)))
    }

    /// The page `id`: resident, else in place in the mapped page file
    /// (its record verified on the first access since it was written),
    /// else read back from the file into RAM.
    pub fn page(&self, id: PageId) -> Result<PageRef<'_>> {
        let slot = self
            .pages
            .get(id as usize)
            .and_then(|p| p.as_ref())
            .ok_or_else(|| corrupt(&format!("pointer to missing page {id}")))?;
        if let Some(p) = slot.data.get() {
            slot.referenced.store(true, Relaxed);
            self.hits.fetch_add(1, Relaxed);
            return Ok(p.view());
        }
        let (Some(loc), Some(source)) = (slot.loc, self.source.as_ref()) else {
            return Err(corrupt(&format!(
                "page {id} is neither in RAM nor in the file"
            )));
        };
        if let Some(m) = slot.map.get() {
            self.hits.fetch_add(1, Relaxed);
            return in_place(&**source, m, id, loc);
        }
        if let Some(page) = self.map_checked(slot, id, loc, source)? {
            return Ok(page);
        }
        slot.referenced.store(true, Relaxed);
        let page = source.read(id, loc)?;
        sized(slot, id, page.view())?;
        self.misses.fetch_add(1, Relaxed);
        // Two readers may load it at once: one copy wins, counted once.
        if slot.data.set(Arc::new(page)).is_ok() {
            self.resident.fetch_add(slot.cap(), Relaxed);
            if !slot.queued.swap(true, Relaxed) {
                crate::index::lock(&self.loaded).push(id);
            }
        }
        slot.data
            .get()
            .map(|p| p.view())
            .ok_or_else(|| corrupt(&format!("page {id} vanished while loading")))
    }

    /// The bytes of page `id` (as [`PsTree::page`]; a page read in place
    /// is not decoded again: chain walks need only its bytes).
    pub fn page_data(&self, id: PageId) -> Result<&[u8]> {
        if let Some(data) = self.direct(id) {
            self.hits.fetch_add(1, Relaxed);
            #[cfg(debug_assertions)]
            self.check_direct(id, data);
            return Ok(data);
        }
        if let Some(Some(slot)) = self.pages.get(id as usize) {
            if let (None, Some(m), Some(loc), Some(source)) = (
                slot.data.get(),
                slot.map.get(),
                slot.loc,
                self.source.as_ref(),
            ) {
                self.hits.fetch_add(1, Relaxed);
                return m
                    .mapped()
                    .and_then(|bytes| source.view_data(bytes, loc))
                    .ok_or_else(|| corrupt(&format!("page {id}'s mapped record does not parse")));
            }
        }
        Ok(self.page(id)?.data)
    }

    /// Page `id`'s record in a mapping of the page file, checked (a miss)
    /// and its mapping kept in `slot` for later accesses; `None` if the
    /// file system does not map.
    fn map_checked<'s>(
        &self,
        slot: &'s Slot,
        id: PageId,
        loc: Loc,
        source: &Arc<dyn PageSource>,
    ) -> Result<Option<PageRef<'s>>> {
        let Some(m) = source.map(id, loc)? else {
            return Ok(None);
        };
        self.misses.fetch_add(1, Relaxed);
        // Two threads may check it at once: either mapping is kept (and
        // both pack the same bytes of it).
        let page = in_place(&**source, slot.map.get_or_init(|| m), id, loc)?;
        sized(slot, id, page)?;
        if slot.data.get().is_none() {
            if let Some(d) = self.direct.get(id as usize) {
                d.store(pack_direct(page.data), Release);
            }
        }
        Ok(Some(page))
    }

    /// Page `id`'s data in place in the page file, if a reader checked
    /// it there since it last changed (see `direct`).
    #[allow(unsafe_code)]
    fn direct(&self, id: PageId) -> Option<&[u8]> {
        let v = self.direct.get(id as usize)?.load(Acquire);
        if v == 0 {
            return None;
        }
        let ptr = std::ptr::with_exposed_provenance::<u8>((v & DIRECT_ADDR_MASK) as usize);
        let len = (v >> DIRECT_ADDR_BITS) as usize;
        // SAFETY: a nonzero entry was packed from `len` bytes at `ptr` of
        // the mapping that the page's slot keeps in `map` (the invariant
        // of `PsTree::direct`). A mapping's bytes stay valid and unchanged
        // while it lives (`RandomRead::mapped`), and it lives at least as
        // long as the slot holds it: only a holder of `&mut self` drops
        // or replaces it, after clearing the entry, and the returned
        // slice borrows `self`.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Debug builds: the direct bytes are those the slot's mapping holds.
    #[cfg(debug_assertions)]
    fn check_direct(&self, id: PageId, data: &[u8]) {
        let slot = self.pages.get(id as usize).and_then(|p| p.as_ref());
        let via_slot = slot.and_then(|slot| match (slot.data.get(), slot.map.get(), slot.loc) {
            (None, Some(m), Some(loc)) => {
                let source = self.source.as_ref()?;
                source.view_data(m.mapped()?, loc)
            }
            _ => None,
        });
        assert!(
            via_slot.is_some_and(|b| std::ptr::eq(b, data)),
            "page {id}: direct bytes without their slot's mapping"
        );
    }

    /// Forgets page `id`'s direct bytes (before its slot changes).
    fn clear_direct(&mut self, id: PageId) {
        if let Some(d) = self.direct.get_mut(id as usize) {
            *d.get_mut() = 0;
        }
    }

    /// `direct` has an entry for every page id.
    fn grow_direct(&mut self) {
        if self.direct.len() < self.pages.len() {
            self.direct
                .resize_with(self.pages.len(), || AtomicU64::new(0));
        }
    }

    /// Checks page `id`'s record in the page file ahead of its first
    /// reader, as that reader would (counted as a miss; a record that
    /// fails writes the corruption marker, `file::PageReader::bad`), and
    /// keeps the mapping. Nothing for a page that is resident, already
    /// checked, freed or not in the file. `Ok(false)` if the file system
    /// does not map (readers copy pages then; nothing to check ahead).
    pub fn check_ahead(&self, id: PageId) -> Result<bool> {
        let Some(slot) = self.pages.get(id as usize).and_then(|p| p.as_ref()) else {
            return Ok(true);
        };
        if slot.data.get().is_some() || slot.map.get().is_some() {
            return Ok(true);
        }
        let (Some(loc), Some(source)) = (slot.loc, self.source.as_ref()) else {
            return Ok(true);
        };
        Ok(self.map_checked(slot, id, loc, source)?.is_some())
    }

    /// Bytes of the page table itself (one slot per page id up to the
    /// highest, resident or not, and the free list): DRAM the index takes
    /// beside the pages. The vectors' spare capacity is not counted: it is
    /// reserved and mostly never written, so the system backs little of it
    /// (on huge pages, at most the rest of the 2 MiB page the slots end in).
    pub fn slot_bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<Option<Slot>>()
            + self.direct.len() * std::mem::size_of::<AtomicU64>()
            + self.free.len() * std::mem::size_of::<PageId>()
    }

    /// The ids of every live page.
    pub fn page_ids(&self) -> Vec<PageId> {
        self.pages
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|_| i as PageId))
            .collect()
    }

    fn slot_for(&mut self, id: PageId) -> Option<&mut Option<Slot>> {
        let i = id as usize;
        if self.pages.len() <= i {
            if self.pages.capacity() <= i {
                // Grown by doubling into a buffer on huge pages where the
                // system allows (writers and a page's first reader read a
                // random slot; a lookup's walk reads `direct` instead; see
                // `strata_lsm::mem`).
                let cap = (i + 1).max(self.pages.capacity().saturating_mul(2));
                let mut grown = strata_lsm::mem::with_capacity(cap);
                grown.append(&mut self.pages);
                self.pages = grown;
            }
            self.pages.resize_with(i + 1, || None);
            self.grow_direct();
        }
        self.pages.get_mut(i)
    }

    /// Installs a page whose contents stay in the file at `loc` until
    /// needed (recovery).
    pub fn load_page_at(&mut self, id: PageId, cap: usize, loc: Loc) {
        self.unload_page(id);
        if let Some(slot) = self.slot_for(id) {
            *slot = Some(Slot {
                cap: cap as u32,
                loc: Some(loc),
                data: OnceLock::new(),
                map: OnceLock::new(),
                referenced: AtomicBool::new(false),
                queued: AtomicBool::new(false),
                dirty: false,
            });
        }
        self.page_bytes += cap;
    }

    /// Drops a page (recovery of a free record).
    pub fn unload_page(&mut self, id: PageId) {
        self.clear_direct(id);
        if let Some(slot) = self.pages.get_mut(id as usize) {
            if let Some(old) = slot.take() {
                self.page_bytes -= old.cap();
                if old.data.get().is_some() {
                    self.resident.fetch_sub(old.cap(), Relaxed);
                }
                if old.dirty {
                    self.dirty_count -= 1;
                }
            }
        }
    }

    /// Records where a flush wrote page `id` (which is clean from then on,
    /// unless it changed since the group was encoded).
    pub fn written(&mut self, id: PageId, loc: Loc) {
        self.clear_direct(id);
        if let Some(Some(slot)) = self.pages.get_mut(id as usize) {
            if slot.dirty {
                return;
            }
            slot.loc = Some(loc);
            slot.map.take();
            if slot.data.get().is_some() && !slot.queued.swap(true, Relaxed) {
                self.clock.push_back(id);
            }
        }
    }

    /// Evicts clean pages, in clock order over the queue of clean
    /// resident pages (second chance for pages read since they were
    /// queued), until the resident bytes are within the budget or no
    /// clean page is left. Work: the queue entries examined, each at most
    /// twice per call.
    pub fn evict(&mut self) {
        let loaded = std::mem::take(&mut *crate::index::lock(&self.loaded));
        self.clock.extend(loaded);
        // A freed page's entry stays queued while its id is reused (the
        // new page starts unqueued), so without budget pressure, which
        // would drain the queue, stale entries could pile up: rebuild the
        // queue from the slots once it is twice their number.
        if self.clock.len() > 2 * self.pages.len() + 64 {
            self.requeue();
        }
        if !self.over_budget() {
            return;
        }
        let mut resident = self.resident.load(Relaxed);
        for _ in 0..2 * self.clock.len() {
            if resident <= self.budget {
                break;
            }
            let Some(id) = self.clock.pop_front() else {
                break;
            };
            self.swept += 1;
            let Some(Some(slot)) = self.pages.get_mut(id as usize) else {
                continue;
            };
            if slot.loc.is_none() || slot.data.get().is_none() {
                // Dirty or gone: queued again when a flush writes it or a
                // reader loads it.
                slot.queued.store(false, Relaxed);
                continue;
            }
            if slot.referenced.swap(false, Relaxed) {
                self.clock.push_back(id);
                continue;
            }
            slot.queued.store(false, Relaxed);
            if slot.data.take().is_some() {
                resident -= slot.cap();
                self.evictions += 1;
            }
        }
        self.resident.store(resident, Relaxed);
    }

    /// The eviction queue rebuilt from the slots: each clean resident
    /// page once.
    fn requeue(&mut self) {
        self.clock.clear();
        for (id, slot) in self.pages.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let clean = slot.loc.is_some() && slot.data.get().is_some();
            slot.queued.store(clean, Relaxed);
            if clean {
                self.clock.push_back(id as PageId);
            }
        }
    }

    /// Rebuilds the free list after recovery.
    pub fn finish_load(&mut self) {
        self.free = self
            .pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_none())
            .map(|(i, _)| i as PageId)
            .rev()
            .collect();
    }

    fn alloc(&mut self, kind: PageKind, cap: usize) -> PageId {
        let page = Page {
            kind,
            cap,
            data: Vec::with_capacity(cap.min(PAGE_SIZE)),
        };
        self.page_bytes += cap;
        self.resident.fetch_add(cap, Relaxed);
        let id = match self.free.pop() {
            Some(id) => {
                self.clear_direct(id);
                if let Some(slot) = self.pages.get_mut(id as usize) {
                    *slot = Some(Slot::resident(page));
                }
                id
            }
            None => {
                self.pages.push(Some(Slot::resident(page)));
                self.grow_direct();
                (self.pages.len() - 1) as PageId
            }
        };
        self.freed.remove(&id);
        self.mark_dirty(id);
        id
    }

    /// Lists page `id` as changed (once until the next
    /// [`PsTree::take_dirty`]).
    pub fn mark_dirty(&mut self, id: PageId) {
        if let Some(Some(slot)) = self.pages.get_mut(id as usize) {
            if !slot.dirty {
                slot.dirty = true;
                self.dirty.push(id);
                self.dirty_count += 1;
            }
        }
    }

    /// True if no page changed since the last [`PsTree::take_dirty`].
    pub fn is_dirty_empty(&self) -> bool {
        self.dirty_count == 0
    }

    /// The pages changed since the last call, in id order; they count as
    /// unchanged from now on (a flush took them).
    pub fn take_dirty(&mut self) -> Vec<PageId> {
        let mut out = Vec::with_capacity(self.dirty_count);
        for id in std::mem::take(&mut self.dirty) {
            if let Some(Some(slot)) = self.pages.get_mut(id as usize) {
                if std::mem::take(&mut slot.dirty) {
                    out.push(id);
                }
            }
        }
        self.dirty_count = 0;
        out.sort_unstable();
        out
    }

    fn release(&mut self, id: PageId) {
        self.clear_direct(id);
        if let Some(slot) = self.pages.get_mut(id as usize) {
            if let Some(old) = slot.take() {
                self.page_bytes -= old.cap();
                if old.data.get().is_some() {
                    self.resident.fetch_sub(old.cap(), Relaxed);
                }
                self.free.push(id);
                if old.dirty {
                    self.dirty_count -= 1;
                }
                self.freed.insert(id);
            }
        }
    }

    fn page_mut(&mut self, id: PageId) -> Result<&mut Page> {
        // Resident first (copied out of the file if it is not); its file
        // copy is stale from now on.
        let copy = if self.is_resident(id) {
            None
        } else {
            // Read in place (a copy is due), or read back into RAM by
            // `page` itself where the file is not mapped (none is).
            let p = self.page(id)?;
            (!self.is_resident(id)).then(|| p.to_page())
        };
        self.mark_dirty(id);
        self.clear_direct(id);
        let slot = self
            .pages
            .get_mut(id as usize)
            .and_then(|p| p.as_mut())
            .ok_or_else(|| corrupt(&format!("pointer to missing page {id}")))?;
        if let Some(page) = copy {
            if slot.data.set(Arc::new(page)).is_ok() {
                self.resident.fetch_add(slot.cap(), Relaxed);
            }
        }
        slot.loc = None;
        slot.map.take();
        slot.data
            .get_mut()
            .map(Arc::make_mut)
            .ok_or_else(|| corrupt(&format!("page {id} not resident")))
    }

    /// Page `id` if it is resident, shared: a writer that changes it
    /// afterwards changes a copy (a flush encodes the pages it took
    /// without the tree's lock).
    pub fn resident_page(&self, id: PageId) -> Option<Arc<Page>> {
        match self.pages.get(id as usize) {
            Some(Some(s)) => s.data.get().cloned(),
            _ => None,
        }
    }

    fn is_resident(&self, id: PageId) -> bool {
        matches!(self.pages.get(id as usize), Some(Some(s)) if s.data.get().is_some())
    }

    /// The normal page a new group of `skey` (whose newest group is
    /// `head`) goes to: the page of its newest group, else that of a
    /// neighbouring secondary key (locality), if normal.
    fn target_page(&self, skey: &[u8], head: Option<Ptr>) -> Option<PageId> {
        let normal = |p: Ptr| {
            let id = ptr_page(p);
            matches!(self.page(id), Ok(pg) if pg.kind == PageKind::Normal).then_some(id)
        };
        if let Some(id) = head.and_then(normal) {
            return Some(id);
        }
        self.skeys
            .before(skey)
            .and_then(normal)
            .or_else(|| self.skeys.after(skey).and_then(normal))
    }

    /// Algorithm 1 (Insert): appends a one-entry group for `skey` to the
    /// page of its newest group (or a neighbour's), splitting a full page
    /// first, and makes it the head of the key's chain; or, if the key's
    /// newest group is the last group of that page, adds the entry to the
    /// front of that group (a deviation from the paper: fewer, larger
    /// groups, one cache line and one header fewer for a reader).
    pub fn insert(
        &mut self,
        skey: &[u8],
        entry: Entry,
        valid: &mut Validation,
        horizon: SeqNo,
    ) -> Result<SplitStats> {
        let mut stats = SplitStats::default();
        let need = group_size(skey, std::slice::from_ref(&entry));
        let mut head = self.head(skey)?;
        let mut target = self.target_page(skey, head);
        if let Some(id) = target {
            let pg = self.page(id)?;
            if pg.data.len() + need > pg.cap {
                stats = self.split(id, valid, horizon)?;
                head = self.head(skey)?;
                target = self
                    .target_page(skey, head)
                    .filter(|&id| matches!(self.page(id), Ok(p) if p.data.len() + need <= p.cap));
            }
        }
        let id = match target {
            Some(id) => id,
            None => self.alloc(PageKind::Normal, PAGE_SIZE.max(2 * need)),
        };
        let prev = head.unwrap_or(NULL);
        let geom_len = self.geom_len;
        let page = self.page_mut(id)?;
        let off = page.data.len();
        // The key's newest group ends the page: the entry joins it, first
        // (newest first), instead of starting a group of its own, so that
        // a chain is not a run of one-entry groups between two splits.
        // Nothing follows the group, so no pointer into the page moves.
        if let Some(h) = head.filter(|&h| ptr_page(h) == id) {
            let at = ptr_off(h);
            if group_end(&page.data, at, geom_len)? == off {
                let (n, first) = {
                    let g = group_at(&page.data, at)?;
                    (g.n, g.entries)
                };
                let mut bytes = Vec::with_capacity(entry.size());
                encode_entry(&mut bytes, &entry);
                page.data.splice(first..first, bytes);
                page.data
                    .get_mut(at + 8..at + 12)
                    .ok_or_else(|| corrupt("truncated group header"))?
                    .copy_from_slice(&(n + 1).to_le_bytes());
                return Ok(stats);
            }
        }
        encode_group(&mut page.data, prev, skey, std::slice::from_ref(&entry));
        self.skeys.set(skey, ptr(id, off));
        Ok(stats)
    }

    /// The groups of the chain starting at `head`, newest first, as
    /// pointers. Errors on a cycle or a dangling pointer.
    fn chain(&self, head: Ptr) -> Result<Vec<Ptr>> {
        let mut out = Vec::new();
        let mut p = head;
        while p != NULL {
            if out.len() > self.pages.len() * PAGE_SIZE + 1 {
                return Err(corrupt("cycle in a group chain"));
            }
            out.push(p);
            let pg = self.page(ptr_page(p))?;
            p = group_at(pg.data, ptr_off(p))?.prev;
        }
        Ok(out)
    }

    /// The entries of the group at `p`.
    fn group_entries(&self, p: Ptr) -> Result<(Vec<Entry>, Ptr)> {
        let pg = self.page(ptr_page(p))?;
        let g = group_at(pg.data, ptr_off(p))?;
        let mut at = g.entries;
        let mut out = Vec::with_capacity(g.n as usize);
        for _ in 0..g.n {
            let (e, next) = entry_at(pg.data, at, self.geom_len)?;
            out.push(Entry {
                seq: e.seq,
                obsolete: e.obsolete,
                pk: InlineKey::new(e.pk),
                geom: e.geom.to_vec(),
            });
            at = next;
        }
        Ok((out, g.prev))
    }

    fn set_referrer(&mut self, skey: &[u8], r: Referrer, to: Ptr) -> Result<()> {
        match r {
            Referrer::Head if to == NULL => self.skeys.remove(skey),
            Referrer::Head => self.skeys.set(skey, to),
            Referrer::Prev(g) => {
                let page = self.page_mut(ptr_page(g))?;
                let off = ptr_off(g);
                let field = page
                    .data
                    .get_mut(off..off + 8)
                    .ok_or_else(|| corrupt("group pointer past the page"))?;
                field.copy_from_slice(&to.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Locality-aware split with garbage collection (§4.2.2): every chain
    /// section in page `id` is rewritten as one group (newest entries in
    /// new normal pages, the older ones of a large chain in overflow
    /// pages), collectable obsolete entries are dropped, the pointer into
    /// each section is redirected, and the page is freed. Overflow groups
    /// of the same keys are collected by the lazy rule
    /// ([`PsTree::collect_overflow`]).
    pub fn split(
        &mut self,
        id: PageId,
        valid: &mut Validation,
        horizon: SeqNo,
    ) -> Result<SplitStats> {
        let mut stats = SplitStats::default();
        // The secondary keys with groups in the page.
        // (Inline keys: no allocation; sorted to drop duplicates.)
        let skeys: Vec<InlineKey> = {
            let pg = self.page(id)?;
            let mut at = 0;
            let mut out = Vec::new();
            while at < pg.data.len() {
                out.push(InlineKey::new(group_at(pg.data, at)?.skey));
                at = group_end(pg.data, at, self.geom_len)?;
            }
            out.sort_unstable();
            out.dedup();
            out
        };
        let mut sections: Vec<Section> = Vec::new();
        for key in &skeys {
            let sk = key.bytes();
            // (By the hash table first: a split looks up every key of its
            // page, and the ordered map's descent cost ~840 instructions.)
            let Some(head) = self.head(sk)? else {
                continue; // unreachable groups: garbage
            };
            let mut chain = self.chain(head)?;
            // The lazy rule first: it rewrites overflow groups in place.
            if chain.len() > 1 && self.has_overflow(&chain)? {
                stats.collected += self.collect_overflow(sk, valid, horizon)?;
                match self.head(sk)? {
                    Some(head) => chain = self.chain(head)?,
                    None => continue,
                }
            }
            let mut i = 0;
            while i < chain.len() {
                let Some(&g) = chain.get(i) else { break };
                if ptr_page(g) != id {
                    i += 1;
                    continue;
                }
                let referrer = match i.checked_sub(1).and_then(|j| chain.get(j)) {
                    None => Referrer::Head,
                    Some(&p) => Referrer::Prev(p),
                };
                let mut entries = Vec::new();
                let mut out = NULL;
                while let Some(&g) = chain.get(i) {
                    if ptr_page(g) != id {
                        break;
                    }
                    let (es, prev) = self.group_entries(g)?;
                    entries.extend(es);
                    out = prev;
                    i += 1;
                }
                sections.push((key.clone(), referrer, entries, out));
            }
        }
        // Garbage collection.
        // Every entry is judged on the counts before any is collected (a
        // collection only lowers its key's count, which changes no other
        // verdict while the counts are exact), so the judge borrows the
        // entries' keys instead of copying them.
        let dead: Vec<bool> = {
            let n = sections.iter().map(|s| s.2.len()).sum();
            let newer = NewerVersions::of(sections.iter().flat_map(|s| s.2.iter()), n, horizon);
            sections
                .iter()
                .flat_map(|s| s.2.iter())
                .map(|e| newer.collectable(e, valid, horizon))
                .collect()
        };
        let mut dead = dead.into_iter();
        for (_, _, entries, _) in &mut sections {
            let before = entries.len();
            entries.retain(|e| {
                if dead.next().unwrap_or(false) {
                    valid.collected(&e.pk);
                    false
                } else {
                    true
                }
            });
            stats.collected += (before - entries.len()) as u64;
        }
        self.release(id);
        self.layout(sections)?;
        Ok(stats)
    }

    fn has_overflow(&self, chain: &[Ptr]) -> Result<bool> {
        for &g in chain {
            if self.page(ptr_page(g))?.kind == PageKind::Overflow {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The lazy rule for groups spilling over pages (§4.2.2): every
    /// overflow group of `skey`'s chain with more than half its entries
    /// collectable is rewritten at the same place in the chain without
    /// them (or unlinked if none is left), and its page freed. Returns the
    /// entries collected.
    fn collect_overflow(
        &mut self,
        skey: &[u8],
        valid: &mut Validation,
        horizon: SeqNo,
    ) -> Result<u64> {
        let Some(head) = self.skeys.get(skey) else {
            return Ok(0);
        };
        let chain = self.chain(head)?;
        let mut collected = 0;
        // From the oldest: rewriting a group changes only the `prev` of
        // the group before it, which keeps its place.
        for (j, &g) in chain.iter().enumerate().rev() {
            if self.page(ptr_page(g))?.kind != PageKind::Overflow {
                continue;
            }
            let (entries, prev) = self.group_entries(g)?;
            let dead: Vec<bool> = {
                let newer = NewerVersions::of(entries.iter(), entries.len(), horizon);
                entries
                    .iter()
                    .map(|e| newer.collectable(e, valid, horizon))
                    .collect()
            };
            let n_dead = dead.iter().filter(|d| **d).count();
            if 2 * n_dead <= entries.len() {
                continue;
            }
            let mut live = Vec::with_capacity(entries.len() - n_dead);
            for (e, dead) in entries.into_iter().zip(dead) {
                if dead {
                    valid.collected(&e.pk);
                    collected += 1;
                } else {
                    live.push(e);
                }
            }
            self.release(ptr_page(g));
            let to = if live.is_empty() {
                prev
            } else {
                let size = group_size(skey, &live);
                let ov = self.alloc(PageKind::Overflow, PAGE_SIZE.max(size));
                encode_group(&mut self.page_mut(ov)?.data, prev, skey, &live);
                ptr(ov, 0)
            };
            let referrer = match j.checked_sub(1).and_then(|i| chain.get(i)) {
                None => Referrer::Head,
                Some(&p) => Referrer::Prev(p),
            };
            self.set_referrer(skey, referrer, to)?;
        }
        Ok(collected)
    }

    /// Writes `sections` (each: secondary key, referrer, entries, outgoing
    /// pointer) into new pages and points each referrer at its new group.
    fn layout(&mut self, mut sections: Vec<Section>) -> Result<()> {
        sections.sort_by(|a, b| a.0.cmp(&b.0));
        let mut current: Option<PageId> = None;
        for (key, referrer, mut entries, out) in sections {
            let skey = key.bytes();
            if entries.is_empty() {
                self.set_referrer(skey, referrer, out)?;
                continue;
            }
            entries.sort_by_key(|e| std::cmp::Reverse(e.seq));
            // Head: the newest entries up to HEAD_MAX bytes (at least one).
            let mut head_len = 0;
            let mut bytes = GROUP_HEADER + skey.len();
            for e in &entries {
                if head_len > 0 && bytes + e.size() > HEAD_MAX {
                    break;
                }
                bytes += e.size();
                head_len += 1;
            }
            let rest = entries.split_off(head_len);
            // Older entries: overflow pages, one group each, written oldest
            // first so each knows its successor.
            let mut next = out;
            let mut chunks: Vec<Vec<Entry>> = Vec::new();
            let mut chunk: Vec<Entry> = Vec::new();
            let mut cb = GROUP_HEADER + skey.len();
            for e in rest {
                if !chunk.is_empty() && cb + e.size() > PAGE_SIZE {
                    chunks.push(std::mem::take(&mut chunk));
                    cb = GROUP_HEADER + skey.len();
                }
                cb += e.size();
                chunk.push(e);
            }
            if !chunk.is_empty() {
                chunks.push(chunk);
            }
            for c in chunks.into_iter().rev() {
                let size = group_size(skey, &c);
                let ov = self.alloc(PageKind::Overflow, PAGE_SIZE.max(size));
                encode_group(&mut self.page_mut(ov)?.data, next, skey, &c);
                next = ptr(ov, 0);
            }
            // The head group in a normal page.
            let size = group_size(skey, &entries);
            let fits = match current {
                Some(c) => self.page(c)?.data.len() + size <= FILL,
                None => false,
            };
            let page = match current {
                Some(c) if fits => c,
                _ => {
                    let c = self.alloc(PageKind::Normal, PAGE_SIZE.max(2 * size));
                    current = Some(c);
                    c
                }
            };
            let pg = self.page_mut(page)?;
            let off = pg.data.len();
            encode_group(&mut pg.data, next, skey, &entries);
            self.set_referrer(skey, referrer, ptr(page, off))?;
        }
        Ok(())
    }

    /// Regroups every chain completely (after a scan build, whose records
    /// arrive out of sequence order): each secondary key's entries sorted
    /// newest first in fresh pages. Collects nothing.
    pub fn reorganize(&mut self) -> Result<()> {
        let mut sections = Vec::new();
        for (sk, head) in self.skeys.iter() {
            let mut entries = Vec::new();
            for g in self.chain(head)? {
                entries.extend(self.group_entries(g)?.0);
            }
            sections.push((InlineKey::new(sk), Referrer::Head, entries, NULL));
        }
        for id in self.page_ids() {
            self.release(id);
        }
        self.layout(sections)
    }

    /// The head of `skey`'s chain: the SKey layer's hash table when the
    /// group it names is `skey`'s (one probe and a group header the chain
    /// walk reads next anyway), else its ordered map.
    pub fn head(&self, skey: &[u8]) -> Result<Option<Ptr>> {
        Ok(match self.hinted_head(skey)? {
            Some((p, _)) => Some(p),
            None => self.skeys.get(skey),
        })
    }

    /// The hash table's head for `skey` and the bytes of its page, if the
    /// group it names is `skey`'s (`None` says nothing: see
    /// [`SKeyLayer::hint`]).
    fn hinted_head(&self, skey: &[u8]) -> Result<Option<(Ptr, &[u8])>> {
        if let Some(p) = self.skeys.hint(skey) {
            let page = self.page_data(ptr_page(p))?;
            if group_at(page, ptr_off(p))?.skey == skey {
                return Ok(Some((p, page)));
            }
        }
        Ok(None)
    }

    /// A cursor over `skey`'s chain, newest first (`None`: no such key).
    /// As [`PsTree::head`], and the page of the head, which a chain's
    /// newer groups share, is looked up once and its lines loaded at once.
    pub fn cursor_of(&self, skey: &[u8]) -> Result<Option<Cursor<'_>>> {
        let Some((p, page)) = self.hinted_head(skey)? else {
            return Ok(self.skeys.get(skey).map(|h| self.cursor(h)));
        };
        // A chain's older groups precede its newest in the page.
        touch_lines(page.get(..ptr_off(p) + 64).unwrap_or(page));
        Ok(Some(Cursor {
            tree: self,
            next_group: p,
            page,
            page_id: Some(ptr_page(p)),
            left: 0,
            at: 0,
        }))
    }

    /// A cursor over the chain whose newest group is at `skey_head`,
    /// newest first.
    pub fn cursor(&self, skey_head: Ptr) -> Cursor<'_> {
        Cursor {
            tree: self,
            next_group: skey_head,
            page: &[],
            page_id: None,
            left: 0,
            at: 0,
        }
    }

    /// Every entry of every chain, with its secondary key (tests, checks).
    #[cfg(test)]
    pub fn all_entries(&self) -> Result<Vec<(Vec<u8>, Entry)>> {
        let mut out = Vec::new();
        for (sk, head) in self.skeys.iter() {
            for g in self.chain(head)? {
                for e in self.group_entries(g)?.0 {
                    out.push((sk.to_vec(), e));
                }
            }
        }
        Ok(out)
    }
}

/// For each primary key, the newest sequence number at or below the
/// horizon among a set of entries: an entry of the key older than it was
/// replaced at or below the horizon even when the key's latest version is
/// newer than the horizon. (One number per key, not the list: "some
/// entry of the key at or below the horizon is newer than `e`" is "the
/// newest such entry is"; a split builds this for every entry it moves.)
struct NewerVersions<'a>(FastMap<&'a [u8], SeqNo>);

impl<'a> NewerVersions<'a> {
    /// `n`: how many entries `entries` yields (the map is sized for them
    /// once: a split's entries come through a `flat_map`, whose size hint
    /// is 0, and growing the map rehashed it a few times a split).
    fn of(entries: impl Iterator<Item = &'a Entry>, n: usize, horizon: SeqNo) -> NewerVersions<'a> {
        let mut m: FastMap<&'a [u8], SeqNo> =
            FastMap::with_capacity_and_hasher(n, Default::default());
        for e in entries {
            if e.seq > horizon {
                continue;
            }
            let t = m.entry(e.pk.bytes()).or_insert(e.seq);
            *t = (*t).max(e.seq);
        }
        NewerVersions(m)
    }

    /// True if no reader at or above `horizon` can need `e`: it is not its
    /// key's latest version, and the version that replaced it is at or
    /// below the horizon (the latest is, or another entry of the key is
    /// newer than `e` and at or below the horizon).
    fn collectable(&self, e: &Entry, valid: &Validation, horizon: SeqNo) -> bool {
        match valid.verdict(&e.pk, e.seq, horizon) {
            Verdict::Collectable => true,
            Verdict::Valid => false,
            _ => self.0.get(e.pk.bytes()).is_some_and(|&t| t > e.seq),
        }
    }
}

/// Loads every cache line of `page` by independent loads: a chain's
/// groups are scattered over its page (the one-entry groups appended
/// since its last split, then its regrouped entries), and walking them
/// one pointer at a time paid a cache miss each; loaded together, the
/// misses overlap. A hint only.
fn touch_lines(page: &[u8]) {
    let mut acc = 0u8;
    for b in page.iter().step_by(64) {
        acc = acc.wrapping_add(*b);
    }
    std::hint::black_box(acc);
}

/// Walks one chain's entries newest first (see [`PsTree::cursor`]): the
/// page of each group is looked up once, its entries read in place.
pub(crate) struct Cursor<'t> {
    tree: &'t PsTree,
    /// The group after the current one ([`NULL`]: the chain's end).
    next_group: Ptr,
    /// The current group's page; `left` entries of it remain, the next at
    /// byte `at`.
    page: &'t [u8],
    /// The id of `page` (`None` before the first group).
    page_id: Option<PageId>,
    left: u32,
    at: usize,
}

impl<'t> Cursor<'t> {
    /// Fills `out` from the front with the next entries a reader at `at`
    /// may see (not obsolete, sequence number at most `at`), each with
    /// `hash` of its primary key; returns how many (fewer than `out.len()`
    /// only at the chain's end). [`Cursor::next`] and that filter in one
    /// loop, for an equality lookup.
    pub fn fill(
        &mut self,
        at: SeqNo,
        out: &mut [Candidate<'t>],
        hash: impl Fn(&[u8]) -> u64,
    ) -> Result<usize> {
        let mut n = 0;
        while let Some(slot) = out.get_mut(n) {
            if self.left == 0 {
                if !self.next_group()? {
                    break;
                }
                continue;
            }
            let (e, next) = entry_at(self.page, self.at, self.tree.geom_len)?;
            self.at = next;
            self.left -= 1;
            if e.seq <= at && !e.obsolete {
                *slot = Candidate {
                    pk: e.pk,
                    seq: e.seq,
                    hash: hash(e.pk),
                };
                n += 1;
            }
        }
        Ok(n)
    }

    /// Moves to the chain's next group (`false`: none is left).
    fn next_group(&mut self) -> Result<bool> {
        if self.next_group == NULL {
            return Ok(false);
        }
        let p = self.next_group;
        // Consecutive groups of a chain often share a page (the one-entry
        // groups written since its last split): it is looked up once for
        // them.
        if self.page_id != Some(ptr_page(p)) {
            self.page = self.tree.page_data(ptr_page(p))?;
            self.page_id = Some(ptr_page(p));
        }
        let g = group_at(self.page, ptr_off(p))?;
        (self.next_group, self.left, self.at) = (g.prev, g.n, g.entries);
        Ok(true)
    }

    pub fn next(&mut self) -> Result<Option<EntryRef<'t>>> {
        while self.left == 0 {
            if !self.next_group()? {
                return Ok(None);
            }
        }
        let (e, next) = entry_at(self.page, self.at, self.tree.geom_len)?;
        self.at = next;
        self.left -= 1;
        Ok(Some(e))
    }
}

/// A chain section a split or a reorganization rewrites: its secondary
/// key, the pointer to redirect to its new group, its entries, and the
/// group it continues to.
type Section = (InlineKey, Referrer, Vec<Entry>, Ptr);

/// Counts of a chain walk, for checks of the invariants in tests.
#[cfg(test)]
pub(crate) fn chain_seqs(tree: &PsTree, skey: &[u8]) -> Vec<SeqNo> {
    let mut out = Vec::new();
    if let Some(h) = tree.skeys.get(skey) {
        let mut c = tree.cursor(h);
        while let Ok(Some(e)) = c.next() {
            out.push(e.seq);
        }
    }
    out
}

/// Entries per primary key across the tree (tests).
#[cfg(test)]
pub(crate) fn entries_by_pk(tree: &PsTree) -> std::collections::HashMap<Vec<u8>, usize> {
    let mut m = std::collections::HashMap::new();
    if let Ok(all) = tree.all_entries() {
        for (_, e) in all {
            *m.entry(e.pk.bytes().to_vec()).or_insert(0) += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A small deterministic generator.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn entry(pk: Vec<u8>, seq: SeqNo) -> Entry {
        Entry {
            seq,
            obsolete: false,
            pk: InlineKey::new(&pk),
            geom: Vec::new(),
        }
    }

    fn skey_of(i: u64) -> Vec<u8> {
        // Some long keys, so groups and pages fill unevenly.
        let mut k = format!("sk{i:03}").into_bytes();
        if i.is_multiple_of(7) {
            k.extend(std::iter::repeat_n(b'x', 300));
        }
        k
    }

    /// Random blind writes against a model; checks after every step that
    /// each secondary key's valid entries are exactly the model's keys
    /// with that attribute, that chains are newest first, and (with a
    /// horizon that follows the writes) that garbage stays bounded.
    fn run(seed: u64, lag: u64, steps: u64, skeys: u64) {
        let mut rng = Rng(seed);
        let mut tree = PsTree::new(0);
        let mut valid = Validation::default();
        let mut model: HashMap<Vec<u8>, (SeqNo, Option<Vec<u8>>)> = HashMap::new();
        let mut collected = 0;
        for seq in 1..=steps {
            let pk = format!("pk{:04}", rng.below(300)).into_bytes();
            let horizon = seq.saturating_sub(lag + 1);
            if rng.below(10) == 0 {
                valid.write(&pk, seq, false).unwrap();
                model.insert(pk, (seq, None));
            } else {
                let sk = skey_of(rng.below(skeys));
                valid.write(&pk, seq, true).unwrap();
                let e = Entry {
                    seq,
                    obsolete: false,
                    pk: InlineKey::new(&pk),
                    geom: Vec::new(),
                };
                collected += tree.insert(&sk, e, &mut valid, horizon).unwrap().collected;
                model.insert(pk, (seq, Some(sk)));
            }
            if seq % 97 == 0 || seq == steps {
                check(&tree, &valid, &model, seq);
            }
        }
        let live = model.values().filter(|(_, s)| s.is_some()).count();
        let total: usize = entries_by_pk(&tree).values().sum();
        if lag == 0 {
            assert!(collected > 0, "nothing collected");
            // Garbage is collected page by page: bounded by the live
            // entries plus what the unsplit pages hold.
            assert!(
                total <= live + tree.page_count() * (PAGE_SIZE / ENTRY_HEADER),
                "{total} entries for {live} live"
            );
        }
        // A reorganization keeps every entry and the order.
        tree.reorganize().unwrap();
        assert_eq!(entries_by_pk(&tree).values().sum::<usize>(), total);
        check(&tree, &valid, &model, steps);
    }

    fn check(
        tree: &PsTree,
        valid: &Validation,
        model: &HashMap<Vec<u8>, (SeqNo, Option<Vec<u8>>)>,
        at: SeqNo,
    ) {
        // The hash path finds every key's head, and nothing for keys
        // without one (they may share a hash with a key that has one).
        // So does `cursor_of`, whose cursor starts on the head's page:
        // it walks the chain the ordered map's head starts.
        let walk = |c: Option<Cursor<'_>>| {
            let mut out = Vec::new();
            if let Some(mut c) = c {
                while let Some(e) = c.next().unwrap() {
                    out.push((e.pk.to_vec(), e.seq, e.obsolete));
                }
            }
            out
        };
        for i in 0..64 {
            let sk = skey_of(i);
            assert_eq!(tree.head(&sk).unwrap(), tree.skeys.get(&sk), "head of {i}");
            assert_eq!(
                walk(tree.cursor_of(&sk).unwrap()),
                walk(tree.skeys.get(&sk).map(|h| tree.cursor(h))),
                "chain of {i}"
            );
        }
        let mut got: HashMap<Vec<u8>, Vec<(Vec<u8>, SeqNo)>> = HashMap::new();
        for (sk, _) in tree.skeys.iter() {
            let seqs = chain_seqs(tree, sk);
            assert!(
                seqs.windows(2).all(|w| w[0] > w[1]),
                "chain of {:?} not newest first: {seqs:?}",
                String::from_utf8_lossy(sk)
            );
            let mut c = tree.cursor(tree.skeys.get(sk).unwrap());
            while let Some(e) = c.next().unwrap() {
                if valid.check(e.pk, e.seq, at) == Verdict::Valid {
                    got.entry(sk.to_vec())
                        .or_default()
                        .push((e.pk.to_vec(), e.seq));
                }
            }
        }
        let mut want: HashMap<Vec<u8>, Vec<(Vec<u8>, SeqNo)>> = HashMap::new();
        for (pk, (seq, sk)) in model {
            if let Some(sk) = sk {
                want.entry(sk.clone()).or_default().push((pk.clone(), *seq));
            }
        }
        for v in want.values_mut().chain(got.values_mut()) {
            v.sort();
        }
        assert_eq!(got, want);
    }

    /// Keeps every page handed to it; `read` returns the copy.
    #[derive(Default)]
    struct MemSource(std::sync::Mutex<HashMap<PageId, Page>>);
    impl PageSource for MemSource {
        fn read(&self, id: PageId, _loc: Loc) -> Result<Page> {
            self.0
                .lock()
                .unwrap()
                .get(&id)
                .cloned()
                .ok_or_else(|| corrupt("no such page"))
        }
    }

    /// Regression: with every resident page dirty (a load between two
    /// flushes) and the cache over budget, each `evict` (one per write
    /// batch) swept every slot twice: 32–41% of PERSEID's upsert ingest
    /// (perf). Now it visits only the queue of clean resident pages: no
    /// work while every page is dirty, and a page loaded back and
    /// rewritten (an upsert touching an evicted page) costs a bounded
    /// number of visits.
    /// A group and its entries decode as encoded, with and without a
    /// geometry; every truncation is an error, not a panic or a shorter
    /// key.
    #[test]
    fn groups_and_entries_decode_and_truncations_fail() {
        for geom_len in [0usize, 16] {
            let entries = [
                Entry {
                    seq: 7,
                    obsolete: false,
                    pk: InlineKey::new(b"k1"),
                    geom: vec![1; geom_len],
                },
                Entry {
                    seq: MAX_SEQ,
                    obsolete: true,
                    pk: InlineKey::new(b""),
                    geom: vec![2; geom_len],
                },
            ];
            let mut page = vec![0xAA; 3];
            encode_group(&mut page, ptr(5, 9), b"skey", &entries);
            let g = group_at(&page, 3).unwrap();
            assert_eq!((g.prev, g.n, g.skey), (ptr(5, 9), 2, &b"skey"[..]));
            let mut at = g.entries;
            for want in &entries {
                let (e, next) = entry_at(&page, at, geom_len).unwrap();
                assert_eq!(
                    (e.seq, e.obsolete, e.pk, e.geom),
                    (want.seq, want.obsolete, &want.pk[..], &want.geom[..])
                );
                at = next;
            }
            assert_eq!(at, page.len());
            for cut in 3..page.len() {
                let short = &page[..cut];
                let ok = group_at(short, 3).and_then(|g| {
                    let mut at = g.entries;
                    for _ in 0..g.n {
                        at = entry_at(short, at, geom_len)?.1;
                    }
                    Ok(at)
                });
                assert!(ok.is_err(), "cut at {cut} of {} decoded", page.len());
            }
        }
    }

    #[test]
    fn eviction_does_not_resweep_dirty_pages() {
        let source = Arc::new(MemSource::default());
        let mut tree = PsTree::new(0);
        tree.set_cache(0, source.clone());
        let mut valid = Validation::default();
        for seq in 1..=2_000u64 {
            let pk = format!("pk{seq:06}").into_bytes();
            valid.write(&pk, seq, true).unwrap();
            tree.insert(&skey_of(seq % 50), entry(pk, seq), &mut valid, 0)
                .unwrap();
        }
        let n = tree.pages.len() as u64;
        assert!(n > 10, "{n} pages");
        for _ in 0..1_000 {
            tree.evict();
        }
        assert_eq!(tree.evictions, 0, "dirty pages were evicted");
        assert!(
            tree.swept <= 2 * n,
            "{} slots swept for {n} pages over 1,000 calls",
            tree.swept
        );
        // A flush (which takes the dirty set first) writes every page:
        // they become clean and go.
        let ids = tree.page_ids();
        tree.take_dirty();
        for (k, &id) in ids.iter().enumerate() {
            let page = tree.page(id).unwrap().to_page();
            source.0.lock().unwrap().insert(id, page);
            let loc = Loc {
                file: 1,
                offset: k as u64 * 10,
                len: 10,
            };
            tree.written(id, loc);
        }
        tree.evict();
        assert_eq!(tree.resident_bytes(), 0);
        assert_eq!(tree.evictions, ids.len() as u64);
        // A reader brings one back; the next evict drops it again.
        let first = ids[0];
        assert!(tree.page(first).is_ok());
        assert!(tree.resident_bytes() > 0);
        tree.evict();
        assert_eq!(tree.resident_bytes(), 0);
        // Writers load pages back and dirty them, over budget: each
        // evict examines at most the pages loaded since the last one.
        let before = tree.swept;
        for &id in &ids {
            tree.page_mut(id).unwrap();
            tree.evict();
        }
        assert!(
            tree.swept - before <= ids.len() as u64,
            "{} queue entries examined for {} loads",
            tree.swept - before,
            ids.len()
        );
        assert_eq!(tree.resident_bytes(), tree.page_bytes());
    }

    /// Pages freed by splits and their ids reused, every page written
    /// after each batch, the cache never over budget (so nothing drains
    /// the queue): the eviction queue stays bounded by the pages.
    #[test]
    fn eviction_queue_stays_bounded_without_budget_pressure() {
        let source = Arc::new(MemSource::default());
        let mut tree = PsTree::new(0);
        tree.set_cache(usize::MAX, source);
        let mut valid = Validation::default();
        let mut rng = Rng(11);
        let mut file_offset = 0;
        let mut most = 0;
        for seq in 1..=20_000u64 {
            let pk = format!("pk{:04}", rng.below(300)).into_bytes();
            valid.write(&pk, seq, true).unwrap();
            tree.insert(&skey_of(rng.below(40)), entry(pk, seq), &mut valid, seq - 1)
                .unwrap();
            if seq % 50 == 0 {
                let dirty = tree.take_dirty();
                for id in dirty {
                    file_offset += 10;
                    let loc = Loc {
                        file: 1,
                        offset: file_offset,
                        len: 10,
                    };
                    tree.written(id, loc);
                }
                tree.evict();
                most = most.max(tree.clock.len());
            }
        }
        assert_eq!(tree.evictions, 0);
        assert!(
            most <= 2 * tree.pages.len() + 64,
            "{most} queue entries for {} page slots",
            tree.pages.len()
        );
    }

    #[test]
    fn random_writes_collect_garbage_and_stay_exact() {
        for seed in 1..4 {
            run(seed, 0, 3000, 40);
        }
    }

    #[test]
    fn a_lagging_horizon_keeps_what_readers_need() {
        // One hot secondary key; 50 primary keys updated in turn. While a
        // reader holds snapshot `horizon`, every version it or a later
        // reader can see stays: for each key, the versions above the
        // horizon and the newest at or below it.
        let mut tree = PsTree::new(0);
        let mut valid = Validation::default();
        let mut insert = |tree: &mut PsTree, seq: SeqNo, horizon: SeqNo| {
            let pk = format!("pk{:02}", seq % 50).into_bytes();
            valid.write(&pk, seq, true).unwrap();
            tree.insert(b"one", entry(pk, seq), &mut valid, horizon)
                .unwrap()
        };
        let horizon = 700;
        for seq in 1..=2000u64 {
            insert(&mut tree, seq, horizon.min(seq - 1));
        }
        let present: std::collections::HashSet<SeqNo> =
            chain_seqs(&tree, b"one").into_iter().collect();
        for seq in 1..=2000u64 {
            let needed = seq > horizon || seq + 50 > horizon;
            if needed {
                assert!(present.contains(&seq), "lost {seq}");
            }
        }
        // The reader leaves: the old overflow groups are collected.
        let before = present.len();
        let mut collected = 0;
        for seq in 2001..=3000u64 {
            collected += insert(&mut tree, seq, seq - 1).collected;
        }
        let after = chain_seqs(&tree, b"one").len();
        assert!(collected > 0 && after < before / 2, "{before} -> {after}");
        assert!(after < 50 + PAGE_SIZE / 16, "{after} entries left");
    }

    /// Consecutive writes of one key whose newest group ends its page
    /// join that group (newest first); a write after another key's group
    /// starts a new one. The chain reads the same either way.
    #[test]
    fn writes_join_the_newest_group_when_it_ends_the_page() {
        let mut tree = PsTree::new(0);
        let mut valid = Validation::default();
        let groups =
            |tree: &PsTree, sk: &[u8]| tree.chain(tree.skeys.get(sk).unwrap()).unwrap().len();
        let mut seq = 0;
        let mut put = |tree: &mut PsTree, sk: &[u8], pk: &str| {
            seq += 1;
            valid.write(pk.as_bytes(), seq, true).unwrap();
            tree.insert(sk, entry(pk.as_bytes().to_vec(), seq), &mut valid, 0)
                .unwrap();
        };
        for pk in ["a", "b", "c"] {
            put(&mut tree, b"k1", pk);
        }
        assert_eq!(groups(&tree, b"k1"), 1);
        put(&mut tree, b"k2", "d");
        put(&mut tree, b"k1", "e");
        put(&mut tree, b"k1", "f");
        assert_eq!(groups(&tree, b"k1"), 2);
        assert_eq!(groups(&tree, b"k2"), 1);
        assert_eq!(chain_seqs(&tree, b"k1"), vec![6, 5, 3, 2, 1]);
        assert_eq!(chain_seqs(&tree, b"k2"), vec![4]);
    }

    /// A page's data packs into one word with its address and length
    /// recoverable; data too long for the length's bits packs to 0 (the
    /// page is then read through its slot).
    #[test]
    fn direct_entries_pack_address_and_length_or_nothing() {
        let bytes = vec![7u8; 70_000];
        for len in [0usize, 1, 4096, 65_535] {
            let d = bytes.get(..len).unwrap();
            let v = pack_direct(d);
            assert_ne!(v, 0);
            assert_eq!((v & DIRECT_ADDR_MASK) as usize, d.as_ptr() as usize);
            assert_eq!((v >> DIRECT_ADDR_BITS) as usize, len);
        }
        assert_eq!(pack_direct(&bytes[..65_536]), 0);
    }

    /// Pages left in the file take no page bytes in RAM, but their slots
    /// do: `slot_bytes` counts one per page id (the index's DRAM, which
    /// left it out before session 18).
    #[test]
    fn slots_of_pages_not_in_ram_count_as_dram() {
        let mut tree = PsTree::new(0);
        for id in 0..1000 {
            let loc = Loc {
                offset: u64::from(id) * 4096,
                file: 1,
                len: 100,
            };
            tree.load_page_at(id, PAGE_SIZE, loc);
        }
        assert_eq!(tree.resident_bytes(), 0);
        assert!(tree.slot_bytes() >= 1000 * std::mem::size_of::<Option<Slot>>());
    }

    /// The changed pages are listed once each, freed ones not at all,
    /// and a page a flush took (shared) is copied by the next writer, so
    /// the flush encodes the state it took.
    #[test]
    fn dirty_pages_are_taken_once_and_shared_pages_copied_on_write() {
        let mut tree = PsTree::new(0);
        let mut valid = Validation::default();
        let mut rng = Rng(5);
        let mut seq = 0;
        let mut write = |tree: &mut PsTree, valid: &mut Validation, n: u64| {
            for _ in 0..n {
                seq += 1;
                let pk = format!("pk{:04}", rng.below(400)).into_bytes();
                valid.write(&pk, seq, true).unwrap();
                tree.insert(&skey_of(rng.below(60)), entry(pk, seq), valid, seq - 1)
                    .unwrap();
            }
        };
        write(&mut tree, &mut valid, 5_000);
        // Splits freed pages and reused their ids meanwhile: the list
        // holds ids of freed pages, or ids twice.
        assert!(tree.dirty.len() > tree.dirty_count);
        let ids = tree.take_dirty();
        assert_eq!(ids, tree.page_ids(), "every live page, once, in order");
        assert!(tree.is_dirty_empty());
        assert!(tree.take_dirty().is_empty());
        // A flush holds the pages; writes go on.
        let held: Vec<(PageId, Arc<Page>, Vec<u8>)> = ids
            .iter()
            .map(|&id| {
                let p = tree.resident_page(id).unwrap();
                let bytes = p.data.clone();
                (id, p, bytes)
            })
            .collect();
        write(&mut tree, &mut valid, 20);
        let changed = tree.take_dirty();
        assert!(!changed.is_empty());
        let mut unchanged = 0;
        for (id, p, bytes) in &held {
            assert_eq!(&p.data, bytes, "page {id} changed under the flush");
            if !changed.contains(id) && tree.has_page(*id) {
                unchanged += 1;
                assert_eq!(tree.page(*id).unwrap().data, &bytes[..]);
            }
        }
        assert!(unchanged > 0);
        for id in changed {
            assert!(tree.has_page(id));
        }
    }

    #[test]
    fn a_slot_takes_64_bytes() {
        // `slot_bytes` counts them for every page: a larger slot is DRAM
        // that PERSEID's DRAM budget pays for each page of the file.
        assert!(std::mem::size_of::<Option<Slot>>() <= 64);
    }

    /// With every secondary key hashed to one of four values, the SKey
    /// layer's hash table is a hint that is mostly another key's head:
    /// writes and lookups must still find each key's own chain (`check`
    /// compares `head` with the ordered map after every 97 writes).
    #[test]
    fn heads_agree_when_every_key_shares_a_few_hashes() {
        super::super::skey::HASH_MASK.with(|m| m.set(3));
        run(11, 0, 3000, 40);
        run(12, 1_000_000, 2000, 9);
        super::super::skey::HASH_MASK.with(|m| m.set(u32::MAX));
    }

    #[test]
    fn hot_keys_spill_to_overflow_pages() {
        run(7, 0, 4000, 2);
        run(8, 1_000_000, 2500, 3);
    }
}
