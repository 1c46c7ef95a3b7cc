//! NEXT's `pin` parameter: a pinned table's secondary blocks are kept in
//! RAM, so queries read none of them from the block cache or the file,
//! whether the table was written by a flush or compaction (blocks taken
//! from the builder), found at open (read once from the table), or
//! covered by an online build (read once from its side file). `pin=true`
//! pins every table; the default pins tables while their blocks fit a
//! budget per index (`pin=<size>`), returning a table's share when it
//! leaves the index; `pin=false` pins none. Answers are those of the
//! unpinned index on the same data, and the index's memory counts the
//! pinned bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::topk::{expected, opts, query, query_index, record, Model};
use common::{key, Rng};
use strata::{Db, IndexSpec, KeyType};

fn spec(name: &str, pin: &str) -> IndexSpec {
    IndexSpec::field(name, "u", KeyType::I64)
        .strategy("next")
        .param("pin", pin)
}

/// Meta block reads (cache and file) made by queries since open.
fn meta_reads(db: &Db) -> u64 {
    let m = db.stats().io.meta_blocks;
    m.cache + m.disk
}

fn memory(db: &Db, name: &str) -> (u64, u64) {
    let info = db
        .indexes()
        .into_iter()
        .find(|i| i.spec.name == name)
        .unwrap();
    (info.stats.memory_bytes, info.stats.disk_bytes)
}

/// `pinned` and `plain` (`pin=false`) answer every query alike and as the
/// model does; queries on `pinned` read no meta block, those on `plain`
/// do when its blocks are in the tables (`plain_in_tables`; side files'
/// blocks are not the tables' meta blocks), so that the check can fail.
fn check(db: &Db, model: &Model, plain_in_tables: bool) {
    for (lo, hi) in [(3, 3), (0, 4), (0, 19), (11, 12), (25, 30)] {
        for k in [None, Some(1), Some(10)] {
            let want = expected(model, lo, hi, k.unwrap_or(usize::MAX));
            // Once unmeasured: a table's first use opens it, which reads
            // its properties and metaindex (meta blocks too).
            query_index(db, "pinned", lo, hi, k);
            let before = meta_reads(db);
            let (got, p) = query_index(db, "pinned", lo, hi, k);
            assert_eq!(got, want, "pinned {lo}..={hi} {k:?}");
            assert_eq!(meta_reads(db), before, "pinned read meta blocks: {p:?}");
            let (plain, _) = query_index(db, "plain", lo, hi, k);
            assert_eq!(plain, want, "plain {lo}..={hi} {k:?}");
        }
    }
    if plain_in_tables {
        let before = meta_reads(db);
        query_index(db, "plain", 0, 19, None);
        assert!(
            meta_reads(db) > before,
            "the unpinned index reads its blocks"
        );
    }
}

/// Writes `n` new or updated keys and records them in the model.
fn write(db: &Db, model: &mut Model, order: &mut u64, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        let i = rng.below(3_000);
        let u = rng.below(30) as i64;
        db.put(&key(i), &record(u, i)).unwrap();
        *order += 1;
        model.insert(key(i), (*order, u));
    }
}

#[test]
fn pinned_blocks_serve_queries_after_flush_compaction_reopen_and_online_build() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(11);
    let mut model = Model::new();
    let mut order = 0u64;
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        // Tables written before the indexes exist: the online build covers
        // them with side files.
        for _ in 0..3 {
            write(&db, &mut model, &mut order, &mut rng, 500);
            db.flush().unwrap();
        }
        db.create_index(spec("pinned", "true")).unwrap();
        db.create_index(spec("plain", "false")).unwrap();
        check(&db, &model, false);
        // Tables written by flushes and a compaction carry the blocks.
        for t in 0..4 {
            write(&db, &mut model, &mut order, &mut rng, 400);
            db.flush().unwrap();
            if t == 1 {
                db.compact_level(0).unwrap();
            }
        }
        check(&db, &model, true);
        let (mem, disk) = memory(&db, "pinned");
        let (plain_mem, plain_disk) = memory(&db, "plain");
        assert_eq!(disk, plain_disk);
        assert!(
            mem >= plain_mem + disk / 2,
            "pinned memory {mem} against {plain_mem} unpinned, {disk} on disk"
        );
    }
    // At open, every table's blocks are read once.
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, &model, true);
    db.compact_range(None, None).unwrap();
    check(&db, &model, true);
    // `common::topk::query` on a pinned `by_u`, as the other top-K tests
    // use it.
    db.create_index(
        IndexSpec::field("by_u", "u", KeyType::I64)
            .strategy("next")
            .param("pin", "true"),
    )
    .unwrap();
    let (top, _) = query(&db, 0, 19, Some(10));
    assert_eq!(top, expected(&model, 0, 19, 10));
}

/// Pinned bytes of index `name`: its memory beyond `plain`'s, which
/// indexes the same field unpinned.
fn pinned_bytes(db: &Db, name: &str) -> u64 {
    memory(db, name).0.saturating_sub(memory(db, "plain").0)
}

/// A budget pins tables while their blocks fit, answers stay exact with
/// some tables pinned and some not, and a table's share of the budget
/// returns when a compaction drops it, so newer tables are pinned again.
#[test]
fn a_pin_budget_pins_tables_while_they_fit_and_frees_dropped_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(5);
    let mut model = Model::new();
    let mut order = 0u64;
    let db = Db::open(dir.path(), opts()).unwrap();
    db.create_index(spec("plain", "false")).unwrap();
    db.create_index(spec("all", "true")).unwrap();
    write(&db, &mut model, &mut order, &mut rng, 400);
    db.flush().unwrap();
    // The first table's blocks, and a budget for about two such tables.
    let one = pinned_bytes(&db, "all");
    assert!(one > 0);
    let budget = one * 5 / 2;
    db.create_index(spec("budget", &budget.to_string()))
        .unwrap();
    assert!(pinned_bytes(&db, "budget") <= budget);
    for _ in 0..5 {
        write(&db, &mut model, &mut order, &mut rng, 400);
        db.flush().unwrap();
    }
    let tables = db.current_version().num_files();
    assert!(tables >= 4, "{tables} tables");
    let held = pinned_bytes(&db, "budget");
    assert!(held > 0 && held <= budget, "{held} pinned of {budget}");
    assert!(held < pinned_bytes(&db, "all"), "not every table fits");
    for (lo, hi) in [(3, 3), (0, 19), (11, 12)] {
        for k in [None, Some(10)] {
            let want = expected(&model, lo, hi, k.unwrap_or(usize::MAX));
            assert_eq!(query_index(&db, "budget", lo, hi, k).0, want);
        }
    }
    // Everything into one table larger than the budget (not pinned): the
    // inputs' shares return, so the next flushes' tables are pinned.
    db.compact_range(None, None).unwrap();
    assert_eq!(pinned_bytes(&db, "budget"), 0);
    write(&db, &mut model, &mut order, &mut rng, 400);
    db.flush().unwrap();
    let held = pinned_bytes(&db, "budget");
    assert!(held > 0 && held <= budget, "{held} pinned of {budget}");
    let want = expected(&model, 0, 29, usize::MAX);
    assert_eq!(query_index(&db, "budget", 0, 29, None).0, want);
    // At open, the same rule: pinned while the tables fit.
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    let held = pinned_bytes(&db, "budget");
    assert!(held > 0 && held <= budget, "{held} pinned of {budget}");
    assert_eq!(query_index(&db, "budget", 0, 29, None).0, want);
}

#[test]
fn pin_rejects_a_value_other_than_true_false_or_a_size() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let err = db
        .create_index(
            IndexSpec::field("x", "u", KeyType::I64)
                .strategy("next")
                .param("pin", "yes"),
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("pin must be true, false or a size"),
        "{err}"
    );
}
