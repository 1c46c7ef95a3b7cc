//! Embedded top-K walks data blocks newest first (by each block's newest
//! indexed sequence number, across tables and levels) and stops once K
//! valid results are newer than every block left: the answer is still the
//! K newest live matches when a newer record sits in a deeper level, when a
//! table's newest blocks are its first ones, and under updates and
//! deletions; with time-ordered keys a top-K reads about K blocks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::topk::{expected, open, query, record, Model};
use common::{key, Rng};
use strata::lsm::key::user_key;
use strata::Db;

struct Writer {
    model: Model,
    order: u64,
}

impl Writer {
    fn new() -> Self {
        Writer {
            model: Model::new(),
            order: 0,
        }
    }

    fn put(&mut self, db: &Db, i: u64, u: i64) {
        db.put(&key(i), &record(u, i)).unwrap();
        self.order += 1;
        self.model.insert(key(i), (self.order, u));
    }

    fn delete(&mut self, db: &Db, i: u64) {
        db.delete(&key(i)).unwrap();
        self.model.remove(&key(i));
    }

    fn expected(&self, lo: i64, hi: i64, k: usize) -> Vec<Vec<u8>> {
        expected(&self.model, lo, hi, k)
    }
}

fn level_of(db: &Db, k: &[u8]) -> usize {
    let v = db.current_version();
    v.levels
        .iter()
        .position(|files| {
            files
                .iter()
                .any(|f| user_key(&f.smallest) <= k && k <= user_key(&f.largest))
        })
        .expect("key in some table")
}

/// L1 holds 200 old matches, L2 the 50 newest (a partial manual
/// compaction pushed them down): the paper's "stop after the level where
/// K are known" would answer with old records; the walk by newest block
/// answers with the newest.
#[test]
fn newer_records_in_a_deeper_level_win() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "embedded");
    let mut w = Writer::new();
    // A filler in L2, so that a manual compaction of L1 goes on to L2.
    w.put(&db, 9999, 9);
    db.compact_level(0).unwrap();
    db.compact_level(1).unwrap();
    // Older matches (keys 1000..), then newer ones (keys 0..50), all in
    // L1, in several tables; then the tables holding the newer ones (and
    // some older ones sharing them) go down to L2.
    for i in 1000..1300 {
        w.put(&db, i, 1);
    }
    for i in 0..50 {
        w.put(&db, i, 1);
    }
    db.compact_level(0).unwrap();
    db.compact_range(Some(&key(0)), Some(&key(49))).unwrap();
    let (old, new) = (level_of(&db, &key(1299)), level_of(&db, &key(0)));
    assert_eq!((old, new), (1, 2), "newer records deeper than older ones");
    for k in [1, 10, 49, 50, 51, 120, 400] {
        let (top, _) = query(&db, 1, 1, Some(k));
        assert_eq!(top, w.expected(1, 1, k), "top {k}");
        let (top, _) = query(&db, 0, 5, Some(k));
        assert_eq!(top, w.expected(0, 5, k), "range top {k}");
    }
    // The newest 10 come from the deeper tables: some L1 table is never
    // read.
    let (_, p) = query(&db, 1, 1, Some(10));
    assert!(p.tables_skipped >= 1, "{p:?}");
}

/// One table whose newest records have the smallest keys (written in
/// descending key order): its first data blocks are its newest, and a
/// top-K reads them, not the last ones in file order.
#[test]
fn newest_blocks_first_within_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "embedded");
    let mut w = Writer::new();
    for i in (0..400).rev() {
        w.put(&db, i, (i % 3) as i64);
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let (all, full) = query(&db, 0, 2, None);
    assert_eq!(all, w.expected(0, 2, usize::MAX));
    for k in [1, 3, 10, 40] {
        let (top, p) = query(&db, 0, 0, Some(k));
        assert_eq!(top, w.expected(0, 0, k), "top {k}");
        let (top, p2) = query(&db, 0, 2, Some(k));
        assert_eq!(top, w.expected(0, 2, k), "range top {k}");
        if k == 10 {
            assert!(p.data_blocks_read <= 12, "{p:?}");
            assert!(p2.data_blocks_read <= 6, "{p2:?}");
            assert!(full.data_blocks_read > 5 * p2.data_blocks_read, "{full:?}");
        }
    }
}

/// Time-ordered keys (as chirp's growing `ID`) spread over many tables of
/// several levels: a top-10 reads about as many blocks as its results
/// need, not every block whose zone map overlaps.
#[test]
fn time_ordered_keys_read_about_k_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "embedded");
    let mut w = Writer::new();
    let mut rng = Rng::new(11);
    for t in 0..10u64 {
        for i in 0..300 {
            w.put(&db, t * 300 + i, rng.below(50) as i64);
        }
        db.flush().unwrap();
        if t % 3 == 2 {
            db.compact_level(0).unwrap();
        }
    }
    let v = db.current_version();
    let deep: usize = v.levels.iter().skip(1).map(|l| l.len()).sum();
    assert!(deep >= 4, "{deep} tables below L0");
    for (lo, hi) in [(0, 49), (10, 30), (7, 7)] {
        let (all, full) = query(&db, lo, hi, None);
        assert_eq!(all, w.expected(lo, hi, usize::MAX));
        let (top, p) = query(&db, lo, hi, Some(10));
        assert_eq!(top, w.expected(lo, hi, 10), "{lo}..={hi}");
        if lo != hi {
            assert!(p.data_blocks_read <= 12, "{lo}..={hi}: {p:?}");
            assert!(full.data_blocks_read > 10 * p.data_blocks_read, "{full:?}");
        }
    }
}

/// Random puts, updates, deletions, flushes and partial compactions: every
/// top-K is the K newest live matches.
#[test]
fn random_trees_answer_the_k_newest() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "embedded");
    let mut w = Writer::new();
    let mut rng = Rng::new(5);
    for step in 0..4000u64 {
        let i = rng.below(600);
        match rng.below(100) {
            0..=69 => w.put(&db, i, rng.below(12) as i64),
            70..=79 => w.delete(&db, i),
            80..=81 => db.flush().unwrap(),
            82 => db.compact_level(0).unwrap(),
            83 => {
                let a = rng.below(600);
                let b = a + rng.below(200);
                db.compact_range(Some(&key(a)), Some(&key(b))).unwrap();
            }
            _ => {
                let lo = rng.below(12) as i64;
                let hi = lo + rng.below(4) as i64;
                let k = [1, 2, 5, 10, 30][rng.below(5) as usize];
                let (top, _) = query(&db, lo, hi, Some(k));
                assert_eq!(
                    top,
                    w.expected(lo, hi, k),
                    "step {step}: {lo}..={hi} top {k}"
                );
            }
        }
    }
    let tables: usize = db.current_version().levels.iter().map(|l| l.len()).sum();
    assert!(tables >= 3, "{tables} tables");
}
