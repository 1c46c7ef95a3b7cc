//! Version edits: the records of the MANIFEST.
//!
//! Encoding (`docs/format/manifest.md`): a sequence of tagged fields, tags as
//! varint32; unknown tags are `Error::Corruption` (a newer format).

use std::sync::Arc;

use crate::error::Result;

/// What the manifest records about one table file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMetaData {
    pub number: u64,
    pub file_size: u64,
    /// Smallest and largest internal keys.
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub smallest_seq: u64,
    pub largest_seq: u64,
    pub num_entries: u64,
    pub num_deletions: u64,
}

/// A change to the set of live files plus counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WAL files numbered below this are obsolete.
    pub log_number: Option<u64>,
    pub next_file_number: Option<u64>,
    pub last_sequence: Option<u64>,
    /// (level, file) added.
    pub new_files: Vec<(usize, Arc<FileMetaData>)>,
    /// (level, file number) removed.
    pub deleted_files: Vec<(usize, u64)>,
    /// Opaque per-extension payloads, by extension name, in order.
    pub ext_payloads: Vec<(String, Vec<u8>)>,
}

impl VersionEdit {
    pub fn encode(&self) -> Vec<u8> {
        todo!("wal helper")
    }
    pub fn decode(src: &[u8]) -> Result<VersionEdit> {
        let _ = src;
        todo!("wal helper")
    }
}
