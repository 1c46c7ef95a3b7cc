//! `Db::locate_entry` finds the data block holding each entry, and
//! `Db::read_block_verified` reads it without touching caches or counters.

use strata_lsm::{Db, Options};

#[test]
fn every_flushed_entry_is_located_in_the_block_that_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    let key = |i: u32| format!("key{i:06}").into_bytes();
    for i in 0..3000u32 {
        db.put(&key(i), &vec![b'v'; 40 + (i % 50) as usize])
            .unwrap();
    }
    // Overwrite some: the old versions' sequence numbers must not be found
    // once compacted away, the new ones must.
    for i in (0..3000u32).step_by(7) {
        db.put(&key(i), b"new").unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    // Newer writes stay in the memtable: not located.
    db.put(&key(5000), b"mem").unwrap();

    let keys: Vec<Vec<u8>> = (0..3000).map(key).chain([key(5000)]).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let found = db.multi_get_with_seq(&refs).unwrap();
    let before = db.stats();
    let mut blocks = std::collections::BTreeSet::new();
    for (k, f) in keys.iter().zip(&found) {
        let (seq, value) = f.clone().unwrap();
        let loc = db.locate_entry(k, seq).unwrap();
        if k == &key(5000) {
            assert_eq!(loc, None);
            continue;
        }
        let loc = loc.unwrap_or_else(|| panic!("{k:?}@{seq} not located"));
        let entries = db.read_data_block(loc.file_number, loc.handle).unwrap();
        assert!(entries
            .iter()
            .any(|e| &e.user_key == k && e.seq == seq && e.value == value));
        // A sequence number the key never had is not located.
        assert_eq!(db.locate_entry(k, seq + 100_000).unwrap(), None);
        blocks.insert(loc);
    }
    assert!(blocks.len() > 10);
    let s0 = db.stats();
    for loc in &blocks {
        assert_eq!(
            db.read_block_verified(loc).unwrap(),
            loc.handle.size + 5,
            "{loc:?}"
        );
    }
    // Neither call counts block reads (read_data_block above did).
    let s1 = db.stats();
    assert_eq!(s0.io.data_blocks, s1.io.data_blocks);
    assert_eq!(before.io.bloom_probes, s1.io.bloom_probes);
}
