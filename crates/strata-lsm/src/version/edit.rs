//! Version edits: the records of the MANIFEST.
//!
//! Encoding (`docs/format/manifest.md`): a sequence of tagged fields, tags as
//! varint32; unknown tags are `Error::Corruption` (a newer format).
//! Scalar fields appear at most once when encoded; on decode the last
//! occurrence wins. Repeated fields keep their order.

#![deny(clippy::indexing_slicing)]

use std::sync::Arc;

use crate::coding::{get_length_prefixed, get_varint32, get_varint64, put_length_prefixed};
use crate::coding::{put_varint32, put_varint64};
use crate::error::{Error, Result};

/// Field tags (on disk; never reuse a number).
const TAG_LOG_NUMBER: u32 = 1;
const TAG_NEXT_FILE_NUMBER: u32 = 2;
const TAG_LAST_SEQUENCE: u32 = 3;
const TAG_NEW_FILE: u32 = 4;
const TAG_DELETED_FILE: u32 = 5;
const TAG_EXT_PAYLOAD: u32 = 6;

/// Levels are encoded as varints below this bound.
pub const MAX_ENCODED_LEVELS: usize = 64;

/// What the manifest records about one table file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMetaData {
    /// File number (`NNNNNN.sst`).
    pub number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest and largest internal keys.
    pub smallest: Vec<u8>,
    /// Largest internal key (see `smallest`).
    pub largest: Vec<u8>,
    /// Smallest sequence number of an entry.
    pub smallest_seq: u64,
    /// Largest sequence number of an entry.
    pub largest_seq: u64,
    /// Entries (values, tombstones, merge operands).
    pub num_entries: u64,
    /// Of those, tombstones.
    pub num_deletions: u64,
}

/// A change to the set of live files plus counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WAL files numbered below this are obsolete.
    pub log_number: Option<u64>,
    /// Every file number below this has been allocated.
    pub next_file_number: Option<u64>,
    /// Last sequence number assigned when the edit was written.
    pub last_sequence: Option<u64>,
    /// (level, file) added.
    pub new_files: Vec<(usize, Arc<FileMetaData>)>,
    /// (level, file number) removed.
    pub deleted_files: Vec<(usize, u64)>,
    /// Opaque per-extension payloads, by extension name, in order.
    pub ext_payloads: Vec<(String, Vec<u8>)>,
}

impl VersionEdit {
    /// Encodes scalars, then deleted files, new files and payloads, each in
    /// vector order. Levels must be below [`MAX_ENCODED_LEVELS`].
    pub fn encode(&self) -> Vec<u8> {
        let mut dst = Vec::new();
        for (tag, v) in [
            (TAG_LOG_NUMBER, self.log_number),
            (TAG_NEXT_FILE_NUMBER, self.next_file_number),
            (TAG_LAST_SEQUENCE, self.last_sequence),
        ] {
            if let Some(v) = v {
                put_varint32(&mut dst, tag);
                put_varint64(&mut dst, v);
            }
        }
        for &(level, number) in &self.deleted_files {
            put_varint32(&mut dst, TAG_DELETED_FILE);
            put_level(&mut dst, level);
            put_varint64(&mut dst, number);
        }
        for (level, f) in &self.new_files {
            put_varint32(&mut dst, TAG_NEW_FILE);
            put_level(&mut dst, *level);
            put_varint64(&mut dst, f.number);
            put_varint64(&mut dst, f.file_size);
            put_length_prefixed(&mut dst, &f.smallest);
            put_length_prefixed(&mut dst, &f.largest);
            put_varint64(&mut dst, f.smallest_seq);
            put_varint64(&mut dst, f.largest_seq);
            put_varint64(&mut dst, f.num_entries);
            put_varint64(&mut dst, f.num_deletions);
        }
        for (name, payload) in &self.ext_payloads {
            put_varint32(&mut dst, TAG_EXT_PAYLOAD);
            put_length_prefixed(&mut dst, name.as_bytes());
            put_length_prefixed(&mut dst, payload);
        }
        dst
    }

    /// Decodes an edit; `Error::Corruption` on truncation, unknown tags,
    /// levels >= [`MAX_ENCODED_LEVELS`] or non-UTF-8 extension names.
    pub fn decode(src: &[u8]) -> Result<VersionEdit> {
        let mut edit = VersionEdit::default();
        let mut src = src;
        while !src.is_empty() {
            let tag = get_varint32(&mut src).ok_or_else(|| bad("tag"))?;
            match tag {
                TAG_LOG_NUMBER => edit.log_number = Some(u64_field(&mut src, "log number")?),
                TAG_NEXT_FILE_NUMBER => {
                    edit.next_file_number = Some(u64_field(&mut src, "next file number")?)
                }
                TAG_LAST_SEQUENCE => {
                    edit.last_sequence = Some(u64_field(&mut src, "last sequence")?)
                }
                TAG_NEW_FILE => {
                    let level = level_field(&mut src)?;
                    let f = FileMetaData {
                        number: u64_field(&mut src, "file number")?,
                        file_size: u64_field(&mut src, "file size")?,
                        smallest: bytes_field(&mut src, "smallest key")?.to_vec(),
                        largest: bytes_field(&mut src, "largest key")?.to_vec(),
                        smallest_seq: u64_field(&mut src, "smallest sequence")?,
                        largest_seq: u64_field(&mut src, "largest sequence")?,
                        num_entries: u64_field(&mut src, "entry count")?,
                        num_deletions: u64_field(&mut src, "deletion count")?,
                    };
                    edit.new_files.push((level, Arc::new(f)));
                }
                TAG_DELETED_FILE => {
                    let level = level_field(&mut src)?;
                    let number = u64_field(&mut src, "deleted file number")?;
                    edit.deleted_files.push((level, number));
                }
                TAG_EXT_PAYLOAD => {
                    let name = bytes_field(&mut src, "extension name")?;
                    let name = std::str::from_utf8(name)
                        .map_err(|_| bad("extension name (not UTF-8)"))?
                        .to_string();
                    let payload = bytes_field(&mut src, "extension payload")?.to_vec();
                    edit.ext_payloads.push((name, payload));
                }
                t => {
                    return Err(Error::corruption(format!(
                        "version edit: unknown tag {t} (written by a newer format?)"
                    )))
                }
            }
        }
        Ok(edit)
    }
}

fn put_level(dst: &mut Vec<u8>, level: usize) {
    debug_assert!(level < MAX_ENCODED_LEVELS, "level {level} out of range");
    put_varint32(dst, level as u32);
}

fn bad(what: &str) -> Error {
    Error::corruption(format!("version edit: bad or truncated {what}"))
}

fn u64_field(src: &mut &[u8], what: &str) -> Result<u64> {
    get_varint64(src).ok_or_else(|| bad(what))
}

fn bytes_field<'a>(src: &mut &'a [u8], what: &str) -> Result<&'a [u8]> {
    get_length_prefixed(src).ok_or_else(|| bad(what))
}

fn level_field(src: &mut &[u8]) -> Result<usize> {
    let level = get_varint32(src).ok_or_else(|| bad("level"))? as usize;
    if level >= MAX_ENCODED_LEVELS {
        return Err(Error::corruption(format!(
            "version edit: level {level} out of range"
        )));
    }
    Ok(level)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u64) -> Arc<FileMetaData> {
        Arc::new(FileMetaData {
            number: n,
            file_size: 1 << 40,
            smallest: b"apple\x01\0\0\0\0\0\0\0".to_vec(),
            largest: vec![0xff; 200],
            smallest_seq: 1,
            largest_seq: u64::MAX >> 8,
            num_entries: 1000,
            num_deletions: 0,
        })
    }

    fn full_edit() -> VersionEdit {
        VersionEdit {
            log_number: Some(7),
            next_file_number: Some(u64::MAX),
            last_sequence: Some(0),
            new_files: vec![(0, file(12)), (63, file(3)), (1, file(9))],
            deleted_files: vec![(2, 5), (0, 1), (2, 4)],
            ext_payloads: vec![
                ("secondary:city".into(), vec![1, 2, 3]),
                ("a".into(), vec![]),
                ("secondary:city".into(), vec![0; 300]),
            ],
        }
    }

    #[test]
    fn roundtrip() {
        for e in [VersionEdit::default(), full_edit()] {
            let enc = e.encode();
            assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
        }
        assert!(VersionEdit::default().encode().is_empty());
        let e = VersionEdit {
            last_sequence: Some(300),
            deleted_files: vec![(1, 2)],
            ..VersionEdit::default()
        };
        // Exact bytes (docs/format/manifest.md).
        assert_eq!(e.encode(), [3, 0xac, 0x02, 5, 1, 2]);
    }

    /// The edits that `full_edit().encode()` passes through field by field,
    /// in encoding order: a cut at a field boundary decodes to one of them.
    fn field_prefixes() -> Vec<VersionEdit> {
        let full = full_edit();
        let mut e = VersionEdit::default();
        let mut out = vec![e.clone()];
        e.log_number = full.log_number;
        out.push(e.clone());
        e.next_file_number = full.next_file_number;
        out.push(e.clone());
        e.last_sequence = full.last_sequence;
        out.push(e.clone());
        for d in &full.deleted_files {
            e.deleted_files.push(*d);
            out.push(e.clone());
        }
        for f in &full.new_files {
            e.new_files.push(f.clone());
            out.push(e.clone());
        }
        for x in &full.ext_payloads {
            e.ext_payloads.push(x.clone());
            out.push(e.clone());
        }
        out
    }

    #[test]
    fn every_truncation_rejected() {
        let enc = full_edit().encode();
        let prefixes = field_prefixes();
        assert_eq!(prefixes.last(), Some(&full_edit()));
        // Edits are framed by their log record, so a cut exactly between two
        // fields is a well-formed shorter edit; every other cut is an error.
        for cut in 0..enc.len() {
            let at_boundary = prefixes.iter().find(|p| p.encode().len() == cut);
            match (VersionEdit::decode(&enc[..cut]), at_boundary) {
                (Ok(e), Some(p)) => assert_eq!(&e, p, "cut {cut}"),
                (Err(e), None) => assert!(e.is_corruption(), "cut {cut}"),
                (r, p) => panic!("cut {cut}: decoded {r:?}, boundary {p:?}"),
            }
        }
    }

    #[test]
    fn unknown_tag_and_bad_level_rejected() {
        for tag in [0u32, 7, 100, 1 << 20] {
            let mut enc = full_edit().encode();
            put_varint32(&mut enc, tag);
            put_varint64(&mut enc, 1);
            let e = VersionEdit::decode(&enc).unwrap_err();
            assert!(e.is_corruption() && e.to_string().contains("unknown tag"));
        }
        for tag in [TAG_DELETED_FILE, TAG_NEW_FILE] {
            let mut enc = Vec::new();
            put_varint32(&mut enc, tag);
            put_varint32(&mut enc, 64);
            put_varint64(&mut enc, 1);
            assert!(VersionEdit::decode(&enc).unwrap_err().is_corruption());
        }
        let mut enc = Vec::new();
        put_varint32(&mut enc, TAG_EXT_PAYLOAD);
        put_length_prefixed(&mut enc, &[0xff, 0xfe]);
        put_length_prefixed(&mut enc, b"");
        assert!(VersionEdit::decode(&enc).unwrap_err().is_corruption());
    }

    #[test]
    fn garbage_never_panics() {
        let good = full_edit().encode();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..good.len() {
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut d = good.clone();
                d[i] = x as u8;
                let _ = VersionEdit::decode(&d);
            }
        }
        let _ = VersionEdit::decode(&[0xff; 64]);
        let _ = VersionEdit::decode(&[4, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    }
}
