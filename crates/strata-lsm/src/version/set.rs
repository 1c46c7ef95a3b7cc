use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::error::{Error, IoContext, Result};
use crate::filename;
use crate::io::Fs;
use crate::version::ext::{InstallEvent, InstallReason, VersionExtension};
use crate::version::{Version, VersionEdit};
use crate::wal::WalRecovery;
use crate::wal::{LogReader, LogWriter};

/// Owns the MANIFEST and the current version.
///
/// Who may call: one install at a time (the `Db` keeps the set behind its
/// own mutex, taken before the state mutex). `log_and_apply` makes an edit
/// durable (append + fsync) before the new version becomes current.
pub struct VersionSet {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    current: Arc<Version>,
    /// Every version handed out; dead weak pointers are pruned lazily.
    live: Vec<Weak<Version>>,
    manifest: Option<LogWriter>,
    manifest_number: u64,
    /// Shared with the `Db` so that the WAL can allocate numbers without
    /// taking this set's lock.
    next_file_number: Arc<AtomicU64>,
    /// WAL files numbered below this hold nothing that is not in a table.
    log_number: u64,
    hooks: Vec<Arc<dyn VersionExtension>>,
    /// Payloads of every extension (registered or not), oldest first; written
    /// again when a fresh manifest is started.
    payload_history: BTreeMap<String, Vec<Vec<u8>>>,
}

/// What recovery read from the MANIFEST.
pub struct Recovered {
    /// The version set, at the recovered version.
    pub versions: VersionSet,
    /// Last sequence number the MANIFEST records.
    pub last_sequence: u64,
    /// WAL files numbered below this are obsolete; the others are replayed.
    pub log_number: u64,
}

impl VersionSet {
    /// True if `dir` holds a database (a CURRENT file).
    pub fn exists(fs: &dyn Fs, dir: &Path) -> bool {
        fs.exists(&filename::current_file(dir))
    }

    /// Writes an empty database's first manifest and CURRENT.
    pub fn create(
        fs: &Arc<dyn Fs>,
        dir: &Path,
        num_levels: usize,
        hooks: Vec<Arc<dyn VersionExtension>>,
    ) -> Result<()> {
        // A creation that failed before CURRENT was written leaves its
        // MANIFEST behind: number the new one past every file present
        // (never overwriting what may be evidence of a damaged database).
        let mut first = 2;
        for name in fs.list_dir(dir).path_ctx("list", dir)? {
            use filename::FileKind::{Log, Manifest, Table};
            if let Some(Log(n) | Table(n) | Manifest(n)) = name.to_str().and_then(filename::parse) {
                first = first.max(n + 1);
            }
        }
        let mut vs = VersionSet {
            dir: dir.to_path_buf(),
            fs: fs.clone(),
            current: Arc::new(Version::new(num_levels)),
            live: Vec::new(),
            manifest: None,
            manifest_number: 0,
            next_file_number: Arc::new(AtomicU64::new(first)),
            log_number: 0,
            hooks,
            payload_history: BTreeMap::new(),
        };
        vs.write_fresh_manifest(0)
    }

    /// Replays the manifest named by CURRENT.
    pub fn recover(
        fs: &Arc<dyn Fs>,
        dir: &Path,
        num_levels: usize,
        hooks: Vec<Arc<dyn VersionExtension>>,
    ) -> Result<Recovered> {
        let current_path = filename::current_file(dir);
        let mut current = String::new();
        fs.open_sequential(&current_path)
            .and_then(|mut f| f.read_to_string(&mut current))
            .path_ctx("read", &current_path)?;
        let name = current
            .strip_suffix('\n')
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .ok_or_else(|| {
                Error::corruption_at(
                    &current_path,
                    None,
                    format!("a manifest name and a newline, found {current:?}"),
                )
            })?;
        let manifest_number = match filename::parse(name) {
            Some(filename::FileKind::Manifest(n)) => n,
            _ => {
                return Err(Error::corruption_at(
                    &current_path,
                    None,
                    format!("a manifest name, found {name:?}"),
                ))
            }
        };
        let path = dir.join(name);
        let file = fs.open_sequential(&path).path_ctx("open manifest", &path)?;
        let mut reader = LogReader::new(file, path.clone(), WalRecovery::TolerateTornTail);
        let mut version = Version::new(num_levels);
        let mut log_number = None;
        let mut next_file = None;
        let mut last_seq = None;
        let mut history: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        let mut records = 0u64;
        while let Some(rec) = reader.read_record()? {
            let edit = VersionEdit::decode(&rec).map_err(|e| {
                Error::corruption_at(
                    &path,
                    None,
                    format!("a version edit in record {records}: {e}"),
                )
            })?;
            records += 1;
            if edit.new_files.iter().any(|(l, _)| *l >= num_levels)
                || edit.deleted_files.iter().any(|(l, _)| *l >= num_levels)
            {
                return Err(Error::corruption_at(
                    &path,
                    None,
                    format!("files at levels below num_levels ({num_levels})"),
                ));
            }
            version = version.apply(&edit).map_err(|e| {
                Error::corruption_at(
                    &path,
                    None,
                    format!("a valid edit in record {records}: {e}"),
                )
            })?;
            log_number = edit.log_number.or(log_number);
            next_file = edit.next_file_number.or(next_file);
            last_seq = edit.last_sequence.or(last_seq);
            for (name, p) in edit.ext_payloads {
                history.entry(name).or_default().push(p);
            }
        }
        let (Some(log_number), Some(next_file), Some(last_seq)) = (log_number, next_file, last_seq)
        else {
            return Err(Error::corruption_at(
                &path,
                None,
                "a log number, a next file number and a last sequence",
            ));
        };
        // Orphans of a crash (a table being written, a WAL created before
        // its edit) also hold numbers: never hand those out again.
        let mut max_file = version
            .all_files()
            .map(|(_, f)| f.number)
            .max()
            .unwrap_or(0);
        for name in fs.list_dir(dir).path_ctx("list", dir)? {
            use filename::FileKind::{Log, Manifest, Table};
            if let Some(Log(n) | Table(n) | Manifest(n)) = name.to_str().and_then(filename::parse) {
                max_file = max_file.max(n);
            }
        }
        let next_file = next_file.max(max_file + 1).max(manifest_number + 1);
        let files: Vec<_> = version.all_files().map(|(l, f)| (l, f.clone())).collect();
        for h in &hooks {
            let payloads = history.get(h.name()).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(state) = h.on_recover(payloads, &files)? {
                version.ext.insert(h.name().to_string(), state);
            }
        }
        let vs = VersionSet {
            dir: dir.to_path_buf(),
            fs: fs.clone(),
            current: Arc::new(version),
            live: Vec::new(),
            manifest: None,
            manifest_number,
            next_file_number: Arc::new(AtomicU64::new(next_file)),
            log_number,
            hooks,
            payload_history: history,
        };
        Ok(Recovered {
            versions: vs,
            last_sequence: last_seq,
            log_number,
        })
    }

    /// The shared counter file numbers are allocated from.
    pub fn next_file_counter(&self) -> Arc<AtomicU64> {
        self.next_file_number.clone()
    }

    /// Allocates a new file number (never reused).
    pub fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::SeqCst)
    }

    /// False once an edit failed to reach the MANIFEST: nothing more can
    /// be installed until the database is reopened.
    pub fn is_writable(&self) -> bool {
        self.manifest.is_some()
    }

    /// WAL files numbered below this are obsolete.
    pub fn log_number(&self) -> u64 {
        self.log_number
    }

    /// File number of the live MANIFEST.
    pub fn manifest_number(&self) -> u64 {
        self.manifest_number
    }

    /// Makes every version handed out from now on (the current one
    /// included) raise `signal` when it dies.
    pub fn set_release_signal(&mut self, signal: Arc<crate::version::ReleaseSignal>) {
        Arc::make_mut(&mut self.current).release = Some(signal);
    }

    /// The current version; the returned `Arc` is tracked so its files stay
    /// alive until it is dropped.
    pub fn current(&mut self) -> Arc<Version> {
        let v = self.current.clone();
        self.track(&v);
        v
    }

    fn track(&mut self, v: &Arc<Version>) {
        if self.live.len() > 64 {
            self.live.retain(|w| w.strong_count() > 0);
        }
        self.live.push(Arc::downgrade(v));
    }

    /// Numbers of every table referenced by a version someone still holds.
    pub fn live_files(&mut self) -> HashSet<u64> {
        self.live.retain(|w| w.strong_count() > 0);
        let mut set: HashSet<u64> = self.current.all_files().map(|(_, f)| f.number).collect();
        for w in &self.live {
            if let Some(v) = w.upgrade() {
                set.extend(v.all_files().map(|(_, f)| f.number));
            }
        }
        set
    }

    /// Runs the install hooks, makes `edit` durable and installs the
    /// resulting version, which is returned. `last_sequence` is recorded in
    /// the same edit.
    pub fn log_and_apply(
        &mut self,
        mut edit: VersionEdit,
        reason: InstallReason,
        last_sequence: u64,
    ) -> Result<Arc<Version>> {
        let mut next = self.current.apply(&edit)?;
        for h in &self.hooks {
            let ev = InstallEvent {
                reason,
                added: &edit.new_files,
                removed: &edit.deleted_files,
                previous: self.current.ext.get(h.name()),
            };
            let outcome = h.on_install(&ev)?;
            if let Some(p) = outcome.payload {
                edit.ext_payloads.push((h.name().to_string(), p));
            }
            if let Some(s) = outcome.state {
                next.ext.insert(h.name().to_string(), s);
            }
        }
        edit.next_file_number = Some(self.next_file_number.load(Ordering::SeqCst));
        edit.last_sequence = Some(last_sequence);
        if self.manifest.is_none() {
            return Err(Error::Background("no manifest is open for writing".into()));
        }
        let record = edit.encode();
        if !edit.new_files.is_empty() {
            // The new tables' names must be durable before a durable edit
            // names them: a table created (and synced) in a directory never
            // synced may vanish in a power loss (LevelDB syncs the
            // directory before the MANIFEST for the same reason).
            self.fs
                .sync_dir(&self.dir)
                .path_ctx("fsync directory", &self.dir)?;
        }
        let w = self
            .manifest
            .as_mut()
            .ok_or_else(|| Error::Background("no manifest is open for writing".into()))?;
        if let Err(e) = w.add_record(&record).and_then(|_| w.sync()) {
            // The edit may or may not be in the MANIFEST now: no later edit
            // may follow it there (a reopen would replay it with them).
            // The database must be reopened, which starts a new MANIFEST.
            self.manifest = None;
            return Err(e);
        }
        if let Some(n) = edit.log_number {
            self.log_number = n;
        }
        for (name, p) in edit.ext_payloads {
            self.payload_history.entry(name).or_default().push(p);
        }
        let next = Arc::new(next);
        self.current = next.clone();
        self.track(&next);
        Ok(next)
    }

    /// Starts a new manifest holding one edit that describes the whole
    /// current state, then points CURRENT at it (write temp, fsync, rename,
    /// fsync dir). The old manifest is left for obsolete-file deletion.
    pub fn write_fresh_manifest(&mut self, last_sequence: u64) -> Result<()> {
        let number = self.new_file_number();
        let path = filename::manifest_file(&self.dir, number);
        let file = self
            .fs
            .create(&path, true)
            .path_ctx("create manifest", &path)?;
        let mut writer = LogWriter::new(file, path.clone(), 0);
        let mut edit = VersionEdit {
            log_number: Some(self.log_number),
            next_file_number: Some(self.next_file_number.load(Ordering::SeqCst)),
            last_sequence: Some(last_sequence),
            ..VersionEdit::default()
        };
        for (l, f) in self.current.all_files() {
            edit.new_files.push((l, f.clone()));
        }
        for (name, payloads) in &self.payload_history {
            for p in payloads {
                edit.ext_payloads.push((name.clone(), p.clone()));
            }
        }
        writer.add_record(&edit.encode())?;
        writer.sync()?;
        set_current(&*self.fs, &self.dir, number)?;
        self.manifest = Some(writer);
        self.manifest_number = number;
        Ok(())
    }
}

/// Atomically points CURRENT at `MANIFEST-<number>`.
fn set_current(fs: &dyn Fs, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let contents = format!("MANIFEST-{number:06}\n");
    {
        let mut f = fs.create(&tmp, false).path_ctx("create", &tmp)?;
        f.write_all(contents.as_bytes()).path_ctx("write", &tmp)?;
        f.sync_all().path_ctx("fsync", &tmp)?;
    }
    let cur = filename::current_file(dir);
    fs.rename(&tmp, &cur)
        .path_ctx("rename CURRENT.tmp to", &cur)?;
    fs.sync_dir(dir).path_ctx("fsync directory", dir)
}
