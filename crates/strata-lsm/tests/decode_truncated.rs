//! Every on-disk decoder returns an error, never panics, on every prefix of
//! a valid encoding and on single-byte damage (the modules under
//! `clippy::indexing_slicing`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::sync::Arc;

use strata_lsm::iter::InternalIterator;
use strata_lsm::key::{compare_internal, make_internal_key, parse_internal_key, ValueKind};
use strata_lsm::sstable::block::{Block, BlockBuilder};
use strata_lsm::sstable::filter::{BloomBuilder, BloomFilter};
use strata_lsm::sstable::format::Footer;
use strata_lsm::sstable::obsolete::ObsoleteMap;
use strata_lsm::sstable::{BlockHandle, TableProperties};
use strata_lsm::version::{FileMetaData, VersionEdit};
use strata_lsm::WriteBatch;

/// Every strict prefix of `valid`, then `valid` with each byte flipped.
fn damaged(valid: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..valid.len()).map(|n| valid[..n].to_vec()).collect();
    for i in 0..valid.len() {
        let mut v = valid.to_vec();
        v[i] ^= 0x5a;
        out.push(v);
    }
    out
}

fn drain(mut it: impl InternalIterator) {
    if it.seek_to_first().is_err() {
        return;
    }
    while it.valid() {
        let _ = (it.key().len(), it.value().len());
        if it.next().is_err() {
            return;
        }
    }
}

#[test]
fn block_decoding_never_panics() {
    let mut b = BlockBuilder::new(2);
    for i in 0..7u64 {
        let k = make_internal_key(format!("key{i:03}").as_bytes(), 10 + i, ValueKind::Value);
        b.add(&k, format!("value{i}").as_bytes());
    }
    let valid = b.finish().to_vec();
    drain(Arc::new(Block::new(valid.clone()).unwrap()).iter(compare_internal));
    for bytes in damaged(&valid) {
        if let Ok(block) = Block::new(bytes) {
            let block = Arc::new(block);
            drain(block.iter(compare_internal));
            let mut it = block.iter(compare_internal);
            let _ = it.seek(&make_internal_key(b"key004", 100, ValueKind::Value));
        }
    }
}

#[test]
fn filter_footer_and_properties_decoding_never_panic() {
    let mut f = BloomBuilder::new(10);
    for i in 0..50u32 {
        f.add_key(&i.to_le_bytes());
    }
    let valid = f.finish();
    assert!(BloomFilter::from_bytes(valid.clone()).is_ok());
    for bytes in damaged(&valid) {
        if let Ok(filter) = BloomFilter::from_bytes(bytes) {
            let _ = filter.may_contain(b"x");
        }
    }

    let footer = Footer {
        metaindex: BlockHandle::new(1000, 200),
        index: BlockHandle::new(1205, 3000),
    };
    let valid = footer.encode();
    assert_eq!(Footer::decode(&valid, "t").unwrap(), footer);
    for bytes in damaged(&valid) {
        assert!(Footer::decode(&bytes, "t").is_err());
    }

    let props = TableProperties {
        num_entries: 7,
        smallest_key: b"a".to_vec(),
        largest_key: b"z".to_vec(),
        ..TableProperties::default()
    };
    let valid = props.encode();
    for bytes in damaged(&valid) {
        let _ = TableProperties::decode(&bytes);
    }
}

#[test]
fn batch_edit_bitmap_and_key_decoding_never_panic() {
    let mut batch = WriteBatch::new();
    batch.put(b"k1", b"v1").delete(b"k2").put(b"k3", b"v3");
    let valid = batch.data().to_vec();
    for bytes in damaged(&valid) {
        if let Ok(b) = WriteBatch::from_data(bytes) {
            for op in b.iter() {
                let _ = op;
            }
        }
    }

    let edit = VersionEdit {
        log_number: Some(3),
        next_file_number: Some(9),
        last_sequence: Some(77),
        new_files: vec![(
            1,
            Arc::new(FileMetaData {
                number: 8,
                file_size: 4096,
                smallest: make_internal_key(b"a", 1, ValueKind::Value),
                largest: make_internal_key(b"z", 2, ValueKind::Value),
                smallest_seq: 1,
                largest_seq: 2,
                num_entries: 2,
                num_deletions: 0,
            }),
        )],
        deleted_files: vec![(0, 5)],
        ..VersionEdit::default()
    };
    let valid = edit.encode();
    assert_eq!(VersionEdit::decode(&valid).unwrap(), edit);
    for bytes in damaged(&valid) {
        let _ = VersionEdit::decode(&bytes);
    }

    let valid = ObsoleteMap::from_marks(16, &[(0, 1), (4096, 3), (4096, 40)]).encode();
    for bytes in damaged(&valid) {
        let _ = ObsoleteMap::decode(&bytes);
    }

    let valid = make_internal_key(b"user", 42, ValueKind::Deletion);
    for bytes in damaged(&valid) {
        let _ = parse_internal_key(&bytes);
    }
}
