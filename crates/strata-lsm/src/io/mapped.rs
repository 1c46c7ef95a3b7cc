//! Append-only files written through a shared memory mapping: the WAL's
//! writer on Linux ([`crate::Options::wal_mmap`], on by default).
//!
//! A `write` system call per WAL record cost 1.7–2.4 µs on our ext4 VM
//! disk, against 0.36 µs for the same appends copied into a mapped window
//! (`docs/benchmarks.md`, "The WAL through a memory mapping"); LevelDB
//! 1.14, the engine LevelDB++ measured, wrote its log the same way.
//!
//! The file grows by *windows*: before a window is mapped, `fallocate`
//! allocates its blocks and extends the file's length to the window's end,
//! so a store into the mapping never needs a block the file system could
//! fail to provide (a full disk is `fallocate`'s error, returned by
//! `write`, not a `SIGBUS`). The first window is [`MIN_WINDOW`] bytes, each
//! next one as long as the file so far, up to [`MAX_WINDOW`]; window starts
//! are multiples of `MIN_WINDOW`, hence of the page size.
//!
//! Durability is a written file's: the mapping is shared, so the bytes are
//! in the page cache once `write` returns (a crash of the process loses
//! nothing), and [`MappedLog::sync_data`] (`fdatasync`, which writes
//! back pages dirtied through mappings as well, and the length
//! `fallocate` set) makes them durable.
//!
//! Until it is dropped, the file ends in zeros up to the window's end. The
//! log format reserves type 0, so zeros are never a record, and the reader
//! takes them for a torn tail (`docs/format/wal.md`). Dropping unmaps the
//! window and truncates the file to the bytes written (not synced: after a
//! power loss the zeros may be back, which reads the same).
//!
//! Every [`WRITEBACK_CHUNK`] bytes appended, the file's writeback is
//! started for them (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`), so
//! that the `fdatasync` of a full WAL at a memtable switch — on the
//! writer's path — finds little left to write: it took 0.2–0.4 s for a
//! 64 MiB WAL on our VM disk when every byte was still dirty.
//! Before that, the writer unmaps those pages from its window
//! (`MADV_DONTNEED`; their bytes stay in the page cache): writeback
//! write-protects each mapped page it starts on, and each one cost an
//! interrupt to flush the other cores' TLBs.
//!
//! Neither that call nor `fallocate` runs on the writer's path: both block
//! on a busy disk (`strace -T` of a 200 k-put replay beside flushes and
//! compactions: 89 `sync_file_range` calls took 0.42 s in the writer, up
//! to 15 ms each, and 31 `fallocate` calls 0.12 s). Each log has a worker
//! thread (`strata-wal-wb`) that starts the writeback the writer asks for
//! and prepares the next window once the writer is halfway through the
//! current one: allocates it, maps it and faults its pages in
//! (`MADV_POPULATE_WRITE`); the writer waits only if it reaches the
//! window's end first. Without a worker (the thread could not be
//! started) the writer allocates and maps each window itself.
//!
//! The first store into a fresh page of the mapping faults, and the fault
//! (page cache allocation, zeroing, ext4's `page_mkwrite`) cost 3.8–4.2 µs
//! a page on our VM disk, 0.14 µs once populated (`docs/benchmarks.md`,
//! session 40): about 0.4 µs of every 450-byte record when the writer
//! took the faults. Populated pages are dirty zeros, which a sync writes
//! like data, so:
//! - windows are at most [`MAX_WINDOW`] (1 MiB): a sync writes at most two
//!   windows of zeros beyond the data;
//! - a window is populated only if the log was not synced while the
//!   writer filled the previous half window (a log synced on every write
//!   would write each zero page and fault again after the sync);
//! - [`MappedLog::finish`], which ends a log at a memtable switch and at
//!   close, truncates the file to its bytes before it syncs them.
//!
//! Where the file system cannot preallocate (`fallocate` unsupported),
//! [`create`] hands back the plain file and the WAL is written with
//! `write` calls as before.

// One of the two modules with `unsafe` (with `mapped_read`): mapping the file and `fallocate`, see the
// `SAFETY` comments.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use memmap2::{MmapMut, MmapOptions};

use crate::sync::{lock, wait};

/// Length of the first window.
pub const MIN_WINDOW: u64 = 256 << 10;
/// Largest window.
pub const MAX_WINDOW: u64 = 1 << 20;
/// Appended bytes between two starts of writeback.
pub const WRITEBACK_CHUNK: u64 = 512 << 10;
/// Writeback is started for whole pages of this size (a multiple of the
/// page size of every Linux platform we build for).
const PAGE: u64 = 4096;

/// An append-only file written through a mapped window.
///
/// Invariants: `start` is a multiple of [`MIN_WINDOW`]; `start <= pos`;
/// `written_back <= pos` is a multiple of `PAGE`;
/// if `map` is `Some`, it maps file bytes `start..start + map.len()`, all
/// allocated, and `pos <= start + map.len()`; if `None`, `pos == start`
/// and the next write maps the window at `start`.
pub struct MappedLog {
    file: Arc<File>,
    map: Option<MmapMut>,
    start: u64,
    pos: u64,
    /// Writeback was asked for (or, without a worker, started) for the
    /// bytes before this offset.
    written_back: u64,
    /// The next window was asked of the worker.
    next_asked: bool,
    /// The file was synced since the last window was asked for.
    synced: bool,
    /// [`MappedLog::finish`] ran: no write may follow.
    finished: bool,
    worker: Option<Worker>,
}

/// The log's worker thread and what it shares with the writer.
struct Worker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    work: Mutex<Work>,
    /// Wakes the worker: work was asked for, or `stop`.
    wake: Condvar,
    /// Wakes a writer waiting for an allocation.
    allocated: Condvar,
}

/// Invariants: `writeback_done <= writeback_to`, both multiples of `PAGE`;
/// the file's bytes `0..allocated_to` are allocated; `alloc` is a window
/// starting at `allocated_to`; `ready` maps a window that ends at
/// `allocated_to`.
#[derive(Default)]
struct Work {
    /// The writer asks for writeback of the bytes before this offset.
    writeback_to: u64,
    /// Writeback was started for the bytes before this offset.
    writeback_done: u64,
    /// The window the writer wants allocated next.
    alloc: Option<Ask>,
    allocated_to: u64,
    /// The window the worker allocated and mapped for the writer: its
    /// start and mapping.
    ready: Option<(u64, MmapMut)>,
    /// The last allocation failed (handed to the writer once).
    alloc_err: Option<std::io::Error>,
    stop: bool,
}

/// A window asked of the worker.
#[derive(Clone, Copy)]
struct Ask {
    start: u64,
    len: u64,
    /// Fault its pages in once mapped (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    populate: bool,
}

/// What [`Worker::allocate`] found.
enum Allocated {
    /// Allocated and mapped by the worker.
    Mapped(MmapMut),
    /// Allocated; the writer maps it.
    Unmapped,
    /// Not the worker's next window (never expected): the writer
    /// allocates it.
    NotAsked,
}

impl Worker {
    /// Starts the worker of `file`, whose bytes `0..allocated_to` are
    /// allocated; `None` if the thread cannot be started.
    fn start(file: Arc<File>, allocated_to: u64) -> Option<Worker> {
        let shared = Arc::new(Shared {
            work: Mutex::new(Work {
                allocated_to,
                ..Work::default()
            }),
            wake: Condvar::new(),
            allocated: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("strata-wal-wb".into())
            .spawn(move || work_loop(&s, &file))
            .ok()?;
        Some(Worker {
            shared,
            thread: Some(thread),
        })
    }
    /// Waits until the window `start..start + len` is allocated, asking
    /// for it (not populated) if it was not yet.
    fn allocate(&self, start: u64, len: u64) -> std::io::Result<Allocated> {
        let shared = &self.shared;
        let mut w = lock(&shared.work);
        loop {
            if w.allocated_to >= start + len {
                return Ok(match w.ready.take() {
                    Some((s, map)) if s == start && map.len() as u64 == len => {
                        Allocated::Mapped(map)
                    }
                    _ => Allocated::Unmapped,
                });
            }
            if let Some(e) = w.alloc_err.take() {
                return Err(e);
            }
            if w.alloc.is_none() {
                if w.allocated_to != start {
                    return Ok(Allocated::NotAsked);
                }
                w.alloc = Some(Ask {
                    start,
                    len,
                    populate: false,
                });
                shared.wake.notify_one();
            }
            w = wait(&shared.allocated, w);
        }
    }
}

/// Stops the worker once it has done what was asked (an allocation asked
/// for is made), and waits for it.
impl Drop for Worker {
    fn drop(&mut self) {
        lock(&self.shared.work).stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The worker: allocations first (a writer may be waiting), then
/// writeback, each system call made without the lock.
fn work_loop(shared: &Shared, file: &File) {
    let mut w = lock(&shared.work);
    loop {
        if let Some(ask) = w.alloc.take() {
            drop(w);
            let r = allocate(file, ask.start, ask.len).map(|()| prepare(file, ask));
            w = lock(&shared.work);
            match r {
                Ok(map) => {
                    w.allocated_to = ask.start + ask.len;
                    w.ready = map.map(|m| (ask.start, m));
                }
                Err(e) => w.alloc_err = Some(e),
            }
            shared.allocated.notify_all();
            continue;
        }
        if w.writeback_to > w.writeback_done {
            let (from, to) = (w.writeback_done, w.writeback_to);
            drop(w);
            start_writeback(file, from, to - from);
            w = lock(&shared.work);
            w.writeback_done = w.writeback_done.max(to);
            continue;
        }
        if w.stop {
            return;
        }
        w = wait(&shared.wake, w);
    }
}

/// Maps the allocated window `ask` and, if asked, faults its pages in for
/// writing. `None` if it cannot be mapped: the writer maps it then, and
/// reports the error. Populating is a hint (Linux 5.14 and later); its
/// errors leave the pages to fault on the writer's first stores.
fn prepare(file: &File, ask: Ask) -> Option<MmapMut> {
    let map = map_window(file, ask.start, ask.len).ok()?;
    #[cfg(target_os = "linux")]
    if ask.populate {
        let _ = map.advise(memmap2::Advice::PopulateWrite);
    }
    Some(map)
}

/// What [`create`] made.
pub enum Created {
    /// Writes go through the mapping.
    Mapped(MappedLog),
    /// The file system cannot preallocate: write to the plain file.
    Plain(File),
}

/// Creates `path` (it must not exist) and maps its first window.
pub fn create(path: &Path) -> std::io::Result<Created> {
    // Read access as well: a shared writable mapping needs it.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)?;
    match allocate(&file, 0, MIN_WINDOW) {
        Ok(()) => {}
        Err(e) if unsupported(&e) => return Ok(Created::Plain(file)),
        Err(e) => return Err(e),
    }
    let map = map_window(&file, 0, MIN_WINDOW)?;
    let file = Arc::new(file);
    let worker = Worker::start(file.clone(), MIN_WINDOW);
    Ok(Created::Mapped(MappedLog {
        file,
        map: Some(map),
        start: 0,
        pos: 0,
        written_back: 0,
        next_asked: false,
        synced: false,
        finished: false,
        worker,
    }))
}

/// Length of the window that starts at `start`.
fn window_len(start: u64) -> u64 {
    start.clamp(MIN_WINDOW, MAX_WINDOW)
}

fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
    ) || e.kind() == std::io::ErrorKind::Unsupported
}

/// Allocates the file's bytes `offset..offset + len`, extending its length.
#[cfg(target_os = "linux")]
fn allocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::Error::other(
            "WAL window beyond the file offset range",
        ));
    };
    loop {
        // SAFETY: a plain system call on a file descriptor `file` owns and
        // keeps open for the call; no memory is passed.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, n) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Starts writeback of the file's bytes `offset..offset + len` without
/// waiting for it. A hint: errors are left to the next `fdatasync`, which
/// reports write-back failures of the file.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::unix::io::AsRawFd;
    if let (Ok(off), Ok(n)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) {
        // SAFETY: a plain system call on a file descriptor `file` owns and
        // keeps open for the call; no memory is passed.
        let _ =
            unsafe { libc::sync_file_range(file.as_raw_fd(), off, n, libc::SYNC_FILE_RANGE_WRITE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

#[cfg(not(target_os = "linux"))]
fn allocate(_file: &File, _offset: u64, _len: u64) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

fn map_window(file: &File, start: u64, len: u64) -> std::io::Result<MmapMut> {
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: the mapped bytes `start..start + len` are allocated (the
    // caller ran `allocate` on them), so no store faults for a block the
    // file system cannot provide. The file was created by `create`
    // (`create_new`) in a database directory whose LOCK this process holds,
    // and the engine reads it only through other handles after the writer
    // is gone, never writes or truncates it while a mapping exists (`Drop`
    // and `finish` unmap first, the worker's prepared window with the
    // worker): nothing changes the mapped bytes behind the slice.
    unsafe { MmapOptions::new().offset(start).len(len).map_mut(file) }
}

impl MappedLog {
    /// Bytes appended so far.
    pub fn len(&self) -> u64 {
        self.pos
    }

    /// True if nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// `fdatasync`: makes the bytes appended durable (pages dirtied through
    /// the mapping are written back like any dirty page of the file) with
    /// the length `fallocate` set.
    pub fn sync_data(&mut self) -> std::io::Result<()> {
        self.synced = true;
        self.file.sync_data()
    }

    /// `fsync`.
    pub fn sync_all(&mut self) -> std::io::Result<()> {
        self.synced = true;
        self.file.sync_all()
    }

    /// Ends the log: unmaps it, truncates the file to the bytes appended
    /// (so the populated zeros past them are never written) and makes
    /// those bytes durable (`fdatasync`, which covers the length). Writes
    /// fail afterwards.
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.close()?;
        self.file.sync_data()
    }

    /// Stops the worker, unmaps every window and truncates the file to
    /// the bytes appended; writes fail afterwards. The worker goes first:
    /// no allocation may extend the file after the truncation, and its
    /// prepared window is unmapped with it.
    fn close(&mut self) -> std::io::Result<()> {
        self.finished = true;
        self.worker = None;
        self.map = None;
        self.file.set_len(self.pos)
    }

    /// Maps the window at `start` (the current one is full or unmapped),
    /// once its bytes are allocated: by the worker ([`Worker::allocate`]),
    /// or here without a worker.
    fn next_window(&mut self) -> std::io::Result<()> {
        if let Some(m) = self.map.take() {
            self.start += m.len() as u64;
        }
        let len = window_len(self.start);
        // Asked again (by the next write) if this one fails.
        self.next_asked = false;
        let got = match &self.worker {
            Some(w) => w.allocate(self.start, len)?,
            None => Allocated::NotAsked,
        };
        let map = match got {
            Allocated::Mapped(m) => m,
            Allocated::Unmapped => map_window(&self.file, self.start, len)?,
            Allocated::NotAsked => {
                allocate(&self.file, self.start, len)?;
                map_window(&self.file, self.start, len)?
            }
        };
        self.map = Some(map);
        Ok(())
    }

    /// Removes the file's bytes `from..to` (whole pages, all written,
    /// about to be written back) from this process's mapping; their bytes
    /// stay in the page cache, dirty. Writeback write-protects every
    /// mapped page it starts on, and flushed the other cores' TLBs for
    /// each one with an interrupt: 19% of the CPU of a 500 k-record
    /// ingest (`perf`: `sync_file_range` → `folio_mkclean` →
    /// `flush_tlb_mm_range`); unmapping them first flushes once for the
    /// whole range. A hint: an error leaves them mapped.
    fn unmap_pages(&self, from: u64, to: u64) {
        let Some(m) = &self.map else { return };
        let end = self.start + m.len() as u64;
        let (lo, hi) = (from.max(self.start), to.min(end));
        if hi <= lo {
            return;
        }
        if let (Ok(off), Ok(len)) = (usize::try_from(lo - self.start), usize::try_from(hi - lo)) {
            // SAFETY: `MADV_DONTNEED` on a shared file mapping only drops
            // the page table entries of `off..off + len` (inside the
            // window): the file's bytes, dirty in the page cache, stay,
            // and a later access maps them again. No reference into the
            // range is alive (the writer appends only at `pos >= to`, and
            // the map is borrowed here immutably).
            let _ =
                unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, off, len) };
        }
    }

    /// Past half of the current window: asks the worker to prepare the
    /// next one, populated unless the log was synced since the last ask.
    fn ask_next_window(&mut self) {
        let (Some(worker), Some(m)) = (&self.worker, &self.map) else {
            return;
        };
        let len = m.len() as u64;
        if self.next_asked || self.pos - self.start < len / 2 {
            return;
        }
        self.next_asked = true;
        let populate = !std::mem::replace(&mut self.synced, false);
        let next = self.start + len;
        let mut w = lock(&worker.shared.work);
        if w.alloc.is_none() && w.allocated_to == next {
            w.alloc = Some(Ask {
                start: next,
                len: window_len(next),
                populate,
            });
            worker.shared.wake.notify_one();
        }
    }
}

impl Write for MappedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.finished {
            return Err(std::io::Error::other("write to a finished log"));
        }
        let mut done = 0;
        while done < buf.len() {
            let off = (self.pos - self.start) as usize;
            let room = self.map.as_mut().and_then(|m| m.get_mut(off..));
            let dst = match room {
                Some(d) if !d.is_empty() => d,
                _ => {
                    if let Err(e) = self.next_window() {
                        // What was copied is in the file: report it, and
                        // the error on the next call.
                        return if done > 0 { Ok(done) } else { Err(e) };
                    }
                    continue;
                }
            };
            let src = buf.get(done..).unwrap_or(&[]);
            let n = dst.len().min(src.len());
            if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
                d.copy_from_slice(s);
            }
            done += n;
            self.pos += n as u64;
        }
        // Whole pages only: a page under writeback is write-protected, and
        // the next append into it would wait for the write to finish.
        let done_pages = self.pos & !(PAGE - 1);
        if done_pages.saturating_sub(self.written_back) >= WRITEBACK_CHUNK {
            self.unmap_pages(self.written_back, done_pages);
            match &self.worker {
                Some(worker) => {
                    let mut w = lock(&worker.shared.work);
                    w.writeback_to = w.writeback_to.max(done_pages);
                    worker.shared.wake.notify_one();
                }
                None => start_writeback(
                    &self.file,
                    self.written_back,
                    done_pages - self.written_back,
                ),
            }
            self.written_back = done_pages;
        }
        self.ask_next_window();
        Ok(done)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        // Best effort: a file left longer ends in zeros, read as a torn
        // tail.
        let _ = self.close();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    use crate::test_data::payload;

    fn mapped(path: &Path) -> MappedLog {
        match create(path).unwrap() {
            Created::Mapped(m) => m,
            Created::Plain(_) => panic!("the test file system cannot preallocate"),
        }
    }

    /// Appends cross window boundaries; while the writer lives the file is
    /// the bytes written then zeros (what a crashed process leaves); after
    /// the drop it is exactly the bytes written.
    #[test]
    fn appends_across_windows_then_truncates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.log");
        let mut f = mapped(&path);
        let mut want = Vec::new();
        let mut seed = 0;
        // Past MIN_WINDOW + 256 KiB + 512 KiB + 1 MiB + ... into a 4 MiB window.
        while want.len() < 9 << 20 {
            seed += 1;
            let b = payload(seed, 1 + (seed as usize * 7919) % 70_000);
            f.write_all(&b).unwrap();
            want.extend_from_slice(&b);
        }
        assert_eq!(f.len(), want.len() as u64);
        f.sync_data().unwrap();
        let seen = std::fs::read(&path).unwrap();
        assert!(seen.len() >= want.len());
        assert_eq!(&seen[..want.len()], &want[..]);
        assert!(seen[want.len()..].iter().all(|&b| b == 0));
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// Bytes of `map` present in this process's page tables, from
    /// `/proc/self/pagemap` (bit 63 of each page's entry). Not an
    /// `smaps` `Rss`: that counts a whole VMA, and the kernel merges a
    /// window with the next one when the next is mapped right after it in
    /// the address space (consecutive file ranges, same flags), which made
    /// a window look 1.5 MiB resident about once in twelve runs of the
    /// crate's tests.
    #[cfg(target_os = "linux")]
    fn present_bytes(map: &MmapMut) -> u64 {
        use std::io::{Read, Seek, SeekFrom};
        let first = map.as_ptr() as u64 / PAGE;
        let pages = (map.len() as u64).div_ceil(PAGE);
        let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
        f.seek(SeekFrom::Start(first * 8)).unwrap();
        let mut entries = vec![0u8; pages as usize * 8];
        f.read_exact(&mut entries).unwrap();
        let present = entries
            .chunks_exact(8)
            .filter(|e| u64::from_le_bytes(<[u8; 8]>::try_from(*e).unwrap()) >> 63 == 1)
            .count();
        present as u64 * PAGE
    }

    /// Bytes present of the window the worker has prepared (mapped, not
    /// yet taken by the writer) at file offset `start`.
    #[cfg(target_os = "linux")]
    fn ready_present(f: &MappedLog, start: u64) -> u64 {
        let worker = f.worker.as_ref().unwrap();
        let w = lock(&worker.shared.work);
        let (at, map) = w.ready.as_ref().unwrap();
        assert_eq!(*at, start);
        present_bytes(map)
    }

    /// Waits until the worker has prepared (allocated and mapped) the
    /// window after the current one.
    fn wait_for_ready(f: &MappedLog) -> u64 {
        let worker = f.worker.as_ref().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some((start, _)) = &lock(&worker.shared.work).ready {
                return *start;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the next window was not prepared"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Pages handed to writeback leave the mapping first (one TLB flush
    /// for the range instead of one per page): the window keeps mapped
    /// only what was written since and the populated pages ahead, and the
    /// file has every byte.
    #[cfg(target_os = "linux")]
    #[test]
    fn pages_handed_to_writeback_leave_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000003.log");
        let mut f = mapped(&path);
        let mut want = Vec::new();
        // Into the last 1 MiB window before 4 MiB, then 3/4 of it: one
        // writeback chunk handed over inside it.
        let mut seed = 0;
        while want.len() < (3 << 20) + (768 << 10) {
            seed += 1;
            let b = payload(seed, 4000);
            f.write_all(&b).unwrap();
            want.extend_from_slice(&b);
        }
        assert_eq!(f.start, 3 << 20);
        assert_eq!(f.written_back, (3 << 20) + WRITEBACK_CHUNK);
        let start = f.start;
        let rss = present_bytes(f.map.as_ref().unwrap());
        let unwritten = start + MAX_WINDOW - f.written_back;
        assert!(
            rss > 0 && rss <= unwritten + PAGE,
            "{rss} bytes mapped of the current window, {unwritten} not handed over"
        );
        let seen = std::fs::read(&path).unwrap();
        assert_eq!(&seen[..want.len()], &want[..]);
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// The worker faults the next window's pages in before the writer
    /// reaches it, unless the log was synced since the last window was
    /// asked for.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_next_window_is_populated_unless_the_log_was_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000004.log");
        let mut f = mapped(&path);
        // Past half of the first window: the second is prepared.
        f.write_all(&payload(1, (MIN_WINDOW * 3 / 4) as usize))
            .unwrap();
        assert_eq!(wait_for_ready(&f), MIN_WINDOW);
        assert_eq!(ready_present(&f, MIN_WINDOW), MIN_WINDOW);
        // Into the second, synced, then past its half: the third (at
        // 512 KiB) is mapped but not populated.
        f.write_all(&payload(2, (MIN_WINDOW / 2) as usize)).unwrap();
        assert_eq!(f.start, MIN_WINDOW);
        f.sync_data().unwrap();
        f.write_all(&payload(3, (MIN_WINDOW / 2) as usize)).unwrap();
        assert_eq!(wait_for_ready(&f), 2 * MIN_WINDOW);
        assert_eq!(ready_present(&f, 2 * MIN_WINDOW), 0);
    }

    /// `finish` cuts the populated zeros off before the sync and refuses
    /// later writes; the drop after it leaves the same file.
    #[test]
    fn finish_truncates_to_the_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000005.log");
        let mut f = mapped(&path);
        let b = payload(9, (MIN_WINDOW + MIN_WINDOW * 3 / 4) as usize);
        f.write_all(&b).unwrap();
        wait_for_ready(&f);
        assert!(std::fs::metadata(&path).unwrap().len() > b.len() as u64);
        f.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b);
        assert!(f.write_all(b"x").is_err());
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b);
    }

    /// Past half of a window the worker allocates the next one, before
    /// the writer needs it; the drop still truncates to the bytes written.
    #[test]
    fn the_worker_allocates_the_next_window_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000002.log");
        let mut f = mapped(&path);
        assert!(f.worker.is_some());
        let b = payload(7, (MIN_WINDOW * 3 / 4) as usize);
        f.write_all(&b).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::metadata(&path).unwrap().len() < 2 * MIN_WINDOW {
            assert!(
                std::time::Instant::now() < deadline,
                "the next window was not allocated"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Still in the first window: nothing mapped past it yet.
        assert_eq!(f.start, 0);
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b);
    }

    #[test]
    fn create_refuses_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, b"old").unwrap();
        assert!(create(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
    }

    #[test]
    fn empty_file_stays_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.log");
        let f = mapped(&path);
        assert!(f.is_empty());
        drop(f);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }
}
