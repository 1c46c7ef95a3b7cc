//! `Options::mmap_reads`: tables read through memory mappings answer gets,
//! scans and index queries exactly as with `pread`, across flushes,
//! compactions (which remove mapped tables) and reopen; a damaged block is
//! a corruption error, not wrong data; the option is refused with
//! `direct_io`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::topk::{expected, query, record, Model};
use common::{key, Rng};
use strata::{Db, IndexSpec, KeyType, Options};

fn open(dir: &std::path::Path, mmap: bool) -> Db {
    let opts = Options::small_for_tests()
        .background_work(false)
        .mmap_reads(mmap);
    let db = Db::open(dir, opts).unwrap();
    if db.indexes().is_empty() {
        db.create_index(IndexSpec::field("by_u", "u", KeyType::I64).strategy("next"))
            .unwrap();
    }
    db
}

fn scan(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.iter(None, None).unwrap().map(|r| r.unwrap()).collect()
}

#[test]
fn mapped_tables_answer_like_pread_through_compactions_and_reopen() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut dbs = [open(a.path(), true), open(b.path(), false)];
    let mut rng = Rng::new(11);
    let mut model = Model::new();
    let mut order = 0u64;
    for round in 0..12 {
        for _ in 0..300 {
            let i = rng.below(900);
            if rng.chance(15) {
                for db in &dbs {
                    db.delete(&key(i)).unwrap();
                }
                model.remove(&key(i));
            } else {
                let u = rng.below(30) as i64;
                for db in &dbs {
                    db.put(&key(i), &record(u, i)).unwrap();
                }
                order += 1;
                model.insert(key(i), (order, u));
            }
        }
        for db in &dbs {
            db.flush().unwrap();
            if round % 4 == 3 {
                db.compact_range(None, None).unwrap();
            }
        }
        if round % 5 == 4 {
            let [x, y] = dbs;
            drop((x, y));
            dbs = [open(a.path(), true), open(b.path(), false)];
        }
        let [m, p] = &dbs;
        assert_eq!(scan(m), scan(p), "round {round}");
        // The mapped database's tables are mapped; the other's are not
        // (both map their WAL).
        if cfg!(target_os = "linux") {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            let dir_of = |d: &std::path::Path| d.to_str().unwrap().to_string();
            let mapped = |d: &std::path::Path| {
                maps.lines()
                    .any(|l| l.contains(&dir_of(d)) && l.trim_end().ends_with(".sst"))
            };
            assert!(mapped(a.path()) && !mapped(b.path()), "round {round}");
        }
        for i in (0..900).step_by(37) {
            assert_eq!(m.get(&key(i)).unwrap(), p.get(&key(i)).unwrap());
        }
        for (lo, hi) in [(4, 4), (0, 9), (0, 29)] {
            let want = expected(&model, lo, hi, usize::MAX);
            assert_eq!(query(m, lo, hi, None).0, want, "round {round} {lo}..={hi}");
            assert_eq!(query(p, lo, hi, None).0, want);
            assert_eq!(query(m, lo, hi, Some(5)).0, expected(&model, lo, hi, 5));
        }
    }
}

#[test]
fn a_damaged_block_read_through_a_mapping_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = open(dir.path(), false);
        for i in 0..2000 {
            db.put(&key(i), &record((i % 7) as i64, i)).unwrap();
        }
        db.flush().unwrap();
    }
    // Flip one byte in the middle of the data blocks of the table.
    let table = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("a table");
    let mut bytes = std::fs::read(&table).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x10;
    std::fs::write(&table, &bytes).unwrap();
    let db = open(dir.path(), true);
    let err = db
        .iter(None, None)
        .unwrap()
        .find_map(|r| r.err())
        .expect("a damaged block");
    assert!(err.is_corruption(), "{err}");
}

#[test]
fn mmap_reads_and_direct_io_are_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().mmap_reads(true).direct_io(true);
    let err = Db::open(dir.path(), opts).err().expect("refused");
    assert!(err.to_string().contains("exclusive"), "{err}");
}
