//! The `filter` strategy (Luo & Carey range filters) beyond the shared
//! oracle: a time-correlated attribute (`created_at`, following insertion
//! order, the workload range filters are made for) under an update-heavy
//! load with flushes, compactions, reopens and crash copies, compared with
//! a model; and queries racing a writer and an index build.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{copy_dir, Rng};
use serde_json::json;
use strata::{Db, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteBatch};

const MODES: &[&str] = &["mutable-bitmap", "validation", "eager"];

fn spec(name: &str, path: &str, maintain: &str) -> IndexSpec {
    IndexSpec::field(name, path, KeyType::I64)
        .strategy("filter")
        .param("maintain", maintain)
}

fn doc(created_at: i64, x: i64) -> Vec<u8> {
    serde_json::to_vec(&json!({"created_at": created_at, "x": x, "pad": "p".repeat(24)})).unwrap()
}

/// key → (write order, created_at, x).
type Model = BTreeMap<Vec<u8>, (u64, i64, i64)>;

fn expect(model: &Model, pick: impl Fn(&(u64, i64, i64)) -> i64, lo: i64, hi: i64) -> Vec<Vec<u8>> {
    let mut v: Vec<(u64, Vec<u8>)> = model
        .iter()
        .filter(|(_, e)| (lo..=hi).contains(&pick(e)))
        .map(|(k, e)| (e.0, k.clone()))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    v.into_iter().map(|e| e.1).collect()
}

fn check(db: &Db, model: &Model, rng: &mut Rng, now: i64, step: usize) {
    // Recent (> T), old (< T), and a random window, on both attributes:
    // `created_at` follows insertion order, `x` does not.
    let t = rng.below(now.max(1) as u64) as i64;
    let queries = [
        ("by_created", t, i64::MAX),
        ("by_created", i64::MIN, t),
        ("by_created", t, t + rng.below(50) as i64),
        ("by_x", t % 30, t % 30 + rng.below(8) as i64),
    ];
    for (name, lo, hi) in queries {
        let pred = Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi));
        let want = if name == "by_created" {
            expect(model, |e| e.1, lo, hi)
        } else {
            expect(model, |e| e.2, lo, hi)
        };
        for limit in [None, Some(1 + rng.below(4) as usize)] {
            let mut opts = QueryOptions::default().keys_only(rng.chance(50));
            if let Some(k) = limit {
                opts = opts.limit(k);
            }
            let got: Vec<Vec<u8>> = db
                .query(name, &pred, opts)
                .unwrap()
                .into_iter()
                .map(|h| h.key)
                .collect();
            let mut want = want.clone();
            if let Some(k) = limit {
                want.truncate(k);
            }
            assert_eq!(got, want, "step {step}: {name} [{lo}, {hi}] {opts:?}");
        }
    }
}

fn run(maintain: &str, seed: u64, steps: usize, opts: Options) -> strata::IndexStats {
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    let mut db = Db::open(dirs[0].path(), opts.clone()).unwrap();
    db.create_index(spec("by_created", "created_at", maintain))
        .unwrap();
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut order = 0u64;
    let mut now = 0i64;
    let keys = 300;
    for step in 0..steps {
        if step == steps / 5 {
            // Over existing data.
            db.create_index(spec("by_x", "x", maintain)).unwrap();
        }
        let k = format!("k{:04}", rng.below(keys)).into_bytes();
        match rng.below(100) {
            // Update-heavy: most writes replace an existing key's record
            // with a new created_at.
            0..=59 => {
                now += 1;
                order += 1;
                let x = rng.below(40) as i64;
                db.put(&k, &doc(now, x)).unwrap();
                model.insert(k, (order, now, x));
            }
            60..=69 => {
                order += 1;
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            70..=74 => {
                let mut b = WriteBatch::new();
                for _ in 0..1 + rng.below(5) {
                    let k = format!("k{:04}", rng.below(keys)).into_bytes();
                    order += 1;
                    if rng.chance(80) {
                        now += 1;
                        let x = rng.below(40) as i64;
                        b.put(&k, &doc(now, x));
                        model.insert(k, (order, now, x));
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                }
                db.write(b, Default::default()).unwrap();
            }
            75..=86 if step >= steps / 5 => check(&db, &model, &mut rng, now, step),
            87..=91 => db.flush().unwrap(),
            92..=93 => db.compact_range(None, None).unwrap(),
            94..=96 => {
                drop(db);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
            97..=99 => {
                // Crash: the directory as it is, opened without a close.
                db.wait_for_compactions().unwrap();
                let next = tempfile::tempdir().unwrap();
                copy_dir(dirs.last().unwrap().path(), next.path());
                drop(db);
                dirs.push(next);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
            _ => {}
        }
    }
    check(&db, &model, &mut rng, now, steps);
    for name in ["by_created", "by_x"] {
        let c = db.check_index(name).unwrap();
        assert!(c.ok(), "{c:?}");
    }
    let infos = db.indexes();
    infos
        .into_iter()
        .find(|i| i.spec.name == "by_created")
        .unwrap()
        .stats
}

#[test]
fn time_ordered_and_random_attributes_match_the_model() {
    for maintain in MODES {
        for seed in 0..1 {
            let st = run(
                maintain,
                seed,
                1500,
                Options::small_for_tests().background_work(false),
            );
            assert!(st.components_scanned > 0, "{st:?}");
            assert!(st.components_skipped > 0, "{maintain}: {st:?}");
            if *maintain != "validation" {
                assert_eq!(st.exact_checks, 0, "{maintain} needs no lookups: {st:?}");
            }
        }
        run(maintain, 50, 1500, Options::small_for_tests());
    }
}

/// A token moves between keys in atomic batches, each write also moving
/// the key's `created_at` forward: at every snapshot exactly one key holds
/// it. Queries running alongside the writer (and an index built while it
/// runs) find exactly one holder.
#[test]
fn queries_see_one_snapshot_under_concurrent_writes() {
    for maintain in MODES {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Options::small_for_tests()).unwrap());
        let keys = 20u64;
        let rec = |tok: bool, i: u64| {
            serde_json::to_vec(
                &json!({"tok": i64::from(tok), "created_at": i, "pad": "x".repeat(64)}),
            )
            .unwrap()
        };
        let mut b = WriteBatch::new();
        for i in 0..keys {
            b.put(format!("t{i:02}").as_bytes(), &rec(i == 0, 0));
        }
        db.write(b, Default::default()).unwrap();
        db.create_index(spec("tok", "tok", maintain)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut holder = 0u64;
                let mut i = 1u64;
                while !stop.load(Ordering::Relaxed) && i < 4000 {
                    let next = (holder + 1 + i % 7) % keys;
                    let mut b = WriteBatch::new();
                    b.put(format!("t{holder:02}").as_bytes(), &rec(false, i));
                    b.put(format!("t{next:02}").as_bytes(), &rec(true, i));
                    db.write(b, Default::default()).unwrap();
                    holder = next;
                    i += 1;
                }
            })
        };
        // Built (by rewriting the tables) while the writer runs.
        db.create_index(spec("created", "created_at", maintain))
            .unwrap();
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for q in 0..300 {
                        let one = db
                            .query(
                                "tok",
                                &Predicate::Eq(IndexValue::I64(1)),
                                QueryOptions::default(),
                            )
                            .unwrap();
                        assert_eq!(one.len(), 1, "{one:?}");
                        let all = db
                            .query(
                                "created",
                                &Predicate::Range(IndexValue::I64(0), IndexValue::I64(i64::MAX)),
                                QueryOptions::default().keys_only(true),
                            )
                            .unwrap();
                        assert_eq!(all.len() as u64, keys);
                        if (q + r) % 3 == 0 {
                            // Top 2 newest: the last batch's two keys.
                            let top = db
                                .query(
                                    "created",
                                    &Predicate::Range(
                                        IndexValue::I64(0),
                                        IndexValue::I64(i64::MAX),
                                    ),
                                    QueryOptions::default().limit(2),
                                )
                                .unwrap()
                                .into_vec();
                            assert_eq!(top.len(), 2);
                            assert_eq!(top[0].seq, top[1].seq + 1, "{top:?}");
                        }
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        for name in ["tok", "created"] {
            let c = db.check_index(name).unwrap();
            assert!(c.ok(), "{maintain} {name}: {c:?}");
        }
    }
}

/// The mark's snapshot rule: a query pinned before an update must still
/// return the version the update replaces, though the update (marking it
/// deleted) lands, is flushed and compacted while the query runs.
#[test]
fn marks_newer_than_the_snapshot_do_not_delete() {
    for maintain in MODES {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(
            Db::open(
                dir.path(),
                Options::small_for_tests().background_work(false),
            )
            .unwrap(),
        );
        db.create_index(spec("by_created", "created_at", maintain))
            .unwrap();
        let n = 50u64;
        for i in 0..n {
            db.put(format!("k{i:03}").as_bytes(), &doc(i as i64, 0))
                .unwrap();
        }
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        let fired = Arc::new(AtomicBool::new(false));
        {
            let (db2, fired) = (Arc::downgrade(&db), fired.clone());
            db.set_query_pause_hook(Some(Arc::new(move || {
                if fired.swap(true, Ordering::SeqCst) {
                    return;
                }
                let db = db2.upgrade().unwrap();
                // Every record moves out of the queried range (half are
                // deleted), in a newer table, compacted with the old one.
                for i in 0..n {
                    let k = format!("k{i:03}");
                    if i % 2 == 0 {
                        db.put(k.as_bytes(), &doc(1000 + i as i64, 0)).unwrap();
                    } else {
                        db.delete(k.as_bytes()).unwrap();
                    }
                }
                db.flush().unwrap();
                db.compact_range(None, None).unwrap();
            })));
        }
        let hits = db
            .query(
                "by_created",
                &Predicate::Range(IndexValue::I64(0), IndexValue::I64(999)),
                QueryOptions::default(),
            )
            .unwrap();
        db.set_query_pause_hook(None);
        assert!(fired.load(Ordering::SeqCst));
        assert_eq!(hits.len() as u64, n, "{maintain}: the snapshot's records");
        // After the query, the new state.
        let after = db
            .query(
                "by_created",
                &Predicate::Range(IndexValue::I64(0), IndexValue::I64(999)),
                QueryOptions::default(),
            )
            .unwrap();
        assert!(after.is_empty(), "{maintain}: {after:?}");
        let now = db
            .query(
                "by_created",
                &Predicate::Range(IndexValue::I64(1000), IndexValue::I64(2000)),
                QueryOptions::default(),
            )
            .unwrap();
        assert_eq!(now.len() as u64, n / 2, "{maintain}");
    }
}

/// Every table a flush or a compaction writes records each value of the
/// index by sequence number in its values block (`docs/format/filter.md`),
/// which later compactions read instead of the records: after updates,
/// deletes and compactions, each table's values block holds exactly the
/// (sequence number, encoded attribute) of its entries that have the
/// attribute, and its range filter is their exact range.
#[test]
fn tables_record_every_value_by_sequence_number() {
    use strata::lsm::coding::get_varint64;
    use strata::lsm::iter::InternalIterator;
    use strata::lsm::key::{parse_internal_key, ValueKind};
    use strata::lsm::sstable::table::{Table, TableReadOptions};
    use strata::lsm::stats::ReadPurpose;

    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().background_work(false);
    let db = Db::open(dir.path(), opts).unwrap();
    db.create_index(spec("by_created", "created_at", "mutable-bitmap"))
        .unwrap();
    let mut rng = Rng::new(7);
    let mut now = 0i64;
    for round in 0..4 {
        for _ in 0..300 {
            now += 1;
            let k = format!("k{:04}", rng.below(500));
            if rng.chance(10) {
                db.delete(k.as_bytes()).unwrap();
            } else if rng.chance(10) {
                // No attribute: not in the values block.
                db.put(k.as_bytes(), br#"{"x":1}"#).unwrap();
            } else {
                db.put(k.as_bytes(), &doc(now, 0)).unwrap();
            }
        }
        db.flush().unwrap();
        if round % 2 == 1 {
            db.compact_range(None, None).unwrap();
        }
    }
    let id = db.indexes()[0].id;
    drop(db);

    let values_name = format!("filter.{id}.values");
    let mut tables = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let Some(number) = name.strip_suffix(".sst").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let size = std::fs::metadata(&p).unwrap().len();
        let t = Arc::new(Table::open(&p, number, size, TableReadOptions::uncached()).unwrap());
        // The values the table's entries have.
        let mut want = Vec::new();
        let mut it = t.iter(ReadPurpose::Query);
        it.seek_to_first().unwrap();
        while it.valid() {
            let k = parse_internal_key(it.key()).unwrap();
            if k.kind == ValueKind::Value {
                let v: serde_json::Value = serde_json::from_slice(it.value()).unwrap();
                if let Some(c) = v["created_at"].as_i64() {
                    want.push((k.seq, IndexValue::I64(c).encode()));
                }
            }
            it.next().unwrap();
        }
        // The values block: version 1, key type 1 (i64), count, entries.
        let block = t.meta_block(&values_name).unwrap().expect("values block");
        assert_eq!(&block[..2], &[1, 1], "table {number}");
        let mut src = &block[2..];
        let n = get_varint64(&mut src).unwrap();
        let mut got = Vec::new();
        for _ in 0..n {
            let seq = get_varint64(&mut src).unwrap();
            let len = get_varint64(&mut src).unwrap() as usize;
            got.push((seq, src[..len].to_vec()));
            src = &src[len..];
        }
        assert!(src.is_empty());
        assert_eq!(got, want, "table {number}");
        // The range filter: version, type, flags, value count, then (own
        // zone present) its min and max.
        let f = t.meta_block(&format!("filter.{id}")).unwrap().unwrap();
        let mut src = &f[3..];
        assert_eq!(get_varint64(&mut src).unwrap(), want.len() as u64);
        if let (Some(lo), Some(hi)) = (
            want.iter().map(|w| &w.1).min(),
            want.iter().map(|w| &w.1).max(),
        ) {
            assert_eq!(f[2] & 1, 1, "own zone present");
            let lo_len = get_varint64(&mut src).unwrap() as usize;
            assert_eq!(&src[..lo_len], lo.as_slice(), "table {number}");
            src = &src[lo_len..];
            let hi_len = get_varint64(&mut src).unwrap() as usize;
            assert_eq!(&src[..hi_len], hi.as_slice(), "table {number}");
        }
        tables += 1;
    }
    assert!(tables >= 2, "{tables} tables");
}

/// Mutable-bitmap marks a key, not a located version: an update asks only
/// whether an older version may exist (Bloom filters for tables), so the
/// write path reads no data block. (Before, each update read the data
/// block of the record it replaced to learn its sequence number: 300 here.)
/// The marks still delete: the old values no longer match, before and
/// after a flush, a compaction and a reopen.
#[test]
fn updates_mark_without_reading_tables() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        Db::open(
            dir.path(),
            Options::small_for_tests().background_work(false),
        )
        .unwrap()
    };
    let db = open();
    db.create_index(spec("by_created", "created_at", "mutable-bitmap"))
        .unwrap();
    let n = 300i64;
    for i in 0..n {
        db.put(format!("k{i:04}").as_bytes(), &doc(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let blocks = |db: &Db| db.stats().io.data_blocks.total();
    let before = blocks(&db);
    for i in 0..n {
        db.put(format!("k{i:04}").as_bytes(), &doc(1000 + i, 0))
            .unwrap();
    }
    assert_eq!(blocks(&db) - before, 0, "data blocks read by updates");
    let count = |db: &Db, lo: i64, hi: i64| {
        db.query(
            "by_created",
            &Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)),
            QueryOptions::default(),
        )
        .unwrap()
        .len() as i64
    };
    assert_eq!(count(&db, 0, 999), 0);
    db.flush().unwrap();
    assert_eq!(count(&db, 0, 999), 0);
    assert_eq!(count(&db, 1000, 2000), n);
    drop(db);
    let db = open();
    assert_eq!(count(&db, 0, 999), 0);
    db.compact_range(None, None).unwrap();
    assert_eq!(count(&db, 0, 999), 0);
    assert_eq!(count(&db, 1000, 2000), n);
}
