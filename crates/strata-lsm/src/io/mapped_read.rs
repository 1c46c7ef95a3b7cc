//! Table reads through a read-only memory mapping ([`crate::Options::mmap_reads`]).
//!
//! A table file is mapped whole when it is opened; a block read copies the
//! requested bytes out of the mapping into a buffer of the per-thread pool
//! (`io::take_unfilled`), so the caller gets the same owned bytes as from
//! `pread` and verifies their checksum the same way. What the mapping
//! saves is the system call per block: on a warm page cache a 4 KiB
//! `pread` costs about 2 µs on our machines, a copy out of a mapped page
//! a tenth of that (plus a minor fault the first time a page is touched).
//!
//! Reads past the end of the file are `Error::Corruption`, as with `pread`
//! (the file's length is fixed when it is mapped).

// Mapping a file is `unsafe`: see the `SAFETY` comment in `open`.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::{take_unfilled, RandomRead};
use crate::error::{Error, Result};

/// A table file mapped read-only, whole.
pub struct MappedFile {
    map: Mmap,
    path: PathBuf,
}

impl MappedFile {
    /// Maps the file at `path` read-only. `Err` if it cannot be opened or
    /// mapped (the caller then reads it with `pread`).
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let file = File::open(path)?;
        // SAFETY: `Mmap` exposes the file's bytes as a `&[u8]`, which must
        // not change or vanish while borrowed. The engine maps only table
        // files, which are written once, synced and never modified or
        // truncated afterwards (a compaction writes new files; an obsolete
        // table is unlinked, which leaves an existing mapping intact). The
        // database directory is locked (LOCK) against other engines; a
        // process that edits table files behind the engine's back breaks
        // the contract stated on `Options::mmap_reads`.
        let map = unsafe { Mmap::map(&file)? };
        Ok(MappedFile {
            map,
            path: path.to_path_buf(),
        })
    }
}

impl RandomRead for MappedFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let bytes = self.slice(offset, len)?;
        let mut buf = take_unfilled(len);
        buf.extend_from_slice(bytes);
        Ok(buf)
    }

    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        f(self.slice(offset, len)?);
        Ok(())
    }

    fn mapped(&self) -> Option<&[u8]> {
        Some(&self.map)
    }

    fn advise_huge_pages(&self) {
        // A hint; an error (a kernel without huge pages for files, say)
        // leaves the mapping as it was.
        #[cfg(target_os = "linux")]
        let _ = self.map.advise(memmap2::Advice::HugePage);
    }
}

impl MappedFile {
    /// The mapped bytes `offset..offset + len`.
    fn slice(&self, offset: u64, len: usize) -> Result<&[u8]> {
        let start = usize::try_from(offset).ok();
        let range = start.and_then(|s| Some(s..s.checked_add(len)?));
        range.and_then(|r| self.map.get(r)).ok_or_else(|| {
            Error::corruption(format!(
                "file too short: {} has {} bytes, {len} wanted at offset {offset}",
                self.path.display(),
                self.map.len()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ranges_and_refuses_past_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let f = MappedFile::open(&path).expect("map");
        assert_eq!(f.read_at(0, 10).expect("read"), data[..10]);
        assert_eq!(f.read_at(4090, 20).expect("read"), data[4090..4110]);
        assert_eq!(f.read_at(9_990, 10).expect("read"), data[9_990..]);
        assert!(f.read_at(9_991, 10).is_err());
        let mut seen = Vec::new();
        f.read_with(4090, 20, &mut |b| seen.extend_from_slice(b))
            .expect("read");
        assert_eq!(seen, data[4090..4110]);
        assert!(f.read_with(9_991, 10, &mut |_| ()).is_err());
        assert!(f.read_at(u64::MAX, 1).is_err());
        let err = f.read_at(20_000, 1).expect_err("past the end");
        assert!(err.to_string().contains("too short"), "{err}");
    }

    /// Advising huge pages leaves the mapped bytes exactly the file's
    /// (more than 2 MiB, and a partial last huge page).
    #[test]
    fn huge_page_advice_keeps_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t");
        let data: Vec<u8> = (0..(5u32 << 20) + 123)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&path, &data).expect("write");
        let f = MappedFile::open(&path).expect("map");
        f.advise_huge_pages();
        assert_eq!(
            f.read_at(3 << 20, 4096).expect("read"),
            data[3 << 20..(3 << 20) + 4096]
        );
        assert!(f.mapped() == Some(&data[..]), "bytes changed");
    }
}
