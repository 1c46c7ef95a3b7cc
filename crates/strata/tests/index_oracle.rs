//! The oracle test every index strategy must pass: random puts (new keys
//! and updates that change the attribute), deletes, batches, flushes,
//! compactions, reopens and crash-reopens, with lookup, range and within
//! queries (with and without limit, keys-only) on all five key types,
//! compared with a brute-force oracle over an in-memory model.
//!
//! A new strategy joins by adding its name to `STRATEGIES`. Setting
//! `STRATA_ORACLE_ONLY=name[,name...]` runs only those strategies (while
//! developing one); CI runs them all.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;

use common::{attr, copy_dir, spec_for, Rng, STRATEGIES};
use serde_json::{json, Value};
use strata::{
    Db, Hit, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteBatch,
    WriteOptions,
};

/// `STRATEGIES` (index, name), filtered by `STRATA_ORACLE_ONLY`.
fn strategies() -> Vec<(usize, &'static str)> {
    let only = std::env::var("STRATA_ORACLE_ONLY").ok();
    STRATEGIES
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, s)| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == *s))
        })
        .collect()
}

const FIELDS: &[(&str, &str, KeyType)] = &[
    ("by_n", "n", KeyType::I64),
    ("by_f", "f", KeyType::F64),
    ("by_s", "s", KeyType::String),
    ("by_p", "loc.p", KeyType::Point),
    ("by_r", "r", KeyType::Rect),
];

/// key → (write order, value bytes).
type Model = BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

fn random_value(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(3) {
        return b"not json {".to_vec();
    }
    let mut doc = serde_json::Map::new();
    if !rng.chance(10) {
        // Occasionally the wrong type.
        doc.insert(
            "n".into(),
            if rng.chance(5) {
                json!("x")
            } else {
                json!(rng.below(40) as i64 - 20)
            },
        );
    }
    if !rng.chance(10) {
        doc.insert("f".into(), json!((rng.below(200) as f64) / 8.0 - 10.0));
    }
    if !rng.chance(10) {
        let words = [
            "apple", "banana", "cherry", "date", "elder", "fig", "grape", "",
        ];
        doc.insert(
            "s".into(),
            json!(words[rng.below(words.len() as u64) as usize]),
        );
    }
    if !rng.chance(10) {
        let x = rng.below(100) as f64 / 4.0;
        let y = rng.below(100) as f64 / 4.0;
        doc.insert("loc".into(), json!({"p": [x, y]}));
    }
    if !rng.chance(10) {
        let x = rng.below(100) as f64 / 4.0;
        let y = rng.below(100) as f64 / 4.0;
        let w = rng.below(12) as f64 / 4.0;
        let h = rng.below(12) as f64 / 4.0;
        doc.insert("r".into(), json!([x, y, x + w, y + h]));
    }
    doc.insert("pad".into(), json!("x".repeat(rng.below(80) as usize)));
    serde_json::to_vec(&Value::Object(doc)).unwrap()
}

fn random_predicate(rng: &mut Rng, ty: KeyType) -> Predicate {
    match ty {
        KeyType::I64 => {
            let a = rng.below(44) as i64 - 22;
            if rng.chance(40) {
                Predicate::Eq(IndexValue::I64(a))
            } else {
                Predicate::Range(
                    IndexValue::I64(a),
                    IndexValue::I64(a + rng.below(12) as i64),
                )
            }
        }
        KeyType::F64 => {
            let a = rng.below(200) as f64 / 8.0 - 11.0;
            if rng.chance(40) {
                Predicate::Eq(IndexValue::F64(a))
            } else {
                Predicate::Range(
                    IndexValue::F64(a),
                    IndexValue::F64(a + rng.below(40) as f64 / 8.0),
                )
            }
        }
        KeyType::String => {
            let words = [
                "apple", "b", "banana", "cherry", "d", "fig", "grape", "zzz", "",
            ];
            let a = words[rng.below(words.len() as u64) as usize].to_string();
            if rng.chance(40) {
                Predicate::Eq(IndexValue::Str(a))
            } else {
                let b = words[rng.below(words.len() as u64) as usize].to_string();
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                Predicate::Range(IndexValue::Str(lo), IndexValue::Str(hi))
            }
        }
        KeyType::Point | KeyType::Rect => {
            let x = rng.below(100) as f64 / 4.0 - 1.0;
            let y = rng.below(100) as f64 / 4.0 - 1.0;
            let w = rng.below(40) as f64 / 4.0;
            let h = rng.below(40) as f64 / 4.0;
            Predicate::Within([x, y, x + w, y + h])
        }
    }
}

fn expected(
    model: &Model,
    path: &str,
    ty: KeyType,
    pred: &Predicate,
    opts: QueryOptions,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut v: Vec<(u64, Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter(|(_, (_, val))| attr(val, path, ty).is_some_and(|a| pred.matches(&a)))
        .map(|(k, (o, val))| (*o, k.clone(), val.clone()))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    if let Some(k) = opts.limit {
        v.truncate(k);
    }
    v.into_iter()
        .map(|(_, k, val)| (k, if opts.keys_only { None } else { Some(val) }))
        .collect()
}

fn check_queries(db: &Db, model: &Model, rng: &mut Rng, step: usize, n: usize, active: &[usize]) {
    for _ in 0..n {
        let (name, path, ty) = FIELDS[active[rng.below(active.len() as u64) as usize]];
        let pred = random_predicate(rng, ty);
        let mut opts = QueryOptions::default();
        if rng.chance(40) {
            opts = opts.limit(rng.below(6) as usize + 1);
        }
        if rng.chance(20) {
            opts = opts.keys_only(true);
        }
        let got: Vec<Hit> = db
            .query(name, &pred, opts)
            .unwrap_or_else(|e| panic!("step {step}: {name} {pred:?}: {e}"));
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            got.into_iter().map(|h| (h.key, h.value)).collect();
        let want = expected(model, path, ty, &pred, opts);
        if got != want {
            for (k, _) in got.iter().filter(|g| !want.iter().any(|w| w.0 == g.0)) {
                eprintln!(
                    "extra {:?}: db has {:?}, model {:?}",
                    String::from_utf8_lossy(k),
                    db.get(k)
                        .unwrap()
                        .map(|v| String::from_utf8_lossy(&v).into_owned()),
                    model
                        .get(k)
                        .map(|v| String::from_utf8_lossy(&v.1).into_owned())
                );
            }
        }
        assert!(
            got == want,
            "step {step}: {name} {pred:?} {opts:?}\n got  {:?}\n want {:?}",
            got.iter()
                .map(|g| String::from_utf8_lossy(&g.0).into_owned())
                .collect::<Vec<_>>(),
            want.iter()
                .map(|g| String::from_utf8_lossy(&g.0).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

fn create_indexes(db: &Db, strategy: &str, which: &[usize]) {
    for &i in which {
        let (name, path, ty) = FIELDS[i];
        db.create_index(spec_for(strategy, name, path, ty)).unwrap();
    }
}

fn run(strategy: &str, seed: u64, steps: usize, opts: Options) {
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    let mut rng = Rng::new(seed);
    let mut db = Db::open(dirs[0].path(), opts.clone()).unwrap();
    // Three indexes before any data, two created over existing data.
    // Queried from the first step, before any flush (the memtable that was
    // active at creation must index new writes).
    create_indexes(&db, strategy, &[0, 2, 3]);
    let mut active = vec![0, 2, 3];
    let mut model = Model::new();
    let mut order = 0u64;
    let keys = 150;
    let mut later = true;
    for step in 0..steps {
        if later && step == steps / 4 {
            create_indexes(&db, strategy, &[1, 4]);
            active.extend([1, 4]);
            later = false;
        }
        let key = |rng: &mut Rng| format!("r{:04}", rng.below(keys)).into_bytes();
        match rng.below(100) {
            0..=44 => {
                let k = key(&mut rng);
                let v = random_value(&mut rng);
                db.put(&k, &v).unwrap();
                order += 1;
                model.insert(k, (order, v));
            }
            45..=57 => {
                let k = key(&mut rng);
                db.delete(&k).unwrap();
                order += 1;
                model.remove(&k);
            }
            58..=65 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.below(6) + 1 {
                    let k = key(&mut rng);
                    order += 1;
                    if rng.chance(75) {
                        let v = random_value(&mut rng);
                        b.put(&k, &v);
                        model.insert(k, (order, v));
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                }
                db.write(b, WriteOptions::default()).unwrap();
            }
            66..=85 => check_queries(&db, &model, &mut rng, step, 3, &active),
            86..=90 => db.flush().unwrap(),
            91..=93 => db.compact_range(None, None).unwrap(),
            94..=96 => {
                drop(db);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
            _ => {
                // Crash: the directory as it is now, opened without a clean
                // close. Background work is quiesced first so that the copy
                // is one instant's state.
                db.wait_for_compactions().unwrap();
                let next = tempfile::tempdir().unwrap();
                copy_dir(dirs.last().unwrap().path(), next.path());
                drop(db);
                dirs.push(next);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
        }
    }
    if !later {
        check_queries(&db, &model, &mut rng, steps, 40, &active);
        for (name, _, _) in FIELDS {
            let c = db.check_index(name).unwrap();
            assert!(c.ok(), "{c:?}");
        }
    }
    let infos = db.indexes();
    assert_eq!(infos.len(), 5);
    assert!(infos.iter().all(|i| i.state == strata::IndexState::Ready));
    assert!(infos.iter().any(|i| i.stats.validations > 0));
}

#[test]
fn oracle_inline_work() {
    for (i, s) in strategies() {
        // Stand-alone strategies open a nested tree per index at every
        // reopen, which makes them slower: one seed each (different ones).
        let seeds = if i < 3 {
            0..3
        } else {
            10 + i as u64..11 + i as u64
        };
        for seed in seeds {
            run(
                s,
                seed,
                1500,
                Options::small_for_tests().background_work(false),
            );
        }
    }
}

#[test]
fn oracle_background_work() {
    for (_, s) in strategies() {
        run(s, 100, 1500, Options::small_for_tests());
    }
}

#[test]
fn oracle_delta_off_and_fixed() {
    for delta in ["off", "0.5"] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            Options::small_for_tests().background_work(false),
        )
        .unwrap();
        db.create_index(IndexSpec::field("by_n", "n", KeyType::I64).param("delta", delta))
            .unwrap();
        let mut rng = Rng::new(5);
        let mut model = Model::new();
        for i in 0..600u64 {
            let k = format!("r{:04}", rng.below(200)).into_bytes();
            let v = random_value(&mut rng);
            db.put(&k, &v).unwrap();
            model.insert(k, (i, v));
        }
        db.flush().unwrap();
        for _ in 0..50 {
            let pred = random_predicate(&mut rng, KeyType::I64);
            let got: Vec<Vec<u8>> = db
                .query("by_n", &pred, QueryOptions::default())
                .unwrap()
                .into_iter()
                .map(|h| h.key)
                .collect();
            let want: Vec<Vec<u8>> =
                expected(&model, "n", KeyType::I64, &pred, QueryOptions::default())
                    .into_iter()
                    .map(|w| w.0)
                    .collect();
            assert_eq!(got, want);
        }
    }
}
