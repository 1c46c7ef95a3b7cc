//! A NEXT query without a limit reads its data blocks with several threads
//! from one shared queue (`QueryOptions::parallelism`). Its answer, the
//! answer's order and the query's counters must be those of one thread:
//! with stale entries in older tables, deletes, records in the memtable,
//! and candidates the update memo leaves to the exact check (an index
//! built on a loaded database, whose older versions the memo never saw).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::topk::{expected, open, record, Model};
use common::{key, Rng};
use strata::{Db, Hit, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions};

/// `ops` random writes over keys `0..keys`: new records, updates (a new
/// `u`) and deletes, in the model too.
fn write(db: &Db, rng: &mut Rng, ops: usize, keys: u64, order: &mut u64, model: &mut Model) {
    for _ in 0..ops {
        let i = rng.below(keys);
        *order += 1;
        if rng.chance(15) {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            let u = rng.below(20) as i64;
            db.put(&key(i), &record(u, i)).unwrap();
            model.insert(key(i), (*order, u));
        }
    }
}

fn pred(lo: i64, hi: i64) -> Predicate {
    if lo == hi {
        Predicate::Eq(IndexValue::I64(lo))
    } else {
        Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi))
    }
}

/// The query at 1, 2 and 4 threads: each answer equals the model's and
/// the one-thread answer (records and order), each profile the one-thread
/// profile. Returns the one-thread profile.
fn same_at_every_parallelism(db: &Db, model: &Model, lo: i64, hi: i64) -> strata::QueryProfile {
    let p = pred(lo, hi);
    let run = |n: usize| -> (Vec<Hit>, strata::QueryProfile) {
        let (hits, prof) = db
            .query_profiled("by_u", &p, QueryOptions::default().parallelism(n))
            .unwrap();
        (hits.into_vec(), prof)
    };
    let (one, p1) = run(1);
    let keys: Vec<Vec<u8>> = one.iter().map(|h| h.key.clone()).collect();
    assert_eq!(keys, expected(model, lo, hi, usize::MAX), "{lo}..={hi}");
    for h in &one {
        let stored = db.get(&h.key).unwrap();
        assert_eq!(h.value, stored, "{lo}..={hi}: value of {:?}", h.key);
    }
    for n in [2, 4] {
        let (many, pn) = run(n);
        assert_eq!(many, one, "{lo}..={hi} at {n} threads");
        assert_eq!(pn.data_blocks_read, p1.data_blocks_read, "{n} threads");
        assert_eq!(pn.index_blocks_read, p1.index_blocks_read, "{n} threads");
        assert_eq!(pn.candidates, p1.candidates, "{n} threads");
        assert_eq!(pn.stale, p1.stale, "{n} threads");
        assert_eq!(pn.min_data_blocks, p1.min_data_blocks, "{n} threads");
    }
    p1
}

#[test]
fn several_threads_answer_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "next");
    let mut rng = Rng::new(23);
    let mut model = Model::new();
    let mut order = 0;
    for round in 0..6 {
        write(&db, &mut rng, 900, 2_500, &mut order, &mut model);
        db.flush().unwrap();
        if round == 2 {
            db.compact_level(0).unwrap();
        }
    }
    // Newer versions in the memtable too.
    write(&db, &mut rng, 300, 2_500, &mut order, &mut model);
    let mut stale = 0;
    let mut most_blocks = 0;
    for (lo, hi) in [(0, 19), (3, 3), (5, 9), (0, 0), (12, 17)] {
        let p = same_at_every_parallelism(&db, &model, lo, hi);
        stale += p.stale;
        most_blocks = most_blocks.max(p.data_blocks_read);
    }
    assert!(stale > 0, "older tables hold stale entries");
    // The default parallelism reads the largest query with several
    // threads on a machine that has them.
    assert!(
        most_blocks as usize >= strata::PARALLEL_MIN_BLOCKS,
        "{most_blocks} blocks"
    );
}

#[test]
fn candidates_left_to_the_exact_check_are_checked_on_the_querying_thread() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().background_work(false);
    let db = Db::open(dir.path(), opts).unwrap();
    let mut rng = Rng::new(5);
    let mut model = Model::new();
    let mut order = 0;
    // Loaded before the index exists: the update memo never saw these
    // writes, so the query checks their candidates exactly.
    for _ in 0..4 {
        write(&db, &mut rng, 900, 2_000, &mut order, &mut model);
        db.flush().unwrap();
    }
    db.create_index(IndexSpec::field("by_u", "u", KeyType::I64).strategy("next"))
        .unwrap();
    for _ in 0..2 {
        write(&db, &mut rng, 600, 2_000, &mut order, &mut model);
        db.flush().unwrap();
    }
    write(&db, &mut rng, 200, 2_000, &mut order, &mut model);
    let before = db.indexes()[0].stats.exact_checks;
    let mut stale = 0;
    for (lo, hi) in [(0, 19), (4, 4), (2, 11)] {
        stale += same_at_every_parallelism(&db, &model, lo, hi).stale;
    }
    let exact = db.indexes()[0].stats.exact_checks - before;
    assert!(exact > 0, "no candidate went to the exact check");
    assert!(stale > 0, "the exact check found no stale entry");
}
