//! Fuzz target bodies for the engine's decoders of bytes read from disk
//! (feature `testing`). The `fuzz/` crate runs them under libFuzzer and
//! `crates/strata/tests/fuzz_corpus_replay.rs` replays the saved corpus on
//! every test run. Contract of every target: any input returns (an error
//! or a value); no panic, no hang, no allocation sized by an unchecked
//! length.

#![allow(clippy::indexing_slicing)] // inputs are split with checked helpers

use std::io::Write;
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::iter::InternalIterator;
use crate::key::{compare_internal, make_internal_key, parse_internal_key, ValueKind};
use crate::sstable::block::Block;
use crate::sstable::filter::BloomFilter;
use crate::sstable::format::{decode_block, Footer};
use crate::sstable::obsolete::ObsoleteMap;
use crate::sstable::{BlockHandle, TableProperties};
use crate::version::VersionEdit;
use crate::wal::LogReader;
use crate::WalRecovery;

/// A fuzz target: a name (the corpus directory) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// The engine's targets.
pub const TARGETS: &[Target] = &[
    ("data_block", data_block),
    ("block_trailer", block_trailer),
    ("bloom_filter", bloom_filter),
    ("footer", footer),
    ("table_properties", table_properties),
    ("obsolete_bitmap", obsolete_bitmap),
    ("manifest_edit", manifest_edit),
    ("write_batch", write_batch),
    ("internal_key", internal_key),
    ("wal_records", wal_records),
];

fn drain(mut it: impl InternalIterator) {
    if it.seek_to_first().is_err() {
        return;
    }
    let mut n = 0usize;
    while it.valid() && n < 1 << 20 {
        let _ = (it.key().len(), it.value().len());
        if it.next().is_err() {
            return;
        }
        n += 1;
    }
}

/// Data, index and meta blocks (one format): decode, iterate, seek.
pub fn data_block(data: &[u8]) {
    if let Ok(block) = Block::new(data.to_vec()) {
        let block = Arc::new(block);
        drain(block.iter(compare_internal));
        let mut it = block.iter(compare_internal);
        let _ = it.seek(&make_internal_key(b"key", 100, ValueKind::Value));
    }
}

/// A block as read from a table: compression type and CRC trailer.
pub fn block_trailer(data: &[u8]) {
    let _ = decode_block(data.to_vec(), BlockHandle::new(0, data.len() as u64));
    if let Some(n) = data.len().checked_sub(5) {
        let _ = decode_block(data.to_vec(), BlockHandle::new(0, n as u64));
    }
}

/// Bloom filter block.
pub fn bloom_filter(data: &[u8]) {
    if let Ok(f) = BloomFilter::from_bytes(data.to_vec()) {
        let _ = f.may_contain(b"x");
        let _ = f.may_contain(data);
    }
}

/// Table footer.
pub fn footer(data: &[u8]) {
    let _ = Footer::decode(data, "fuzz");
}

/// Table properties block.
pub fn table_properties(data: &[u8]) {
    let _ = TableProperties::decode(data);
}

/// Obsolete-entry bitmap block.
pub fn obsolete_bitmap(data: &[u8]) {
    let _ = ObsoleteMap::decode(data);
}

/// One MANIFEST record (version edit).
pub fn manifest_edit(data: &[u8]) {
    let _ = VersionEdit::decode(data);
}

/// A write batch as stored in a WAL record.
pub fn write_batch(data: &[u8]) {
    if let Ok(b) = WriteBatch::from_data(data.to_vec()) {
        for op in b.iter() {
            let _ = op;
        }
    }
}

/// An internal key (user key, sequence number, kind).
pub fn internal_key(data: &[u8]) {
    let _ = parse_internal_key(data);
}

/// A WAL (or MANIFEST) file, read in both recovery modes.
pub fn wal_records(data: &[u8]) {
    let dir = std::env::temp_dir().join(format!("strata-fuzz-wal-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = dir.join("000001.log");
    let written = std::fs::File::create(&path).and_then(|mut f| f.write_all(data));
    if written.is_err() {
        return;
    }
    for mode in [WalRecovery::TolerateTornTail, WalRecovery::BestEffort] {
        let Ok(file) = std::fs::File::open(&path) else {
            return;
        };
        let mut r = LogReader::new(file, path.clone(), mode);
        let mut n = 0usize;
        while let Ok(Some(rec)) = r.read_record() {
            write_batch(&rec);
            n += 1;
            if n > 1 << 20 {
                break;
            }
        }
    }
}
