//! The database: ties the WAL, memtables, versions, caches and background
//! threads together behind the public [`Db`] API.
//!
//! Locks, always taken in this order: `versions` (installs, manifest I/O)
//! → `state` (memtables, current version, writer queue) → `log` (the WAL
//! writer). Readers take `state` only, to copy three `Arc`s. A guard an
//! extension returns from [`crate::hooks::EngineHooks::before_batch`] comes
//! before `state`: a write-group leader takes `state` while holding it;
//! nobody may take it while holding `state`, `versions` or `log`. The lock
//! of the release signal ([`crate::version::ReleaseSignal`], raised when a
//! version is dropped) is a leaf, taken under any of these.
//!
//! Who waits for what: a queued writer on its own condition variable
//! (`write::Writer`), the flush thread on `flush_cv`, the compaction thread
//! on `compact_cv`, stalled writers and `flush` / `wait_for_compactions` on
//! `bg_done`, the obsolete-file thread on the release signal. A write that
//! neither freezes a memtable nor hands the queue to a waiting writer wakes
//! nobody.

mod background;
pub mod iter;
#[cfg(test)]
mod probe_tests;
mod write;

use crate::read::multi_get_components;
pub use crate::read::Versioned;

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::batch::WriteBatch;
use crate::cache::{BlockCache, TableCache};
use crate::compaction::{key_range, Compaction, CompactionPicker};
use crate::error::{Error, IoContext, Result};
use crate::filename::{self, FileKind};
use crate::hooks::{EngineHandle, EngineHooks, InstallReason};
use crate::host::{HostedEngine, HostedSet};
use crate::io::{FileLock, Fs, LockError, RealFs};
use crate::iter::merging::MergingIterator;
use crate::iter::InternalIterator;
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{MemGet, MemTable};
use crate::merge;
use crate::options::{Options, WriteOptions};
use crate::sstable::{BlockHandle, Found, TableReadOptions};
use crate::stats::{Counters, LevelStats, ReadPurpose, Stats};
use crate::version::{ReleaseSignal, Version, VersionEdit, VersionSet};
use crate::wal::{LogReader, LogWriter};
use iter::DbIterator;

pub(crate) use crate::sync::lock;

/// State guarded by `DbInner::state`.
pub(crate) struct State {
    pub mem: Arc<MemTable>,
    /// Frozen memtables, oldest first.
    pub imm: VecDeque<Arc<MemTable>>,
    pub current: Arc<Version>,
    pub writers: VecDeque<Arc<write::Writer>>,
    /// The last write leader's queue entry, kept for the next write (no
    /// allocation per uncontended write); see `write::Writer::reuse`.
    pub spare_writer: Option<Arc<write::Writer>>,
    pub bg_error: Option<Error>,
    pub shutting_down: bool,
    /// A manual compaction is running; the background thread stands aside.
    pub manual_compaction: bool,
    /// Table files being written (not yet in any version).
    pub pending_outputs: HashSet<u64>,
}

pub(crate) struct DbInner {
    pub dir: PathBuf,
    pub opts: Options,
    pub counters: Arc<Counters>,
    pub block_cache: Option<Arc<BlockCache>>,
    pub tables: Arc<TableCache>,
    pub picker: Box<dyn CompactionPicker>,
    pub versions: Mutex<VersionSet>,
    pub state: Mutex<State>,
    /// With `state`: signalled when a memtable is frozen (and at shutdown);
    /// the flush thread waits on it.
    pub flush_cv: Condvar,
    /// With `state`: signalled when a version is installed, a manual
    /// compaction ends (and at shutdown); the compaction thread waits on it.
    pub compact_cv: Condvar,
    /// With `state`: signalled when background work installs a version or
    /// fails (and at shutdown): what stalled writers, `flush` and
    /// `wait_for_compactions` wait for. Queued writers wait on their own
    /// condition variable (`write::Writer`); no write signals any of these.
    pub bg_done: Condvar,
    /// Raised when a version dies; the obsolete-file deleter waits on it.
    pub released: Arc<ReleaseSignal>,
    /// Highest sequence number visible to readers.
    pub last_sequence: Arc<AtomicU64>,
    pub next_file: Arc<AtomicU64>,
    pub log: Arc<Mutex<Option<LogWriter>>>,
    /// Live snapshots: sequence number → count.
    pub snapshots: Arc<Mutex<crate::read::SnapshotList>>,
    /// Held by whoever runs a compaction (background or manual), taken
    /// through [`DbInner::compaction_turn`].
    pub compaction_lock: Mutex<()>,
    /// Compaction turns (begun, ended), each counted under
    /// `compaction_lock`: [`Db::wait_for_running_compaction`] waits for the
    /// turn running at its call only, not for the lock, which the
    /// background thread takes again at once for its next compaction.
    pub compaction_turns: Mutex<(u64, u64)>,
    /// Signalled when a compaction turn ends.
    pub compaction_turn_ended: Condvar,
    /// Flushed memtables that readers may still hold: freed here (by the
    /// flush or obsolete-file thread) once this list is their only holder,
    /// so that no reader or writer pays for freeing a memtable's entries.
    pub retired_mems: Mutex<Vec<Arc<MemTable>>>,
    /// Held for the whole of `flush_one` (taken before `versions`).
    pub flush_lock: Mutex<()>,
    /// The extensions (`Options::hooks`).
    pub hooks: Vec<Arc<dyn EngineHooks>>,
    /// The engines this one hosts (see [`crate::host`]).
    pub hosted: Arc<HostedSet>,
    /// Hosted engine: the host's set (this engine is a member of it).
    pub host: Option<Arc<HostedSet>>,
    /// Hosted engine: serializes writes and memtable freezes (there is no
    /// writer queue).
    pub hosted_write: Mutex<()>,
    /// The write leader's list of the memtables a batch shadows (newest
    /// first), kept between writes for its allocation: taken (after
    /// `state`), filled and cleared by the write leader only, one at a
    /// time, so never contended.
    pub batch_mems: Mutex<Vec<Arc<MemTable>>>,
    /// Hosted engine: L0 pressure as of the last install.
    pub l0_now: AtomicUsize,
    _lock_file: Box<dyn FileLock>,
}

/// An open database. Dropping it stops the background threads and closes
/// the files; everything acknowledged is in the WAL or in tables.
pub struct Db {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A consistent read view: reads through it see the database as of its
/// creation. Compaction keeps every version it can see.
///
/// Clones share one registration (an `Arc`): cloning costs no lock.
#[derive(Clone)]
pub struct Snapshot {
    reg: Arc<Registration>,
}

/// One registration in the live-snapshot list, removed when dropped.
struct Registration {
    inner: Arc<DbInner>,
    seq: SeqNo,
}

/// One entry of a data block read by handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEntry {
    /// The user key.
    pub user_key: Vec<u8>,
    /// Sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: ValueKind,
    /// The value (empty for a tombstone).
    pub value: Vec<u8>,
}

impl Db {
    /// Opens (or creates, per `opts`) the database in `path`, replaying the
    /// WAL of an unclean shutdown.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = path.as_ref().to_path_buf();
        let fs = opts.fs.clone();
        if !fs.is_dir(&dir) {
            if !opts.create_if_missing {
                return Err(Error::NotFound(format!(
                    "database directory {}",
                    dir.display()
                )));
            }
            fs.create_dir_all(&dir).path_ctx("create directory", &dir)?;
            // The new directory's own name (for nested index trees, too).
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent).path_ctx("fsync directory", parent)?;
            }
        }
        let lock_path = filename::lock_file(&dir);
        let lock_file = match fs.lock(&lock_path) {
            Ok(l) => l,
            Err(LockError::WouldBlock) => {
                return Err(Error::Locked(format!(
                    "{} is in use by another handle or process",
                    dir.display()
                )))
            }
            Err(LockError::Io(e)) => {
                return Err(Error::io(format!("lock {}", lock_path.display()), e))
            }
        };
        let counters = Arc::new(Counters::default());
        let block_cache = (opts.block_cache_bytes > 0).then(|| {
            Arc::new(BlockCache::with_doorkeeper(
                opts.block_cache_bytes,
                opts.block_cache_doorkeeper,
            ))
        });
        let tables = Arc::new(TableCache::new(
            dir.clone(),
            opts.max_open_files,
            TableReadOptions {
                block_cache: block_cache.clone(),
                counters: counters.clone(),
                direct_io: opts.direct_io,
                mmap_reads: opts.mmap_reads,
                fs: fs.clone(),
            },
        ));
        let hooks = opts.hooks.clone();
        // Shared with extensions (`EngineHandle`), never `inner` itself: an
        // extension's thread must never hold the last reference to the
        // database.
        let snapshots = Arc::new(Mutex::new(crate::read::SnapshotList::default()));
        let last_sequence = Arc::new(AtomicU64::new(0));
        // Empty until the new WAL exists (after recovery).
        let wal = Arc::new(Mutex::new(None));
        let hosted = Arc::new(HostedSet::default());
        let host = match &opts.host {
            None => None,
            Some(h) => {
                let h = h.get().ok_or_else(|| {
                    Error::invalid(format!(
                        "hosted engine {}: its host has not attached its extensions yet",
                        dir.display()
                    ))
                })?;
                if opts.hooks.iter().any(|h| h.wants_batches()) {
                    return Err(Error::invalid(
                        "a hosted engine cannot have extensions that see batches",
                    ));
                }
                Some(h.hosted.clone())
            }
        };
        let handle = EngineHandle {
            tables: tables.clone(),
            snapshots: snapshots.clone(),
            last_sequence: last_sequence.clone(),
            log: wal.clone(),
            hosted: hosted.clone(),
        };
        for h in &hooks {
            h.attach(&handle);
        }
        let side = || hooks.iter().find_map(|h| h.memtable_side());
        let version_exts: Vec<Arc<dyn crate::version::VersionExtension>> = hooks
            .iter()
            .map(|h| {
                Arc::new(crate::hooks::AsVersionExtension(h.clone()))
                    as Arc<dyn crate::version::VersionExtension>
            })
            .collect();
        if VersionSet::exists(&*fs, &dir) {
            if opts.error_if_exists {
                return Err(Error::invalid(format!(
                    "database {} already exists",
                    dir.display()
                )));
            }
        } else {
            if !opts.create_if_missing {
                return Err(Error::NotFound(format!("no database in {}", dir.display())));
            }
            VersionSet::create(&fs, &dir, opts.num_levels, version_exts.clone())?;
        }
        let recovered = VersionSet::recover(&fs, &dir, opts.num_levels, version_exts.clone())?;
        let mut versions = recovered.versions;
        let released = Arc::new(ReleaseSignal::new());
        versions.set_release_signal(released.clone());
        let mut last_seq = recovered.last_sequence;
        versions.write_fresh_manifest(last_seq)?;
        let current = versions.current();
        let next_file = versions.next_file_counter();

        // Replay the WALs that may hold writes not yet in a table.
        let mut logs: Vec<u64> = fs
            .list_dir(&dir)
            .path_ctx("list", &dir)?
            .into_iter()
            .filter_map(|name| match name.to_str().and_then(filename::parse) {
                Some(FileKind::Log(n)) if n >= recovered.log_number => Some(n),
                _ => None,
            })
            .collect();
        logs.sort_unstable();
        let new_mem = |log: u64| memtable_for(&opts, log, side());
        let mut recovered_mems = vec![new_mem(0)];
        // Extensions see every replayed batch again (`BatchContext::
        // recovering`), with the replayed memtables and the recovered
        // version as the components it shadows.
        let batch_hooks: Vec<Arc<dyn EngineHooks>> = hooks
            .iter()
            .filter(|h| h.wants_batches())
            .cloned()
            .collect();
        for &n in &logs {
            let path = filename::log_file(&dir, n);
            let file = fs.open_sequential(&path).path_ctx("open WAL", &path)?;
            let mut reader = LogReader::new(file, path.clone(), opts.wal_recovery);
            while let Some(rec) = reader.read_record()? {
                let batch = WriteBatch::from_data(rec).map_err(|e| e.with_location(&path, None))?;
                if batch.is_empty() {
                    continue;
                }
                let mem = recovered_mems.last().cloned().unwrap_or_else(|| new_mem(0));
                if batch_hooks.is_empty() {
                    write::insert_into(&mem, &batch, None)?;
                } else {
                    let mems: Vec<Arc<MemTable>> = recovered_mems.iter().rev().cloned().collect();
                    let cx = crate::hooks::BatchContext {
                        tables: &tables,
                        merge_operator: opts.merge_operator.as_ref(),
                        mems: &mems,
                        version: &current,
                        recovering: true,
                    };
                    // The hooks return no guard during replay (nothing else runs).
                    let mut guards = write::Guards::default();
                    write::insert_with_hooks(&batch_hooks, &mem, &batch, &cx, &mut guards)?;
                }
                last_seq = last_seq.max(batch.sequence() + batch.len() as u64 - 1);
                if mem.approximate_bytes() >= opts.memtable_size {
                    recovered_mems.push(new_mem(0));
                }
            }
        }

        let log_number = next_file.fetch_add(1, Ordering::SeqCst);
        let log_path = filename::log_file(&dir, log_number);
        let log_file = fs
            .create_log(&log_path, opts.wal && opts.wal_mmap)
            .path_ctx("create WAL", &log_path)?;
        let log = LogWriter::new(log_file, log_path, 0).sync_dir_first(fs.clone());
        let mem = new_mem(log_number);

        let inner = Arc::new(DbInner {
            dir: dir.clone(),
            picker: crate::compaction::picker_for(&opts),
            opts,
            counters,
            block_cache,
            tables,
            versions: Mutex::new(versions),
            state: Mutex::new(State {
                mem,
                imm: VecDeque::new(),
                current,
                writers: VecDeque::new(),
                spare_writer: None,
                bg_error: None,
                shutting_down: false,
                manual_compaction: false,
                pending_outputs: HashSet::new(),
            }),
            flush_cv: Condvar::new(),
            compact_cv: Condvar::new(),
            bg_done: Condvar::new(),
            released,
            last_sequence: {
                last_sequence.store(last_seq, Ordering::SeqCst);
                last_sequence
            },
            next_file,
            log: {
                *lock(&wal) = Some(log);
                wal
            },
            snapshots,
            compaction_lock: Mutex::new(()),
            compaction_turns: Mutex::new((0, 0)),
            compaction_turn_ended: Condvar::new(),
            retired_mems: Mutex::new(Vec::new()),
            flush_lock: Mutex::new(()),
            hooks,
            hosted,
            host,
            hosted_write: Mutex::new(()),
            batch_mems: Mutex::new(Vec::new()),
            l0_now: AtomicUsize::new(0),
            _lock_file: lock_file,
        });

        // Recovered writes become L0 tables in one edit that also retires
        // the replayed WALs, so a crash here simply replays them again.
        let mut edit = VersionEdit {
            log_number: Some(log_number),
            ..VersionEdit::default()
        };
        for mem in &recovered_mems {
            if let Some(meta) = inner.write_level0_table(mem)? {
                edit.new_files.push((0, meta));
            }
        }
        // What the replay put into hosted memtables becomes durable with
        // the tables that retire the replayed WALs.
        inner.hosted.freeze_all();
        inner.notify_flush()?;
        inner.install(edit, InstallReason::Flush, |_| {})?;
        inner.delete_obsolete_files();

        let db = Db {
            inner: inner.clone(),
            threads: Mutex::new(Vec::new()),
        };
        if inner.opts.background_work {
            let a = inner.clone();
            let b = inner.clone();
            let c = inner.clone();
            let mut threads = lock(&db.threads);
            threads.push(
                std::thread::Builder::new()
                    .name("strata-flush".into())
                    .spawn(move || a.flush_loop())
                    .ctx(|| "spawn flush thread".into())?,
            );
            threads.push(
                std::thread::Builder::new()
                    .name("strata-compact".into())
                    .spawn(move || b.compaction_loop())
                    .ctx(|| "spawn compaction thread".into())?,
            );
            threads.push(
                std::thread::Builder::new()
                    .name("strata-obsolete".into())
                    .spawn(move || c.obsolete_loop())
                    .ctx(|| "spawn obsolete-file thread".into())?,
            );
        } else {
            inner.run_inline_work()?;
        }
        if let Some(host) = &inner.host {
            inner.l0_now.store(
                inner.picker.l0_pressure(&lock(&inner.state).current),
                Ordering::SeqCst,
            );
            let me: std::sync::Weak<dyn HostedEngine> = Arc::downgrade(&inner) as _;
            host.register(me);
            host.refresh_l0();
        }
        Ok(db)
    }

    /// Removes every database file in `path` and then the directory itself
    /// if it is empty. Fails with `Error::Locked` if the database is open.
    pub fn destroy(path: impl AsRef<Path>) -> Result<()> {
        Db::destroy_with(path, &RealFs)
    }

    /// [`Db::destroy`] through the file system `fs`.
    pub fn destroy_with(path: impl AsRef<Path>, fs: &dyn Fs) -> Result<()> {
        let dir = path.as_ref();
        if !fs.exists(dir) {
            return Ok(());
        }
        let lock_path = filename::lock_file(dir);
        let _held = if fs.exists(&lock_path) {
            match fs.lock(&lock_path) {
                Ok(l) => Some(l),
                Err(LockError::WouldBlock) => {
                    return Err(Error::Locked(format!("{} is open", dir.display())))
                }
                Err(LockError::Io(e)) => {
                    return Err(Error::io(format!("open {}", lock_path.display()), e))
                }
            }
        } else {
            None
        };
        for name in fs.list_dir(dir).path_ctx("list", dir)? {
            let name = name.to_str().unwrap_or("");
            if filename::parse(name).is_some() {
                let p = dir.join(name);
                fs.remove_file(&p).path_ctx("remove", &p)?;
            }
        }
        let _ = fs.remove_dir(dir);
        Ok(())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The options the database was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Writes `key` → `value` with default [`WriteOptions`]. Errors: oversized
    /// key or value (`Error::InvalidArgument`), I/O, or an earlier background
    /// error that stopped writes.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_opt(key, value, WriteOptions::default())
    }

    /// [`Db::put`] with explicit write options (e.g. `sync`).
    pub fn put_opt(&self, key: &[u8], value: &[u8], opts: WriteOptions) -> Result<()> {
        self.inner.write(WriteBatch::single_put(key, value), opts)
    }

    /// Deletes `key` (writes a tombstone; a no-op for readers if absent).
    /// Errors as for [`Db::put`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.delete_opt(key, WriteOptions::default())
    }

    /// [`Db::delete`] with explicit write options.
    pub fn delete_opt(&self, key: &[u8], opts: WriteOptions) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.inner.write(b, opts)
    }

    /// Applies `batch` atomically: after a crash either all of it or none of
    /// it is visible.
    pub fn write(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        self.inner.write(batch, opts)
    }

    /// [`Db::write`] that leaves `batch` with the caller, cleared, for the
    /// next write: an engine hosted by another ([`crate::Options::host`])
    /// inserts it in place, so a caller that keeps its batch writes
    /// without an allocation; another engine takes the batch's contents.
    pub fn write_in_place(&self, batch: &mut WriteBatch, opts: WriteOptions) -> Result<()> {
        self.inner.write_in_place(batch, opts)
    }

    /// The latest value of `key`; `None` if absent or deleted. Errors: I/O or
    /// corruption of a table read.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let seq = self.inner.last_sequence.load(Ordering::SeqCst);
        self.inner.get_at(key, seq)
    }

    /// Batched point lookup; results in the order of `keys`.
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let seq = self.inner.last_sequence.load(Ordering::SeqCst);
        self.inner.multi_get_at(keys, seq)
    }

    /// Like [`Db::multi_get`], also returning each found record's sequence
    /// number (index strategies validate with it).
    pub fn multi_get_with_seq(&self, keys: &[&[u8]]) -> Result<Vec<Option<Versioned>>> {
        let seq = self.inner.last_sequence.load(Ordering::SeqCst);
        self.inner.multi_get_found(keys, seq)
    }

    /// Iterates `[from, to)` in key order (`None` bounds are open) over the
    /// latest data.
    pub fn iter(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<DbIterator> {
        let seq = self.inner.last_sequence.load(Ordering::SeqCst);
        self.inner.iter_at(from, to, seq)
    }

    /// A read view of the latest published data; compactions keep every
    /// version it sees until it is dropped.
    pub fn snapshot(&self) -> Snapshot {
        let seq = {
            let mut snaps = lock(&self.inner.snapshots);
            let seq = self.inner.last_sequence.load(Ordering::SeqCst);
            snaps.register(seq);
            seq
        };
        Snapshot {
            reg: Arc::new(Registration {
                inner: self.inner.clone(),
                seq,
            }),
        }
    }

    /// For each key: may it have changed after sequence number `after`?
    /// True if it may have a version above `after`, or if no component
    /// seems to hold it at all (a deletion whose tombstone compaction has
    /// since dropped leaves no other trace). Exact for memtables; tables
    /// are probed by key range and Bloom filter, reading no data block. A
    /// `false` is certain. (Merge repair's component pruning,
    /// `index::repair`.)
    pub fn may_have_changed_since(&self, keys: &[&[u8]], after: SeqNo) -> Vec<bool> {
        let (mems, version) = self.inner.read_view();
        keys.iter()
            .map(|key| {
                for m in &mems {
                    if let Some(s) = m.newest_seq(key) {
                        return s > after;
                    }
                }
                let mut seen = false;
                for f in version.files_for_key(key) {
                    if crate::read::bloom_may_match(&self.inner.tables, f, key) {
                        if f.largest_seq > after {
                            return true;
                        }
                        seen = true;
                    }
                }
                !seen
            })
            .collect()
    }

    /// Highest sequence number assigned to an acknowledged write.
    pub fn last_sequence(&self) -> SeqNo {
        self.inner.last_sequence.load(Ordering::SeqCst)
    }

    /// Writes the memtable to an L0 table and waits until no frozen
    /// memtable remains; the WAL files the flushes retired are deleted on
    /// return.
    pub fn flush(&self) -> Result<()> {
        if self.inner.host.is_some() {
            HostedEngine::freeze(&*self.inner);
            return HostedEngine::flush_frozen(&*self.inner);
        }
        let mut st = self.inner.force_switch_memtable()?;
        if !self.inner.opts.background_work {
            drop(st);
            while self.inner.flush_one()? {}
        } else {
            while !st.imm.is_empty() {
                if let Some(e) = &st.bg_error {
                    return Err(Error::Background(e.to_string()));
                }
                st = crate::sync::wait(&self.inner.bg_done, st);
            }
            drop(st);
            // The flush thread deletes after its install, which may be
            // after this wake-up.
            self.inner.delete_obsolete_files();
        }
        // Hosted writes made while this memtable stayed empty (no switch
        // froze them); their tables install after this WAL is durable.
        self.inner.hosted.freeze_all();
        self.inner.hosted.flush_all()
    }

    /// Flushes, then compacts every level's files overlapping `[from, to]`
    /// (`None` = open) into the next level, down to the deepest level
    /// holding data, which is finally rewritten in place. Afterwards the
    /// range sits in one sorted level with every version no snapshot needs
    /// dropped (and reported to the dropped-versions stream).
    pub fn compact_range(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<()> {
        self.flush()?;
        let inner = &self.inner;
        let _g = inner.compaction_turn();
        lock(&inner.state).manual_compaction = true;
        let result = (|| -> Result<()> {
            let deepest = {
                let v = lock(&inner.versions).current();
                (0..v.num_levels())
                    .rev()
                    .find(|&l| !v.levels[l].is_empty())
                    .unwrap_or(0)
            };
            for level in 0..=deepest {
                let v = lock(&inner.versions).current();
                let inputs0 = if level == 0 {
                    v.levels[0].clone()
                } else {
                    v.overlapping(level, from, to)
                };
                if inputs0.is_empty() {
                    continue;
                }
                let mut c = if level < deepest || (level == 0 && level + 1 < v.num_levels()) {
                    let (lo, hi) = key_range(&inputs0);
                    let inputs1 = v.overlapping(level + 1, Some(&lo), Some(&hi));
                    Compaction::new(level, inputs0, inputs1)
                } else {
                    // The deepest level: rewrite in place.
                    Compaction {
                        level,
                        output_level: level,
                        inputs: [inputs0, Vec::new()],
                        allow_trivial_move: false,
                        single_output: false,
                    }
                };
                c.allow_trivial_move = false;
                inner.run_compaction(&c, &v)?;
            }
            Ok(())
        })();
        inner.end_manual_compaction();
        result
    }

    /// Flushes, then compacts every file of `level` with the overlapping
    /// files of `level + 1` into `level + 1`, as one compaction (what the
    /// leveled picker would do for those files). Tests use it to build an
    /// exact tree shape.
    #[cfg(feature = "testing")]
    pub fn compact_level(&self, level: usize) -> Result<()> {
        self.flush()?;
        let inner = &self.inner;
        let _g = inner.compaction_turn();
        let v = lock(&inner.versions).current();
        if level + 1 >= v.num_levels() {
            return Err(Error::invalid(format!(
                "compact_level({level}): the last level is {}",
                v.num_levels() - 1
            )));
        }
        let inputs0 = v.levels[level].clone();
        if inputs0.is_empty() {
            return Ok(());
        }
        let (lo, hi) = key_range(&inputs0);
        let inputs1 = v.overlapping(level + 1, Some(&lo), Some(&hi));
        let mut c = Compaction::new(level, inputs0, inputs1);
        c.allow_trivial_move = false;
        lock(&inner.state).manual_compaction = true;
        let result = inner.run_compaction(&c, &v);
        drop(v);
        inner.end_manual_compaction();
        result
    }

    /// The memtables (newest first) and the version at this moment: the
    /// components a reader at a snapshot taken before this call reads. For
    /// extensions answering their own queries.
    pub fn read_view(&self) -> (Vec<Arc<MemTable>>, Arc<Version>) {
        self.inner.read_view()
    }

    /// The table cache (tables of a [`Db::read_view`]).
    pub fn table_cache(&self) -> &Arc<TableCache> {
        &self.inner.tables
    }

    /// The active memtable (extensions attach new structures to its side
    /// structure).
    pub fn active_memtable(&self) -> Arc<MemTable> {
        lock(&self.inner.state).mem.clone()
    }

    /// Batched point lookup at sequence number `seq`, which the caller keeps
    /// readable (a live [`Snapshot`]): each key's value and sequence
    /// number, `None` if absent or deleted, in the order of `keys`.
    pub fn multi_get_at_seq(&self, keys: &[&[u8]], seq: SeqNo) -> Result<Vec<Option<Versioned>>> {
        self.inner.multi_get_found(keys, seq)
    }

    /// The exact versions `(key, seq)` of `reqs` (PERSEID §4.4), each
    /// looked up only in the components whose sequence-number zone map
    /// holds `seq`; a version no longer there (compacted away) falls back
    /// to a normal lookup at `snapshot`, which the caller keeps readable
    /// (a live [`Snapshot`]). `threads` workers share one queue of
    /// requests. Results in the order of `reqs`; the caller compares each
    /// returned sequence number with the requested one.
    pub fn get_versions(
        &self,
        reqs: &[(&[u8], SeqNo)],
        snapshot: SeqNo,
        threads: usize,
    ) -> Result<(Vec<Option<Versioned>>, crate::read::ZoneLookupStats)> {
        let (mems, version) = self.read_view();
        crate::read::get_versions_components(
            &self.inner.tables,
            self.inner.opts.merge_operator.as_ref(),
            &mems,
            &version,
            reqs,
            snapshot,
            threads,
        )
    }

    /// Data blocks fetched so far (cache hits and disk reads).
    pub fn data_blocks_read(&self) -> u64 {
        let d = self.inner.counters.snapshot().data_blocks;
        d.disk + d.cache
    }

    /// Writes `payload` under extension `hook` to the MANIFEST, durable on
    /// return (replayed to [`crate::hooks::EngineHooks::on_recover`]).
    pub fn log_extension_payload(&self, hook: &str, payload: Vec<u8>) -> Result<()> {
        let edit = VersionEdit {
            ext_payloads: vec![(hook.to_string(), payload)],
            ..VersionEdit::default()
        };
        self.inner.install(edit, InstallReason::External, |_| {})?;
        Ok(())
    }

    /// Runs `f` while no write is in flight and none starts (every write
    /// queued before is published first). The caller must not write from
    /// `f`. For extensions that scan the data to build a structure writers
    /// maintain from then on.
    pub fn pause_writes<T>(&self, f: impl FnOnce() -> T) -> T {
        self.inner.pause_writes(f)
    }

    /// Reads one data block of a live table by handle, through the block
    /// cache (counted as a data block read). `Error::NotFound` if the table
    /// is not in the current version.
    pub fn read_data_block(
        &self,
        file_number: u64,
        handle: BlockHandle,
    ) -> Result<Vec<BlockEntry>> {
        let v = lock(&self.inner.state).current.clone();
        let f = v
            .all_files()
            .find(|(_, f)| f.number == file_number)
            .map(|(_, f)| f.clone())
            .ok_or_else(|| Error::NotFound(format!("table {file_number} is not live")))?;
        let t = self.inner.tables.get(f.number, f.file_size)?;
        Ok(t.read_data_block_entries(handle)?
            .into_iter()
            .map(|(user_key, seq, kind, value)| BlockEntry {
                user_key,
                seq,
                kind,
                value,
            })
            .collect())
    }

    /// The current version (live files per level and extension state).
    pub fn current_version(&self) -> Arc<Version> {
        lock(&self.inner.state).current.clone()
    }

    /// Counters, per-level sizes and memory use, as of now.
    pub fn stats(&self) -> Stats {
        let inner = &self.inner;
        let (v, mem_bytes, side_bytes, filter_bytes, imm) = {
            let st = lock(&inner.state);
            let mems = || std::iter::once(&st.mem).chain(st.imm.iter());
            let sum = |f: fn(&MemTable) -> usize| mems().map(|m| f(m) as u64).sum::<u64>();
            (
                st.current.clone(),
                sum(MemTable::approximate_bytes),
                sum(MemTable::side_bytes),
                sum(MemTable::filter_bytes),
                st.imm.len(),
            )
        };
        let io = inner.counters.snapshot();
        let levels: Vec<LevelStats> = (0..v.num_levels())
            .map(|l| LevelStats {
                level: l,
                files: v.levels[l].len(),
                bytes: v.level_bytes(l),
                entries: v.levels[l].iter().map(|f| f.num_entries).sum(),
            })
            .collect();
        Stats {
            write_amplification: io.write_amplification(),
            io,
            table_bytes: levels.iter().map(|l| l.bytes).sum(),
            levels,
            memtable_bytes: mem_bytes,
            memtable_side_bytes: side_bytes,
            memtable_filter_bytes: filter_bytes,
            immutable_memtables: imm,
            retired_memtables: lock(&inner.retired_mems).len(),
            block_cache_bytes: inner.block_cache.as_ref().map(|c| c.usage()).unwrap_or(0),
            last_sequence: inner.last_sequence.load(Ordering::SeqCst),
        }
    }

    /// Returns once the compaction running at the call, if any, has
    /// installed its result. Every compaction that begins later asks the
    /// extensions for its table observers after the call: an extension's
    /// state changed before the call (a new index) reaches every table a
    /// compaction installs from then on.
    pub fn wait_for_running_compaction(&self) {
        let inner = &self.inner;
        let mut turns = lock(&inner.compaction_turns);
        // Every turn begun so far: at most one has not ended.
        let begun = turns.0;
        while turns.1 < begun {
            turns = crate::sync::wait(&inner.compaction_turn_ended, turns);
        }
    }

    /// Waits until no flush or compaction is pending (for benchmarks and
    /// tests that want a settled tree).
    pub fn wait_for_compactions(&self) -> Result<()> {
        let mut st = lock(&self.inner.state);
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.imm.is_empty() && self.inner.picker.pick(&st.current).is_none() {
                drop(st);
                if self.inner.opts.background_work {
                    // A flush or compaction publishes its version before
                    // it drops the one it read (whose death makes its
                    // inputs deletable): wait for both to end first.
                    drop(lock(&self.inner.flush_lock));
                    drop(lock(&self.inner.compaction_lock));
                    self.inner.released.wait_idle();
                } else if self.inner.released.take() {
                    self.inner.delete_obsolete_files();
                }
                return Ok(());
            }
            if !self.inner.opts.background_work {
                drop(st);
                self.inner.run_inline_work()?;
                st = lock(&self.inner.state);
                continue;
            }
            st = crate::sync::wait(&self.inner.bg_done, st);
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.inner.state);
            st.shutting_down = true;
            self.inner.flush_cv.notify_all();
            self.inner.compact_cv.notify_all();
            self.inner.bg_done.notify_all();
        }
        self.inner.released.stop();
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
        if self.inner.host.is_some() {
            // The host may be flushing or compacting this engine on its
            // threads: wait for that step; later ones see `shutting_down`.
            drop(lock(&self.inner.flush_lock));
            drop(lock(&self.inner.compaction_lock));
        }
        if let Some(log) = lock(&self.inner.log).as_mut() {
            let _ = log.finish();
        }
    }
}

impl Snapshot {
    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> SeqNo {
        self.reg.seq
    }

    /// [`Db::get`] as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.reg.inner.get_at(key, self.reg.seq)
    }

    /// [`Db::multi_get`] as of the snapshot.
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.reg.inner.multi_get_at(keys, self.reg.seq)
    }

    /// [`Db::iter`] as of the snapshot.
    pub fn iter(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<DbIterator> {
        self.reg.inner.iter_at(from, to, self.reg.seq)
    }

    /// Visits the entries of `key` visible here, newest first, component by
    /// component, merge operands uncombined; `f` returns false to stop
    /// (see `merge::for_each_version`).
    pub fn for_each_version(&self, key: &[u8], f: &mut merge::VersionVisitor<'_>) -> Result<()> {
        self.reg.inner.for_each_version_at(key, self.reg.seq, f)
    }

    /// See `merge::components_in_ranges`.
    pub fn components_in_ranges(&self, ranges: &[(Vec<u8>, Option<Vec<u8>>)]) -> usize {
        let (mems, version) = self.reg.inner.read_view();
        merge::components_in_ranges(&mems, &version, ranges, self.reg.seq)
    }

    /// Visits the entries visible here in the key ranges `[from, to)`,
    /// component by component, newest first (see
    /// `merge::for_each_in_ranges_by_component`).
    pub fn for_each_in_ranges_by_component(
        &self,
        ranges: &[(Vec<u8>, Option<Vec<u8>>)],
        f: &mut merge::ComponentVisitor<'_>,
    ) -> Result<()> {
        let (mems, version) = self.reg.inner.read_view();
        merge::for_each_in_ranges_by_component(
            &self.reg.inner.tables,
            &mems,
            &version,
            ranges,
            self.reg.seq,
            f,
        )
    }
}

/// Another handle on the same snapshot: compaction keeps what it sees
/// until every handle is dropped.
impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.inner.snapshots).unregister(self.seq);
    }
}

/// A new empty memtable for WAL file `log` with side structure `side`,
/// the key filter and the runs mode `opts` ask for (at open, for the
/// replayed WALs, and at every switch).
fn memtable_for(
    opts: &Options,
    log: u64,
    side: Option<Arc<dyn crate::memtable::MemSide>>,
) -> Arc<MemTable> {
    Arc::new(
        MemTable::with_side(log, side)
            .with_key_filter(opts.memtable_filter_bytes())
            .with_runs(opts.memtable_runs()),
    )
}

impl DbInner {
    /// The side structure of a new memtable (the first extension's that
    /// provides one).
    fn memtable_side(&self) -> Option<Arc<dyn crate::memtable::MemSide>> {
        self.hooks.iter().find_map(|h| h.memtable_side())
    }

    /// A new empty memtable for WAL file `log`, with the side structure,
    /// the key filter and the runs mode the options ask for.
    pub(crate) fn new_memtable(&self, log: u64) -> Arc<MemTable> {
        memtable_for(&self.opts, log, self.memtable_side())
    }

    /// Memtables (newest first) and version at this moment.
    fn read_view(&self) -> (Vec<Arc<MemTable>>, Arc<Version>) {
        let st = lock(&self.state);
        let mut mems = Vec::with_capacity(1 + st.imm.len());
        mems.push(st.mem.clone());
        mems.extend(st.imm.iter().rev().cloned());
        (mems, st.current.clone())
    }

    fn get_at(&self, key: &[u8], seq: SeqNo) -> Result<Option<Vec<u8>>> {
        let (mems, version) = self.read_view();
        for m in &mems {
            match m.get(key, seq) {
                Some(MemGet::Value(_, v)) => return Ok(Some(v)),
                Some(MemGet::Deleted(_)) => return Ok(None),
                Some(MemGet::Merge(_)) => return self.merged_at(&mems, &version, key, seq),
                None => {}
            }
        }
        match version.get(&self.tables, key, seq)? {
            Some(Found {
                kind: ValueKind::Value,
                value,
                ..
            }) => Ok(Some(value)),
            Some(Found {
                kind: ValueKind::Merge,
                ..
            }) => self.merged_at(&mems, &version, key, seq),
            _ => Ok(None),
        }
    }

    /// The value of `key`, whose newest entry at `seq` is a merge operand.
    fn merged_at(
        &self,
        mems: &[Arc<MemTable>],
        version: &Version,
        key: &[u8],
        seq: SeqNo,
    ) -> Result<Option<Vec<u8>>> {
        let op = merge::require(self.opts.merge_operator.as_ref())?;
        Ok(merge::resolve_at(op, &self.tables, mems, version, key, seq)?.map(|(_, v)| v))
    }

    /// Visits the entries of `key` at `seq` newest first, component by
    /// component, without combining merge operands (see
    /// [`merge::for_each_version`]); `f` returns false to stop.
    pub(crate) fn for_each_version_at(
        &self,
        key: &[u8],
        seq: SeqNo,
        f: &mut merge::VersionVisitor<'_>,
    ) -> Result<()> {
        let (mems, version) = self.read_view();
        merge::for_each_version(&self.tables, &mems, &version, key, seq, f)
    }

    fn multi_get_found(&self, keys: &[&[u8]], seq: SeqNo) -> Result<Vec<Option<Versioned>>> {
        let (mems, version) = self.read_view();
        self.multi_get_in(&mems, &version, keys, seq)
    }

    /// Batched point lookup at `seq` in the given components (memtables
    /// newest first, then `version`'s tables): keys sorted and deduplicated,
    /// memtables first, then the tables component by component. Results in
    /// the order of `keys`, `None` for absent or deleted keys.
    pub(crate) fn multi_get_in(
        &self,
        mems: &[Arc<MemTable>],
        version: &Version,
        keys: &[&[u8]],
        seq: SeqNo,
    ) -> Result<Vec<Option<Versioned>>> {
        multi_get_components(
            &self.tables,
            self.opts.merge_operator.as_ref(),
            mems,
            version,
            keys,
            seq,
        )
    }

    fn multi_get_at(&self, keys: &[&[u8]], seq: SeqNo) -> Result<Vec<Option<Vec<u8>>>> {
        Ok(self
            .multi_get_found(keys, seq)?
            .into_iter()
            .map(|r| r.map(|(_, v)| v))
            .collect())
    }

    fn iter_at(&self, from: Option<&[u8]>, to: Option<&[u8]>, seq: SeqNo) -> Result<DbIterator> {
        let (mems, version) = self.read_view();
        let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
        for m in &mems {
            children.push(Box::new(m.iter()));
        }
        children.extend(version.iterators(&self.tables, ReadPurpose::Query)?);
        Ok(DbIterator::new(
            Box::new(MergingIterator::new(children)),
            seq,
            from.map(<[u8]>::to_vec),
            to.map(<[u8]>::to_vec),
            self.opts.merge_operator.clone(),
            Box::new(version),
        ))
    }
}
