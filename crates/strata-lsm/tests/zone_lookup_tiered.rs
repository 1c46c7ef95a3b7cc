//! PERSEID §4.4 in the engine: `Db::get_versions` goes straight to the
//! component whose sequence-number zone map holds the requested version
//! (falling back to a normal lookup when it was compacted away), with
//! parallel workers; and the tiered compaction policy keeps every read
//! exact, across reopens.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::collections::BTreeMap;

use strata_lsm::{CompactionStyle, Db, Options, WriteBatch};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// Four flushed tables that all cover the key space, no compaction.
fn four_tables(dir: &std::path::Path) -> Db {
    let opts = Options::small_for_tests()
        .background_work(false)
        .memtable_size(1 << 20)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100);
    let db = Db::open(dir, opts).unwrap();
    for round in 0..4u32 {
        for i in (round..400).step_by(4) {
            db.put(&key(i), format!("v{round}-{i}").as_bytes()).unwrap();
        }
        // One key present in every table, as a first, unrelated entry.
        db.put(&key(1000), format!("r{round}").as_bytes()).unwrap();
        db.flush().unwrap();
    }
    assert_eq!(db.current_version().levels[0].len(), 4);
    db
}

#[test]
fn a_version_is_read_from_the_one_component_whose_zone_map_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = four_tables(dir.path());
    // A fifth round stays in the memtable.
    for i in (0..400u32).step_by(10) {
        db.put(&key(i), b"mem").unwrap();
    }
    let keys: Vec<Vec<u8>> = (0..400).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let expected = db.multi_get_with_seq(&refs).unwrap();
    let reqs: Vec<(&[u8], u64)> = refs
        .iter()
        .zip(&expected)
        .map(|(k, e)| (*k, e.as_ref().unwrap().0))
        .collect();
    let snap = db.snapshot();
    for threads in [1, 3] {
        let before = db.stats().io.bloom_probes;
        let (found, stats) = db.get_versions(&reqs, snap.sequence(), threads).unwrap();
        assert_eq!(found, expected, "threads {threads}");
        // Flush ranges are disjoint: exactly one component per request, and
        // at most one Bloom probe (none for the memtable's).
        assert_eq!(stats.components_probed, reqs.len() as u64);
        assert_eq!(stats.fallbacks, 0);
        let probes = db.stats().io.bloom_probes - before;
        assert!(probes <= reqs.len() as u64, "{probes} probes");
    }
    // The normal path probes the newer tables' filters too.
    let before = db.stats().io.bloom_probes;
    for k in &refs {
        db.get(k).unwrap();
    }
    let normal = db.stats().io.bloom_probes - before;
    assert!(normal > reqs.len() as u64 * 2, "{normal} probes");
}

#[test]
fn a_version_compacted_away_falls_back_to_the_snapshot_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let db = four_tables(dir.path());
    let old = db.multi_get_with_seq(&[&key(1000)]).unwrap()[0]
        .clone()
        .unwrap();
    db.put(&key(1000), b"newest").unwrap();
    db.compact_range(None, None).unwrap();
    let snap = db.snapshot();
    let (found, stats) = db
        .get_versions(&[(&key(1000), old.0)], snap.sequence(), 1)
        .unwrap();
    assert_eq!(stats.fallbacks, 1);
    let (seq, value) = found[0].clone().unwrap();
    assert!(seq > old.0);
    assert_eq!(value, b"newest");
    // A version newer than the snapshot is never returned.
    let (found, _) = db
        .get_versions(&[(&key(1000), seq)], snap.sequence() - 1, 1)
        .unwrap();
    assert_ne!(found[0].as_ref().map(|f| f.0), Some(seq));
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..600u32 {
        assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned(), "{i}");
    }
    let scanned: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter(None, None).unwrap().map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    assert_eq!(scanned, want);
}

fn tiered_invariants(db: &Db) {
    let v = db.current_version();
    assert!(v.levels[1..].iter().all(|l| l.is_empty()), "{v:?}");
    let mut ranges: Vec<(u64, u64)> = v.levels[0]
        .iter()
        .map(|f| (f.smallest_seq, f.largest_seq))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(w[0].1 < w[1].0, "overlapping runs {ranges:?}");
    }
}

#[test]
fn tiered_compaction_keeps_reads_exact_and_runs_disjoint_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        Options::small_for_tests()
            .background_work(false)
            .compaction_style(CompactionStyle::Tiered)
            .tiered_runs(3)
    };
    let mut model = BTreeMap::new();
    let mut merged = 0;
    for round in 0..3 {
        let db = Db::open(dir.path(), opts()).unwrap();
        check(&db, &model);
        let mut x = 12345u64 + round;
        for n in 0..4000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key((x % 600) as u32);
            if x.is_multiple_of(5) {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("{round}-{n}-{}", "x".repeat((x % 60) as usize)).into_bytes();
                let mut b = WriteBatch::new();
                b.put(&k, &v);
                db.write(b, Default::default()).unwrap();
                model.insert(k, v);
            }
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        tiered_invariants(&db);
        check(&db, &model);
        merged += db.stats().io.compactions;
    }
    assert!(merged > 0, "no tiered merge ran");
    let db = Db::open(dir.path(), opts()).unwrap();
    tiered_invariants(&db);
    check(&db, &model);
    // Reopened leveled, the same data reads the same.
    drop(db);
    let db = Db::open(
        dir.path(),
        Options::small_for_tests().background_work(false),
    )
    .unwrap();
    db.compact_range(None, None).unwrap();
    check(&db, &model);
}
