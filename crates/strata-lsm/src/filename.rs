//! Names of the files in a database directory.
//!
//! `NNNNNN.log` WAL, `NNNNNN.sst` table, `MANIFEST-NNNNNN` version log,
//! `CURRENT` (name of the live manifest), `LOCK`, `*.tmp` temporaries.

use std::path::{Path, PathBuf};

/// What a file in a database directory is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `NNNNNN.log`: a write-ahead log.
    Log(u64),
    /// `NNNNNN.sst`: a table.
    Table(u64),
    /// `MANIFEST-NNNNNN`: a version log.
    Manifest(u64),
    /// `CURRENT`: names the live manifest.
    Current,
    /// `LOCK`: held by the open database.
    Lock,
    /// `*.tmp`: a temporary, removed by the obsolete-file sweep.
    Temp,
}

/// Path of WAL file `n` in `dir`.
pub fn log_file(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

/// Path of table file `n` in `dir`.
pub fn table_file(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.sst"))
}

/// Path of manifest `n` in `dir`.
pub fn manifest_file(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{n:06}"))
}

/// Path of `CURRENT` in `dir`.
pub fn current_file(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}

/// Path of `LOCK` in `dir`.
pub fn lock_file(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}

/// Classifies a directory entry name; `None` for files that are not ours.
pub fn parse(name: &str) -> Option<FileKind> {
    if name == "CURRENT" {
        return Some(FileKind::Current);
    }
    if name == "LOCK" {
        return Some(FileKind::Lock);
    }
    if name.ends_with(".tmp") {
        return Some(FileKind::Temp);
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    if let Some(n) = name.strip_suffix(".log") {
        return n.parse().ok().map(FileKind::Log);
    }
    if let Some(n) = name.strip_suffix(".sst") {
        return n.parse().ok().map(FileKind::Table);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        let d = Path::new("/x");
        for (p, k) in [
            (log_file(d, 7), FileKind::Log(7)),
            (table_file(d, 123456), FileKind::Table(123456)),
            (manifest_file(d, 3), FileKind::Manifest(3)),
            (current_file(d), FileKind::Current),
            (lock_file(d), FileKind::Lock),
        ] {
            let name = p.file_name().unwrap().to_str().unwrap();
            assert_eq!(parse(name), Some(k));
        }
        assert_eq!(parse("notes.txt"), None);
        assert_eq!(parse("CURRENT.tmp"), Some(FileKind::Temp));
    }
}
