//! Probes of a key across many tables (`read::may_exist`, `Version::get`),
//! through a database: beside `db` because they open one (`read` sits
//! below `db`).

use crate::db::Db;
use crate::options::Options;
use crate::read::may_exist;

/// A database whose flushed tables all stay in level 0 (no compaction
/// runs below 100 of them).
fn level0_only(dir: &std::path::Path) -> Db {
    let mut opts = Options::small_for_tests();
    opts.background_work = false;
    opts.l0_compaction_trigger = 100;
    opts.l0_slowdown_trigger = 100;
    opts.l0_stop_trigger = 100;
    Db::open(dir, opts).unwrap()
}

/// Twenty level-0 tables (more than `PROBE_AHEAD`, so the probes go in
/// several rounds), each holding its own keys: every written key may
/// exist, whichever table holds it; most keys the tables do not hold
/// are rejected by every filter; a key above every table does not
/// exist.
#[test]
fn finds_a_key_in_any_of_more_tables_than_one_round_probes() {
    let dir = tempfile::tempdir().unwrap();
    let db = level0_only(dir.path());
    let key = |t: u32, i: u32| format!("k{:03}", i * 20 + t).into_bytes();
    for t in 0..20 {
        for i in 0..10 {
            db.put(&key(t, i), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    let v = db.current_version();
    assert_eq!(v.num_files(), 20, "every table stays in level 0");
    let tables = db.table_cache();
    for t in 0..20 {
        for i in 0..10 {
            assert!(
                may_exist(tables, &key(t, i), &[], &v, true),
                "table {t} key {i}"
            );
        }
    }
    // Keys inside every table's range, held by none: a false positive
    // of 20 filters at 10 bits a key is rare, so most must be rejected.
    let absent = (0..200)
        .filter(|i| !may_exist(tables, format!("k{i:03}x").as_bytes(), &[], &v, true))
        .count();
    assert!(absent > 150, "only {absent} of 200 absent keys rejected");
    assert!(!may_exist(tables, b"zzz", &[], &v, true));
}

/// `Version::get` across twenty level-0 tables: each key written in
/// every fourth table with the table's number, so the newest table
/// holding it is the one found; snapshots taken between flushes see
/// the version of their time; keys held by the oldest table only are
/// found behind nineteen newer tables whose ranges cover them; an entry
/// read without its value is the same entry.
#[test]
fn get_finds_the_newest_version_across_twenty_level0_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = level0_only(dir.path());
    let key = |i: u32| format!("k{i:03}").into_bytes();
    let old = |i: u32| format!("k{i:03}a").into_bytes();
    let mut snaps = Vec::new();
    for t in 0..20u32 {
        for i in (0..40).filter(|i| i % 4 == t % 4) {
            db.put(&key(i), format!("t{t}").as_bytes()).unwrap();
        }
        if t == 0 {
            // In the range of every table, held by the oldest only.
            for i in 0..39 {
                db.put(&old(i), b"old").unwrap();
            }
        }
        db.flush().unwrap();
        snaps.push(db.snapshot());
    }
    assert_eq!(db.current_version().num_files(), 20);
    // The newest table that wrote key i, as of a snapshot after table s.
    let expect = |i: u32, s: u32| {
        (0..=s)
            .rev()
            .find(|t| i % 4 == t % 4)
            .map(|t| format!("t{t}").into_bytes())
    };
    for i in 0..40 {
        assert_eq!(db.get(&key(i)).unwrap(), expect(i, 19), "key {i}");
        for (s, snap) in snaps.iter().enumerate() {
            assert_eq!(
                snap.get(&key(i)).unwrap(),
                expect(i, s as u32),
                "key {i} at {s}"
            );
        }
    }
    for i in 0..39 {
        assert_eq!(
            db.get(&old(i)).unwrap(),
            Some(b"old".to_vec()),
            "old key {i}"
        );
        assert_eq!(snaps[0].get(&old(i)).unwrap(), Some(b"old".to_vec()));
    }
    // Without the value: the same entry, nothing copied.
    let (v, tables) = (db.current_version(), db.table_cache());
    for k in (0..40).map(key).chain((0..39).map(old)) {
        let full = v.get(tables, &k, crate::key::MAX_SEQ).unwrap().unwrap();
        let head = v
            .get_entry(tables, &k, crate::key::MAX_SEQ, false)
            .unwrap()
            .unwrap();
        assert_eq!((head.seq, head.kind), (full.seq, full.kind));
        assert!(head.value.is_empty() && !full.value.is_empty());
    }
    assert_eq!(db.get(b"k999").unwrap(), None);
    assert_eq!(db.get(b"k0005").unwrap(), None);
}
