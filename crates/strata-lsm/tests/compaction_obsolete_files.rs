//! Obsolete files (compaction inputs, flushed WALs, old manifests) leave
//! the directory as soon as no live version and no reader holds them, not
//! only at the next open; and what remains always opens to the same data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::BTreeSet;
use std::path::Path;

use strata_lsm::filename::{self, FileKind};
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("value-{i}-{round}-{}", "x".repeat(100)).into_bytes()
}

/// Writes keys `0..n` (value round `round`), flushing every `per_flush`.
fn fill(db: &Db, n: u32, round: u32, per_flush: u32) {
    for i in 0..n {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i, round));
        db.write(b, WriteOptions::default()).unwrap();
        if (i + 1) % per_flush == 0 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
}

fn files(dir: &Path) -> Vec<FileKind> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(filename::parse))
        .collect()
}

fn tables_on_disk(dir: &Path) -> BTreeSet<u64> {
    files(dir)
        .into_iter()
        .filter_map(|k| match k {
            FileKind::Table(n) => Some(n),
            _ => None,
        })
        .collect()
}

fn live_tables(db: &Db) -> BTreeSet<u64> {
    db.current_version()
        .all_files()
        .map(|(_, f)| f.number)
        .collect()
}

fn count(dir: &Path, f: impl Fn(&FileKind) -> bool) -> usize {
    files(dir).iter().filter(|k| f(k)).count()
}

fn check_all(db: &Db, n: u32, round: u32) {
    for i in 0..n {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, round)), "key {i}");
    }
}

fn opts() -> Options {
    Options::small_for_tests()
}

#[test]
fn compact_range_leaves_only_live_files() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    fill(&db, 600, 0, 100);
    fill(&db, 600, 1, 150);
    db.compact_range(None, None).unwrap();
    let live = live_tables(&db);
    assert!(!live.is_empty());
    assert_eq!(tables_on_disk(t.path()), live, "only live tables remain");
    // One WAL (the active memtable's) and one manifest.
    assert_eq!(count(t.path(), |k| matches!(k, FileKind::Log(_))), 1);
    assert_eq!(count(t.path(), |k| matches!(k, FileKind::Manifest(_))), 1);
    check_all(&db, 600, 1);
}

#[test]
fn flush_deletes_the_flushed_wal() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    for round in 0..4 {
        fill(&db, 50, round, 1000);
        assert_eq!(
            count(t.path(), |k| matches!(k, FileKind::Log(_))),
            1,
            "round {round}: only the active WAL remains"
        );
    }
}

#[test]
fn iterator_pins_compaction_inputs_until_dropped() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    fill(&db, 500, 0, 100);
    db.wait_for_compactions().unwrap();
    let before = live_tables(&db);
    let mut it = db.iter(None, None).unwrap();
    // Read a little before the compaction, the rest after.
    let mut seen = Vec::new();
    for _ in 0..10 {
        let (k, v) = it.next().unwrap().unwrap();
        seen.push((k, v));
    }

    fill(&db, 500, 1, 100);
    db.compact_range(None, None).unwrap();
    db.wait_for_compactions().unwrap();
    let after = live_tables(&db);
    assert!(before.is_disjoint(&after), "every old table was rewritten");
    assert!(
        tables_on_disk(t.path()).is_superset(&before),
        "the iterator's tables stay while it lives"
    );

    for r in it.by_ref() {
        seen.push(r.unwrap());
    }
    assert_eq!(seen.len(), 500);
    for (i, (k, v)) in seen.iter().enumerate() {
        assert_eq!(k, &key(i as u32));
        assert_eq!(v, &value(i as u32, 0), "the iterator reads its own view");
    }

    drop(it);
    // Deletion after the last reader is asynchronous;
    // `wait_for_compactions` also waits for it.
    db.wait_for_compactions().unwrap();
    assert_eq!(tables_on_disk(t.path()), live_tables(&db));
    check_all(&db, 500, 1);
}

#[test]
fn snapshot_reads_survive_deletion() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    fill(&db, 300, 0, 100);
    let snap = db.snapshot();
    fill(&db, 300, 1, 100);
    db.compact_range(None, None).unwrap();
    assert_eq!(tables_on_disk(t.path()), live_tables(&db));
    // The compaction kept the versions the snapshot sees in the new tables.
    for i in 0..300 {
        assert_eq!(snap.get(&key(i)).unwrap(), Some(value(i, 0)));
    }
    check_all(&db, 300, 1);
}

/// Copies the database files as they are at this instant: what a crash
/// right now would leave on disk (minus unsynced data, which every file
/// here has synced).
fn crash_image(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name();
        if name.to_str() == Some("LOCK") {
            continue;
        }
        std::fs::copy(e.path(), to.join(&name)).unwrap();
    }
}

#[test]
fn crash_and_reopen_after_deletion() {
    let t = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    fill(&db, 400, 0, 80);
    fill(&db, 400, 1, 120);
    db.compact_range(None, None).unwrap();
    // Writes after the compaction live only in the WAL.
    for i in 0..20 {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i, 2));
        db.write(b, WriteOptions::default().sync(true)).unwrap();
    }
    crash_image(t.path(), &image.path().join("db"));

    let reopened = Db::open(image.path().join("db"), opts()).unwrap();
    for i in 0..400 {
        let round = if i < 20 { 2 } else { 1 };
        assert_eq!(reopened.get(&key(i)).unwrap(), Some(value(i, round)));
    }
    drop(reopened);
    drop(db);

    // A clean reopen of the original directory sees the same.
    let db = Db::open(t.path(), opts()).unwrap();
    assert_eq!(tables_on_disk(t.path()), live_tables(&db));
    for i in 0..400 {
        let round = if i < 20 { 2 } else { 1 };
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, round)));
    }
}

#[test]
fn inline_work_deletes_too() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts().background_work(false)).unwrap();
    fill(&db, 500, 0, 100);
    let it = db.iter(None, None).unwrap();
    fill(&db, 500, 1, 100);
    db.compact_range(None, None).unwrap();
    drop(it);
    db.wait_for_compactions().unwrap();
    assert_eq!(tables_on_disk(t.path()), live_tables(&db));
    check_all(&db, 500, 1);
}

/// `wait_for_compactions` returns only after the last compaction's inputs
/// left the directory: the compaction thread still held its input version
/// when it published the result, and a waiter woken by the publication
/// returned before that version died (the benchmark then reported the
/// inputs in the database's size).
#[test]
fn wait_for_compactions_returns_after_inputs_are_deleted() {
    let t = tempfile::tempdir().unwrap();
    let db = Db::open(t.path(), opts()).unwrap();
    for round in 0..30 {
        fill(&db, 300, round, 100);
        db.wait_for_compactions().unwrap();
        assert_eq!(
            tables_on_disk(t.path()),
            live_tables(&db),
            "round {round}: only live tables after wait_for_compactions"
        );
    }
    check_all(&db, 300, 29);
}
