//! Strategy `perseid`: PERSEID (Wang et al., "Revisiting Secondary
//! Indexing in LSM-based Storage Systems with Persistent Memory", USENIX
//! ATC 2023), §4.2–4.3.
//!
//! A PS-Tree (§4.2) kept in a page file of the index's directory: the
//! SKey layer (`skey`: ordered secondary keys → newest PKey group, with a
//! hash table of the same heads for equality lookups) over
//! the PKey layer (`pkey`: pages of groups of log-structured entries, one
//! chain per secondary key, newest first, regrouped and garbage-collected
//! by copy-on-write page splits), and hybrid validation (§4.3,
//! `validation`): a persistent table of primary key → (latest sequence
//! number, count) and a small volatile table of the keys that may have
//! obsolete entries. Writes are blind, as in the paper: the write leader
//! appends each put's entry and notes every write in the tables, without
//! reading the records a batch overwrites (`NeedsCurrent::No`).
//!
//! Queries run at one snapshot `S`, pinned under the sync guard; then they
//! read the structure under its read lock while writers go on. An entry is
//! visible if its sequence number is at most `S`; it is validated with the
//! volatile table only, and when the table reports a newer version than
//! `S` (a concurrent write) by a point lookup in the primary at `S`. Chains
//! are ordered newest first, so a top-K query over one or many secondary
//! keys (a k-way merge by sequence number) stops after K valid entries.
//! Garbage collection keeps every obsolete entry whose replacing version
//! is newer than the oldest snapshot a reader may hold.
//!
//! Spatial keys: the secondary key is the Hilbert cell of the MBR centre
//! (`tree::sort_key`, as the stand-alone trees), each entry carries the
//! exact geometry, and a window query scans the cells of its Hilbert cover
//! (widened by the largest rectangle half-extent) and refines exactly.
//!
//! Durability (`file`): the primary's WAL is the log. [`IndexStrategy::flush`]
//! — called before the primary installs a flush, after it fsynced its WAL —
//! syncs the primary's WAL once more (the checkpoint may cover batches
//! appended since) and writes the changes since the last flush as one
//! committed group with the checkpoint: the largest sequence number every
//! write at or below which is reflected. At open the committed groups are
//! read back (all but their page records, which are verified when read),
//! the volatile table is rebuilt from the persistent one's keys with
//! obsolete entries (§4.3 Recovery), and the batches the framework
//! replays from the WAL are applied again except those at or below the
//! checkpoint. If the files fail their checks, a page or table bucket
//! failed them when read since (a marker file says so), or the checkpoint
//! is below a sequence number the recovered tables hold (the WAL that
//! covered the gap may be gone), the index is rebuilt from the primary by
//! a scan.
//!
//! RAM: without persistent memory, the pages of the PKey layer live in the
//! page file, read in place through a read-only mapping as PERSEID reads
//! PM; only pages changed since the last flush (dirty) are in RAM, plus
//! up to `page_cache_mb` MiB of clean ones (parameter, default
//! [`DEFAULT_PAGE_CACHE_MB`], 0: a flush leaves none; clock eviction over
//! a queue of the clean resident pages, so that dirty pages cost nothing
//! between flushes), and a reopen reads no page (`pkey`): once the
//! database is open, a thread checks the page file's records ahead of the
//! readers (parameter `check_pages`). The page files' mappings are advised
//! onto huge pages (what a fault reads then comes 2 MiB at a time, and a
//! lookup's page costs no TLB miss). The persistent
//! validation table is a hashed table file read through a mapping
//! (`table`) plus the keys changed since it was written (the delta: a
//! small hash map of recent keys and a sorted vector of the rest, so its
//! RAM follows its length), merged into a new file once the delta
//! outgrows `merge_min_keys` plus 1/256 of the file; the flush
//! writes that file after releasing the state's lock, while writers fill
//! a new delta (`validation::MergeJob`). The index's DRAM (`memory_bytes`) is the
//! resident pages, the page table, the SKey layer, the delta and the
//! volatile table.
//!
//! Primary lookups of non-index-only queries (§4.4): every valid entry
//! names the version to read (its sequence number), so its record is
//! fetched by `strata_lsm::Db::get_versions`, which probes only the
//! component (memtable or table) whose sequence-number zone map holds it,
//! skipping every other component's Bloom filter and index, and falls
//! back to a normal lookup at the snapshot when a compaction moved it
//! away. The lookups are grouped per table and read in key order, one
//! pass per table, so a data block holding several records is read once.
//! `QueryOptions::parallelism` workers share the work through one queue;
//! results keep the newest-first order. The engine's tiered policy
//! (`Options::compaction_style`) keeps the components' sequence ranges
//! disjoint, as in the paper's tiered primary.

#![deny(clippy::indexing_slicing)]

mod file;
mod heads;
mod pkey;
mod skey;
mod table;
mod validation;
mod volatile;

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;
use strata_lsm::version::FileMetaData;

use super::def::Attrs;
use super::hits::PackBuf;
use super::strategy::{
    BuildMethod, Current, IndexStrategy, NeedsCurrent, OpenCx, QueryCx, StrategyKind, VersionSlot,
    WritePath,
};
use super::tree::{self as sortkeys, PrimaryHandle};
use super::value::{IndexValue, KeyType, Predicate};
use super::{lock, read, write, Hit, Hits, IndexStats, OpRef, QueryProfile, SyncGate};

use file::{Commit, GroupWriter, PageReader, Rec, Store};
use pkey::{Entry, Loc, PsTree};
use validation::{Validation, Verdict};

thread_local! {
    /// A sort key being built: an equality lookup's, or a written
    /// entry's (no allocation a lookup or a write). Never borrowed across
    /// a call that could build another.
    static SORT_KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most candidates validated in one batch (see `query`).
const MAX_BATCH: usize = 16;

/// The entries of the chains a query visits, newest first: one chain (an
/// equality) is walked as it is; several are merged by sequence number.
enum Chains<'t> {
    One(Option<pkey::Cursor<'t>>),
    Merge {
        cursors: Vec<pkey::Cursor<'t>>,
        /// Each cursor's next entry, taken when it is the newest.
        current: Vec<Option<pkey::EntryRef<'t>>>,
        /// (sequence number, cursor) of every cursor's current entry.
        heap: BinaryHeap<(SeqNo, usize)>,
    },
}

impl<'t> Chains<'t> {
    fn merge(mut cursors: Vec<pkey::Cursor<'t>>) -> Result<Chains<'t>> {
        let mut current = Vec::with_capacity(cursors.len());
        let mut heap = BinaryHeap::with_capacity(cursors.len());
        for (i, c) in cursors.iter_mut().enumerate() {
            let e = c.next()?;
            if let Some(e) = &e {
                heap.push((e.seq, i));
            }
            current.push(e);
        }
        Ok(Chains::Merge {
            cursors,
            current,
            heap,
        })
    }

    fn next(&mut self) -> Result<Option<pkey::EntryRef<'t>>> {
        match self {
            Chains::One(c) => match c {
                Some(c) => c.next(),
                None => Ok(None),
            },
            Chains::Merge {
                cursors,
                current,
                heap,
            } => loop {
                let Some((_, i)) = heap.pop() else {
                    return Ok(None);
                };
                let (Some(e), Some(c)) = (
                    current.get_mut(i).and_then(|e| e.take()),
                    cursors.get_mut(i),
                ) else {
                    continue;
                };
                let next = c.next()?;
                if let Some(nx) = &next {
                    heap.push((nx.seq, i));
                }
                if let Some(slot) = current.get_mut(i) {
                    *slot = next;
                }
                return Ok(Some(e));
            },
        }
    }
}

/// Default page cache budget, MiB (parameter `page_cache_mb`): none.
/// Clean pages are read in place in the mapped page file, so a resident
/// copy saves only a writer's copy of the page; a 2 MiB cache (the default
/// until session 18) held 1.7% of a 2 M index's pages and saved none of
/// its load's page checks. A file system that cannot map reads a clean
/// page back on every access: give it a budget.
pub const DEFAULT_PAGE_CACHE_MB: usize = 0;

/// Default of parameter `merge_min_keys`: the persistent table's delta
/// is merged into a new table file once it holds more than this many keys
/// plus 1/256 of the file's (`validation::MERGE_SHARE`), so it bounds the
/// delta a flush leaves in RAM: under 1 MiB at 1.3 M table keys (checked
/// by `validation::tests`); 16,384 left up to 1.5 MB there.
pub const DEFAULT_MERGE_MIN_KEYS: usize = 4_096;

/// The parameters of the strategy (see [`parse_params`]).
struct Params {
    /// The page cache's budget, bytes.
    budget: usize,
    merge_min: usize,
    /// Check the page file's records in the background after an open.
    check_ahead: bool,
}

/// The parameters: `page_cache_mb` (the page cache's budget, MiB) and
/// `merge_min_keys`, both non-negative integers, and `check_pages`:
/// `background` (the default: after an open, a thread checks every page
/// record of the file, oldest page id first, as a reader's first access
/// would, so that readers find them checked) or `on-read` (each page is
/// checked by its first reader only).
fn parse_params(params: &[(String, String)]) -> Result<Params> {
    let mut mb = DEFAULT_PAGE_CACHE_MB;
    let mut merge_min = DEFAULT_MERGE_MIN_KEYS;
    let mut check_ahead = true;
    let int = |k: &str, v: &str, max: usize| {
        v.parse::<usize>()
            .ok()
            .filter(|m| *m <= max)
            .ok_or_else(|| {
                Error::invalid(format!("{k} must be an integer from 0 to {max}, not {v:?}"))
            })
    };
    for (k, v) in params {
        match k.as_str() {
            "page_cache_mb" => mb = int(k, v, 1 << 20)?,
            "merge_min_keys" => merge_min = int(k, v, 1 << 40)?,
            "check_pages" => {
                check_ahead = match v.as_str() {
                    "background" => true,
                    "on-read" => false,
                    _ => {
                        return Err(Error::invalid(format!(
                            "check_pages must be background or on-read, not {v:?}"
                        )))
                    }
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "unknown parameter {k:?} for strategy perseid \
                     (known: page_cache_mb, merge_min_keys, check_pages)"
                )))
            }
        }
    }
    Ok(Params {
        budget: mb << 20,
        merge_min,
        check_ahead,
    })
}

/// Pages [`check_pages_ahead`] checks under one hold of the read lock (a
/// writer waits for at most this many checks).
const CHECK_CHUNK: usize = 16;

/// The thread that checks pages after an open ([`check_pages_ahead`]):
/// told to stop and joined when the index is dropped, so that nothing of
/// a closed database runs on (it may write the corruption marker).
struct Checker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checks the records of pages `ids` in the page file on a thread of its
/// own (`pkey::PsTree::check_ahead`), a few under each hold of the state's
/// read lock; stops when told to, when the file system does not map, or
/// at the end. A record that fails is left to its reader, which reports
/// it (the marker that makes the next open rebuild is written either
/// way). `None` if no thread could be started: readers check pages
/// themselves then.
fn check_pages_ahead(state: Arc<RwLock<State>>, ids: Vec<pkey::PageId>) -> Option<Checker> {
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    let run = move || {
        for chunk in ids.chunks(CHECK_CHUNK) {
            if halt.load(Relaxed) {
                return;
            }
            let st = read(&state);
            for &id in chunk {
                if let Ok(false) = st.tree.check_ahead(id) {
                    return;
                }
            }
        }
    };
    let thread = std::thread::Builder::new()
        .name("strata-perseid-check".into())
        .spawn(run)
        .ok()?;
    Some(Checker {
        stop,
        thread: Some(thread),
    })
}

/// Bytes of the exact geometry stored with each entry.
fn geom_len(ty: KeyType) -> usize {
    match ty {
        KeyType::Point => 16,
        KeyType::Rect => 32,
        _ => 0,
    }
}

fn key_code(ty: KeyType) -> u8 {
    KeyType::ALL.iter().position(|t| *t == ty).unwrap_or(0) as u8
}

/// The in-RAM state: the PS-Tree, the validation tables, and what the
/// file has.
struct State {
    tree: PsTree,
    valid: Validation,
    /// Largest rectangle half-extents indexed.
    extent: [f64; 2],
    /// Every write at or below it is reflected (replayed batches at or
    /// below it are skipped).
    applied: SeqNo,
    /// The checkpoint of the last group written.
    flushed: SeqNo,
    /// Entries in the PKey layer, live and obsolete (recorded in each
    /// Commit, so that an open need not count them).
    entries: u64,
    /// A scan build is running: records arrive out of sequence order and
    /// nothing is flushed until it ends.
    building: bool,
}

impl State {
    fn new(ty: KeyType) -> State {
        State {
            tree: PsTree::new(geom_len(ty)),
            valid: Validation::default(),
            extent: [0.0, 0.0],
            applied: 0,
            flushed: 0,
            entries: 0,
            building: false,
        }
    }

    /// Applies one committed group read from the file. `superseded`: a
    /// later group names a new table file, which replaces every Pk record
    /// before it (they are skipped).
    fn load(&mut self, ty: KeyType, g: file::GroupRead, superseded: bool) -> Result<()> {
        if g.full {
            *self = State::new(ty);
            // A full group lists every secondary key in order: one bulk
            // build of the SKey layer instead of a search per key.
            let mut keys = Vec::new();
            for r in &g.records {
                if let Rec::SKey(k, Some(p)) = r {
                    keys.push((g.key(k)?, *p));
                }
            }
            self.tree.skeys.load_all(keys);
        }
        let mut skeys = Vec::new();
        for r in &g.records {
            match r {
                Rec::PageAt(id, cap, loc) => self.tree.load_page_at(*id, *cap, *loc),
                Rec::Page(id) => {
                    return Err(Error::corruption(format!(
                        "perseid: page {id} decoded at open"
                    )))
                }
                Rec::Free(id) => self.tree.unload_page(*id),
                Rec::SKey(..) if g.full => {}
                Rec::SKey(k, p) => skeys.push((g.key(k)?, *p)),
                Rec::Pk(..) if superseded => {}
                Rec::Pk(k, e) => self.valid.load(g.key(k)?, *e),
                Rec::Table(r) => self.valid.load_table(*r),
            }
        }
        self.tree.skeys.load_batch(skeys);
        self.applied = g.commit.checkpoint;
        self.flushed = g.commit.checkpoint;
        self.entries = g.commit.entries;
        self.extent = g.commit.extent;
        Ok(())
    }

    /// Checks that every head pointer names a live page (a cheap check of
    /// the recovered state).
    fn check(&self) -> Result<()> {
        for (_, p) in self.tree.skeys.iter() {
            if !self.tree.has_page(pkey::ptr_page(p)) {
                return Err(Error::corruption(format!(
                    "perseid: a secondary key points to missing page {}",
                    pkey::ptr_page(p)
                )));
            }
        }
        Ok(())
    }

    fn live_bytes(&self) -> u64 {
        (self.tree.page_bytes() + self.tree.skeys.memory_bytes() + self.valid.memory_bytes().0)
            as u64
    }
}

pub(crate) struct Perseid {
    ty: KeyType,
    /// Shared with the thread that checks pages after an open
    /// ([`check_pages_ahead`]).
    state: Arc<RwLock<State>>,
    /// The page file; held for the whole of a flush (flushes are serial).
    /// Lock order: `store` before `state`.
    store: Mutex<Store>,
    gate: Arc<SyncGate>,
    primary: PrimaryHandle,
    /// The file failed its checks or is behind the tables: the framework
    /// rebuilds the index by a scan at open.
    rebuild: AtomicBool,
    /// Why the index was rebuilt at open (reported by `stats`).
    rebuild_reason: Mutex<Option<String>>,
    /// Obsolete entries removed by garbage collection.
    collected: AtomicU64,
    /// The page cache's budget and its reader of the page files.
    cache: (usize, Arc<PageReader>),
    /// Parameter `merge_min_keys`.
    merge_min: usize,
    /// The pages the checker thread is to check ([`Perseid::on_opened`]
    /// starts it), then the thread (`check_pages`); dropped (stopped and
    /// joined) with the index.
    checks: Mutex<(Vec<pkey::PageId>, Option<Checker>)>,
}

impl Perseid {
    /// Opens (creating if needed) the page file in `index-<id>/` and reads
    /// back its committed state (no page is read: the page cache reads
    /// them when needed). Parameters: see [`parse_params`].
    pub fn open(cx: &OpenCx<'_>) -> Result<Perseid> {
        let Params {
            budget,
            merge_min,
            check_ahead,
        } = parse_params(cx.params)?;
        let ty = cx.spec.key_type;
        let (store, recovered) = Store::open(cx.tree_opts.fs.clone(), cx.dir, key_code(ty))?;
        let reader = Arc::new(PageReader::new(cx.tree_opts.fs.clone(), cx.dir));
        let mut state = State::new(ty);
        let mut reason = None;
        match recovered {
            Ok(r) => {
                // The table file the log names is checked and the
                // volatile table rebuilt from it (§4.3 Recovery).
                let last_table = r
                    .groups
                    .iter()
                    .rposition(|g| g.records.iter().any(|r| matches!(r, Rec::Table(_))));
                let loaded = r
                    .groups
                    .into_iter()
                    .enumerate()
                    .try_for_each(|(i, g)| state.load(ty, g, last_table.is_some_and(|t| i < t)))
                    .and_then(|_| {
                        state.tree.skeys.finish_load();
                        state.check()
                    })
                    .and_then(|_| {
                        state
                            .valid
                            .finish_open(&cx.tree_opts.fs, cx.dir, key_code(ty))
                    });
                match loaded {
                    Ok(()) => {}
                    Err(e) => {
                        reason = Some(e.to_string());
                        state = State::new(ty);
                    }
                }
            }
            Err(e) => reason = Some(e.to_string()),
        }
        let rebuild = reason.is_some();
        state.tree.finish_load();
        state.tree.set_cache(budget, reader.clone());
        let ids = if check_ahead && !rebuild {
            state.tree.page_ids()
        } else {
            Vec::new()
        };
        let state = Arc::new(RwLock::new(state));
        let p = Perseid {
            ty,
            state,
            store: Mutex::new(store),
            gate: cx.gate.clone(),
            primary: cx.primary.clone(),
            rebuild: AtomicBool::new(rebuild),
            rebuild_reason: Mutex::new(reason),
            collected: AtomicU64::new(0),
            cache: (budget, reader),
            merge_min,
            checks: Mutex::new((ids, None)),
        };
        if rebuild {
            lock(&p.store).needs_full = true;
        }
        Ok(p)
    }

    /// The oldest sequence number a reader may read at (0 before the
    /// primary is open: collect nothing).
    fn horizon(&self) -> SeqNo {
        self.gate.primary_clock.get().map_or(0, |c| c().0)
    }

    fn published(&self) -> SeqNo {
        self.gate.primary_clock.get().map_or(0, |c| c().1)
    }

    /// [`IndexStrategy::flush`]'s work: the changes since the last flush as
    /// one committed group.
    fn write_group(&self) -> Result<()> {
        let mut store = lock(&self.store);
        // Pages written, with their record's offset in the group and size.
        let mut pages = Vec::new();
        // Resident pages of the group, encoded after the state's lock is
        // released (a writer changes a copy meanwhile): copying every
        // changed page under the lock held writers up for 4.5 s of a 2 M
        // upsert load (off-CPU profile).
        let mut shared = Vec::new();
        // The table file the group refers to.
        let table;
        let (mut g, commit, full, job) = {
            let mut st = write(&self.state);
            // A scan build runs, or is due (this open found the files
            // damaged): the state is not the index's; the files keep the
            // last committed one, whose checkpoint makes the next open
            // rebuild if this one does not finish.
            if st.building || self.rebuild.load(Relaxed) {
                return Ok(());
            }
            let checkpoint = st.applied.max(self.published());
            let st = &mut *st;
            let clean = st.tree.is_dirty_empty()
                && st.tree.freed.is_empty()
                && st.tree.skeys.is_clean()
                && st.valid.is_clean();
            if clean && checkpoint == st.flushed && !store.needs_full {
                return Ok(());
            }
            let full = store.wants_full(st.live_bytes());
            let mut g = GroupWriter::new(full);
            if full {
                // Evicted pages are read back from the files this group
                // replaces (removed only after it is written).
                for id in st.tree.page_ids() {
                    match st.tree.resident_page(id) {
                        Some(p) => shared.push((id, p)),
                        None => pages.push((id, g.page(id, st.tree.page(id)?))),
                    }
                }
                for (k, p) in st.tree.skeys.iter() {
                    g.skey(k, Some(p));
                }
                st.tree.skeys.drain_changes(|_, _| {});
            } else {
                let ids = st.tree.take_dirty();
                for &id in &ids {
                    if let Some(p) = st.tree.resident_page(id) {
                        shared.push((id, p));
                        continue;
                    }
                    match st.tree.page(id) {
                        Ok(p) => pages.push((id, g.page(id, p))),
                        Err(e) => {
                            // Nothing is written: the pages stay changed.
                            for &id in &ids {
                                st.tree.mark_dirty(id);
                            }
                            return Err(e);
                        }
                    }
                }
                for &id in &st.tree.freed {
                    g.free(id);
                }
                st.tree.skeys.drain_changes(|k, p| g.skey(k, p));
            }
            // A full group, or a delta grown past its share of the table,
            // merges the persistent table into a new file (durable before
            // the group that names it is written), after the state's lock
            // is released: writers go on meanwhile. Nothing below fails
            // before the job is finished or aborted.
            let job = (full || st.valid.wants_merge(self.merge_min))
                .then(|| (store.new_table(), st.valid.begin_merge()));
            table = match &job {
                Some((n, _)) => Some(*n),
                None => st.valid.table().map(|r| r.number),
            };
            // The Pk records of the keys changed since the last group (none
            // if a merge began: its table holds them).
            st.valid.drain_changes(|k, e| g.pk(k, e));
            st.tree.take_dirty();
            st.tree.freed.clear();
            st.applied = checkpoint;
            st.flushed = checkpoint;
            let commit = Commit {
                checkpoint,
                extent: st.extent,
                entries: st.entries,
            };
            (g, commit, full, job)
        };
        g.reserve_pages(
            shared.len(),
            shared
                .iter()
                .map(|(_, p)| file::page_record_len(p.data.len()))
                .sum(),
        );
        for (id, p) in shared {
            pages.push((id, g.page(id, p.view())));
        }
        if let Some((n, job)) = job {
            let written = job.write(store.fs(), store.dir(), n, key_code(self.ty));
            let mut st = write(&self.state);
            match written {
                Ok(t) => {
                    store.table_written(n, t.r.len);
                    g.table(&t.r);
                    st.valid.finish_merge(t);
                }
                Err(e) => {
                    // The state's changes since the last group were taken
                    // for this one: the next group writes everything.
                    st.valid.abort_merge();
                    store.needs_full = true;
                    return Err(e);
                }
            }
        }
        let group = g.commit(&commit);
        // The checkpoint may cover batches appended to the WAL after the
        // primary's own sync: nothing durable here may be newer than the
        // durable WAL.
        if let Some(h) = self.primary.get() {
            h.sync_wal()?;
        }
        let (file, start) = store.write_group(&group, full)?;
        {
            // The pages written are clean now (unless changed since): the
            // cache may evict them.
            let mut st = write(&self.state);
            for (id, (offset, len)) in pages {
                st.tree.written(
                    id,
                    Loc {
                        file,
                        offset: start + offset,
                        len,
                    },
                );
            }
            st.tree.evict();
        }
        store.remove_tables_except(table);
        let live = store.retire();
        self.cache.1.retain(&live);
        Ok(())
    }

    /// [`IndexStrategy::apply`]'s work.
    fn apply_ops(&self, ops: &[OpRef<'_>], _: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        let horizon = self.horizon();
        let mut st = write(&self.state);
        if self.damaged(&st) {
            return Ok(());
        }
        let State {
            tree,
            valid,
            extent,
            applied,
            building,
            entries,
            ..
        } = &mut *st;
        let (mut added, mut collected) = (0, 0);
        for &(seq, pk, new) in ops {
            if !*building && seq <= *applied {
                continue;
            }
            if seq > pkey::MAX_SEQ {
                return Err(Error::invalid(format!(
                    "perseid: sequence number {seq} exceeds the entry format's {}",
                    pkey::MAX_SEQ
                )));
            }
            let attr = new.and_then(|raw| attrs.counted(raw));
            valid.write(pk, seq, attr.is_some())?;
            if let Some(v) = attr {
                if let IndexValue::Rect(r) = v {
                    extent[0] = extent[0].max((r[2] - r[0]) / 2.0);
                    extent[1] = extent[1].max((r[3] - r[1]) / 2.0);
                }
                let entry = Entry {
                    seq,
                    obsolete: false,
                    pk: crate::index::inline_key::InlineKey::new(pk),
                    geom: sortkeys::geometry(&v),
                };
                // The thread's sort key buffer (no allocation a write).
                let s = SORT_KEY.with_borrow_mut(|k| {
                    k.clear();
                    sortkeys::sort_key_into(&v, k);
                    tree.insert(k, entry, valid, horizon)
                })?;
                added += 1;
                collected += s.collected;
            }
            *applied = (*applied).max(seq);
        }
        *entries = (*entries + added).saturating_sub(collected);
        tree.evict();
        drop(st);
        self.collected.fetch_add(collected, Relaxed);
        Ok(())
    }

    /// The index gave up its state at run time (its files failed a check
    /// when read, see [`Perseid::abandon_if_damaged`]): it is neither
    /// maintained nor queried until the next open rebuilds it. (At open the
    /// same flag means "rebuild by this open's scan", which sets
    /// `building`.)
    fn damaged(&self, st: &State) -> bool {
        self.rebuild.load(Relaxed) && !st.building
    }

    /// `r`, unless it is a corruption error (a page or table bucket failed
    /// its checks when read): then the index gives up its state and `Ok`.
    /// During a WAL replay at open it is rebuilt by this open's scan, as
    /// when the files fail their checks at open; later, by the next open.
    fn abandon_if_damaged(&self, r: Result<()>) -> Result<()> {
        match r {
            Err(e) if e.is_corruption() => {
                lock(&self.rebuild_reason).get_or_insert_with(|| e.to_string());
                lock(&self.store).needs_full = true;
                self.rebuild.store(true, Relaxed);
                Ok(())
            }
            r => r,
        }
    }
}

/// What [`Perseid::collect`] found.
struct Collected {
    /// The sequence number it validated at.
    at: SeqNo,
    /// An index-only answer's keys.
    packed: Option<(PackBuf, Vec<crate::index::hits::Row>)>,
    /// Otherwise the valid candidates, keys and versions.
    found: Vec<(Vec<u8>, SeqNo)>,
    validated: u64,
    stale: u64,
    exact: u64,
    /// The page cache went over its budget.
    evict: bool,
}

impl Perseid {
    /// The candidates of `cx` in `st`, newest first, validated at `at`:
    /// the first `limit` valid ones, packed for an index-only answer, else
    /// listed. A candidate newer than `at` is looked up in the primary at
    /// `at` if `pinned` (a snapshot registered at `at` keeps its version);
    /// otherwise the answer is abandoned (`None`).
    fn collect(
        &self,
        cx: &QueryCx<'_>,
        st: &State,
        at: SeqNo,
        pinned: bool,
    ) -> Result<Option<Collected>> {
        let (def, view, opts) = (cx.def, cx.view, cx.opts);
        let limit = opts.limit.unwrap_or(usize::MAX);
        let mut found: Vec<(Vec<u8>, SeqNo)> = Vec::new();
        // Index-only answers are packed as they are found (one buffer,
        // no allocation per key).
        let mut packed = opts
            .keys_only
            .then(|| PackBuf::with_capacity(limit.min(64) * 32));
        let mut rows = Vec::with_capacity(if opts.keys_only { limit.min(64) } else { 0 });
        let (mut validated, mut stale, mut exact) = (0u64, 0u64, 0u64);
        let mut evict = false;
        if limit > 0 {
            if self.damaged(st) {
                let why = lock(&self.rebuild_reason).clone().unwrap_or_default();
                return Err(Error::corruption(format!(
                    "index {}: {why}; the index is rebuilt when the database is next opened",
                    def.spec.name
                )));
            }
            let tree = &st.tree;
            let mut chains = match cx.pred {
                // An equality is one chain, found by hash (sort keys are
                // prefix-free: the range of one key holds only it).
                Predicate::Eq(v) if !v.key_type().is_spatial() => {
                    Chains::One(SORT_KEY.with_borrow_mut(|k| {
                        k.clear();
                        sortkeys::sort_key_into(v, k);
                        tree.cursor_of(k)
                    })?)
                }
                _ => {
                    let mut cursors = Vec::new();
                    for (from, to) in sortkeys::key_ranges(cx.pred, st.extent) {
                        for (_, head) in tree.skeys.range(&from, to.as_deref()) {
                            cursors.push(tree.cursor(head));
                        }
                    }
                    Chains::merge(cursors)?
                }
            };
            // Candidates are validated in small batches: their volatile
            // slots are prefetched as the walk finds them, so that the
            // cache misses of a batch overlap each other and the walk
            // (one random slot per entry dominated the profile of an
            // index-only top-K lookup).
            // (A batch on the stack, each candidate with its key's hash.)
            let mut batch = [pkey::Candidate::EMPTY; MAX_BATCH];
            let mut n = 0usize;
            'outer: loop {
                let mut len = 0;
                // A few more than the answer lacks: a stale candidate
                // among them would otherwise cost another round of
                // misses (about one candidate in nine is stale after
                // uniform upserts); the extra ones are only touched.
                let lack = limit.saturating_sub(n);
                let want = lack.saturating_add(lack / 4 + 1).clamp(1, MAX_BATCH);
                if let (Chains::One(Some(c)), false) = (&mut chains, self.ty.is_spatial()) {
                    // An equality's one chain, walked and filtered in one
                    // loop (the loop below then finds it exhausted).
                    let out = batch.get_mut(..want).unwrap_or_default();
                    len = c.fill(at, out, |pk| {
                        let h = table::key_hash(pk);
                        st.valid.prefetch(h);
                        h
                    })?;
                }
                while len < want {
                    let Some(e) = chains.next()? else { break };
                    if e.seq > at || e.obsolete {
                        continue;
                    }
                    if self.ty.is_spatial() && !sortkeys::entry_matches(self.ty, cx.pred, e.geom)? {
                        continue;
                    }
                    if let Some(b) = batch.get_mut(len) {
                        let hash = table::key_hash(e.pk);
                        st.valid.prefetch(hash);
                        *b = pkey::Candidate {
                            pk: e.pk,
                            seq: e.seq,
                            hash,
                        };
                        len += 1;
                    }
                }
                let batch = batch.get(..len).unwrap_or_default();
                if batch.is_empty() {
                    break;
                }
                for e in batch {
                    validated += 1;
                    let ok = match st.valid.check_hashed(e.hash, e.pk, e.seq, at) {
                        Verdict::Valid => true,
                        Verdict::Stale | Verdict::Collectable => false,
                        Verdict::Newer if !pinned => return Ok(None),
                        Verdict::Newer => {
                            exact += 1;
                            let f = (view.fetch)(&[e.pk], at)?;
                            matches!(f.first(), Some(Some((s, _))) if *s == e.seq)
                        }
                    };
                    if !ok {
                        stale += 1;
                        continue;
                    }
                    n = match &mut packed {
                        Some(p) => {
                            rows.push(p.push(e.pk, None, e.seq));
                            rows.len()
                        }
                        None => {
                            found.push((e.pk.to_vec(), e.seq));
                            found.len()
                        }
                    };
                    if n >= limit {
                        break 'outer;
                    }
                }
            }
            evict = tree.over_budget();
        }
        Ok(Some(Collected {
            at,
            packed: packed.map(|p| (p, rows)),
            found,
            validated,
            stale,
            exact,
            evict,
        }))
    }
}

impl IndexStrategy for Perseid {
    fn kind(&self) -> StrategyKind {
        StrategyKind::Perseid
    }

    fn write_path(&self) -> WritePath {
        WritePath::Sync
    }

    fn needs_current(&self) -> NeedsCurrent {
        NeedsCurrent::No
    }

    /// Blind maintenance (Algorithm 1 and §4.3 Insert): every operation
    /// updates the validation tables; a put with an attribute appends its
    /// entry. Operations at or below the state's checkpoint (replayed from
    /// the WAL, already in the file) are skipped.
    /// A page or table bucket that fails its checks here does not fail the
    /// write: the index gives up its state ([`Perseid::damaged`]) and is
    /// rebuilt at the next open (at this one during a WAL replay).
    fn apply(&self, ops: &[OpRef<'_>], current: &Current<'_>, attrs: &Attrs<'_>) -> Result<()> {
        self.abandon_if_damaged(self.apply_ops(ops, current, attrs))
    }

    /// A ready index whose file failed its checks, or whose checkpoint is
    /// below the newest sequence number in the recovered tables, is
    /// rebuilt at open.
    fn on_recover(
        &self,
        files: &[(usize, Arc<FileMetaData>)],
        ready: bool,
    ) -> Result<Option<VersionSlot>> {
        let newest = files.iter().map(|(_, f)| f.largest_seq).max().unwrap_or(0);
        let applied = read(&self.state).applied;
        if ready && applied < newest {
            self.rebuild.store(true, Relaxed);
            lock(&self.rebuild_reason).get_or_insert_with(|| {
                format!(
                    "perseid: the page file's checkpoint (sequence {applied}) is behind \
                     the tables (sequence {newest})"
                )
            });
        }
        Ok(None)
    }

    fn build_method(&self) -> BuildMethod {
        BuildMethod::Scan
    }

    fn rebuilt_at_open(&self) -> bool {
        self.rebuild.load(Relaxed)
    }

    /// Starts the checker thread (`check_pages`), which reads every page
    /// no reader has yet: after the open, not beside it (on 2 cores a
    /// thread reading the page file during the open slowed the open from
    /// 18–21 ms to 23–40 at 2 M records).
    fn on_opened(&self) {
        let mut checks = lock(&self.checks);
        let ids = std::mem::take(&mut checks.0);
        if !ids.is_empty() && checks.1.is_none() {
            checks.1 = check_pages_ahead(self.state.clone(), ids);
        }
    }

    fn clear(&self) -> Result<()> {
        // Lock order: the store before the state (as `flush`), never both
        // the other way round.
        let mut store = lock(&self.store);
        let mut st = write(&self.state);
        *st = State::new(self.ty);
        st.tree.set_cache(self.cache.0, self.cache.1.clone());
        st.building = true;
        store.needs_full = true;
        Ok(())
    }

    /// Sorts every chain (the scan applied records out of order), then
    /// writes the whole state as a full group.
    fn after_build(&self) -> Result<()> {
        {
            let mut st = write(&self.state);
            if st.building {
                st.tree.reorganize()?;
                st.building = false;
            }
        }
        lock(&self.store).needs_full = true;
        self.rebuild.store(false, Relaxed);
        self.flush()
    }

    fn has_own_files(&self) -> bool {
        true
    }

    /// Writes the changes since the last flush as one committed group (see
    /// the module doc). Nothing is written while a scan build runs.
    ///
    /// A page or table bucket that fails its checks when read here (open
    /// reads neither; the flush at the end of a WAL replay may be the
    /// first to) does not fail the primary's flush: the group is not
    /// written, nothing more is, and the index is rebuilt by a scan —
    /// at this open if the database is opening, else at the next one (the
    /// committed checkpoint is then behind the tables).
    fn flush(&self) -> Result<()> {
        self.abandon_if_damaged(self.write_group())
    }

    /// Reads the primary only at its own snapshot, through `fetch`.
    fn pins_own_snapshot(&self) -> bool {
        true
    }

    /// Candidates from the PS-Tree at a snapshot taken under the sync
    /// guard, newest first across the chains of every matching secondary
    /// key, validated by the volatile table (a point lookup in the primary
    /// when it reports a write newer than the snapshot), then the records
    /// of the first `limit` valid ones fetched at that snapshot. An
    /// index-only answer holds the structure instead of registering the
    /// snapshot ([`QueryCx::peek_with`]).
    fn query(&self, cx: &QueryCx<'_>, profile: &mut QueryProfile) -> Result<Hits> {
        let (def, view, opts) = (cx.def, cx.view, cx.opts);
        // An index-only answer reads nothing of the primary (unless a
        // candidate is newer than its snapshot, which a structure held
        // since the snapshot was read cannot have): it holds the
        // structure from the sequence number it reads on and registers no
        // snapshot. Otherwise, and if that fails, at a pinned snapshot.
        let peeked = match opts.keys_only.then(|| cx.peek_with(|| read(&self.state))) {
            Some(Some((at, st))) => self.collect(cx, &st, at, false)?,
            _ => None,
        };
        let (snap, c) = match peeked {
            Some(c) => (None, c),
            None => {
                let (snap, ()) = cx.pin_with(|| ());
                let st = read(&self.state);
                let c = self.collect(cx, &st, snap.sequence(), true)?;
                let c = c.ok_or_else(|| Error::corruption("perseid: pinned lookup declined"))?;
                (Some(snap), c)
            }
        };
        if c.evict {
            // Pages this query read back left the cache over its budget:
            // evict unless a writer holds the structure (it evicts then).
            if let Ok(mut st) = self.state.try_write() {
                st.tree.evict();
            }
        }
        def.counters.validations.fetch_add(c.validated, Relaxed);
        // (Mostly zero: no locked add then.)
        if c.stale > 0 {
            def.counters.failed.fetch_add(c.stale, Relaxed);
        }
        if c.exact > 0 {
            def.counters.exact.fetch_add(c.exact, Relaxed);
        }
        profile.candidates += c.validated;
        profile.stale += c.stale;
        if let Some((p, rows)) = c.packed {
            return Ok(p.into_hits(rows));
        }
        // Each validated entry names the version to read: the zone maps
        // send each lookup to the one component holding it (§4.4); each
        // table reads its lookups in one key-sorted pass, and workers pull
        // the work from one queue. (At the pinned snapshot: records are
        // read only on that path.)
        let (at, found) = (c.at, c.found);
        let reqs: Vec<(&[u8], SeqNo)> = found.iter().map(|(k, s)| (k.as_slice(), *s)).collect();
        let before = (view.data_blocks_read)();
        let (fetched, zone) = (view.fetch_versions)(&reqs, at, opts.lookup_threads(reqs.len()))?;
        profile.data_blocks_read += (view.data_blocks_read)().saturating_sub(before);
        profile.components_scanned += zone.components_probed;
        drop(snap);
        let mut hits = Vec::with_capacity(found.len());
        for ((key, seq), f) in found.into_iter().zip(fetched) {
            match f {
                Some((s, value)) if s == seq => hits.push(Hit {
                    key,
                    value: Some(value),
                    seq,
                }),
                other => {
                    return Err(Error::corruption(format!(
                        "perseid index {:?} validated key {:?} at seq {seq}, the data has {:?}",
                        def.spec.name,
                        String::from_utf8_lossy(&key),
                        other.map(|(s, _)| s)
                    )))
                }
            }
        }
        Ok(hits.into())
    }

    fn stats(&self, _slot: Option<&VersionSlot>, s: &mut IndexStats) {
        let st = read(&self.state);
        let (persistent, volatile) = st.valid.memory_bytes();
        s.memory_bytes = (st.tree.resident_bytes()
            + st.tree.slot_bytes()
            + st.tree.skeys.memory_bytes()
            + persistent
            + volatile) as u64;
        let c = st.tree.cache_stats();
        s.page_cache = Some(super::PageCacheStats {
            hits: c.hits,
            misses: c.misses,
            evictions: c.evictions,
            resident_bytes: c.resident_bytes,
            budget_bytes: c.budget_bytes,
        });
        s.global_entries = st.entries;
        drop(st);
        s.repaired = self.collected.load(Relaxed);
        let store = lock(&self.store);
        s.disk_bytes = store.file_bytes() + store.table_bytes();
        drop(store);
        s.rebuilt_at_open = lock(&self.rebuild_reason).clone();
    }
}
