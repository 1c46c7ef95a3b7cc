//! The memtable key filter (`Options::memtable_key_filter`): reported in
//! `Stats`, and reads through memtables, frozen memtables and tables answer
//! the same with it as without it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;

use strata_lsm::{Db, Options};

fn opts(filter: bool) -> Options {
    Options {
        memtable_size: 64 << 10,
        memtable_key_filter: filter,
        background_work: false,
        ..Options::default()
    }
}

/// Random puts and deletes over 3,000 keys (several flushes at a 64 KiB
/// memtable), then every key read: the same answers with and without the
/// filter, and both equal to a model.
#[test]
fn reads_answer_alike_with_and_without_the_filter() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let dbs: Vec<Db> = dirs
        .iter()
        .zip([true, false])
        .map(|(d, f)| Db::open(d.path(), opts(f)).unwrap())
        .collect();
    let mut model = BTreeMap::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..6_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = format!("key{:05}", x % 3_000).into_bytes();
        if x.is_multiple_of(7) {
            for db in &dbs {
                db.delete(&k).unwrap();
            }
            model.remove(&k);
        } else {
            let v = format!("value{i}").into_bytes();
            for db in &dbs {
                db.put(&k, &v).unwrap();
            }
            model.insert(k, v);
        }
    }
    assert!(dbs[0].stats().table_bytes > 0, "some writes reached tables");
    for i in 0..3_500u64 {
        let k = format!("key{i:05}").into_bytes();
        let want = model.get(&k).cloned();
        for db in &dbs {
            assert_eq!(db.get(&k).unwrap(), want, "key{i:05}");
        }
    }
}

#[test]
fn filter_bytes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(true)).unwrap();
    // 64 KiB budget / 64 = 1 KiB, rounded up to the 8 KiB minimum.
    assert_eq!(db.stats().memtable_filter_bytes, 8 << 10);
    drop(db);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(false)).unwrap();
    assert_eq!(db.stats().memtable_filter_bytes, 0);
    let big = Options {
        memtable_size: 64 << 20,
        ..Options::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), big).unwrap();
    assert_eq!(db.stats().memtable_filter_bytes, 1 << 20);
}
