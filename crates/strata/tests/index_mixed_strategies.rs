//! A database holding NEXT and `memory` indexes at once, on different
//! attributes, checked against a brute-force model through puts, updates,
//! deletes, batches that touch one key several times, flushes, compactions,
//! an index created over existing data, and reopens; and a concurrency test
//! showing that `memory` queries see one snapshot while writers run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{expected, Model, Rng};
use serde_json::json;
use strata::{
    Db, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteBatch, WriteOptions,
};

/// (index name, field path, type, strategy).
const INDEXES: &[(&str, &str, KeyType, &str)] = &[
    ("n_next", "n", KeyType::I64, "next"),
    ("p_next", "p", KeyType::Point, "next"),
    ("s_mem", "s", KeyType::String, "memory"),
    ("r_mem", "r", KeyType::Rect, "memory"),
    // Created over existing data, mid-run.
    ("f_mem", "f", KeyType::F64, "memory"),
];

fn value(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(4) {
        return b"{broken".to_vec();
    }
    let mut d = serde_json::Map::new();
    if !rng.chance(10) {
        d.insert("n".into(), json!(rng.below(30) as i64 - 15));
    }
    if !rng.chance(10) {
        let x = rng.below(40) as f64 / 2.0;
        let y = rng.below(40) as f64 / 2.0;
        d.insert("p".into(), json!([x, y]));
    }
    if !rng.chance(10) {
        let w = ["ant", "bee", "cat", "dog", "eel"];
        // Sometimes the wrong type.
        if rng.chance(10) {
            d.insert("s".into(), json!(7));
        } else {
            d.insert("s".into(), json!(w[rng.below(5) as usize]));
        }
    }
    if !rng.chance(10) {
        let x = rng.below(40) as f64 / 2.0;
        let y = rng.below(40) as f64 / 2.0;
        d.insert(
            "r".into(),
            json!([x, y, x + rng.below(6) as f64, y + rng.below(6) as f64]),
        );
    }
    if !rng.chance(10) {
        d.insert("f".into(), json!(rng.below(50) as f64 / 4.0));
    }
    serde_json::to_vec(&serde_json::Value::Object(d)).unwrap()
}

fn predicate(rng: &mut Rng, ty: KeyType) -> Predicate {
    match ty {
        KeyType::I64 => {
            let a = rng.below(34) as i64 - 17;
            Predicate::Range(IndexValue::I64(a), IndexValue::I64(a + rng.below(8) as i64))
        }
        KeyType::F64 => {
            let a = rng.below(50) as f64 / 4.0;
            if rng.chance(50) {
                Predicate::Eq(IndexValue::F64(a))
            } else {
                Predicate::Range(IndexValue::F64(a), IndexValue::F64(a + 3.0))
            }
        }
        KeyType::String => {
            let w = ["ant", "b", "bee", "cat", "dog", "eel", "z"];
            let a = w[rng.below(7) as usize];
            let b = w[rng.below(7) as usize];
            if rng.chance(50) {
                Predicate::Eq(IndexValue::Str(a.into()))
            } else {
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                Predicate::Range(IndexValue::Str(lo.into()), IndexValue::Str(hi.into()))
            }
        }
        _ => {
            let x = rng.below(44) as f64 / 2.0 - 1.0;
            let y = rng.below(44) as f64 / 2.0 - 1.0;
            Predicate::Within([x, y, x + rng.below(10) as f64, y + rng.below(10) as f64])
        }
    }
}

fn check(db: &Db, model: &Model, rng: &mut Rng, active: usize, step: usize) {
    for _ in 0..4 {
        let (name, path, ty, _) = INDEXES[rng.below(active as u64) as usize];
        let pred = predicate(rng, ty);
        let mut opts = QueryOptions::default();
        if rng.chance(30) {
            opts = opts.limit(rng.below(5) as usize + 1);
        }
        if rng.chance(20) {
            opts = opts.keys_only(true);
        }
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = db
            .query(name, &pred, opts)
            .unwrap_or_else(|e| panic!("step {step}: {name}: {e}"))
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        let want = expected(model, path, ty, &pred, opts);
        assert_eq!(got, want, "step {step}: {name} {pred:?} {opts:?}");
    }
}

fn mixed(opts: Options, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path(), opts.clone()).unwrap();
    for (name, path, ty, strategy) in &INDEXES[..4] {
        db.create_index(IndexSpec::field(name, path, *ty).strategy(strategy))
            .unwrap();
    }
    let mut active = 4;
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut order = 0u64;
    let steps = 1200;
    for step in 0..steps {
        if step == steps / 3 {
            let (name, path, ty, strategy) = INDEXES[4];
            db.create_index(IndexSpec::field(name, path, ty).strategy(strategy))
                .unwrap();
            active = 5;
        }
        let key = |rng: &mut Rng| format!("k{:03}", rng.below(100)).into_bytes();
        match rng.below(100) {
            0..=44 => {
                let (k, v) = (key(&mut rng), value(&mut rng));
                db.put(&k, &v).unwrap();
                order += 1;
                model.insert(k, (order, v));
            }
            45..=54 => {
                let k = key(&mut rng);
                db.delete(&k).unwrap();
                order += 1;
                model.remove(&k);
            }
            55..=64 => {
                // Batches that often touch the same key several times.
                let mut b = WriteBatch::new();
                let hot = key(&mut rng);
                for _ in 0..rng.below(6) + 1 {
                    let k = if rng.chance(50) {
                        hot.clone()
                    } else {
                        key(&mut rng)
                    };
                    order += 1;
                    if rng.chance(70) {
                        let v = value(&mut rng);
                        b.put(&k, &v);
                        model.insert(k, (order, v));
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                }
                db.write(b, WriteOptions::default()).unwrap();
            }
            65..=86 => check(&db, &model, &mut rng, active, step),
            87..=91 => db.flush().unwrap(),
            92..=94 => db.compact_range(None, None).unwrap(),
            _ => {
                drop(db);
                db = Db::open(dir.path(), opts.clone()).unwrap();
            }
        }
    }
    drop(db);
    let db = Db::open(dir.path(), opts).unwrap();
    for _ in 0..20 {
        check(&db, &model, &mut rng, active, steps);
    }
    let infos = db.indexes();
    assert_eq!(infos.len(), 5);
    for (name, _, _, strategy) in INDEXES {
        let c = db.check_index(name).unwrap();
        assert!(c.ok(), "{c:?}");
        let i = infos.iter().find(|i| i.spec.name == *name).unwrap();
        assert_eq!(i.spec.strategy, *strategy);
        assert_eq!(i.state, strata::IndexState::Ready);
        if *strategy == "memory" {
            // Rebuilt at open: one entry per indexed live record.
            assert_eq!(i.stats.global_entries as usize, c.expected, "{name}");
            assert!(c.expected == 0 || i.stats.memory_bytes > 0);
        }
    }
}

#[test]
fn next_and_memory_indexes_together() {
    mixed(Options::small_for_tests().background_work(false), 1);
    mixed(Options::small_for_tests(), 2);
}

#[test]
fn memory_rejects_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    let e = db
        .create_index(
            IndexSpec::field("x", "x", KeyType::I64)
                .strategy("memory")
                .param("delta", "auto"),
        )
        .unwrap_err();
    assert!(matches!(e, strata::Error::InvalidArgument(_)), "{e}");
    assert!(db.indexes().is_empty());
}

/// A token moves between keys in atomic batches: at every snapshot exactly
/// one key holds it. Queries running alongside the writer must find exactly
/// one holder, with a value that says so, on both strategies.
#[test]
fn queries_see_one_snapshot_under_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::small_for_tests()).unwrap());
    let keys = 20u64;
    let doc = |tok: bool, i: u64| {
        serde_json::to_vec(&json!({"s": if tok {"tok"} else {"none"}, "n": i64::from(tok), "pad": "x".repeat(64), "i": i}))
            .unwrap()
    };
    let mut b = WriteBatch::new();
    for i in 0..keys {
        b.put(format!("t{i:02}").as_bytes(), &doc(i == 0, 0));
    }
    db.write(b, WriteOptions::default()).unwrap();
    db.create_index(IndexSpec::field("n_next", "n", KeyType::I64))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut holder = 0u64;
            let mut i = 1u64;
            while !stop.load(Ordering::Relaxed) && i < 3000 {
                let next = (holder + 1 + i % 7) % keys;
                let mut b = WriteBatch::new();
                b.put(format!("t{holder:02}").as_bytes(), &doc(false, i));
                b.put(format!("t{next:02}").as_bytes(), &doc(true, i));
                db.write(b, WriteOptions::default()).unwrap();
                holder = next;
                i += 1;
            }
        })
    };
    // Built while the writer runs: the build must see every write
    // published before it and every later write must maintain it.
    db.create_index(IndexSpec::field("s_mem", "s", KeyType::String).strategy("memory"))
        .unwrap();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let db = db.clone();
            std::thread::spawn(move || {
                for q in 0..400 {
                    let (name, pred) = if (q + r) % 2 == 0 {
                        ("s_mem", Predicate::Eq(IndexValue::Str("tok".into())))
                    } else {
                        ("n_next", Predicate::Eq(IndexValue::I64(1)))
                    };
                    let hits = db.query(name, &pred, QueryOptions::default()).unwrap();
                    assert_eq!(hits.len(), 1, "{name}: {hits:?}");
                    let v: serde_json::Value =
                        serde_json::from_slice(hits.get(0).unwrap().value.unwrap()).unwrap();
                    assert_eq!(v["s"], "tok");
                    let none = db
                        .query(
                            "s_mem",
                            &Predicate::Eq(IndexValue::Str("none".into())),
                            QueryOptions::default().keys_only(true),
                        )
                        .unwrap();
                    assert_eq!(none.len() as u64, keys - 1);
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let c = db.check_index("s_mem").unwrap();
    assert!(c.ok(), "{c:?}");
}
