//! The file system the engine uses, behind a trait.
//!
//! Every file and directory operation of the engine (and of the index layer
//! in `strata`) goes through an [`Fs`], taken from [`crate::Options::fs`].
//! [`RealFs`] (the default) is the operating system's file system with the
//! engine's historical behaviour: positional reads through
//! [`RandomAccessFile`] (optional O_DIRECT with fallback, per-thread buffer
//! pool), `fdatasync` for file syncs, `fsync` of a directory for directory
//! syncs, `flock` for the LOCK file. Tests substitute a fault-injecting
//! implementation (`io::fault::FaultFs`, feature `testing`).
//!
//! Operations return `std::io::Result` (callers add the path as context),
//! except [`Fs::open_random`], whose file reports errors with context, as
//! [`RandomAccessFile`] always did. A random-access read costs one dynamic
//! call and no extra allocation.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;

use super::RandomAccessFile;
use crate::error::Result;

/// A file read at arbitrary offsets (table files).
pub trait RandomRead: Send + Sync {
    /// Reads exactly `len` bytes at `offset` into a buffer of the per-thread
    /// pool; `Error::Corruption` if the file is shorter.
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Calls `f` with exactly `len` bytes at `offset`: the file's mapped
    /// bytes where it is mapped (no copy), else a buffer read by
    /// [`RandomRead::read_at`]. `Error::Corruption` if the file is shorter.
    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let b = self.read_at(offset, len)?;
        f(&b);
        Ok(())
    }
    /// True while reads bypass the page cache (O_DIRECT).
    fn is_direct(&self) -> bool {
        false
    }
    /// The whole file as mapped, where it is mapped: bytes that stay valid
    /// and unchanged for as long as this handle lives (the length is the
    /// file's when it was mapped). `None` for files read with `pread`.
    fn mapped(&self) -> Option<&[u8]> {
        None
    }
    /// For a file read at random through its mapping: asks the system to
    /// back the mapping with huge pages (one TLB entry for 2 MiB instead
    /// of 512). Pages already in the page cache in small pages stay so; a
    /// fault on a page not cached reads 2 MiB into a huge one. A hint:
    /// nothing happens where the file is not mapped or the system
    /// declines.
    fn advise_huge_pages(&self) {}
}

impl RandomRead for RandomAccessFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        RandomAccessFile::read_at(self, offset, len)
    }

    fn is_direct(&self) -> bool {
        RandomAccessFile::is_direct(self)
    }
}

/// A file written sequentially from its start (WAL, MANIFEST, tables,
/// CURRENT.tmp). `write` appends.
pub trait WritableFile: Write + Send {
    /// Makes the bytes written so far durable (`fdatasync`: the length is
    /// covered, other metadata is not).
    fn sync_data(&mut self) -> std::io::Result<()>;
    /// Makes the bytes and all metadata durable (`fsync`).
    fn sync_all(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    /// Ends the file: makes the bytes written durable, and the file no
    /// longer than them; writes fail or are not expected afterwards.
    fn finish(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
}

impl<W: WritableFile + ?Sized> WritableFile for Box<W> {
    fn sync_data(&mut self) -> std::io::Result<()> {
        (**self).sync_data()
    }

    fn sync_all(&mut self) -> std::io::Result<()> {
        (**self).sync_all()
    }

    fn finish(&mut self) -> std::io::Result<()> {
        (**self).finish()
    }
}

impl WritableFile for File {
    fn sync_data(&mut self) -> std::io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&mut self) -> std::io::Result<()> {
        File::sync_all(self)
    }
}

impl WritableFile for super::mapped::MappedLog {
    fn sync_data(&mut self) -> std::io::Result<()> {
        super::mapped::MappedLog::sync_data(self)
    }

    fn sync_all(&mut self) -> std::io::Result<()> {
        super::mapped::MappedLog::sync_all(self)
    }

    fn finish(&mut self) -> std::io::Result<()> {
        super::mapped::MappedLog::finish(self)
    }
}

/// A held lock on the database's LOCK file; released when dropped.
pub trait FileLock: Send + Sync {}

impl FileLock for File {}

/// Why [`Fs::lock`] failed.
#[derive(Debug)]
pub enum LockError {
    /// Another handle or process holds the lock.
    WouldBlock,
    /// Opening or locking the file failed.
    Io(std::io::Error),
}

/// The file-system operations of the engine. Paths are passed as the
/// engine builds them (the database directory joined with a file name).
pub trait Fs: Send + Sync + std::fmt::Debug {
    /// Opens a file for positional reads; with `direct`, O_DIRECT where
    /// the file system allows it.
    fn open_random(&self, path: &Path, direct: bool) -> Result<Box<dyn RandomRead>>;
    /// Opens a table file for positional reads through a read-only memory
    /// mapping ([`crate::Options::mmap_reads`]). The default, for file
    /// systems that do not map, is `open_random(path, false)`.
    fn open_mapped(&self, path: &Path) -> Result<Box<dyn RandomRead>> {
        self.open_random(path, false)
    }
    /// Opens a file for reading from its start (WAL and MANIFEST replay,
    /// CURRENT).
    fn open_sequential(&self, path: &Path) -> std::io::Result<Box<dyn Read + Send>>;
    /// Creates a file for writing: fails if it exists when `exclusive`,
    /// else truncates an existing one.
    fn create(&self, path: &Path, exclusive: bool) -> std::io::Result<Box<dyn WritableFile>>;
    /// Creates a new WAL file (it must not exist). With `mapped`, appends
    /// may be copies into a shared memory mapping instead of `write` calls
    /// (`io::mapped`) where the file system supports it; the bytes must be
    /// in the OS when a write returns either way. The default ignores
    /// `mapped` and calls `create(path, true)`.
    fn create_log(&self, path: &Path, mapped: bool) -> std::io::Result<Box<dyn WritableFile>> {
        let _ = mapped;
        self.create(path, true)
    }
    /// Atomically replaces `to` with `from` (same directory).
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> std::io::Result<()>;
    /// Creates a directory and its missing parents.
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> std::io::Result<()>;
    /// Removes a directory and everything in it.
    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()>;
    /// The names in a directory (entries whose name cannot be read are
    /// skipped).
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<OsString>>;
    /// True if `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Makes the creations, renames and removals in a directory durable.
    fn sync_dir(&self, path: &Path) -> std::io::Result<()>;
    /// A file's length in bytes.
    fn file_size(&self, path: &Path) -> std::io::Result<u64>;
    /// Creates (if missing) and exclusively locks a lock file, without
    /// waiting.
    fn lock(&self, path: &Path) -> std::result::Result<Box<dyn FileLock>, LockError>;
}

/// The operating system's file system (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl Fs for RealFs {
    fn open_random(&self, path: &Path, direct: bool) -> Result<Box<dyn RandomRead>> {
        Ok(Box::new(RandomAccessFile::open(path, direct)?))
    }

    fn open_mapped(&self, path: &Path) -> Result<Box<dyn RandomRead>> {
        // A file that cannot be mapped is read with `pread`.
        match super::mapped_read::MappedFile::open(path) {
            Ok(m) => Ok(Box::new(m)),
            Err(_) => self.open_random(path, false),
        }
    }

    fn open_sequential(&self, path: &Path) -> std::io::Result<Box<dyn Read + Send>> {
        Ok(Box::new(File::open(path)?))
    }

    fn create(&self, path: &Path, exclusive: bool) -> std::io::Result<Box<dyn WritableFile>> {
        let mut o = OpenOptions::new();
        o.write(true);
        if exclusive {
            o.create_new(true);
        } else {
            o.create(true).truncate(true);
        }
        Ok(Box::new(o.open(path)?))
    }

    fn create_log(&self, path: &Path, mapped: bool) -> std::io::Result<Box<dyn WritableFile>> {
        if !mapped {
            return self.create(path, true);
        }
        Ok(match super::mapped::create(path)? {
            super::mapped::Created::Mapped(m) => Box::new(m),
            super::mapped::Created::Plain(f) => Box::new(f),
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)
    }

    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn remove_dir_all(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<OsString>> {
        Ok(std::fs::read_dir(path)?
            .flatten()
            .map(|e| e.file_name())
            .collect())
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn file_size(&self, path: &Path) -> std::io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn lock(&self, path: &Path) -> std::result::Result<Box<dyn FileLock>, LockError> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(LockError::Io)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(f)),
            Err(std::fs::TryLockError::WouldBlock) => Err(LockError::WouldBlock),
            Err(std::fs::TryLockError::Error(e)) => Err(LockError::Io(e)),
        }
    }
}
