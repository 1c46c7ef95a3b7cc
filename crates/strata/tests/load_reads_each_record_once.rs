//! `strata::load` reads each JSONL line once, for its key and for the
//! indexes' fields (`index::preread`): the index maintenance (synchronous
//! and memtable side structure) takes the loader's reading, and
//! every index stays exact, also with another writer's batches merged
//! into the loader's write groups.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use strata::load::{load_file, LoadOptions};
use strata::{Db, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions};

fn opts() -> Options {
    Options::small_for_tests()
}

/// Lines with updates, records without the field or with a string in it,
/// and a key field that is also indexed by one index.
fn write_file(path: &std::path::Path, n: u64) -> BTreeMap<String, serde_json::Value> {
    let mut f = std::fs::File::create(path).unwrap();
    let mut model = BTreeMap::new();
    let mut x = 7u64;
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = (x >> 33) % (n / 2);
        let rec = match i % 10 {
            0 => serde_json::json!({ "id": id, "text": "no u here" }),
            1 => serde_json::json!({ "id": id, "u": "a string", "at": [1.0, 2.0] }),
            _ => serde_json::json!({
                "id": id,
                "u": (x >> 20) % 50,
                "at": [((x >> 8) % 1000) as f64 / 10.0, ((x >> 40) % 1000) as f64 / 10.0],
                "text": "tweet text with \"quotes\" and \\u00e9 escapes",
            }),
        };
        writeln!(f, "{rec}").unwrap();
        model.insert(id.to_string(), rec);
    }
    model
}

fn expect_u(model: &BTreeMap<String, serde_json::Value>, lo: i64, hi: i64) -> Vec<String> {
    model
        .iter()
        .filter(|(_, v)| v["u"].as_i64().is_some_and(|u| (lo..=hi).contains(&u)))
        .map(|(k, _)| k.clone())
        .collect()
}

fn keys(db: &Db, index: &str, pred: &Predicate) -> Vec<String> {
    let mut k: Vec<String> = db
        .query(index, pred, QueryOptions::default())
        .unwrap()
        .into_iter()
        .map(|h| String::from_utf8(h.key).unwrap())
        .collect();
    k.sort();
    k
}

#[test]
fn every_index_takes_the_loaders_reading() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.jsonl");
    let model = write_file(&file, 3000);
    let db = Db::open(dir.path().join("db"), opts()).unwrap();
    db.create_index(IndexSpec::field("u", "u", KeyType::I64))
        .unwrap();
    db.create_index(IndexSpec::field("at", "at", KeyType::Point).strategy("embedded"))
        .unwrap();
    db.create_index(IndexSpec::field("byid", "id", KeyType::I64).strategy("filter"))
        .unwrap();
    // A strategy maintained from batches (not the side structure) beside.
    db.create_index(IndexSpec::field("u2", "u", KeyType::I64).strategy("composite"))
        .unwrap();
    let mut o = LoadOptions::new("id");
    o.batch = 100;
    let loaded = load_file(&db, &file, &o, &mut |_| {}).unwrap();
    assert_eq!(loaded.records, 3000);
    // One writer: every group is the loader's batch alone, so both the
    // synchronous maintenance (composite) and the side structure (next,
    // embedded, filter) took the loader's reading of every record.
    assert_eq!(db.pre_read_hits(), 2 * 3000);
    for name in ["u", "at", "byid", "u2"] {
        assert!(db.check_index(name).unwrap().ok(), "{name}");
    }
    let pred = Predicate::Range(IndexValue::I64(10), IndexValue::I64(20));
    assert_eq!(keys(&db, "u", &pred), expect_u(&model, 10, 20));
    assert_eq!(keys(&db, "u2", &pred), expect_u(&model, 10, 20));
}

#[test]
fn indexes_stay_exact_with_another_writer_in_the_groups() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.jsonl");
    write_file(&file, 4000);
    let db = Db::open(dir.path().join("db"), opts()).unwrap();
    db.create_index(IndexSpec::field("u", "u", KeyType::I64))
        .unwrap();
    db.create_index(IndexSpec::field("at", "at", KeyType::Point).strategy("embedded"))
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Writes records some of which are byte-equal to lines of the file
        // (the same generator), under the file's keys and others.
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let v = format!(r#"{{"id":{},"u":{},"at":[1.5,2.5]}}"#, i % 2000, i % 50);
                db.put(format!("{}", i % 2500).as_bytes(), v.as_bytes())
                    .unwrap();
                i += 1;
            }
        });
        let mut o = LoadOptions::new("id");
        o.batch = 50;
        load_file(&db, &file, &o, &mut |_| {}).unwrap();
        stop.store(true, Ordering::Relaxed);
    });
    for name in ["u", "at"] {
        let c = db.check_index(name).unwrap();
        assert!(c.ok(), "{name}: {c:?}");
    }
}
