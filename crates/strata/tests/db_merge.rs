//! Merge operands against an in-memory model: gets, batched gets and
//! iterators at the latest state and at snapshots, across flushes,
//! compactions (full and partial merges) and reopen.
//!
//! Two forms: one long seeded run and a proptest run (`prop_*`) whose
//! failing operation sequences shrink to a minimal one and are saved in
//! `tests/proptest-regressions/db_merge.txt`, replayed first on every run.
//! `PROPTEST_CASES=n` runs n proptest cases instead of the default.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use common::{key, Rng};
use strata::{Db, Error, MergeOperator, Options, Result, WriteBatch, WriteOptions};

/// Values are comma-separated tokens; an operand appends its tokens, and
/// the token `!` clears everything before it. An empty result deletes the
/// key. Associative: a partial merge keeps the last `!` and what follows.
/// Counts its partial merges (compaction above older data) in `.0`.
struct Append(&'static AtomicU64);

/// Partial merges done in the seeded model test (its own counter, so that
/// the other tests' merges running beside it do not count).
static PARTIAL_MERGES: AtomicU64 = AtomicU64::new(0);
/// Partial merges done in the other tests.
static OTHER_PARTIAL_MERGES: AtomicU64 = AtomicU64::new(0);

fn tokens(b: &[u8]) -> Vec<&[u8]> {
    b.split(|&c| c == b',').filter(|t| !t.is_empty()).collect()
}

fn apply<'a>(out: &mut Vec<&'a [u8]>, add: &[&'a [u8]], keep_clear: bool) {
    for &t in add {
        if t == b"!" {
            out.clear();
            if keep_clear {
                out.push(t);
            }
        } else {
            out.push(t);
        }
    }
}

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }
    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> Result<Option<Vec<u8>>> {
        let mut out = base.map(tokens).unwrap_or_default();
        for o in operands.iter().rev() {
            apply(&mut out, &tokens(o), false);
        }
        Ok((!out.is_empty()).then(|| out.join(&b","[..])))
    }
    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> Result<Vec<u8>> {
        assert!(operands.len() >= 2, "partial merge of one operand");
        self.0.fetch_add(1, Relaxed);
        let mut out = Vec::new();
        for o in operands.iter().rev() {
            apply(&mut out, &tokens(o), true);
        }
        Ok(out.join(&b","[..]))
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn model_merge(m: &mut Model, k: &[u8], operand: &[u8]) {
    let old = m.remove(k);
    let mut out = old.as_deref().map(tokens).unwrap_or_default();
    apply(&mut out, &tokens(operand), false);
    if !out.is_empty() {
        m.insert(k.to_vec(), out.join(&b","[..]));
    }
}

fn opts() -> Options {
    opts_counting(&OTHER_PARTIAL_MERGES)
}

fn opts_counting(partial_merges: &'static AtomicU64) -> Options {
    let mut o = Options::small_for_tests().merge_operator(Arc::new(Append(partial_merges)));
    o.background_work = false;
    o
}

fn check(db: &Db, snap: Option<&strata::Snapshot>, model: &Model, keys: u64) {
    let all: Vec<Vec<u8>> = (0..keys).map(key).collect();
    let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
    let batched = match snap {
        Some(s) => s.multi_get(&refs).unwrap(),
        None => db.multi_get(&refs).unwrap(),
    };
    for (k, got) in all.iter().zip(&batched) {
        let one = match snap {
            Some(s) => s.get(k).unwrap(),
            None => db.get(k).unwrap(),
        };
        assert_eq!(
            one.as_ref(),
            model.get(k),
            "get {:?}",
            String::from_utf8_lossy(k)
        );
        assert_eq!(
            got.as_ref(),
            model.get(k),
            "multi_get {:?}",
            String::from_utf8_lossy(k)
        );
    }
    let it = match snap {
        Some(s) => s.iter(None, None).unwrap(),
        None => db.iter(None, None).unwrap(),
    };
    let scanned: Model = it.map(|r| r.unwrap()).collect();
    assert_eq!(&scanned, model);
}

#[test]
fn merge_operands_match_the_model_across_flush_compaction_snapshots_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let keys = 200;
    let mut rng = Rng::new(7);
    let mut model = Model::new();
    let mut db = Db::open(dir.path(), opts_counting(&PARTIAL_MERGES)).unwrap();
    let mut snaps: Vec<(strata::Snapshot, Model)> = Vec::new();
    for step in 0..9000u64 {
        let k = key(rng.below(keys));
        let r = rng.below(100);
        if r < 60 {
            let operand = if rng.chance(5) {
                "!".to_string()
            } else {
                format!(
                    "m{step},x{}{}",
                    rng.below(9),
                    "y".repeat(rng.below(60) as usize)
                )
            };
            let mut b = WriteBatch::new();
            b.merge(&k, operand.as_bytes());
            db.write(b, WriteOptions::default()).unwrap();
            model_merge(&mut model, &k, operand.as_bytes());
        } else if r < 80 {
            let v = format!("p{step}");
            db.put(&k, v.as_bytes()).unwrap();
            model.insert(k, v.into_bytes());
        } else {
            db.delete(&k).unwrap();
            model.remove(&k);
        }
        if step % 700 == 0 {
            snaps.push((db.snapshot(), model.clone()));
            if snaps.len() > 3 {
                snaps.remove(0);
            }
        }
        if step % 2997 == 0 {
            db.compact_range(None, None).unwrap();
        }
        if step % 1500 == 1499 {
            check(&db, None, &model, keys);
            for (s, m) in &snaps {
                check(&db, Some(s), m, keys);
            }
        }
        if step == 3000 {
            snaps.clear();
            drop(db);
            db = Db::open(dir.path(), opts_counting(&PARTIAL_MERGES)).unwrap();
            check(&db, None, &model, keys);
        }
    }
    snaps.clear();
    db.compact_range(None, None).unwrap();
    check(&db, None, &model, keys);
    drop(db);
    let db = Db::open(dir.path(), opts_counting(&PARTIAL_MERGES)).unwrap();
    check(&db, None, &model, keys);
    assert!(
        PARTIAL_MERGES.load(Relaxed) > 0,
        "no compaction merged partially"
    );
}

#[test]
fn full_compaction_leaves_one_entry_per_merged_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..200u64 {
        let mut b = WriteBatch::new();
        b.merge(&key(i % 10), format!("t{i}").as_bytes());
        db.write(b, WriteOptions::default()).unwrap();
        if i % 50 == 49 {
            db.flush().unwrap();
        }
    }
    db.compact_range(None, None).unwrap();
    let stats = db.stats();
    let entries: u64 = stats.levels.iter().map(|l| l.entries).sum();
    assert_eq!(entries, 10, "one merged value per key");
    let v = db.get(&key(3)).unwrap().unwrap();
    let want: Vec<String> = (0..200)
        .filter(|i| i % 10 == 3)
        .map(|i| format!("t{i}"))
        .collect();
    assert_eq!(String::from_utf8(v).unwrap(), want.join(","));
}

#[test]
fn merge_needs_an_operator_and_no_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    let mut b = WriteBatch::new();
    b.merge(b"k", b"v");
    let err = db.write(b.clone(), WriteOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    drop(db);

    // Written with an operator, reopened without: reads say why they fail.
    let db = Db::open(dir.path(), opts()).unwrap();
    db.write(b.clone(), WriteOptions::default()).unwrap();
    drop(db);
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    let err = db.get(b"k").unwrap_err();
    assert!(err.to_string().contains("merge operator"), "{err}");
    drop(db);

    let db = Db::open(dir.path(), opts()).unwrap();
    db.create_index(strata::IndexSpec::field("n", "n", strata::KeyType::I64))
        .unwrap();
    let err = db.write(b, WriteOptions::default()).unwrap_err();
    assert!(err.to_string().contains("secondary indexes"), "{err}");
}

// ---------------------------------------------------------------------------
// The same model as a proptest: an operation sequence is generated as a
// `Vec<Op>`, so a failing one shrinks to a minimal sequence and is saved in
// `tests/proptest-regressions/db_merge.txt` (replayed first on every run).
// The seeded run above stays: it runs one long sequence and checks that
// partial merges happened. `PROPTEST_CASES=n` runs n cases instead of the
// default.

use proptest::prelude::*;

const PROP_KEYS: u64 = 40;

#[derive(Debug, Clone)]
enum Operand {
    /// `!`: clears what came before.
    Clear,
    /// `m<step>,x<digit><y * len>`.
    Tokens(u8, usize),
}

#[derive(Debug, Clone)]
enum Op {
    Merge(u64, Operand),
    Put(u64),
    Delete(u64),
    /// Keeps a snapshot with a copy of the model (the last 3 are kept).
    Snapshot,
    /// Checks gets, multi_gets and a scan of the latest state and of every
    /// kept snapshot.
    Check,
    Flush,
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let k = || 0..PROP_KEYS;
    let operand = prop_oneof![
        5 => Just(Operand::Clear),
        95 => (0..9u8, 0..60usize).prop_map(|(d, n)| Operand::Tokens(d, n)),
    ];
    prop_oneof![
        600 => (k(), operand).prop_map(|(k, o)| Op::Merge(k, o)),
        200 => k().prop_map(Op::Put),
        100 => k().prop_map(Op::Delete),
        10 => Just(Op::Snapshot),
        10 => Just(Op::Check),
        20 => Just(Op::Flush),
        10 => Just(Op::Compact),
        5 => Just(Op::Reopen),
    ]
}

fn run_ops(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let mut db = Db::open(dir.path(), opts()).unwrap();
    let mut snaps: Vec<(strata::Snapshot, Model)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Merge(k, operand) => {
                let operand = match operand {
                    Operand::Clear => "!".to_string(),
                    Operand::Tokens(d, n) => format!("m{step},x{d}{}", "y".repeat(*n)),
                };
                let mut b = WriteBatch::new();
                b.merge(&key(*k), operand.as_bytes());
                db.write(b, WriteOptions::default()).unwrap();
                model_merge(&mut model, &key(*k), operand.as_bytes());
            }
            Op::Put(k) => {
                let v = format!("p{step}");
                db.put(&key(*k), v.as_bytes()).unwrap();
                model.insert(key(*k), v.into_bytes());
            }
            Op::Delete(k) => {
                db.delete(&key(*k)).unwrap();
                model.remove(&key(*k));
            }
            Op::Snapshot => {
                snaps.push((db.snapshot(), model.clone()));
                if snaps.len() > 3 {
                    snaps.remove(0);
                }
            }
            Op::Check => {
                check(&db, None, &model, PROP_KEYS);
                for (s, m) in &snaps {
                    check(&db, Some(s), m, PROP_KEYS);
                }
            }
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact_range(None, None).unwrap(),
            Op::Reopen => {
                snaps.clear();
                drop(db);
                db = Db::open(dir.path(), opts()).unwrap();
                check(&db, None, &model, PROP_KEYS);
            }
        }
    }
    check(&db, None, &model, PROP_KEYS);
    for (s, m) in &snaps {
        check(&db, Some(s), m, PROP_KEYS);
    }
    snaps.clear();
    db.compact_range(None, None).unwrap();
    check(&db, None, &model, PROP_KEYS);
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, None, &model, PROP_KEYS);
}

#[test]
fn prop_merge_operands_match_the_model() {
    common::proptest_run(
        "merge operands",
        48,
        file!(),
        prop::collection::vec(op(), 1..400),
        |ops| run_ops(&ops),
    );
}
