//! The oracle test every index strategy must pass: random puts (new keys
//! and updates that change the attribute), deletes, batches, flushes,
//! compactions, reopens and crash-reopens, with lookup, range and within
//! queries (with and without limit, keys-only) on all five key types,
//! compared with a brute-force oracle over an in-memory model.
//!
//! The indexes created over existing data are queried in the middle of
//! their build too (held at the build's test hook), while writes go on.
//!
//! A new strategy joins by adding its name to `STRATEGIES`. Setting
//! `STRATA_ORACLE_ONLY=name[,name...]` runs only those strategies (while
//! developing one); CI runs them all.
//!
//! Two forms per strategy: long seeded runs (`oracle_*`) and proptest runs
//! (`prop_oracle_*`) whose failing operation sequences shrink to a minimal
//! one and are saved in `tests/proptest-regressions/index_oracle.txt`,
//! replayed first on every run (for every strategy). `PROPTEST_CASES=n`
//! runs n proptest cases per strategy instead of the default.
//!
//! `STRATA_ORACLE_TIERED=1` runs every test with the tiered compaction
//! policy (`Options::compaction_style`); `oracle_tiered_compaction` always
//! does, for a few seeds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::sync::{mpsc, Arc, Mutex};

use common::{copy_dir, expected, spec_for, Model, Rng, STRATEGIES};
use serde_json::{json, Value};
use strata::CompactionStyle;
use strata::{
    Db, Hit, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteBatch,
    WriteOptions,
};

/// `opts` with the tiered policy if `STRATA_ORACLE_TIERED` is set.
fn style(opts: Options) -> Options {
    if std::env::var("STRATA_ORACLE_TIERED").is_ok_and(|v| v != "0") {
        opts.compaction_style(CompactionStyle::Tiered)
            .tiered_runs(3)
    } else {
        opts
    }
}

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
            .unwrap_or_else(|e| panic!("step {step}: {name} {pred:?}: {e}"))
            .into_vec();
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

/// Creates indexes `which` one by one with each online build held twice:
/// before its first two tables (strategies built table by table) or its
/// first two chunks of scanned records (the others). While held, writes
/// reach the model and queries on every index, the one building included,
/// must match it.
fn create_indexes_mid_build(
    db: &Db,
    strategy: &str,
    which: &[usize],
    active: &[usize],
    model: &mut Model,
    order: &mut u64,
    rng: &mut Rng,
) {
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let held_tx = Mutex::new(held_tx);
    let go_rx = Mutex::new(go_rx);
    // Hook calls of the current build: a table-by-table build calls it
    // once per table it still has to cover.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    db.set_build_pause_hook(Some(Arc::new(move |_, done| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if done < 2 {
            let sent = held_tx.lock().unwrap().send(()).is_ok();
            return sent && go_rx.lock().unwrap().recv().is_ok();
        }
        true
    })));
    let mut active = active.to_vec();
    // Table-by-table builds held, and those that had tables before them.
    let (mut per_table_held, mut per_table_with_tables) = (0, 0);
    for &i in which {
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        let (name, path, ty) = FIELDS[i];
        active.push(i);
        let tables_before = db.current_version().all_files().count();
        let mut holds = 0;
        std::thread::scope(|s| {
            let go_tx = go_tx.clone();
            let builder = s.spawn(|| db.create_index(spec_for(strategy, name, path, ty)));
            loop {
                match held_rx.recv_timeout(std::time::Duration::from_millis(20)) {
                    Ok(()) => {}
                    Err(_) if builder.is_finished() => break,
                    Err(_) => continue,
                }
                for step in 0..30 {
                    let k = format!("r{:04}", rng.below(150)).into_bytes();
                    match rng.below(10) {
                        0..=4 => {
                            let v = random_value(rng);
                            db.put(&k, &v).unwrap();
                            *order += 1;
                            model.insert(k, (*order, v));
                        }
                        5 => {
                            db.delete(&k).unwrap();
                            *order += 1;
                            model.remove(&k);
                        }
                        6 => db.flush().unwrap(),
                        _ => check_queries(db, model, rng, step, 2, &active),
                    }
                }
                check_queries(db, model, rng, 0, 10, &active);
                holds += 1;
                go_tx.send(()).unwrap();
            }
            builder.join().unwrap().unwrap();
        });
        // `filter` builds by a full rewrite, which has no step to hold.
        let rewritten = strategy.starts_with("filter");
        if ["next", "next[pin=false]", "embedded"].contains(&strategy) {
            // With background work, the flush that starts the build can
            // trigger a compaction whose output (written with the index)
            // replaces every older table before the build looks: nothing
            // is left to cover and the hook is never called. A build that
            // had a table to cover was held.
            let called = calls.load(std::sync::atomic::Ordering::SeqCst);
            assert!(called == 0 || holds > 0, "{strategy}: {name} never held");
            per_table_with_tables += usize::from(tables_before > 0);
            per_table_held += usize::from(holds > 0);
        } else if !rewritten {
            assert!(holds > 0, "{strategy}: the build of {name} was never held");
        }
    }
    if per_table_with_tables > 1 {
        assert!(
            per_table_held > 0,
            "{strategy}: no build of {which:?} was held ({per_table_with_tables} had tables)"
        );
    }
    db.set_build_pause_hook(None);
}

fn run(strategy: &str, seed: u64, steps: usize, opts: Options) {
    let opts = style(opts);
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
            create_indexes_mid_build(
                &db,
                strategy,
                &[1, 4],
                &active,
                &mut model,
                &mut order,
                &mut rng,
            );
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
fn oracle_tiered_compaction() {
    let tiered = || {
        Options::small_for_tests()
            .compaction_style(CompactionStyle::Tiered)
            .tiered_runs(3)
    };
    for (_, s) in strategies() {
        for seed in 0..2 {
            run(s, 200 + seed, 1500, tiered().background_work(false));
        }
        run(s, 300, 1500, tiered());
    }
}

/// Every secondary tree's memtable in runs mode with runs of three
/// entries, so that queries, flushes, reopens and crashes meet sealed
/// and merged runs (by default only the range-read trees use runs mode,
/// with runs of 16 Ki entries, which these small runs never fill).
#[test]
fn oracle_memtable_runs() {
    let has_trees = |s: &str| {
        ["composite", "deli", "posting"]
            .iter()
            .any(|p| s.starts_with(p))
    };
    for (i, s) in strategies().into_iter().filter(|(_, s)| has_trees(s)) {
        run(
            s,
            400 + i as u64,
            1500,
            Options::small_for_tests()
                .background_work(false)
                .memtable_run_entries(3),
        );
        // Flushes and compactions on their threads while queries read
        // the runs.
        run(
            s,
            500 + i as u64,
            1000,
            Options::small_for_tests().memtable_run_entries(5),
        );
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

// ---------------------------------------------------------------------------
// The same oracle as a proptest, per strategy: an operation sequence is
// generated as a `Vec<Op>`, so a failing one shrinks to a minimal sequence
// and is saved in `tests/proptest-regressions/index_oracle.txt` (its cases
// are replayed first on every run, for every strategy). The seeded runs
// above stay: they run longer sequences. `PROPTEST_CASES=n` runs n cases
// per strategy instead of the default; `STRATA_ORACLE_ONLY` applies too.

use proptest::prelude::*;

/// A record as `random_value` makes them, field by field; `None` leaves
/// the field out.
#[derive(Debug, Clone)]
enum Doc {
    NotJson,
    Json {
        /// `Err(())`: the wrong type (`"x"`).
        n: Option<Result<i64, ()>>,
        /// Eighths.
        f: Option<u8>,
        s: Option<u8>,
        /// Quarters.
        p: Option<(u8, u8)>,
        /// x, y, w, h in quarters.
        r: Option<(u8, u8, u8, u8)>,
        pad: usize,
    },
}

const WORDS: &[&str] = &[
    "apple", "banana", "cherry", "date", "elder", "fig", "grape", "",
];
const QUERY_WORDS: &[&str] = &[
    "apple", "b", "banana", "cherry", "d", "fig", "grape", "zzz", "",
];

impl Doc {
    fn bytes(&self) -> Vec<u8> {
        let Doc::Json { n, f, s, p, r, pad } = self else {
            return b"not json {".to_vec();
        };
        let mut doc = serde_json::Map::new();
        if let Some(n) = n {
            doc.insert("n".into(), n.map_or(json!("x"), |n| json!(n)));
        }
        if let Some(f) = f {
            doc.insert("f".into(), json!(*f as f64 / 8.0 - 10.0));
        }
        if let Some(s) = s {
            doc.insert("s".into(), json!(WORDS[*s as usize]));
        }
        if let Some((x, y)) = p {
            doc.insert(
                "loc".into(),
                json!({"p": [*x as f64 / 4.0, *y as f64 / 4.0]}),
            );
        }
        if let Some((x, y, w, h)) = r {
            let (x, y) = (*x as f64 / 4.0, *y as f64 / 4.0);
            let (w, h) = (*w as f64 / 4.0, *h as f64 / 4.0);
            doc.insert("r".into(), json!([x, y, x + w, y + h]));
        }
        doc.insert("pad".into(), json!("x".repeat(*pad)));
        serde_json::to_vec(&Value::Object(doc)).unwrap()
    }
}

fn doc() -> impl Strategy<Value = Doc> {
    // Each field is left out one time in ten, as in `random_value`.
    fn field<T: std::fmt::Debug>(s: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
        prop::option::weighted(0.9, s)
    }
    let n = prop_oneof![5 => Just(Err(())), 95 => (-20..20i64).prop_map(Ok)];
    let json = (
        field(n),
        field(0..200u8),
        field(0..WORDS.len() as u8),
        field((0..100u8, 0..100u8)),
        field((0..100u8, 0..100u8, 0..12u8, 0..12u8)),
        0..80usize,
    )
        .prop_map(|(n, f, s, p, r, pad)| Doc::Json { n, f, s, p, r, pad });
    prop_oneof![3 => Just(Doc::NotJson), 97 => json]
}

/// A query on `active[field % active.len()]`; the numbers make a predicate
/// of that field's type as `random_predicate` does.
#[derive(Debug, Clone)]
struct Query {
    field: u8,
    eq: bool,
    a: u8,
    b: u8,
    c: u8,
    d: u8,
    limit: Option<usize>,
    keys_only: bool,
}

impl Query {
    fn predicate(&self, ty: KeyType) -> Predicate {
        let Query { eq, a, b, c, d, .. } = *self;
        match ty {
            KeyType::I64 => {
                let a = (a % 44) as i64 - 22;
                if eq {
                    Predicate::Eq(IndexValue::I64(a))
                } else {
                    Predicate::Range(IndexValue::I64(a), IndexValue::I64(a + (b % 12) as i64))
                }
            }
            KeyType::F64 => {
                let a = a as f64 / 8.0 - 11.0;
                if eq {
                    Predicate::Eq(IndexValue::F64(a))
                } else {
                    Predicate::Range(
                        IndexValue::F64(a),
                        IndexValue::F64(a + (b % 40) as f64 / 8.0),
                    )
                }
            }
            KeyType::String => {
                let a = QUERY_WORDS[a as usize % QUERY_WORDS.len()].to_string();
                if eq {
                    Predicate::Eq(IndexValue::Str(a))
                } else {
                    let b = QUERY_WORDS[b as usize % QUERY_WORDS.len()].to_string();
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    Predicate::Range(IndexValue::Str(lo), IndexValue::Str(hi))
                }
            }
            KeyType::Point | KeyType::Rect => {
                let x = (a % 100) as f64 / 4.0 - 1.0;
                let y = (b % 100) as f64 / 4.0 - 1.0;
                let w = (c % 40) as f64 / 4.0;
                let h = (d % 40) as f64 / 4.0;
                Predicate::Within([x, y, x + w, y + h])
            }
        }
    }
}

fn query() -> impl Strategy<Value = Query> {
    (
        (0..5u8, prop::bool::weighted(0.4)),
        (0..200u8, 0..200u8, 0..40u8, 0..40u8),
        prop::option::weighted(0.4, 1..=6usize),
        prop::bool::weighted(0.2),
    )
        .prop_map(|((field, eq), (a, b, c, d), limit, keys_only)| Query {
            field,
            eq,
            a,
            b,
            c,
            d,
            limit,
            keys_only,
        })
}

/// Keys `r0000`.. of the proptest cases.
const PROP_KEYS: u16 = 60;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, Doc),
    Delete(u16),
    /// (key, Some(record) to put or None to delete).
    Batch(Vec<(u16, Option<Doc>)>),
    Query(Query),
    Flush,
    Compact,
    Reopen,
    /// Opens a copy of the directory as it is now, without a clean close.
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0..PROP_KEYS;
    // Weights as in the seeded runs (a query step there makes 3 queries).
    prop_oneof![
        45 => (k(), doc()).prop_map(|(k, d)| Op::Put(k, d)),
        13 => k().prop_map(Op::Delete),
        8 => prop::collection::vec((k(), prop::option::weighted(0.75, doc())), 1..=6)
            .prop_map(Op::Batch),
        60 => query().prop_map(Op::Query),
        5 => Just(Op::Flush),
        3 => Just(Op::Compact),
        3 => Just(Op::Reopen),
        3 => Just(Op::Crash),
    ]
}

fn check_query(db: &Db, model: &Model, step: usize, q: &Query, active: &[usize]) {
    let (name, path, ty) = FIELDS[active[q.field as usize % active.len()]];
    let pred = q.predicate(ty);
    let mut opts = QueryOptions::default();
    if let Some(l) = q.limit {
        opts = opts.limit(l);
    }
    if q.keys_only {
        opts = opts.keys_only(true);
    }
    let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = db
        .query(name, &pred, opts)
        .unwrap_or_else(|e| panic!("step {step}: {name} {pred:?}: {e}"))
        .into_iter()
        .map(|h| (h.key, h.value))
        .collect();
    let want = expected(model, path, ty, &pred, opts);
    let keys = |v: &[(Vec<u8>, Option<Vec<u8>>)]| -> Vec<String> {
        v.iter()
            .map(|g| String::from_utf8_lossy(&g.0).into_owned())
            .collect()
    };
    assert!(
        got == want,
        "step {step}: {name} {pred:?} {opts:?}\n got  {:?}\n want {:?}",
        keys(&got),
        keys(&want)
    );
}

fn run_ops(strategy: &str, ops: &[Op], opts: Options) {
    let opts = style(opts);
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    let mut db = Db::open(dirs[0].path(), opts.clone()).unwrap();
    // As in `run`: three indexes before any data, two created a quarter of
    // the way through, over existing data.
    create_indexes(&db, strategy, &[0, 2, 3]);
    let mut active = vec![0, 2, 3];
    let mut model = Model::new();
    let mut order = 0u64;
    let key = |k: &u16| format!("r{k:04}").into_bytes();
    for (step, op) in ops.iter().enumerate() {
        if step == ops.len() / 4 && active.len() == 3 {
            create_indexes(&db, strategy, &[1, 4]);
            active.extend([1, 4]);
        }
        match op {
            Op::Put(k, d) => {
                let v = d.bytes();
                db.put(&key(k), &v).unwrap();
                order += 1;
                model.insert(key(k), (order, v));
            }
            Op::Delete(k) => {
                db.delete(&key(k)).unwrap();
                order += 1;
                model.remove(&key(k));
            }
            Op::Batch(entries) => {
                let mut b = WriteBatch::new();
                for (k, d) in entries {
                    order += 1;
                    match d {
                        Some(d) => {
                            let v = d.bytes();
                            b.put(&key(k), &v);
                            model.insert(key(k), (order, v));
                        }
                        None => {
                            b.delete(&key(k));
                            model.remove(&key(k));
                        }
                    }
                }
                db.write(b, WriteOptions::default()).unwrap();
            }
            Op::Query(q) => check_query(&db, &model, step, q, &active),
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact_range(None, None).unwrap(),
            Op::Reopen => {
                drop(db);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
            Op::Crash => {
                db.wait_for_compactions().unwrap();
                let next = tempfile::tempdir().unwrap();
                copy_dir(dirs.last().unwrap().path(), next.path());
                drop(db);
                dirs.push(next);
                db = Db::open(dirs.last().unwrap().path(), opts.clone()).unwrap();
            }
        }
    }
    if active.len() == 3 {
        create_indexes(&db, strategy, &[1, 4]);
        active.extend([1, 4]);
    }
    // Every field with every kind of predicate and option, at the end.
    for field in 0..5u8 {
        for (eq, limit, keys_only) in [
            (true, None, false),
            (false, None, false),
            (false, Some(3), false),
            (false, None, true),
            (true, Some(1), true),
        ] {
            for (a, b, c, d) in [(0, 199, 39, 39), (80, 40, 20, 30), (21, 7, 3, 9)] {
                let q = Query {
                    field,
                    eq,
                    a,
                    b,
                    c,
                    d,
                    limit,
                    keys_only,
                };
                check_query(&db, &model, ops.len(), &q, &active);
            }
        }
    }
    for (name, _, _) in FIELDS {
        let c = db.check_index(name).unwrap();
        assert!(c.ok(), "{name}: {c:?}");
    }
    let infos = db.indexes();
    assert_eq!(infos.len(), 5);
    assert!(infos.iter().all(|i| i.state == strata::IndexState::Ready));
}

fn prop_oracle(cases: u32, opts: Options) {
    for (_, s) in strategies() {
        common::proptest_run(
            s,
            cases,
            file!(),
            prop::collection::vec(op(), 1..200),
            |ops| run_ops(s, &ops, opts.clone()),
        );
    }
}

#[test]
fn prop_oracle_inline_work() {
    prop_oracle(8, Options::small_for_tests().background_work(false));
}

#[test]
fn prop_oracle_background_work() {
    prop_oracle(4, Options::small_for_tests());
}
