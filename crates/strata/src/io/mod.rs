//! File access: positional reads with optional O_DIRECT, and directory sync.

use std::fs::File;
use std::path::Path;

use crate::error::Result;

/// A file read at arbitrary offsets.
pub struct RandomAccessFile {
    _private: (),
}

impl RandomAccessFile {
    /// Opens `path`; with `direct`, tries O_DIRECT and falls back to buffered
    /// reads (logging a warning once per process) if the filesystem refuses.
    pub fn open(path: &Path, direct: bool) -> Result<RandomAccessFile> {
        let _ = (path, direct);
        todo!("sstable helper")
    }
    /// Reads exactly `len` bytes at `offset`; `Error::Corruption` if the file
    /// is shorter.
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let _ = (offset, len);
        todo!()
    }
    pub fn is_direct(&self) -> bool {
        todo!()
    }
}

/// fsyncs a directory so that renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let _ = dir;
    todo!("sstable helper")
}

/// fsyncs a file's data.
pub fn sync_file(f: &File, path: &Path) -> Result<()> {
    let _ = (f, path);
    todo!("sstable helper")
}
