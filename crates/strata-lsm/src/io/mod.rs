//! File access. Every file and directory operation of the engine goes
//! through an [`Fs`] ([`crate::Options::fs`]): [`RealFs`] by default (the
//! operating system, with the reads described below), and with feature
//! `testing` the fault-injecting [`fault::FaultFs`] (per-kind operation
//! counts, N-th operation failures, simulated power loss; its module doc
//! states the fault model, `docs/testing.md` what the engine guarantees
//! under it). I/O sites, by operation: open for reading (tables, WAL and
//! MANIFEST replay, CURRENT), create (WAL, MANIFEST, CURRENT.tmp, tables),
//! read (table blocks, WAL/MANIFEST/CURRENT), write and sync (WAL,
//! MANIFEST, CURRENT.tmp, tables), rename (CURRENT), directory sync (after
//! CURRENT, before an edit that adds tables, before a new WAL's first
//! sync, after creating a database directory), remove (obsolete files,
//! `destroy`, index directories), list (recovery, obsolete files,
//! `destroy`, orphan index directories), create directory, lock (LOCK).
//!
//! Positional reads ([`RandomAccessFile`]) with optional O_DIRECT:
//!
//! With O_DIRECT the kernel requires the file offset, the length and the
//! buffer address to be multiples of the logical block size. Reads round the
//! requested range out to [`DIRECT_ALIGN`], read into an aligned window of an
//! over-allocated buffer (found with `align_offset`, no `unsafe`), and copy
//! the requested bytes out. Whenever the kernel refuses direct I/O (EINVAL at
//! open or at read) the file falls back to buffered reads.
//!
//! Read buffers come from a small per-thread pool ([`take_unfilled`],
//! [`recycle`]): a decoded block returns its bytes to the pool when dropped,
//! so a steady stream of block reads allocates nothing. Buffered reads go
//! into a buffer's spare capacity (`rustix`'s `pread` into uninitialized
//! memory, no `unsafe` here), so no read zero-fills its buffer first.

#![deny(clippy::indexing_slicing)]

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

use crate::error::{Error, IoContext, Result};

#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fault;
mod fs;
pub mod mapped;
mod mapped_read;
pub use fs::{FileLock, Fs, LockError, RandomRead, RealFs, WritableFile};

/// Alignment of offsets, lengths and buffers for O_DIRECT reads.
pub const DIRECT_ALIGN: usize = 4096;

static DIRECT_FALLBACK_WARNING: Once = Once::new();

/// Buffers kept per thread by [`recycle`].
const POOL_BUFFERS: usize = 16;

/// Largest buffer capacity [`recycle`] keeps (larger ones are freed).
const POOL_MAX_CAPACITY: usize = 64 << 10;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Capacities of new pooled buffers are multiples of this: block sizes
/// vary by a few hundred bytes around the target block size, and a
/// recycled buffer is only reused for a read that fits its capacity; with
/// exact capacities about half of the recycled buffers were too small and
/// most reads allocated and zeroed a new one (callgrind: 38 k of 53 k reads
/// of a NEXT query set). Costs at most `POOL_CLASS - 1` bytes per buffer.
const POOL_CLASS: usize = 512;

/// A buffer of exactly `len` bytes whose contents are unspecified (the
/// caller overwrites all of them): a recycled buffer of this thread if one
/// has the capacity, else a new zeroed one with its capacity rounded up to
/// a multiple of [`POOL_CLASS`].
pub fn take_buffer(len: usize) -> Vec<u8> {
    let pooled = POOL
        .try_with(|p| {
            let mut p = p.try_borrow_mut().ok()?;
            let i = p.iter().rposition(|b| b.capacity() >= len)?;
            Some(p.swap_remove(i))
        })
        .ok()
        .flatten();
    match pooled {
        Some(mut b) => {
            if b.len() >= len {
                b.truncate(len);
            } else {
                // Within capacity: no reallocation, zeroes only the growth.
                b.resize(len, 0);
            }
            b
        }
        None => {
            let mut b = Vec::with_capacity(len.div_ceil(POOL_CLASS).saturating_mul(POOL_CLASS));
            b.resize(len, 0);
            b
        }
    }
}

/// Largest spare capacity beyond the requested length that
/// [`take_unfilled`] hands out: a read fills the whole spare capacity, so
/// this bounds the bytes read past the wanted range.
const UNFILLED_SLACK: usize = POOL_CLASS - 1;

/// An empty buffer with capacity for at least `len` bytes and at most
/// `len + UNFILLED_SLACK`, for a read into its spare capacity: a recycled
/// buffer of this thread if one fits, else a new one whose capacity is
/// `len` rounded up to a multiple of [`POOL_CLASS`] (so that it fits the
/// later reads of its size class when it is recycled: with exact
/// capacities, callgrind of a 2 M-tweet NEXT query set showed every one of
/// 206,858 block reads allocating, and every eviction freeing, ~1,100
/// instructions a block). Nothing is zero-filled.
pub fn take_unfilled(len: usize) -> Vec<u8> {
    let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() - len <= UNFILLED_SLACK;
    let pooled = POOL
        .try_with(|p| {
            let mut p = p.try_borrow_mut().ok()?;
            let i = p.iter().rposition(fits)?;
            Some(p.swap_remove(i))
        })
        .ok()
        .flatten();
    match pooled {
        Some(mut b) => {
            b.clear();
            b
        }
        None => Vec::with_capacity(len.div_ceil(POOL_CLASS).saturating_mul(POOL_CLASS)),
    }
}

/// Returns a buffer to this thread's pool (dropped if it is large or
/// empty). A full pool drops its oldest buffer instead, so the pool follows
/// the sizes being read: a pool once filled with buffers no read fits would
/// otherwise refuse every later buffer, and every read would allocate.
pub fn recycle(buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > POOL_MAX_CAPACITY {
        return;
    }
    let oldest = POOL
        .try_with(|p| {
            let mut p = p.try_borrow_mut().ok()?;
            let oldest = (p.len() >= POOL_BUFFERS).then(|| p.remove(0));
            p.push(buf);
            oldest
        })
        .ok()
        .flatten();
    // Freed outside the pool's borrow.
    drop(oldest);
}

fn warn_direct_fallback(path: &Path, why: &str) {
    DIRECT_FALLBACK_WARNING.call_once(|| {
        eprintln!(
            "strata: O_DIRECT unavailable for {} ({why}); using buffered reads \
             (warning printed once per process)",
            path.display()
        );
    });
}

fn is_einval(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// A file read at arbitrary offsets.
///
/// Invariant: if `direct` is true, `file` was opened with O_DIRECT; once a
/// direct read fails with EINVAL, `direct_failed` is set and all reads go
/// through the lazily opened buffered handle.
pub struct RandomAccessFile {
    path: PathBuf,
    file: File,
    direct: bool,
    direct_failed: AtomicBool,
    buffered: OnceLock<File>,
}

impl RandomAccessFile {
    /// Opens `path`; with `direct`, tries O_DIRECT and falls back to buffered
    /// reads (logging a warning once per process) if the filesystem refuses.
    pub fn open(path: &Path, direct: bool) -> Result<RandomAccessFile> {
        let buffered = || File::open(path).path_ctx("open", path);
        let (file, direct) = if direct {
            match OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
            {
                Ok(f) => (f, true),
                Err(e) if is_einval(&e) => {
                    warn_direct_fallback(path, "open refused O_DIRECT");
                    (buffered()?, false)
                }
                Err(e) => return Err(Error::io(format!("open {}", path.display()), e)),
            }
        } else {
            (buffered()?, false)
        };
        Ok(RandomAccessFile {
            path: path.to_path_buf(),
            file,
            direct,
            direct_failed: AtomicBool::new(false),
            buffered: OnceLock::new(),
        })
    }

    /// Reads exactly `len` bytes at `offset`; `Error::Corruption` if the file
    /// is shorter.
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if self.is_direct() {
            match self.read_direct(offset, len) {
                Ok(Some(v)) => return Ok(v),
                // The direct read came up short: let the buffered path
                // produce the bytes or the precise "too short" error.
                Ok(None) => {}
                Err(e) if is_einval(&e) => {
                    self.direct_failed.store(true, Ordering::Relaxed);
                    warn_direct_fallback(&self.path, "read refused O_DIRECT");
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("read {} at {offset} (+{len})", self.path.display()),
                        e,
                    ))
                }
            }
            return self.read_buffered(self.fallback_file()?, offset, len);
        }
        self.read_buffered(&self.file, offset, len)
    }

    /// True while reads use `O_DIRECT` (false once the file system refused it).
    pub fn is_direct(&self) -> bool {
        self.direct && !self.direct_failed.load(Ordering::Relaxed)
    }

    fn fallback_file(&self) -> Result<&File> {
        if let Some(f) = self.buffered.get() {
            return Ok(f);
        }
        let f = File::open(&self.path).path_ctx("open", &self.path)?;
        // Another thread may have won the race; either handle is fine.
        let _ = self.buffered.set(f);
        self.buffered
            .get()
            .ok_or_else(|| Error::corruption("buffered file handle vanished"))
    }

    fn read_buffered(&self, file: &File, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = take_unfilled(len);
        if let Err(e) = read_into_spare(file, &mut buf, offset, len) {
            recycle(buf);
            return Err(Error::io(
                format!("read {} at {offset} (+{len})", self.path.display()),
                e,
            ));
        }
        if buf.len() < len {
            let got = buf.len();
            recycle(buf);
            return Err(Error::corruption(format!(
                "file too short: {} has {got} of the {len} bytes wanted at offset {offset}",
                self.path.display()
            )));
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Direct read of the aligned range enclosing `offset..offset+len`.
    /// `Ok(None)` if fewer bytes came back than requested.
    fn read_direct(&self, offset: u64, len: usize) -> std::io::Result<Option<Vec<u8>>> {
        let align = DIRECT_ALIGN as u64;
        let start = offset - offset % align;
        let Some(end) = offset.checked_add(len as u64) else {
            return Ok(None);
        };
        let aligned_end = end.div_ceil(align) * align;
        let alen = (aligned_end - start) as usize;
        let mut buf = take_buffer(alen + DIRECT_ALIGN);
        let r = Self::read_direct_into(
            &self.file,
            &mut buf,
            start,
            alen,
            (offset - start) as usize,
            len,
        );
        recycle(buf);
        r
    }

    /// Reads `alen` bytes at the aligned offset `start` into the aligned
    /// window of `buf` (`alen + DIRECT_ALIGN` bytes) and copies out `len`
    /// bytes from `skip` on into a pooled buffer.
    fn read_direct_into(
        file: &File,
        buf: &mut [u8],
        start: u64,
        alen: usize,
        skip: usize,
        len: usize,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let pad = buf.as_ptr().align_offset(DIRECT_ALIGN);
        if pad >= DIRECT_ALIGN {
            return Ok(None);
        }
        let Some(window) = buf.get_mut(pad..pad + alen) else {
            return Ok(None);
        };
        let mut got = 0;
        while let Some(unread) = window.get_mut(got..).filter(|u| !u.is_empty()) {
            match file.read_at(unread, start + got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    // A partial chunk means end of file; the next offset
                    // would not be aligned.
                    if got % DIRECT_ALIGN != 0 {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if got < skip + len {
            return Ok(None);
        }
        Ok(window.get(skip..skip + len).map(|w| {
            let mut out = take_unfilled(len);
            out.extend_from_slice(w);
            out
        }))
    }
}

/// Reads at `offset` into the spare capacity of the empty `buf` (never
/// zero-filled first) until it holds at least `len` bytes or the file ends.
/// A read may fill the whole spare capacity, so `buf` can end up to
/// [`UNFILLED_SLACK`] bytes longer than `len`: the caller truncates.
fn read_into_spare(file: &File, buf: &mut Vec<u8>, offset: u64, len: usize) -> std::io::Result<()> {
    if buf.capacity() < len {
        buf.reserve_exact(len - buf.len());
    }
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(buf), at) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write_pattern(dir: &Path, len: usize) -> (PathBuf, Vec<u8>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let p = dir.join("f");
        std::fs::write(&p, &data).unwrap();
        (p, data)
    }

    #[test]
    fn buffered_and_direct_reads_return_exact_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (p, data) = write_pattern(dir.path(), 3 * 4096 + 123);
        for direct in [false, true] {
            let f = RandomAccessFile::open(&p, direct).unwrap();
            if !direct {
                assert!(!f.is_direct());
            }
            for (off, len) in [
                (0u64, 1usize),
                (0, 4096),
                (1, 4096),
                (4095, 2),
                (5000, 7000),
                (3 * 4096, 123),
                (3 * 4096 + 100, 23),
                (0, data.len()),
            ] {
                let got = f.read_at(off, len).unwrap();
                assert_eq!(got, &data[off as usize..off as usize + len], "{off}+{len}");
            }
            assert!(f.read_at(0, 0).unwrap().is_empty());
            let e = f.read_at(data.len() as u64 - 10, 11).unwrap_err();
            assert!(e.is_corruption(), "{e}");
            assert!(e.to_string().contains("too short"));
            let e = f.read_at(data.len() as u64 + 5000, 1).unwrap_err();
            assert!(e.is_corruption(), "{e}");
        }
    }

    #[test]
    fn pooled_buffers_are_reused_with_the_requested_length() {
        let a = take_buffer(5000);
        assert_eq!(a.len(), 5000);
        let ptr = a.as_ptr();
        recycle(a);
        // Smaller and slightly larger (within capacity) requests reuse it.
        let b = take_buffer(4000);
        assert_eq!((b.len(), b.as_ptr()), (4000, ptr));
        recycle(b);
        let c = take_buffer(5000);
        assert_eq!((c.len(), c.as_ptr()), (5000, ptr));
        recycle(c);
        // Too large for any pooled buffer: a fresh one.
        assert_eq!(take_buffer(100_000).len(), 100_000);
        // The pool is bounded and refuses huge buffers.
        for _ in 0..3 * POOL_BUFFERS {
            recycle(vec![1u8; 128]);
        }
        recycle(vec![0u8; POOL_MAX_CAPACITY + 1]);
        POOL.with(|p| {
            let p = p.borrow();
            assert!(p.len() <= POOL_BUFFERS);
            assert!(p.iter().all(|b| b.capacity() <= POOL_MAX_CAPACITY));
        });
    }

    /// Regression: blocks of one table differ by a few bytes; a buffer
    /// recycled after a 4,100-byte read must serve the next 4,350-byte read
    /// (exact capacities made most block reads allocate and zero anew).
    #[test]
    fn recycled_buffers_serve_slightly_larger_reads() {
        POOL.with(|p| p.borrow_mut().clear());
        let a = take_buffer(4100);
        assert_eq!(a.capacity() % POOL_CLASS, 0);
        let ptr = a.as_ptr();
        recycle(a);
        let b = take_buffer(4350);
        assert_eq!((b.len(), b.as_ptr()), (4350, ptr));
    }

    /// Regression: a pool filled with buffers no read fits (left by blocks
    /// of other sizes) refused every later buffer, and reads for the
    /// block cache allocated one each time (callgrind: all 206,858 block
    /// reads of a query set). A full pool now drops its oldest buffer, and
    /// unfilled buffers have class-rounded capacities, so a buffer freed by
    /// an eviction serves the next read of its size class.
    #[test]
    fn a_pool_full_of_misfits_still_takes_and_serves_block_buffers() {
        POOL.with(|p| p.borrow_mut().clear());
        for _ in 0..POOL_BUFFERS {
            recycle(Vec::with_capacity(128));
        }
        let a = take_unfilled(4100);
        assert_eq!(a.capacity(), 4608, "rounded up to the size class");
        let ptr = a.as_ptr();
        recycle(a);
        POOL.with(|p| {
            let p = p.borrow();
            assert_eq!(p.len(), POOL_BUFFERS);
            assert!(p.iter().any(|b| b.as_ptr() == ptr), "kept by the full pool");
        });
        let b = take_unfilled(4300);
        assert_eq!(b.as_ptr(), ptr);
        assert!(b.is_empty() && b.capacity() >= 4300);
    }

    /// Reads go into a recycled buffer's spare capacity: the result is
    /// exactly the wanted bytes, whatever the buffer held before and however
    /// much more the read could fill; buffers with more than the slack to
    /// spare are not taken (a read fills the whole spare capacity).
    #[test]
    fn unfilled_reads_return_exactly_the_wanted_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (p, data) = write_pattern(dir.path(), 20_000);
        let f = RandomAccessFile::open(&p, false).unwrap();
        POOL.with(|p| p.borrow_mut().clear());
        for (off, len) in [(0usize, 4096usize), (100, 3000), (7, 4500), (15_000, 5000)] {
            let mut stale = Vec::with_capacity(len + UNFILLED_SLACK);
            stale.resize(len + UNFILLED_SLACK, 0xAA);
            let ptr = stale.as_ptr();
            recycle(stale);
            // The stale buffer is the one a read of `len` bytes takes.
            let b = take_unfilled(len);
            assert_eq!((b.len(), b.as_ptr()), (0, ptr));
            let mut stale = b;
            stale.resize(len + UNFILLED_SLACK, 0xAA);
            recycle(stale);
            let got = f.read_at(off as u64, len).unwrap();
            assert_eq!(got.as_slice(), data.get(off..off + len).unwrap());
        }
        POOL.with(|p| p.borrow_mut().clear());
        let big = Vec::<u8>::with_capacity(4096 + UNFILLED_SLACK + 1);
        let big_ptr = big.as_ptr();
        recycle(big);
        let b = take_unfilled(4096);
        assert_ne!(b.as_ptr(), big_ptr);
        assert!(b.is_empty() && b.capacity() >= 4096);
        assert!(b.capacity() - 4096 <= UNFILLED_SLACK);
    }

    #[test]
    fn open_missing_file_is_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = RandomAccessFile::open(&dir.path().join("nope"), true)
            .err()
            .unwrap();
        assert!(matches!(e, Error::Io { .. }));
    }

    #[test]
    fn real_fs_syncs_and_locks() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RealFs;
        fs.sync_dir(dir.path()).unwrap();
        let p = dir.path().join("x");
        let mut f = fs.create(&p, true).unwrap();
        f.write_all(b"abc").unwrap();
        f.sync_data().unwrap();
        assert!(fs.create(&p, true).is_err());
        assert_eq!(fs.file_size(&p).unwrap(), 3);
        assert!(fs.sync_dir(&dir.path().join("missing")).is_err());
        let l = dir.path().join("LOCK");
        let held = fs.lock(&l).ok().unwrap();
        assert!(matches!(fs.lock(&l), Err(LockError::WouldBlock)));
        drop(held);
        assert!(fs.lock(&l).is_ok());
    }
}
