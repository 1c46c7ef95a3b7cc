//! The WAL written through a memory mapping (`Options::wal_mmap`, the
//! default) keeps every acknowledged write across a crash of the process.
//!
//! A crashed process leaves the files as the kernel holds them: a copy of
//! the database directory taken while the database is still open (no
//! background threads, so nothing changes during the copy) is exactly
//! that state, zero-filled WAL tails included.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use strata_lsm::{Db, Options};

fn opts(mmap: bool) -> Options {
    Options {
        create_if_missing: true,
        background_work: false,
        memtable_size: 256 << 10,
        wal_mmap: mmap,
        ..Options::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() == "LOCK" {
            continue;
        }
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn wal_lengths(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .collect()
}

/// Writes `n` puts and deletes of pseudo-random sizes (some values longer
/// than a 32 KiB log block) into `db`, mirrored in `model`.
fn write_some(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, seed: u64, n: usize) {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..n {
        let r = next();
        let key = format!("k{:05}", r % 3000).into_bytes();
        if r % 11 == 0 {
            db.delete(&key).unwrap();
            model.remove(&key);
            continue;
        }
        let len = if r % 97 == 0 {
            40_000
        } else {
            (r >> 20) as usize % 700
        };
        let value: Vec<u8> = (0..len).map(|i| (r >> (i % 56)) as u8).collect();
        db.put(&key, &value).unwrap();
        model.insert(key, value);
    }
}

fn check(dir: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(dir, opts(true)).unwrap();
    for k in 0..3000 {
        let key = format!("k{k:05}").into_bytes();
        assert_eq!(
            db.get(&key).unwrap().as_deref(),
            model.get(&key).map(Vec::as_slice),
            "key {k}"
        );
    }
}

#[test]
fn acknowledged_writes_survive_a_process_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts(true)).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..3u64 {
        write_some(&db, &mut model, 0x5eed + round, 4000);
        // The live WAL is mapped: its file runs to the end of a window.
        let lens = wal_lengths(&live);
        assert!(
            lens.iter()
                .any(|l| *l > 0 && l % strata_lsm::io::mapped::MIN_WINDOW == 0),
            "no mapped WAL among {lens:?}"
        );
        let crashed = tmp.path().join(format!("crash-{round}"));
        copy_dir(&live, &crashed);
        check(&crashed, &model);
    }
    drop(db);
    // A clean close trims the WAL to its records.
    assert!(wal_lengths(&live)
        .iter()
        .all(|l| l % strata_lsm::io::mapped::MIN_WINDOW != 0 || *l == 0));
    check(&live, &model);
}

#[test]
fn the_plain_wal_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live");
    let db = Db::open(&live, opts(false)).unwrap();
    let mut model = BTreeMap::new();
    write_some(&db, &mut model, 77, 3000);
    let crashed = tmp.path().join("crash");
    copy_dir(&live, &crashed);
    check(&crashed, &model);
    drop(db);
    check(&live, &model);
}
