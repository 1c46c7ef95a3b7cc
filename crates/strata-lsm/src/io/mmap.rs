//! Read-only memory maps of table files: the one module of the engine that
//! uses `unsafe` (the workspace denies `unsafe_code`; this module alone
//! allows it, see `docs/design.md`).
//!
//! SAFETY invariant relied on by [`MappedFile::map`]: the engine maps only
//! table files, which are immutable once written: a table is written under
//! a temporary name, synced, and renamed into place; after that it is never
//! truncated, rewritten or appended to, only deleted (unlinking keeps the
//! mapped pages valid until the mapping is dropped). So the bytes behind a
//! mapping never change while it exists, and reading them through a `&[u8]`
//! is sound. A process outside the engine that truncates a live table file
//! breaks this (as it would corrupt the database anyway): reads of the lost
//! pages then fault (SIGBUS).

#![allow(unsafe_code)]

use std::fs::File;

/// A read-only mapping of a whole file.
pub struct MappedFile {
    map: memmap2::Mmap,
}

impl MappedFile {
    /// Maps `file` (opened for reading) read-only.
    pub fn map(file: &File) -> std::io::Result<MappedFile> {
        // SAFETY: `file` is a table file, immutable while mapped (module
        // invariant above).
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        Ok(MappedFile { map })
    }

    /// The mapped bytes `offset..offset + len`, `None` if they are not all
    /// within the file.
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        self.map.get(start..end)
    }

    /// Length of the mapping (the file size when mapped).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
