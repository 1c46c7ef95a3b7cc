//! A fault-injecting file system for tests (feature `testing`), modelled on
//! LevelDB's `FaultInjectionTestEnv`.
//!
//! [`FaultFs`] performs every operation on the real file system (through
//! [`RealFs`]) and in addition
//!
//! * counts the operations of each [`Op`] kind, and can make the N-th
//!   operation of a kind (counted from the call to [`FaultFs::fail`]) fail
//!   with an `io::Error`, once or from then on ([`FaultFs::fail_from`]).
//!   A failing write first writes the first half of its buffer (a torn
//!   write); any other failing operation changes nothing;
//! * simulates a power loss ([`FaultFs::power_loss`]). What survives is
//!   what the model below calls durable:
//!   - **file contents**: each file written through this `FaultFs` keeps
//!     exactly the bytes it had at its last successful `sync_data` /
//!     `sync_all` (none if never synced); later bytes are dropped, never
//!     kept in part;
//!   - **names**: the creation, rename and removal of a file are durable
//!     once its directory is synced ([`Fs::sync_dir`]). On power loss the
//!     operations after the directory's last sync are undone, newest first:
//!     a created file disappears (even if its data was synced), a renamed
//!     file gets its old name back and the file it replaced comes back, a
//!     removed file comes back (with its durable contents). Removed and
//!     replaced files are kept in the trash directory given to
//!     [`FaultFs::new`] until their directory is synced;
//!   - **directories** are durable as soon as they are created or removed
//!     (`create_dir_all`, `remove_dir_all` are not undone): a simplification;
//!   - files that existed before this `FaultFs` first touched them are
//!     durable as they are.
//!
//! After [`FaultFs::power_loss`] every operation fails (also through the
//! handles already open) until [`FaultFs::revive`]: the test drops the
//! database, revives the file system and reopens, as after a reboot.
//! Handles opened before the power loss stay dead after `revive`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::fs::{FileLock, Fs, LockError, RandomRead, RealFs, WritableFile};
use crate::error::{Error, Result};

/// Kinds of operations counted and failed by [`FaultFs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Opening a file for reading (random or sequential).
    Open,
    /// Creating a file for writing.
    Create,
    /// One read call (a positional read of a block, or a sequential read).
    Read,
    /// One write call.
    Write,
    /// `sync_data` / `sync_all` of a file.
    Sync,
    /// A rename.
    Rename,
    /// A directory sync.
    SyncDir,
    /// Removing a file or directory.
    Remove,
    /// Listing a directory.
    List,
    /// Creating a directory.
    CreateDir,
    /// Locking the LOCK file.
    Lock,
}

impl Op {
    /// Every kind.
    pub const ALL: [Op; 11] = [
        Op::Open,
        Op::Create,
        Op::Read,
        Op::Write,
        Op::Sync,
        Op::Rename,
        Op::SyncDir,
        Op::Remove,
        Op::List,
        Op::CreateDir,
        Op::Lock,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    /// Operations of the kind still to pass before the first failure.
    skip: u64,
    /// Keep failing after the first failure.
    sticky: bool,
    /// Only operations on paths whose file name contains this count.
    only: Option<&'static str>,
}

/// A file written through the `FaultFs` (or touched by a rename or removal).
#[derive(Debug)]
struct Node {
    /// Where the file is now (its name, or a trash path).
    path: PathBuf,
    /// Bytes durable at the last sync; `None`: all of it (the file predates
    /// the model).
    synced: Option<u64>,
}

/// A directory operation not yet made durable by a directory sync.
#[derive(Debug)]
enum DirOp {
    Create {
        node: u64,
    },
    Rename {
        node: u64,
        from: PathBuf,
        to: PathBuf,
        /// The file `to` replaced, moved to the trash.
        displaced: Option<u64>,
    },
    Remove {
        node: u64,
        from: PathBuf,
    },
}

impl DirOp {
    fn dir(&self, nodes: &HashMap<u64, Node>) -> Option<PathBuf> {
        let p = match self {
            DirOp::Create { node } => nodes.get(node).map(|n| n.path.clone())?,
            DirOp::Rename { to, .. } => to.clone(),
            DirOp::Remove { from, .. } => from.clone(),
        };
        p.parent().map(Path::to_path_buf)
    }
}

#[derive(Debug, Default)]
struct Model {
    next_node: u64,
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    journal: Vec<DirOp>,
    trash_seq: u64,
}

impl Model {
    fn add(&mut self, path: &Path, synced: Option<u64>) -> u64 {
        self.next_node += 1;
        let id = self.next_node;
        self.nodes.insert(
            id,
            Node {
                path: path.to_path_buf(),
                synced,
            },
        );
        self.by_path.insert(path.to_path_buf(), id);
        id
    }

    /// The node at `path`, registering a file that predates the model.
    fn node_at(&mut self, path: &Path) -> u64 {
        match self.by_path.get(path) {
            Some(&id) => id,
            None => self.add(path, None),
        }
    }

    fn move_node(&mut self, id: u64, to: &Path) {
        if let Some(n) = self.nodes.get_mut(&id) {
            if self.by_path.get(&n.path) == Some(&id) {
                self.by_path.remove(&n.path);
            }
            n.path = to.to_path_buf();
            self.by_path.insert(to.to_path_buf(), id);
        }
    }
}

struct Shared {
    real: RealFs,
    trash: PathBuf,
    /// Taken for reading by every operation, for writing by `power_loss`.
    gate: RwLock<()>,
    /// Incremented by each power loss; handles of older generations fail.
    generation: AtomicU64,
    dead: AtomicBool,
    counts: [AtomicU64; Op::ALL.len()],
    faults: Mutex<HashMap<Op, Fault>>,
    injected: AtomicU64,
    model: Mutex<Model>,
}

fn injected_error(op: Op) -> std::io::Error {
    std::io::Error::other(format!("injected fault ({op:?})"))
}

fn dead_error() -> std::io::Error {
    std::io::Error::other("simulated power loss: the file system is down")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Counts an operation of kind `op` by a handle of generation `gen`
    /// (`None`: not a handle); an error if it must fail.
    fn check(&self, op: Op, gen: Option<u64>, path: &Path) -> std::io::Result<()> {
        if self.dead.load(Ordering::SeqCst)
            || gen.is_some_and(|g| g != self.generation.load(Ordering::SeqCst))
        {
            return Err(dead_error());
        }
        if let Some(c) = self.counts.get(op.index()) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let mut faults = lock(&self.faults);
        if let Some(f) = faults.get_mut(&op) {
            let matches = f.only.is_none_or(|needle| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains(needle))
            });
            if !matches {
                return Ok(());
            }
            if f.skip > 0 {
                f.skip -= 1;
            } else {
                if !f.sticky {
                    faults.remove(&op);
                }
                self.injected.fetch_add(1, Ordering::SeqCst);
                return Err(injected_error(op));
            }
        }
        Ok(())
    }

    fn gate(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// The fault-injecting file system (see the module doc).
#[derive(Clone)]
pub struct FaultFs {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFs")
            .field("trash", &self.shared.trash)
            .field("injected", &self.injected())
            .finish_non_exhaustive()
    }
}

impl FaultFs {
    /// A fault-injecting file system keeping removed files in `trash` (a
    /// directory on the same file system as the databases, created if
    /// missing; never a database directory).
    pub fn new(trash: impl Into<PathBuf>) -> FaultFs {
        FaultFs {
            shared: Arc::new(Shared {
                real: RealFs,
                trash: trash.into(),
                gate: RwLock::new(()),
                generation: AtomicU64::new(0),
                dead: AtomicBool::new(false),
                counts: Default::default(),
                faults: Mutex::new(HashMap::new()),
                injected: AtomicU64::new(0),
                model: Mutex::new(Model::default()),
            }),
        }
    }

    /// This file system as the engine's [`Fs`].
    pub fn as_fs(&self) -> Arc<dyn Fs> {
        Arc::new(self.clone())
    }

    /// Makes the `nth` (1-based) operation of kind `op` from now on fail,
    /// once. Replaces any fault planned for `op`.
    pub fn fail(&self, op: Op, nth: u64) {
        lock(&self.shared.faults).insert(
            op,
            Fault {
                skip: nth.saturating_sub(1),
                sticky: false,
                only: None,
            },
        );
    }

    /// [`FaultFs::fail`] counting only operations on files whose name
    /// contains `needle` (e.g. `"MANIFEST"`).
    pub fn fail_on(&self, op: Op, nth: u64, needle: &'static str) {
        lock(&self.shared.faults).insert(
            op,
            Fault {
                skip: nth.saturating_sub(1),
                sticky: false,
                only: Some(needle),
            },
        );
    }

    /// Makes the `nth` operation of kind `op` from now on and every later
    /// one fail, until [`FaultFs::clear_faults`].
    pub fn fail_from(&self, op: Op, nth: u64) {
        lock(&self.shared.faults).insert(
            op,
            Fault {
                skip: nth.saturating_sub(1),
                sticky: true,
                only: None,
            },
        );
    }

    /// Removes every planned fault.
    pub fn clear_faults(&self) {
        lock(&self.shared.faults).clear();
    }

    /// Number of failures injected so far.
    pub fn injected(&self) -> u64 {
        self.shared.injected.load(Ordering::SeqCst)
    }

    /// Operations of kind `op` counted so far (failed ones included).
    pub fn count(&self, op: Op) -> u64 {
        self.shared
            .counts
            .get(op.index())
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Simulates a power loss (see the module doc): waits for operations in
    /// flight, reduces the files and directories to their durable state,
    /// and fails every operation until [`FaultFs::revive`].
    pub fn power_loss(&self) -> Result<()> {
        let _gate = self.shared.gate.write().unwrap_or_else(|p| p.into_inner());
        self.shared.dead.store(true, Ordering::SeqCst);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        let mut m = lock(&self.shared.model);
        let journal = std::mem::take(&mut m.journal);
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Error::io(format!("power loss: {what} {}", p.display()), e)
        };
        for op in journal.into_iter().rev() {
            match op {
                DirOp::Create { node } => {
                    if let Some(n) = m.nodes.remove(&node) {
                        if m.by_path.get(&n.path) == Some(&node) {
                            m.by_path.remove(&n.path);
                        }
                        match std::fs::remove_file(&n.path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(io("remove", &n.path, e)),
                        }
                    }
                }
                DirOp::Rename {
                    node,
                    from,
                    to,
                    displaced,
                } => {
                    std::fs::rename(&to, &from).map_err(|e| io("rename back", &to, e))?;
                    m.move_node(node, &from);
                    if let Some(d) = displaced {
                        let t = m.nodes.get(&d).map(|n| n.path.clone());
                        if let Some(t) = t {
                            std::fs::rename(&t, &to).map_err(|e| io("restore", &to, e))?;
                            m.move_node(d, &to);
                        }
                    }
                }
                DirOp::Remove { node, from } => {
                    let t = m.nodes.get(&node).map(|n| n.path.clone());
                    if let Some(t) = t {
                        std::fs::rename(&t, &from).map_err(|e| io("restore", &from, e))?;
                        m.move_node(node, &from);
                    }
                }
            }
        }
        for n in m.nodes.values() {
            let Some(synced) = n.synced else { continue };
            if n.path.starts_with(&self.shared.trash) {
                continue;
            }
            match std::fs::OpenOptions::new().write(true).open(&n.path) {
                Ok(f) => {
                    let len = f.metadata().map_err(|e| io("stat", &n.path, e))?.len();
                    if len > synced {
                        f.set_len(synced).map_err(|e| io("truncate", &n.path, e))?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("open", &n.path, e)),
            }
        }
        // Everything left is durable now.
        *m = Model::default();
        let _ = std::fs::remove_dir_all(&self.shared.trash);
        Ok(())
    }

    /// Ends a simulated power loss: operations work again (not through
    /// handles opened before it). Planned faults are kept.
    pub fn revive(&self) {
        self.shared.dead.store(false, Ordering::SeqCst);
    }

    fn trash_path(&self, m: &mut Model) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.shared.trash)?;
        m.trash_seq += 1;
        Ok(self.shared.trash.join(format!("{}", m.trash_seq)))
    }
}

struct FaultRandom {
    inner: Box<dyn RandomRead>,
    shared: Arc<Shared>,
    gen: u64,
    path: PathBuf,
}

impl RandomRead for FaultRandom {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let _g = self.shared.gate();
        self.shared
            .check(Op::Read, Some(self.gen), &self.path)
            .map_err(|e| {
                Error::io(
                    format!("read {} at {offset} (+{len})", self.path.display()),
                    e,
                )
            })?;
        self.inner.read_at(offset, len)
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
}

struct FaultSequential {
    inner: Box<dyn Read + Send>,
    shared: Arc<Shared>,
    gen: u64,
    path: PathBuf,
}

impl Read for FaultSequential {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let _g = self.shared.gate();
        self.shared.check(Op::Read, Some(self.gen), &self.path)?;
        self.inner.read(buf)
    }
}

struct FaultWritable {
    inner: File,
    shared: Arc<Shared>,
    gen: u64,
    path: PathBuf,
    node: u64,
    /// Bytes written so far (the file was empty when created).
    written: u64,
}

impl Write for FaultWritable {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _g = self.shared.gate();
        if let Err(e) = self.shared.check(Op::Write, Some(self.gen), &self.path) {
            if !self.shared.dead.load(Ordering::SeqCst) {
                // A torn write: the first half reaches the file.
                let half = buf.get(..buf.len() / 2).unwrap_or_default();
                if self.inner.write_all(half).is_ok() {
                    self.written += half.len() as u64;
                }
            }
            return Err(e);
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl FaultWritable {
    fn sync_with(&mut self, f: fn(&File) -> std::io::Result<()>) -> std::io::Result<()> {
        let _g = self.shared.gate();
        self.shared.check(Op::Sync, Some(self.gen), &self.path)?;
        f(&self.inner)?;
        if let Some(n) = lock(&self.shared.model).nodes.get_mut(&self.node) {
            n.synced = Some(self.written);
        }
        Ok(())
    }
}

impl WritableFile for FaultWritable {
    fn sync_data(&mut self) -> std::io::Result<()> {
        self.sync_with(File::sync_data)
    }

    fn sync_all(&mut self) -> std::io::Result<()> {
        self.sync_with(File::sync_all)
    }
}

struct FaultLock {
    _inner: Box<dyn FileLock>,
}

impl FileLock for FaultLock {}

impl Fs for FaultFs {
    fn open_random(&self, path: &Path, direct: bool) -> Result<Box<dyn RandomRead>> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Open, None, path)
            .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
        Ok(Box::new(FaultRandom {
            inner: s.real.open_random(path, direct)?,
            shared: s.clone(),
            gen: s.generation.load(Ordering::SeqCst),
            path: path.to_path_buf(),
        }))
    }

    fn open_sequential(&self, path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Open, None, path)?;
        Ok(Box::new(FaultSequential {
            inner: s.real.open_sequential(path)?,
            shared: s.clone(),
            gen: s.generation.load(Ordering::SeqCst),
            path: path.to_path_buf(),
        }))
    }

    fn create(&self, path: &Path, exclusive: bool) -> std::io::Result<Box<dyn WritableFile>> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Create, None, path)?;
        let existed = path.exists();
        let mut o = std::fs::OpenOptions::new();
        o.write(true);
        if exclusive {
            o.create_new(true);
        } else {
            o.create(true).truncate(true);
        }
        let file = o.open(path)?;
        let mut m = lock(&s.model);
        let node = if existed {
            // Truncated in place: its old contents are not durable any more.
            let id = m.node_at(path);
            if let Some(n) = m.nodes.get_mut(&id) {
                n.synced = Some(0);
            }
            id
        } else {
            let id = m.add(path, Some(0));
            m.journal.push(DirOp::Create { node: id });
            id
        };
        Ok(Box::new(FaultWritable {
            inner: file,
            shared: s.clone(),
            gen: s.generation.load(Ordering::SeqCst),
            path: path.to_path_buf(),
            node,
            written: 0,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Rename, None, to)?;
        let mut m = lock(&s.model);
        if !from.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("rename: {} not found", from.display()),
            ));
        }
        let node = m.node_at(from);
        let displaced = if to.exists() {
            let d = m.node_at(to);
            let t = self.trash_path(&mut m)?;
            std::fs::rename(to, &t)?;
            m.move_node(d, &t);
            Some(d)
        } else {
            None
        };
        if let Err(e) = std::fs::rename(from, to) {
            if let Some(d) = displaced {
                let t = m.nodes.get(&d).map(|n| n.path.clone());
                if let Some(t) = t {
                    let _ = std::fs::rename(&t, to);
                    m.move_node(d, to);
                }
            }
            return Err(e);
        }
        m.move_node(node, to);
        m.journal.push(DirOp::Rename {
            node,
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            displaced,
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Remove, None, path)?;
        let mut m = lock(&s.model);
        if !path.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("remove: {} not found", path.display()),
            ));
        }
        let node = m.node_at(path);
        let t = self.trash_path(&mut m)?;
        std::fs::rename(path, &t)?;
        m.move_node(node, &t);
        m.journal.push(DirOp::Remove {
            node,
            from: path.to_path_buf(),
        });
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::CreateDir, None, path)?;
        s.real.create_dir_all(path)
    }

    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Remove, None, path)?;
        s.real.remove_dir(path)
    }

    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Remove, None, path)?;
        // Directories are not modelled: the removal is durable at once, and
        // the model forgets what was inside.
        let mut m = lock(&s.model);
        let inside: Vec<u64> = m
            .nodes
            .iter()
            .filter(|(_, n)| n.path.starts_with(path))
            .map(|(&id, _)| id)
            .collect();
        m.journal.retain(|op| match op {
            DirOp::Create { node } | DirOp::Rename { node, .. } | DirOp::Remove { node, .. } => {
                !inside.contains(node)
            }
        });
        for id in inside {
            if let Some(n) = m.nodes.remove(&id) {
                m.by_path.remove(&n.path);
            }
        }
        s.real.remove_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<OsString>> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::List, None, path)?;
        s.real.list_dir(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::SyncDir, None, path)?;
        s.real.sync_dir(path)?;
        let mut m = lock(&s.model);
        let journal = std::mem::take(&mut m.journal);
        let mut keep = Vec::with_capacity(journal.len());
        for op in journal {
            if op.dir(&m.nodes).as_deref() != Some(path) {
                keep.push(op);
                continue;
            }
            // Durable now: files in the trash are gone for good.
            let gone = match op {
                DirOp::Remove { node, .. } => Some(node),
                DirOp::Rename { displaced, .. } => displaced,
                DirOp::Create { .. } => None,
            };
            if let Some(id) = gone {
                if let Some(n) = m.nodes.remove(&id) {
                    m.by_path.remove(&n.path);
                    let _ = std::fs::remove_file(&n.path);
                }
            }
        }
        m.journal = keep;
        Ok(())
    }

    fn file_size(&self, path: &Path) -> std::io::Result<u64> {
        let _g = self.shared.gate();
        self.shared.check(Op::Open, None, path)?;
        self.shared.real.file_size(path)
    }

    fn lock(&self, path: &Path) -> std::result::Result<Box<dyn FileLock>, LockError> {
        let s = &self.shared;
        let _g = s.gate();
        s.check(Op::Lock, None, path).map_err(LockError::Io)?;
        // The LOCK file holds no data: its creation is not modelled.
        let l = s.real.lock(path)?;
        Ok(Box::new(FaultLock { _inner: l }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_loss_keeps_synced_bytes_and_durable_names() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let fs = FaultFs::new(root.path().join("trash"));
        fs.create_dir_all(&dir).unwrap();
        // Created, synced, directory synced: survives with its synced bytes.
        let a = dir.join("a");
        let mut f = fs.create(&a, true).unwrap();
        f.write_all(b"durable").unwrap();
        f.sync_data().unwrap();
        f.write_all(b" lost").unwrap();
        fs.sync_dir(&dir).unwrap();
        // Created and synced, directory not synced: gone.
        let b = dir.join("b");
        let mut g = fs.create(&b, true).unwrap();
        g.write_all(b"x").unwrap();
        g.sync_data().unwrap();
        // A rename over an existing durable file, not made durable.
        let c = dir.join("c");
        std::fs::write(&c, b"old").unwrap();
        let t = dir.join("t");
        let mut h = fs.create(&t, false).unwrap();
        h.write_all(b"new").unwrap();
        h.sync_all().unwrap();
        fs.rename(&t, &c).unwrap();
        // A removal, not made durable.
        let d = dir.join("d");
        std::fs::write(&d, b"kept").unwrap();
        fs.remove_file(&d).unwrap();
        assert!(!d.exists());

        fs.power_loss().unwrap();
        assert!(f.write_all(b"z").is_err());
        assert!(fs.list_dir(&dir).is_err());
        assert_eq!(std::fs::read(&a).unwrap(), b"durable");
        assert!(!b.exists());
        assert_eq!(std::fs::read(&c).unwrap(), b"old");
        assert!(!t.exists());
        assert_eq!(std::fs::read(&d).unwrap(), b"kept");
        fs.revive();
        assert!(f.write_all(b"z").is_err(), "old handles stay dead");
        assert_eq!(fs.list_dir(&dir).unwrap().len(), 3);
    }

    #[test]
    fn nth_operation_fails_once_or_from_then_on() {
        let root = tempfile::tempdir().unwrap();
        let fs = FaultFs::new(root.path().join("trash"));
        let p = root.path().join("f");
        let mut f = fs.create(&p, true).unwrap();
        fs.fail(Op::Write, 2);
        assert!(f.write_all(b"ab").is_ok());
        assert!(f.write_all(b"cdef").is_err());
        assert!(f.write_all(b"gh").is_ok());
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"abcdgh",
            "torn write keeps half"
        );
        fs.fail_from(Op::Sync, 1);
        assert!(f.sync_data().is_err());
        assert!(f.sync_data().is_err());
        fs.clear_faults();
        assert!(f.sync_data().is_ok());
        assert_eq!(fs.injected(), 3);
        assert_eq!(fs.count(Op::Sync), 3);
    }
}
