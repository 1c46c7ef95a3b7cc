//! NEXT top-K at entry granularity: a top-K query takes the K newest
//! matches across the memtables and every table first, reads about K data
//! blocks when nothing is stale, and stays exact when newer tables hold
//! newer versions (stale entries) of the matches.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::topk::{expected, open, query, record, Model};
use common::{key, Rng};
use strata::Db;

/// Writes key `i` with `u` and records it in the model as the newest write.
fn write(db: &Db, model: &mut Model, order: &mut u64, i: u64, u: i64) {
    db.put(&key(i), &record(u, i)).unwrap();
    *order += 1;
    model.insert(key(i), (*order, u));
}

#[test]
fn top_k_reads_about_k_data_blocks_across_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "next");
    let mut rng = Rng::new(7);
    let mut model = Model::new();
    let mut order = 0u64;
    for t in 0..8 {
        for _ in 0..400 {
            let i = rng.below(1_000_000);
            if model.contains_key(&key(i)) {
                continue;
            }
            let u = rng.below(20) as i64;
            db.put(&key(i), &record(u, i)).unwrap();
            order += 1;
            model.insert(key(i), (order, u));
        }
        db.flush().unwrap();
        if t == 3 {
            // Older tables in L1 too.
            db.compact_level(0).unwrap();
        }
    }
    let tables = db.current_version().num_files();
    assert!(tables >= 5, "{tables} tables");
    for (lo, hi) in [(3, 3), (0, 4), (0, 19), (11, 12)] {
        let (all, full) = query(&db, lo, hi, None);
        assert_eq!(all, expected(&model, lo, hi, usize::MAX), "{lo}..={hi}");
        let (top, p) = query(&db, lo, hi, Some(10));
        assert_eq!(top, expected(&model, lo, hi, 10), "{lo}..={hi}");
        assert_eq!(p.stale, 0);
        assert!(
            p.data_blocks_read <= 12,
            "{lo}..={hi}: top-10 read {} data blocks ({} for all {} matches): {p:?}",
            p.data_blocks_read,
            full.data_blocks_read,
            all.len()
        );
        assert!(full.data_blocks_read > 3 * p.data_blocks_read, "{full:?}");
        // Nothing is stale: every block a full query reads holds a result,
        // and the distinct blocks of the results are those it read.
        assert_eq!(full.min_data_blocks, full.data_blocks_read, "{full:?}");
        assert!(p.min_data_blocks <= 10 && p.min_data_blocks > 0, "{p:?}");
    }
}

/// Newer tables and the memtable hold newer versions (other values,
/// deletions, the same value again) of the newest matches: the top K is
/// still exactly the K newest live matches.
#[test]
fn top_k_skips_stale_entries_in_newer_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "next");
    let mut model = Model::new();
    let mut order = 0u64;
    let mut put = |db: &Db, model: &mut Model, i: u64, u: i64| write(db, model, &mut order, i, u);
    // Old versions: u = 1 for every key, in two tables pushed to L1.
    for i in 0..600 {
        put(&db, &mut model, i, 1);
        if i == 300 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
    db.compact_level(0).unwrap();
    // Newer tables: the newest 100 old matches change value, some are
    // deleted, some are rewritten with u = 1 (a newer match, the old one
    // stale).
    for i in (500..600).rev() {
        match i % 4 {
            0 => {
                db.delete(&key(i)).unwrap();
                model.remove(&key(i));
            }
            1 => put(&db, &mut model, i, 1),
            _ => put(&db, &mut model, i, 2),
        }
        if i % 30 == 0 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
    // The memtable: more stale-making writes.
    for i in 480..500 {
        put(&db, &mut model, i, 3);
    }
    for k in [1, 5, 10, 30, 200] {
        let (top, p) = query(&db, 1, 1, Some(k));
        assert_eq!(top, expected(&model, 1, 1, k), "top {k}");
        let (top, _) = query(&db, 1, 2, Some(k));
        assert_eq!(top, expected(&model, 1, 2, k), "range top {k}");
        if k == 30 {
            // 25 rewrites with u = 1 are the newest matches; then the 100
            // superseded old versions and 20 overwritten in the memtable
            // are stale before older live matches follow.
            assert!(p.stale >= 120, "{p:?}");
        }
    }
    let (all, _) = query(&db, 1, 3, None);
    assert_eq!(all, expected(&model, 1, 3, usize::MAX));
    // After a full compaction nothing is stale.
    db.compact_range(None, None).unwrap();
    let (top, p) = query(&db, 1, 1, Some(10));
    assert_eq!(top, expected(&model, 1, 1, 10));
    assert!(p.data_blocks_read <= 12, "{p:?}");
}

/// A value with many versions in the memtables, the newest of them stale:
/// a top-K query first takes each memtable's newest few candidates and,
/// when those are all stale, the older ones in a second round. The answer
/// is the K newest live matches (values too) in both rounds.
#[test]
fn top_k_in_memtables_reaches_past_the_newest_stale_versions() {
    let dir = tempfile::tempdir().unwrap();
    let opts = strata::Options::small_for_tests()
        .background_work(false)
        .memtable_size(4 << 20);
    let db = Db::open(dir.path(), opts).unwrap();
    db.create_index(strata::IndexSpec::field("by_u", "u", strata::KeyType::I64).strategy("next"))
        .unwrap();
    let mut model = Model::new();
    let mut order = 0u64;
    let mut put = |db: &Db, model: &mut Model, i: u64, u: i64| write(db, model, &mut order, i, u);
    // 200 keys with u = 1; the newest 150 of them then move to u = 2 (their
    // u = 1 entries, the newest of u = 1, are stale); nothing reaches a
    // table.
    for i in 0..200 {
        put(&db, &mut model, i, 1);
    }
    for i in (50..200).rev() {
        put(&db, &mut model, i, 2);
    }
    assert_eq!(
        db.current_version()
            .levels
            .iter()
            .map(|l| l.len())
            .sum::<usize>(),
        0
    );
    for k in [1, 10, 40, 60, 500] {
        let (top, p) = query(&db, 1, 1, Some(k));
        assert_eq!(top, expected(&model, 1, 1, k), "top {k}");
        if k == 10 {
            assert!(p.stale >= 150, "every stale version was passed: {p:?}");
        }
        let (top, _) = query(&db, 1, 2, Some(k));
        assert_eq!(top, expected(&model, 1, 2, k), "range top {k}");
    }
    // The records are the live versions' (u = 1, not u = 2).
    let hits = db
        .query(
            "by_u",
            &strata::Predicate::Eq(strata::IndexValue::I64(1)),
            strata::QueryOptions::default().limit(10),
        )
        .unwrap()
        .into_vec();
    for h in &hits {
        let v = h.value.as_deref().expect("values asked for");
        assert_eq!(Some(v), db.get(&h.key).unwrap().as_deref());
    }
}

/// Tables join a top-K query's work by their newest entry: once K results
/// newer than every entry of the older tables are known, those tables are
/// neither searched nor opened, whether they hold matches or not. Here the
/// older tables hold no match of the range, so before tables were
/// searched lazily none of them counted as skipped.
#[test]
fn top_k_does_not_search_tables_older_than_k_results() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "next");
    let mut model = Model::new();
    let mut order = 0u64;
    let mut put = |db: &Db, model: &mut Model, i: u64, u: i64| write(db, model, &mut order, i, u);
    let mut rng = Rng::new(11);
    let mut i = 0;
    for _ in 0..5 {
        for _ in 0..400 {
            put(&db, &mut model, i, rng.below(20) as i64);
            i += 1;
        }
        db.flush().unwrap();
    }
    // The newest table: 30 matches of 20..=30.
    for _ in 0..30 {
        put(&db, &mut model, i, 25);
        i += 1;
    }
    db.flush().unwrap();
    let tables = db.current_version().num_files();
    assert!(tables >= 6, "{tables} tables");
    let (top, p) = query(&db, 20, 30, Some(10));
    assert_eq!(top, expected(&model, 20, 30, 10));
    // The 30 matches are in the newest one or two tables.
    assert!(
        p.tables_skipped + 2 >= tables as u64,
        "{tables} tables: {p:?}"
    );
    assert!(p.data_blocks_read <= 2, "{p:?}");
    // Fewer than K newer results: the older tables are searched (and
    // their matches taken) too.
    let (top, p) = query(&db, 19, 30, Some(1000));
    assert_eq!(top, expected(&model, 19, 30, 1000));
    assert!(top.len() > 30);
    assert_eq!(p.tables_skipped, 0, "{p:?}");
}
