//! `WriteOptions::min_sequence` moves the sequence forward (never back),
//! survives a reopen, and the component visit reports, after each
//! component, a bound on the sequence numbers of the components left.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use strata_lsm::merge::ComponentEvent;
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

fn put(db: &Db, k: &str, floor: u64) {
    let mut b = WriteBatch::new();
    b.put(k.as_bytes(), b"v");
    db.write(b, WriteOptions::default().min_sequence(floor))
        .unwrap();
}

#[test]
fn floor_moves_the_sequence_forward_only() {
    let t = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().background_work(false);
    let db = Db::open(t.path(), opts.clone()).unwrap();
    put(&db, "a", 0);
    assert_eq!(db.last_sequence(), 1);
    put(&db, "b", 100);
    assert_eq!(db.last_sequence(), 100);
    // A floor below the sequence changes nothing.
    put(&db, "c", 50);
    assert_eq!(db.last_sequence(), 101);
    db.flush().unwrap();
    drop(db);
    let db = Db::open(t.path(), opts).unwrap();
    assert_eq!(db.last_sequence(), 101);
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"v"[..]));
    let too_far = WriteOptions::default().min_sequence(u64::MAX);
    let mut b = WriteBatch::new();
    b.put(b"d", b"v");
    assert!(db.write(b, too_far).is_err());
}

#[test]
fn component_visit_bounds_what_is_left() {
    let t = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests()
        .background_work(false)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100);
    let db = Db::open(t.path(), opts).unwrap();
    // Three tables with sequence numbers around 10, 1000 and 20 (the
    // floor only moves forward, so "around 20" is after 1000).
    put(&db, "k1", 10);
    db.flush().unwrap();
    put(&db, "k2", 1000);
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    put(&db, "k3", 0);
    db.flush().unwrap();
    put(&db, "k4", 0);
    let snap = db.snapshot();
    let mut bounds = Vec::new();
    snap.for_each_in_ranges_by_component(&[(Vec::new(), None)], &mut |ev| {
        if let ComponentEvent::End { rest_max_seq } = ev {
            bounds.push(rest_max_seq);
        }
        Ok(true)
    })
    .unwrap();
    // Memtable (k4, seq 1002), L0 table (k3, seq 1001), L1 (seq ≤ 1000).
    assert_eq!(bounds, vec![1001, 1000, 0]);
}
