//! Keys written in order (time-ordered ids) reach the deeper levels by
//! moves, not merges: level-0 tables whose ranges are disjoint move to
//! level 1 whole, and nothing is rewritten. Keys that interleave are
//! merged as before. Either way every key reads back, before and after a
//! reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use strata_lsm::{Db, Options};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat(200)).into_bytes()
}

/// Puts `order`'s keys, flushing every `per_flush`, then lets compactions
/// finish.
fn load(db: &Db, order: &[u32], per_flush: usize) {
    for (n, &i) in order.iter().enumerate() {
        db.put(&key(i), &value(i)).unwrap();
        if (n + 1) % per_flush == 0 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
}

fn check(db: &Db, n: u32) {
    for i in 0..n {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)), "key {i}");
    }
    assert_eq!(db.get(&key(n)).unwrap(), None);
}

fn options() -> Options {
    let mut o = Options::small_for_tests();
    o.l0_compaction_trigger = 4;
    o
}

#[test]
fn keys_in_order_move_down_without_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2_000;
    let order: Vec<u32> = (0..n).collect();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        load(&db, &order, 100);
        let stats = db.stats();
        assert!(stats.io.compactions > 0, "{:?}", stats.io);
        assert_eq!(stats.io.compaction_bytes_written, 0, "{:?}", stats.io);
        assert_eq!(stats.io.compaction_bytes_read, 0, "{:?}", stats.io);
        let v = db.current_version();
        assert!(v.levels[0].len() < 4, "level 0 holds {}", v.levels[0].len());
        assert!(v.levels.iter().skip(1).any(|l| !l.is_empty()));
        check(&db, n);
    }
    let db = Db::open(dir.path(), options()).unwrap();
    check(&db, n);
}

#[test]
fn keys_that_interleave_are_merged() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2_000;
    // Every flush spans the whole key range.
    let order: Vec<u32> = (0..20)
        .flat_map(|r| (0..100).map(move |j| j * 20 + r))
        .collect();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        load(&db, &order, 100);
        let stats = db.stats();
        assert!(stats.io.compaction_bytes_written > 0, "{:?}", stats.io);
        check(&db, n);
    }
    let db = Db::open(dir.path(), options()).unwrap();
    check(&db, n);
}
