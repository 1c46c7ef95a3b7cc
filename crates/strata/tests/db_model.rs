//! Model-based test: random sequences of put/delete/batch/get/multi_get/
//! scan/snapshot/flush/compact/reopen checked against a BTreeMap.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;

use common::{key, Rng};
use strata::{Db, Options, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn check_scan(db: &Db, model: &Model, from: Option<&[u8]>, to: Option<&[u8]>) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.iter(from, to).unwrap().map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter(|(k, _)| {
            from.is_none_or(|f| k.as_slice() >= f) && to.is_none_or(|t| k.as_slice() < t)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got.len(), want.len(), "scan {from:?}..{to:?} length");
    assert!(got == want, "scan {from:?}..{to:?} differs");
}

fn run(seed: u64, ops: usize, opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut model = Model::new();
    let mut snapshots: Vec<(strata::Snapshot, Model)> = Vec::new();
    let key_space = 400;
    for step in 0..ops {
        let r = rng.below(1000);
        match r {
            0..=449 => {
                let k = key(rng.below(key_space));
                let len = rng.below(200) as usize;
                let v = rng.bytes(len);
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            450..=599 => {
                let k = key(rng.below(key_space));
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            600..=679 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.below(8) + 1 {
                    let k = key(rng.below(key_space));
                    if rng.chance(70) {
                        let n = rng.below(100) as usize;
                        let v = rng.bytes(n);
                        b.put(&k, &v);
                        model.insert(k, v);
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                }
                db.write(b, WriteOptions::default()).unwrap();
            }
            680..=829 => {
                let k = key(rng.below(key_space));
                assert_eq!(
                    db.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "step {step} get {k:?}"
                );
            }
            830..=869 => {
                let keys: Vec<Vec<u8>> = (0..rng.below(20) + 1)
                    .map(|_| key(rng.below(key_space)))
                    .collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let got = db.multi_get(&refs).unwrap();
                for (k, g) in keys.iter().zip(got) {
                    assert_eq!(g, model.get(k).cloned(), "step {step} multi_get {k:?}");
                }
            }
            870..=899 => {
                let a = key(rng.below(key_space));
                let b = key(rng.below(key_space));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                match rng.below(3) {
                    0 => check_scan(&db, &model, Some(&lo), Some(&hi)),
                    1 => check_scan(&db, &model, Some(&lo), None),
                    _ => check_scan(&db, &model, None, Some(&hi)),
                }
            }
            900..=929 => {
                if snapshots.len() < 4 {
                    snapshots.push((db.snapshot(), model.clone()));
                } else {
                    let i = rng.below(snapshots.len() as u64) as usize;
                    let (snap, m) = snapshots.swap_remove(i);
                    for _ in 0..10 {
                        let k = key(rng.below(key_space));
                        assert_eq!(
                            snap.get(&k).unwrap(),
                            m.get(&k).cloned(),
                            "step {step} snapshot get"
                        );
                    }
                    let got: Vec<_> = snap.iter(None, None).unwrap().map(|r| r.unwrap()).collect();
                    let want: Vec<_> = m.into_iter().collect();
                    assert!(got == want, "step {step} snapshot scan differs");
                }
            }
            930..=959 => db.flush().unwrap(),
            960..=974 => {
                let a = key(rng.below(key_space));
                if rng.chance(50) {
                    db.compact_range(None, None).unwrap();
                } else {
                    db.compact_range(Some(&a), None).unwrap();
                }
            }
            _ => {
                snapshots.clear();
                drop(db);
                db = Db::open(dir.path(), opts.clone()).unwrap();
            }
        }
    }
    check_scan(&db, &model, None, None);
    // A snapshot keeps the database open; release them before reopening.
    drop(snapshots);
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    check_scan(&db, &model, None, None);
}

#[test]
fn model_inline_background_work() {
    for seed in 0..4 {
        run(
            seed,
            3000,
            Options::small_for_tests().background_work(false),
        );
    }
}

#[test]
fn model_background_threads() {
    for seed in 10..13 {
        run(seed, 3000, Options::small_for_tests());
    }
}

#[test]
fn model_lz4_no_bloom_no_cache() {
    run(
        99,
        3000,
        Options::small_for_tests()
            .compression(strata::Compression::Lz4)
            .bloom_bits_per_key(0)
            .block_cache_bytes(0),
    );
}
