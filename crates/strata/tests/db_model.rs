//! Model-based test: random sequences of put/delete/batch/get/multi_get/
//! scan/snapshot/flush/compact/reopen checked against a BTreeMap.
//!
//! Two forms: long seeded runs (`model_*`) and proptest runs (`prop_model_*`)
//! whose failing operation sequences shrink to a minimal one and are saved
//! in `tests/proptest-regressions/db_model.txt`, replayed first on every run.
//! `PROPTEST_CASES=n` runs n proptest cases per test instead of the default.
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

// ---------------------------------------------------------------------------
// The same model as a proptest: an operation sequence is generated as a
// `Vec<Op>`, so a failing one shrinks to a minimal sequence and is saved in
// `tests/proptest-regressions/db_model.txt` (replayed first on every run).
// The seeded runs above stay: they run longer sequences.
// `PROPTEST_CASES=n` runs n cases per test instead of the default.

use proptest::prelude::*;

/// Keys of the proptest cases: a smaller space than the seeded runs so
/// that short sequences still overwrite and delete what they wrote.
const PROP_KEYS: u16 = 100;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, Vec<u8>),
    Delete(u16),
    /// (key, Some(value) to put or None to delete).
    Batch(Vec<(u16, Option<Vec<u8>>)>),
    Get(u16),
    MultiGet(Vec<u16>),
    /// Bounds a, b sorted; 0: [lo, hi), 1: [lo, ..), 2: [.., hi).
    Scan(u16, u16, u8),
    /// Keeps a snapshot with a copy of the model (at most 4 are kept).
    TakeSnapshot,
    /// Checks snapshot `i % kept` with gets of these keys and a full scan,
    /// then releases it.
    CheckSnapshot(usize, Vec<u16>),
    Flush,
    /// Full (None) or from a key.
    Compact(Option<u16>),
    Reopen,
}

fn value(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(b'a'..=b'z', 0..max)
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0..PROP_KEYS;
    // Weights as in the seeded runs (per mille).
    prop_oneof![
        450 => (k(), value(200)).prop_map(|(k, v)| Op::Put(k, v)),
        150 => k().prop_map(Op::Delete),
        80 => prop::collection::vec((k(), prop::option::weighted(0.7, value(100))), 1..=8)
            .prop_map(Op::Batch),
        150 => k().prop_map(Op::Get),
        40 => prop::collection::vec(k(), 1..=20).prop_map(Op::MultiGet),
        30 => (k(), k(), 0..3u8).prop_map(|(a, b, m)| Op::Scan(a, b, m)),
        15 => Just(Op::TakeSnapshot),
        15 => (any::<usize>(), prop::collection::vec(k(), 10)).prop_map(|(i, ks)| Op::CheckSnapshot(i, ks)),
        30 => Just(Op::Flush),
        15 => prop::option::of(k()).prop_map(Op::Compact),
        25 => Just(Op::Reopen),
    ]
}

fn run_ops(ops: &[Op], opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut model = Model::new();
    let mut snapshots: Vec<(strata::Snapshot, Model)> = Vec::new();
    let key = |k: &u16| key(u64::from(*k));
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Put(k, v) => {
                db.put(&key(k), v).unwrap();
                model.insert(key(k), v.clone());
            }
            Op::Delete(k) => {
                db.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                for (k, v) in entries {
                    match v {
                        Some(v) => {
                            b.put(&key(k), v);
                            model.insert(key(k), v.clone());
                        }
                        None => {
                            b.delete(&key(k));
                            model.remove(&key(k));
                        }
                    }
                }
                db.write(b, WriteOptions::default()).unwrap();
            }
            Op::Get(k) => {
                let k = key(k);
                assert_eq!(
                    db.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "step {step} get {k:?}"
                );
            }
            Op::MultiGet(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(key).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let got = db.multi_get(&refs).unwrap();
                assert_eq!(got.len(), keys.len(), "step {step} multi_get length");
                for (k, g) in keys.iter().zip(got) {
                    assert_eq!(g, model.get(k).cloned(), "step {step} multi_get {k:?}");
                }
            }
            Op::Scan(a, b, m) => {
                let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                match m {
                    0 => check_scan(&db, &model, Some(&lo), Some(&hi)),
                    1 => check_scan(&db, &model, Some(&lo), None),
                    _ => check_scan(&db, &model, None, Some(&hi)),
                }
            }
            Op::TakeSnapshot => {
                if snapshots.len() < 4 {
                    snapshots.push((db.snapshot(), model.clone()));
                }
            }
            Op::CheckSnapshot(i, ks) => {
                if snapshots.is_empty() {
                    continue;
                }
                let (snap, m) = snapshots.swap_remove(i % snapshots.len());
                for k in ks.iter().map(key) {
                    assert_eq!(
                        snap.get(&k).unwrap(),
                        m.get(&k).cloned(),
                        "step {step} snapshot get {k:?}"
                    );
                }
                let got: Vec<_> = snap.iter(None, None).unwrap().map(|r| r.unwrap()).collect();
                let want: Vec<_> = m.into_iter().collect();
                assert!(got == want, "step {step} snapshot scan differs");
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact(None) => db.compact_range(None, None).unwrap(),
            Op::Compact(Some(k)) => db.compact_range(Some(&key(k)), None).unwrap(),
            Op::Reopen => {
                snapshots.clear();
                drop(db);
                db = Db::open(dir.path(), opts.clone()).unwrap();
            }
        }
    }
    // Snapshots still kept see what they saw when taken.
    for (snap, m) in &snapshots {
        let got: Model = snap.iter(None, None).unwrap().map(|r| r.unwrap()).collect();
        assert!(&got == m, "end: snapshot scan differs");
    }
    check_scan(&db, &model, None, None);
    drop(snapshots);
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    check_scan(&db, &model, None, None);
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..400)
}

#[test]
fn prop_model_inline_background_work() {
    common::proptest_run("inline background work", 48, file!(), ops(), |ops| {
        run_ops(&ops, Options::small_for_tests().background_work(false))
    });
}

#[test]
fn prop_model_background_threads() {
    common::proptest_run("background threads", 24, file!(), ops(), |ops| {
        run_ops(&ops, Options::small_for_tests())
    });
}

#[test]
fn prop_model_lz4_no_bloom_no_cache() {
    common::proptest_run("lz4, no bloom, no cache", 16, file!(), ops(), |ops| {
        run_ops(
            &ops,
            Options::small_for_tests()
                .compression(strata::Compression::Lz4)
                .bloom_bits_per_key(0)
                .block_cache_bytes(0),
        )
    });
}
