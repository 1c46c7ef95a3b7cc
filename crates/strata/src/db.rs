//! The database a user opens: the storage engine ([`strata_lsm::Db`])
//! with the secondary-index framework registered as its extension, plus
//! index definition, queries and checks.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use strata_lsm::key::SeqNo;
use strata_lsm::{
    BlockEntry, DbIterator, Error, Options, Result, Snapshot, Stats, Versioned, WriteBatch,
    WriteOptions,
};

use crate::index::strategy::BuildMethod;
use crate::index::{
    self, ExtractorFn, Hits, IndexInfo, IndexManager, IndexSpec, IndexValue, Predicate,
    QueryOptions, QueryProfile, QueryView,
};

/// Records an online scan build applies per hold of the sync guard.
const SCAN_CHUNK: usize = 128;

/// Default of [`Db::set_build_pacing`]: while writes run, an online build
/// sleeps as long as it works (half a core at most).
pub const DEFAULT_BUILD_SHARE: f64 = 1.0;

/// A test hook run in the middle of every index query.
type QueryPause = Arc<dyn Fn() + Send + Sync>;

/// A test hook run by an online build before each table (see
/// [`Db::set_build_pause_hook`]).
type BuildPause = Arc<dyn Fn(&str, u64) -> bool + Send + Sync>;

/// An open database: records by primary key, and secondary indexes over
/// their attributes. Dropping it stops the background threads and closes
/// the files; everything acknowledged is in the WAL or in tables.
pub struct Db {
    engine: strata_lsm::Db,
    index: Arc<IndexManager>,
    /// See [`Db::set_query_pause_hook`] (tests only: a query takes no
    /// lock for it otherwise).
    #[cfg(feature = "testing")]
    query_pause: Mutex<Option<QueryPause>>,
    /// See [`Db::set_build_pause_hook`].
    build_pause: Mutex<Option<BuildPause>>,
    /// A version with no tables: the view of a query whose strategy pins
    /// its own snapshot (`IndexStrategy::pins_own_snapshot`) lists none.
    no_components: Arc<strata_lsm::version::Version>,
    /// [`Db::set_build_pacing`]'s share, as `f64` bits.
    build_share: std::sync::atomic::AtomicU64,
}

/// What [`Db::check_index`] found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IndexCheck {
    /// Name of the index checked.
    pub index: String,
    /// Records whose attribute the index should find (by a full scan).
    pub expected: usize,
    /// Records the index returned.
    pub found: usize,
    /// Keys the index missed, and keys it returned wrongly (or with a
    /// wrong value), at most 100 each.
    pub missing: Vec<String>,
    /// Keys the index returned that a full scan does not match (or whose
    /// value differs), at most 100.
    pub extra: Vec<String>,
}

impl IndexCheck {
    /// True if the index returned exactly the records a full scan matches.
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.expected == self.found
    }
}

/// Attribute extractors that [`crate::Extractor::Custom`] indexes name, to
/// register at every open ([`Db::open_with`]).
#[derive(Clone, Default)]
pub struct Extractors {
    pub(crate) map: BTreeMap<String, ExtractorFn>,
}

impl Extractors {
    /// An empty registry.
    pub fn new() -> Extractors {
        Extractors::default()
    }

    /// Registers `f` under `name`.
    pub fn add(mut self, name: &str, f: ExtractorFn) -> Extractors {
        self.map.insert(name.to_string(), f);
        self
    }
}

use strata_lsm::sync::lock;

impl Db {
    /// Opens (or creates, per `opts`) the database in `path`, replaying the
    /// WAL of an unclean shutdown, and brings its indexes up: `memory`
    /// indexes are rebuilt, builds a crash interrupted are finished.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Db::open_with(path, opts, Extractors::default())
    }

    /// [`Db::open`] with the extractors of custom indexes.
    pub fn open_with(path: impl AsRef<Path>, mut opts: Options, ext: Extractors) -> Result<Db> {
        let dir = path.as_ref().to_path_buf();
        let index = IndexManager::new(dir, &opts, ext.map);
        opts.hooks.push(index.clone());
        let engine = strata_lsm::Db::open(path, opts)?;
        let db = Db {
            engine,
            index,
            #[cfg(feature = "testing")]
            query_pause: Mutex::new(None),
            build_pause: Mutex::new(None),
            no_components: Arc::new(strata_lsm::version::Version::default()),
            build_share: std::sync::atomic::AtomicU64::new(DEFAULT_BUILD_SHARE.to_bits()),
        };
        // `memory` indexes live only in RAM: rebuild them from the recovered
        // data before the first write or query (none can run yet).
        db.scan_build(&db.index.rebuilt_at_open())?;
        db.resume_index_builds()?;
        for d in db.index.defs() {
            d.strategy.on_opened();
        }
        Ok(db)
    }

    /// Removes every database file in `path`, the indexes' directories,
    /// and then the directory itself if it is empty. Fails with
    /// `Error::Locked` if the database is open.
    pub fn destroy(path: impl AsRef<Path>) -> Result<()> {
        Db::destroy_with(path, &strata_lsm::io::RealFs)
    }

    /// [`Db::destroy`] through the file system `fs`.
    pub fn destroy_with(path: impl AsRef<Path>, fs: &dyn strata_lsm::io::Fs) -> Result<()> {
        let dir = path.as_ref();
        if fs.exists(dir) {
            strata_lsm::Db::destroy_with(dir, fs)?;
        }
        if let Ok(names) = fs.list_dir(dir) {
            for name in names {
                let is_index = name.to_str().is_some_and(|n| n.starts_with("index-"));
                let p = dir.join(&name);
                if name
                    .to_str()
                    .and_then(index::sidefile::parse_name)
                    .is_some()
                {
                    fs.remove_file(&p)
                        .map_err(|err| Error::io(format!("remove {}", p.display()), err))?;
                }
                if is_index && fs.is_dir(&p) {
                    fs.remove_dir_all(&p)
                        .map_err(|err| Error::io(format!("remove {}", p.display()), err))?;
                }
            }
            let _ = fs.remove_dir(dir);
        }
        Ok(())
    }

    /// The storage engine under this database (advanced use: statistics
    /// of the tree, extension APIs).
    pub fn engine(&self) -> &strata_lsm::Db {
        &self.engine
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        self.engine.path()
    }

    /// The options the database was opened with.
    pub fn options(&self) -> &Options {
        self.engine.options()
    }

    /// Writes `key` → `value` with default [`WriteOptions`]; every index
    /// sees the new value. Errors: oversized key or value
    /// (`Error::InvalidArgument`), I/O, a database closed by an earlier
    /// background error.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.engine.put(key, value)
    }

    /// [`Db::put`] with explicit write options (e.g. `sync`).
    pub fn put_opt(&self, key: &[u8], value: &[u8], opts: WriteOptions) -> Result<()> {
        self.engine.put_opt(key, value, opts)
    }

    /// Deletes `key` (a no-op if absent); indexes stop returning it.
    /// Errors as for [`Db::put`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.engine.delete(key)
    }

    /// [`Db::delete`] with explicit write options.
    pub fn delete_opt(&self, key: &[u8], opts: WriteOptions) -> Result<()> {
        self.engine.delete_opt(key, opts)
    }

    /// Applies `batch` atomically (every index sees all of it or none).
    pub fn write(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        self.engine.write(batch, opts)
    }

    /// The index layer (for the loader's readings, `index::preread`).
    pub(crate) fn index_manager(&self) -> &IndexManager {
        &self.index
    }

    /// Readings made by a load that the index maintenance took instead of
    /// reading the records again (`index::preread`; one per consumer: the
    /// synchronous maintenance and the memtable side structure), since
    /// open.
    #[cfg(feature = "testing")]
    pub fn pre_read_hits(&self) -> usize {
        self.index.pre_reads().hits()
    }

    /// The current value of `key`, `None` if absent or deleted. Errors:
    /// I/O or corruption of the tables read.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.engine.get(key)
    }

    /// Batched point lookup, in the order of `keys`.
    pub fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.engine.multi_get(keys)
    }

    /// [`Db::multi_get`] with each record's sequence number.
    pub fn multi_get_with_seq(&self, keys: &[&[u8]]) -> Result<Vec<Option<Versioned>>> {
        self.engine.multi_get_with_seq(keys)
    }

    /// Records with keys in `[from, to)` (`None` = open), in key order.
    pub fn iter(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<DbIterator> {
        self.engine.iter(from, to)
    }

    /// A consistent read view (compaction keeps what it sees).
    pub fn snapshot(&self) -> Snapshot {
        self.engine.snapshot()
    }

    /// Highest sequence number assigned to an acknowledged write.
    pub fn last_sequence(&self) -> SeqNo {
        self.engine.last_sequence()
    }

    /// Writes the memtable to an L0 table and waits until no frozen
    /// memtable remains.
    pub fn flush(&self) -> Result<()> {
        self.engine.flush()
    }

    /// Compacts `[from, to]` into one sorted level (see
    /// [`strata_lsm::Db::compact_range`]); a full compaction (both bounds
    /// `None`) then compacts every stand-alone index's trees the same way.
    pub fn compact_range(&self, from: Option<&[u8]>, to: Option<&[u8]>) -> Result<()> {
        self.engine.compact_range(from, to)?;
        if from.is_none() && to.is_none() {
            self.index.compact_trees()?;
        }
        Ok(())
    }

    /// See [`strata_lsm::Db::compact_level`].
    #[cfg(feature = "testing")]
    pub fn compact_level(&self, level: usize) -> Result<()> {
        self.engine.compact_level(level)
    }

    /// Waits until no flush or compaction is pending, in the database and
    /// in the indexes' own trees.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.engine.wait_for_compactions()?;
        self.index.wait_trees()
    }

    /// Reads one data block of a live table by handle (see
    /// [`strata_lsm::Db::read_data_block`]).
    pub fn read_data_block(
        &self,
        file: u64,
        handle: strata_lsm::sstable::BlockHandle,
    ) -> Result<Vec<BlockEntry>> {
        self.engine.read_data_block(file, handle)
    }

    /// The engine's current version (the live tables per level); it keeps
    /// its files alive while held.
    pub fn current_version(&self) -> Arc<strata_lsm::version::Version> {
        self.engine.current_version()
    }

    /// Engine statistics: levels, I/O counters, caches.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Builds the indexes `defs` (all [`BuildMethod::Scan`], rebuilt at
    /// every open: `memory`) from scratch with one scan of the latest data,
    /// while writes are paused (so the
    /// scan sees every published write and every later write maintains the
    /// result): each structure is cleared, every live record is applied as
    /// a put, then each structure is flushed (the build's entries come from
    /// tables, not from the primary WAL: durable before `ready`) and
    /// finished.
    fn scan_build(&self, defs: &[Arc<crate::index::IndexDef>]) -> Result<()> {
        if defs.is_empty() {
            return Ok(());
        }
        self.engine.pause_writes(|| {
            for d in defs {
                d.strategy.clear()?;
            }
            let snap = self.engine.snapshot();
            let mut it = snap.iter(None, None)?;
            let none = crate::index::strategy::Current::default();
            loop {
                let chunk: Vec<(Vec<u8>, SeqNo, Vec<u8>)> =
                    std::iter::from_fn(|| it.next_versioned())
                        .take(1024)
                        .collect::<Result<_>>()?;
                if chunk.is_empty() {
                    break;
                }
                let ops: Vec<crate::index::OpRef<'_>> = chunk
                    .iter()
                    .map(|(k, s, v)| (*s, k.as_slice(), Some(v.as_slice())))
                    .collect();
                self.index.sync_apply(defs, &ops, &none, false)?;
            }
            for d in defs {
                d.strategy.flush()?;
                d.strategy.after_build()?;
            }
            Ok(())
        })
    }

    /// Writes an index payload to the MANIFEST (durable on return).
    fn log_index_payload(&self, payload: Vec<u8>) -> Result<()> {
        self.engine.log_extension_payload(index::HOOK_NAME, payload)
    }
    /// Creates a secondary index and builds it over the existing data.
    /// Returns when the index is ready. The definition is durable: a reopen
    /// restores it (and finishes an interrupted build).
    ///
    /// Writes are not paused (but for a moment at the start, for writes
    /// already in flight). NEXT and embedded give every existing table the
    /// index's structures in a side file without copying its data (a
    /// per-table build); meanwhile the index is listed as
    /// `building` with its progress, and queries on it are answered,
    /// exactly, by scanning the tables not covered yet. The other
    /// strategies scan a snapshot while writes go on (a scan build);
    /// queries on them are answered too, by the
    /// structure for the keys applied and a scan of the snapshot for the
    /// rest.
    pub fn create_index(&self, spec: IndexSpec) -> Result<()> {
        self.create_index_with(spec, false)
    }

    /// [`Db::create_index`] building NEXT and embedded indexes the way it
    /// did before online builds: a full compaction rewrites every table
    /// with the index's blocks. For measurements against the online build.
    #[doc(hidden)]
    pub fn create_index_rewriting(&self, spec: IndexSpec) -> Result<()> {
        self.create_index_with(spec, true)
    }

    fn create_index_with(&self, spec: IndexSpec, rewrite: bool) -> Result<()> {
        let def = self.index.begin_create(spec)?;
        // Writes from now on are indexed in the active memtable too (a
        // memtable created meanwhile has the index already). Writes already
        // past `before_batch` did not see the index: published before
        // `now`, which bounds what the update memo may have missed.
        self.index.attach(&def, &self.engine.active_memtable());
        let now = self.engine.pause_writes(|| self.engine.last_sequence());
        let logged = self
            .index
            .create_payload(&def, now)
            .and_then(|p| self.log_index_payload(p));
        if let Err(e) = logged {
            let _ = self.index.drop_def(&def.spec.name);
            return Err(e);
        }
        self.build_index(&def.spec.name, rewrite)
    }

    /// Logs a definition in state `building` without building it, as a
    /// crash in the middle of [`Db::create_index`] would leave it. For tests
    /// of the resume path.
    #[cfg(feature = "testing")]
    pub fn begin_index_for_tests(&self, spec: IndexSpec) -> Result<()> {
        let def = self.index.begin_create(spec)?;
        let now = self.engine.pause_writes(|| self.engine.last_sequence());
        let payload = self.index.create_payload(&def, now)?;
        self.log_index_payload(payload)
    }

    /// Brings the index named `name` over the existing data (see
    /// [`BuildMethod`]); `rewrite`: a per-table index is built by a full
    /// compaction instead, which also leaves each key with one version.
    fn build_index(&self, name: &str, rewrite: bool) -> Result<()> {
        let def = self
            .index
            .def(name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        if def.is_ready() {
            return Ok(());
        }
        match def.strategy.build_method() {
            BuildMethod::Scan => self.online_scan_build(&def)?,
            BuildMethod::PerTable if !rewrite => self.per_table_build(&def)?,
            BuildMethod::PerTable | BuildMethod::RewriteTables => {
                self.compact_range(None, None)?;
            }
        }
        if def.strategy.build_method() != BuildMethod::Scan {
            let v = self.engine.current_version();
            if !self.index.covers(&def, &v) {
                return Err(Error::Background(format!(
                    "index {name:?} does not cover every table after its build"
                )));
            }
        }
        self.log_index_payload(index::IndexManager::ready_payload(&def))?;
        self.index.mark_ready(&def);
        def.set_online(false);
        Ok(())
    }

    /// The online build of a [`BuildMethod::PerTable`] index (NEXT §5, lazy
    /// construction): the memtable written before the index is flushed
    /// (its entries reach a table written with the index), then queries are
    /// allowed, and every table of the current version without the index's
    /// structures gets a side file — largest level first — until none is
    /// left. Tables that flushes and compactions write meanwhile carry the
    /// index; a table compacted away before its turn is skipped. Each side
    /// file is durable (and installed) by its `covered` payload, so a build
    /// interrupted by a crash resumes with the tables not covered yet.
    fn per_table_build(&self, def: &Arc<index::IndexDef>) -> Result<()> {
        self.engine.flush()?;
        // A compaction that began before the index existed writes tables
        // without its structures; once it has installed them, the loop
        // below sees them uncovered (later ones carry the index).
        self.engine.wait_for_running_compaction();
        def.set_online(true);
        let (done, bytes) = self.index.side_covered(def);
        let p = &def.progress;
        p.tables_done
            .store(done, std::sync::atomic::Ordering::Relaxed);
        p.bytes_done
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        let mut pacer = self.pacer();
        loop {
            if !self
                .index
                .def(&def.spec.name)
                .is_some_and(|d| Arc::ptr_eq(&d, def))
            {
                return Err(Error::invalid(format!(
                    "index {:?} was dropped during its build",
                    def.spec.name
                )));
            }
            let v = self.engine.current_version();
            let todo = self.index.uncovered(def, &v);
            if todo.is_empty() {
                return Ok(());
            }
            let set = |n: usize, b: u64| {
                p.tables_left
                    .store(n as u64, std::sync::atomic::Ordering::Relaxed);
                p.bytes_left.store(b, std::sync::atomic::Ordering::Relaxed);
            };
            let mut left_bytes: u64 = todo.iter().map(|(_, f)| f.file_size).sum();
            set(todo.len(), left_bytes);
            for (i, (_, f)) in todo.iter().enumerate() {
                let hook = lock(&self.build_pause).clone();
                let done = p.tables_done.load(std::sync::atomic::Ordering::Relaxed);
                if let Some(h) = hook {
                    if !h(&def.spec.name, done) {
                        return Err(Error::Background(format!(
                            "build of index {:?} stopped by its test hook",
                            def.spec.name
                        )));
                    }
                }
                // `v` keeps the table's file; a table compacted away since
                // is no longer worth covering.
                let live = self
                    .engine
                    .current_version()
                    .all_files()
                    .any(|(_, g)| g.number == f.number);
                if live {
                    if let Some(payload) = self.index.build_side(def, f, &mut || pacer.step())? {
                        self.log_index_payload(payload)?;
                        p.tables_done
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        p.bytes_done
                            .fetch_add(f.file_size, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                left_bytes = left_bytes.saturating_sub(f.file_size);
                set(todo.len() - i - 1, left_bytes);
            }
        }
    }

    /// The online build of a [`BuildMethod::Scan`] index: with the sync
    /// guard held (no batch between its maintenance and its publication)
    /// the structure is cleared and a snapshot `S` taken; then the live
    /// records at `S` are applied in key order, in chunks of
    /// [`SCAN_CHUNK`], each under the guard, skipping keys written since
    /// `S` (see `index::manager::ScanBuild` for the invariant), while
    /// writes go on and are applied as usual. Queries are answered
    /// meanwhile (the structure for the keys applied, a scan of the
    /// snapshot for the rest). At the end the structure is flushed (its
    /// scanned entries are in no WAL) before `ready` is logged. A crash
    /// restarts the scan.
    fn online_scan_build(&self, def: &Arc<index::IndexDef>) -> Result<()> {
        let snap = {
            let _g = self.index.memory_guard();
            def.strategy.clear()?;
            let snap = self.engine.snapshot();
            *def.scan() = Some(index::manager::ScanBuild {
                at: snap.sequence(),
                cursor: None,
                written: std::collections::HashSet::new(),
                records: 0,
            });
            snap
        };
        def.set_online(true);
        let result = self.scan_into(def, &snap);
        let end = result.and_then(|()| {
            def.strategy.flush()?;
            def.strategy.after_build()
        });
        let _g = self.index.memory_guard();
        *def.scan() = None;
        if end.is_err() {
            def.set_online(false);
        }
        end
    }

    /// Applies the records of `snap` to `def` (see
    /// [`Db::online_scan_build`]).
    fn scan_into(&self, def: &Arc<index::IndexDef>, snap: &Snapshot) -> Result<()> {
        let mut it = snap.iter(None, None)?;
        let none = crate::index::strategy::Current::default();
        let mut chunks = 0u64;
        let mut pacer = self.pacer();
        loop {
            pacer.step();
            let hook = lock(&self.build_pause).clone();
            if let Some(h) = hook {
                if !h(&def.spec.name, chunks) {
                    return Err(Error::Background(format!(
                        "build of index {:?} stopped by its test hook",
                        def.spec.name
                    )));
                }
            }
            let chunk: Vec<(Vec<u8>, SeqNo, Vec<u8>)> = std::iter::from_fn(|| it.next_versioned())
                .take(SCAN_CHUNK)
                .collect::<Result<_>>()?;
            let Some(last) = chunk.last().map(|c| c.0.clone()) else {
                return Ok(());
            };
            let _g = self.index.memory_guard();
            let mut scan = def.scan();
            let b = scan
                .as_mut()
                .ok_or_else(|| Error::invalid("scan build state lost"))?;
            let ops: Vec<crate::index::OpRef<'_>> = chunk
                .iter()
                .filter(|(k, _, _)| !b.written.contains(k))
                .map(|(k, s, v)| (*s, k.as_slice(), Some(v.as_slice())))
                .collect();
            self.index
                .sync_apply(std::slice::from_ref(def), &ops, &none, false)?;
            b.records += ops.len() as u64;
            // Keys up to `last` are applied: the cursor is its successor.
            let mut cursor = last;
            cursor.push(0);
            b.cursor = Some(cursor);
            chunks += 1;
        }
    }

    /// Sets how much an online index build yields to foreground writes:
    /// while writes run, the build sleeps `share` times the time it worked
    /// (it uses at most `1 / (1 + share)` of a core); with no writes it runs
    /// at full speed. `0` turns pacing off; default
    /// [`DEFAULT_BUILD_SHARE`]. Takes effect at the build's next step;
    /// not persisted (a build resumed at open uses the default).
    pub fn set_build_pacing(&self, share: f64) -> Result<()> {
        if !share.is_finite() || share < 0.0 {
            return Err(Error::invalid(format!(
                "build pacing share must be a finite number >= 0, not {share}"
            )));
        }
        self.build_share
            .store(share.to_bits(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn pacer(&self) -> index::pacing::Pacer<impl Fn() -> SeqNo + '_> {
        let share = f64::from_bits(self.build_share.load(std::sync::atomic::Ordering::Relaxed));
        index::pacing::Pacer::new(share, || self.engine.last_sequence())
    }

    /// Installs (or with `None` removes) a hook that an online index build
    /// runs before each table it covers, with the index's name and the
    /// number of tables covered so far; returning false stops the build
    /// with an error, as a crash there would (the tables covered stay
    /// covered). Tests use it to query, write and compact in the middle of
    /// a build, or to interrupt it.
    #[cfg(feature = "testing")]
    pub fn set_build_pause_hook(&self, hook: Option<BuildPause>) {
        *lock(&self.build_pause) = hook;
    }

    /// Installs (or with `None` removes) a hook that every write whose
    /// index maintenance follows its memtable insert (the strategies that
    /// read the records a write replaces) runs between its notes and that
    /// maintenance, on the writing thread, while the write holds the front
    /// of the writer queue. Tests use it to start an online build in that
    /// window.
    #[cfg(feature = "testing")]
    pub fn set_maintenance_pause_hook(&self, hook: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        self.index.set_maintenance_pause(hook);
    }

    /// Runs the builds of the indexes not yet ready (those
    /// [`Db::begin_index_for_tests`] left), as `open` does after a crash.
    #[cfg(feature = "testing")]
    pub fn resume_index_builds_for_tests(&self) -> Result<()> {
        self.resume_index_builds()
    }

    /// Finishes the builds a crash interrupted (called by `open`).
    pub(crate) fn resume_index_builds(&self) -> Result<()> {
        for d in self.index.defs() {
            if !d.is_ready() {
                self.build_index(&d.spec.name, false)?;
            }
        }
        Ok(())
    }

    /// Removes an index and its definition. Its blocks in existing tables
    /// are ignored and disappear as tables are rewritten.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        let payload = self.index.drop_def(name)?;
        self.log_index_payload(payload)
    }

    /// Every index with its state and statistics.
    pub fn indexes(&self) -> Vec<IndexInfo> {
        self.index.infos(&self.engine.current_version())
    }

    /// Update-memo size: (entries, bytes).
    pub fn memo_stats(&self) -> (usize, usize) {
        self.index.memo_stats()
    }

    /// Records of index `index` satisfying `pred`, newest first.
    pub fn query(&self, index: &str, pred: &Predicate, opts: QueryOptions) -> Result<Hits> {
        Ok(self.query_profiled(index, pred, opts)?.0)
    }

    /// [`Db::query`], also returning what the query read.
    pub fn query_profiled(
        &self,
        index: &str,
        pred: &Predicate,
        opts: QueryOptions,
    ) -> Result<(Hits, QueryProfile)> {
        let (hits, profile, _pinned) = self.query_pinned(index, pred, opts, false)?;
        Ok((hits, profile))
    }

    /// [`Db::query`], also returning the snapshot it answered at: the hits
    /// are exactly the records of that snapshot whose attribute matches,
    /// so a caller can read the primary data (`Snapshot::get`, `iter`) at
    /// the same point, e.g. to check an index against a scan while other
    /// threads write.
    pub fn query_snapshot(
        &self,
        index: &str,
        pred: &Predicate,
        opts: QueryOptions,
    ) -> Result<(Hits, Snapshot)> {
        let (hits, _, pinned) = self.query_pinned(index, pred, opts, true)?;
        let pinned = pinned.ok_or_else(|| {
            Error::invalid(format!(
                "index {index:?} answered without pinning a snapshot"
            ))
        })?;
        Ok((hits, pinned))
    }

    fn query_pinned(
        &self,
        index: &str,
        pred: &Predicate,
        opts: QueryOptions,
        must_pin: bool,
    ) -> Result<(Hits, QueryProfile, Option<Snapshot>)> {
        let engine = &self.engine;
        #[cfg(feature = "testing")]
        let pause = lock(&self.query_pause).clone();
        #[cfg(not(feature = "testing"))]
        let pause: Option<QueryPause> = None;
        // The view's own snapshot, if the strategy wants one (see
        // `IndexManager::query`).
        let pinned: std::cell::OnceCell<Snapshot> = std::cell::OnceCell::new();
        // A strategy with a structure of its own answers at the snapshot it
        // pins with its structure (`QueryCx::pin_with`): kept to be
        // returned as the query's.
        let pinned_by_strategy: std::sync::Mutex<Option<Snapshot>> = Default::default();
        let pin_latest = || {
            let s = self.snapshot();
            *lock(&pinned_by_strategy) = Some(s.clone());
            s
        };
        let fetch = |keys: &[&[u8]], at: SeqNo| engine.multi_get_at_seq(keys, at);
        let fetch_versions = |reqs: &[(&[u8], SeqNo)], at: SeqNo, threads: usize| {
            engine.get_versions(reqs, at, threads)
        };
        let data_blocks_read = || engine.data_blocks_read();
        let latest = || engine.last_sequence();
        let view_of = |full: bool| {
            let (snapshot, mems, version) = if full {
                // Pinned first, then the components: every version the
                // snapshot sees is in them, and no compaction drops one
                // until `pinned` goes.
                let seq = pinned.get_or_init(|| self.snapshot()).sequence();
                let (mems, version) = engine.read_view();
                (seq, mems, version)
            } else {
                (0, Vec::new(), self.no_components.clone())
            };
            QueryView {
                mems,
                version,
                snapshot,
                tables: engine.table_cache(),
                pin_latest: &pin_latest,
                latest: &latest,
                must_pin,
                fetch: &fetch,
                fetch_versions: &fetch_versions,
                data_blocks_read: &data_blocks_read,
                pause: pause.as_deref(),
            }
        };
        let mut profile = QueryProfile::default();
        let hits = self
            .index
            .query(index, pred, opts, &view_of, &mut profile)?;
        // `None`: an index-only answer read at a sequence number it did
        // not register (see `QueryCx::peek_with`); never with `must_pin`.
        let answered_at = pinned_by_strategy
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .or_else(|| pinned.into_inner());
        Ok((hits, profile, answered_at))
    }

    /// Installs (or with `None` removes) a hook that every index query runs
    /// once it has pinned what it reads and before it validates a
    /// candidate: tests use it to write, flush and compact in the middle
    /// of a query. The hook runs on the querying thread with no lock held.
    #[cfg(feature = "testing")]
    pub fn set_query_pause_hook(&self, hook: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        *lock(&self.query_pause) = hook;
    }

    /// Records whose attribute equals `value`.
    pub fn lookup(&self, index: &str, value: IndexValue, opts: QueryOptions) -> Result<Hits> {
        self.query(index, &Predicate::Eq(value), opts)
    }

    /// Records whose attribute is in `[lo, hi]`.
    pub fn range(
        &self,
        index: &str,
        lo: IndexValue,
        hi: IndexValue,
        opts: QueryOptions,
    ) -> Result<Hits> {
        self.query(index, &Predicate::Range(lo, hi), opts)
    }

    /// Records whose point lies in, or rectangle intersects, `rect`.
    pub fn within(&self, index: &str, rect: [f64; 4], opts: QueryOptions) -> Result<Hits> {
        self.query(index, &Predicate::Within(rect), opts)
    }

    /// Compares index `name` with a full scan of the primary data.
    pub fn check_index(&self, name: &str) -> Result<IndexCheck> {
        let info = self
            .indexes()
            .into_iter()
            .find(|i| i.spec.name == name)
            .ok_or_else(|| Error::NotFound(format!("index {name:?}")))?;
        let ty = info.spec.key_type;
        let path = match &info.spec.extractor {
            index::Extractor::Field(p) => index::value::parse_path(p)?,
            index::Extractor::Custom(_) => {
                return Err(Error::invalid("check supports field indexes only"))
            }
        };
        let snap = self.snapshot();
        let mut expected: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut max_str = String::new();
        for kv in snap.iter(None, None)? {
            let (k, v) = kv?;
            let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&v) else {
                continue;
            };
            if let Ok(val) = index::value::extract(&doc, &path, ty) {
                if let IndexValue::Str(s) = &val {
                    if *s > max_str {
                        max_str = s.clone();
                    }
                }
                expected.insert(k, v);
            }
        }
        drop(snap);
        let pred = match ty {
            index::KeyType::I64 => {
                Predicate::Range(IndexValue::I64(i64::MIN), IndexValue::I64(i64::MAX))
            }
            index::KeyType::F64 => Predicate::Range(
                IndexValue::F64(f64::NEG_INFINITY),
                IndexValue::F64(f64::INFINITY),
            ),
            index::KeyType::String => Predicate::Range(
                IndexValue::Str(String::new()),
                IndexValue::Str(max_str + "\u{10FFFF}"),
            ),
            _ => Predicate::Within([
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::INFINITY,
            ]),
        };
        let hits = self.query(name, &pred, QueryOptions::default())?;
        let mut check = IndexCheck {
            index: name.to_string(),
            expected: expected.len(),
            found: hits.len(),
            ..IndexCheck::default()
        };
        let mut seen = std::collections::HashSet::new();
        for h in &hits {
            seen.insert(h.key);
            if expected.get(h.key).map(Vec::as_slice) != h.value && check.extra.len() < 100 {
                check
                    .extra
                    .push(String::from_utf8_lossy(h.key).into_owned());
            }
        }
        for k in expected.keys() {
            if !seen.contains(k.as_slice()) && check.missing.len() < 100 {
                check.missing.push(String::from_utf8_lossy(k).into_owned());
            }
        }
        Ok(check)
    }
}
