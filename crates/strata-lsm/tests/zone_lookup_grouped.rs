//! PERSEID §4.4, grouped: `Db::get_versions` sends each request to the
//! component its sequence-number zone map names, then reads each table's
//! requests in one key-sorted pass. Its answers must be exactly those of
//! the one-request-at-a-time walk (re-implemented here from public parts)
//! and of a model of every write, whatever the number of threads; and a
//! data block holding several requested records is read once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::collections::BTreeMap;

use strata_lsm::memtable::MemGet;
use strata_lsm::{CompactionStyle, Db, Options, Snapshot, Versioned};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every write: (key, seq) → value (`None` for a tombstone).
type Model = BTreeMap<(Vec<u8>, u64), Option<Vec<u8>>>;

/// `n` random puts and deletes over 400 keys, recorded in `model`.
fn write(db: &Db, model: &mut Model, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        let x = rng.next();
        let k = key(x % 400);
        let value = if x.is_multiple_of(7) {
            db.delete(&k).unwrap();
            None
        } else {
            let v = format!("v{x}-{}", "p".repeat((x % 40) as usize)).into_bytes();
            db.put(&k, &v).unwrap();
            Some(v)
        };
        // One writer, one entry per write: the last sequence number is it.
        model.insert((k, db.snapshot().sequence()), value);
    }
}

/// What the one-request-at-a-time walk answers for `(key, seq)`: the
/// memtables whose sequence range holds `seq`, newest first, then every
/// table (in `Version::all_files` order) whose sequence and key ranges
/// hold it, each looked up at `seq` and accepted only with exactly that
/// version as a value; else the normal lookup at `snapshot`. With the
/// number of components probed and whether it fell back.
fn one_at_a_time(db: &Db, key: &[u8], seq: u64, snapshot: u64) -> (Option<Versioned>, u64, bool) {
    let (mems, version) = db.read_view();
    let mut probed = 0;
    if seq <= snapshot {
        for m in &mems {
            if !m.seq_range().is_some_and(|(lo, hi)| lo <= seq && seq <= hi) {
                continue;
            }
            probed += 1;
            if let Some(MemGet::Value(s, v)) = m.get(key, seq) {
                if s == seq {
                    return (Some((s, v)), probed, false);
                }
            }
        }
        for (_, f) in version.all_files() {
            if f.smallest_seq > seq
                || seq > f.largest_seq
                || key < strata_lsm::key::user_key(&f.smallest)
                || key > strata_lsm::key::user_key(&f.largest)
            {
                continue;
            }
            probed += 1;
            let t = db.table_cache().get(f.number, f.file_size).unwrap();
            if let Some(found) = t.get(key, seq).unwrap() {
                if found.seq == seq && found.kind == strata_lsm::key::ValueKind::Value {
                    return (Some((found.seq, found.value)), probed, false);
                }
            }
        }
    }
    let r = db
        .multi_get_at_seq(&[key], snapshot)
        .unwrap()
        .pop()
        .unwrap();
    (r, probed, true)
}

/// The visible version of `key` at `seq` in the model.
fn visible(model: &Model, key: &[u8], seq: u64) -> Option<(u64, Option<Vec<u8>>)> {
    model
        .range((key.to_vec(), 0)..=(key.to_vec(), seq))
        .next_back()
        .map(|((_, s), v)| (*s, v.clone()))
}

/// A database whose versions sit in deeper levels (leveled) or older runs
/// (tiered), level-0 tables and the memtable, with old snapshots that keep
/// some overwritten versions alive and others dropped, so requests take
/// every path: memtable, one table, several tables, fallback.
fn build(dir: &std::path::Path, style: CompactionStyle) -> (Db, Model, Vec<Snapshot>) {
    let opts = Options::small_for_tests()
        .background_work(false)
        .memtable_size(1 << 20)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100)
        .compaction_style(style)
        .tiered_runs(3);
    let db = Db::open(dir, opts).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ style as u64);
    let mut snaps = Vec::new();
    for round in 0..8 {
        write(&db, &mut model, &mut rng, 250);
        let s = db.snapshot();
        if round % 2 == 0 {
            snaps.push(s);
        }
    }
    db.compact_range(None, None).unwrap();
    for _ in 0..3 {
        write(&db, &mut model, &mut rng, 300);
        db.flush().unwrap();
    }
    if style == CompactionStyle::Leveled {
        db.compact_level(0).unwrap();
    }
    for _ in 0..2 {
        write(&db, &mut model, &mut rng, 300);
        db.flush().unwrap();
    }
    write(&db, &mut model, &mut rng, 300);
    let v = db.current_version();
    assert!(!v.levels[0].is_empty(), "{v:?}");
    if style == CompactionStyle::Leveled {
        assert!(v.levels[1..].iter().any(|l| !l.is_empty()), "{v:?}");
    }
    (db, model, snaps)
}

#[test]
fn grouped_lookups_equal_the_one_at_a_time_walk_and_the_model() {
    for style in [CompactionStyle::Leveled, CompactionStyle::Tiered] {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut model, snaps) = build(dir.path(), style);
        let snap = db.snapshot();
        let at = snap.sequence();
        // Writes after the snapshot: requests for them fall back.
        let mut rng = Rng(77);
        write(&db, &mut model, &mut rng, 100);

        // Every version ever written, some twice, and keys never written.
        let mut reqs: Vec<(Vec<u8>, u64)> = model.keys().cloned().collect();
        for i in 0..60 {
            let (k, s) = reqs[(rng.next() % reqs.len() as u64) as usize].clone();
            reqs.push((k, s));
            reqs.push((format!("key{i:05}x").into_bytes(), rng.next() % (at + 1)));
        }
        for i in (1..reqs.len()).rev() {
            reqs.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        let refs: Vec<(&[u8], u64)> = reqs.iter().map(|(k, s)| (&k[..], *s)).collect();

        let expected: Vec<(Option<Versioned>, u64, bool)> = refs
            .iter()
            .map(|&(k, s)| one_at_a_time(&db, k, s, at))
            .collect();
        let probed: u64 = expected.iter().map(|e| e.1).sum();
        let fallbacks = expected.iter().filter(|e| e.2).count() as u64;
        let exact = expected.iter().filter(|e| !e.2).count();
        assert!(
            fallbacks > 100 && exact > 1000,
            "{fallbacks} fallbacks, {exact} exact"
        );

        for threads in [1, 2, 4] {
            let (found, stats) = db.get_versions(&refs, at, threads).unwrap();
            for (i, ((k, seq), f)) in refs.iter().zip(&found).enumerate() {
                let k = String::from_utf8_lossy(k);
                assert_eq!(
                    f, &expected[i].0,
                    "{style:?} threads {threads}: {k} at {seq}"
                );
            }
            assert_eq!(
                stats.components_probed, probed,
                "{style:?} {threads}: {stats:?}"
            );
            assert_eq!(stats.fallbacks, fallbacks, "{style:?} {threads}: {stats:?}");
            assert!(stats.table_passes > 0 && stats.data_blocks > 0, "{stats:?}");
            // Group of one: the same answers.
            if threads == 1 {
                for (i, r) in refs.iter().enumerate().step_by(7) {
                    let (one, _) = db.get_versions(&[*r], at, 1).unwrap();
                    assert_eq!(one[0], expected[i].0);
                }
            }
        }

        // The model: a returned version at the requested sequence number
        // is that write; a version visible at a live snapshot (the query's
        // or an older one) is found exactly, without the fallback.
        let live: Vec<u64> = snaps.iter().map(|s| s.sequence()).chain([at]).collect();
        for (i, (k, seq)) in reqs.iter().enumerate() {
            let (r, _, fell_back) = &expected[i];
            if let Some((s, v)) = r {
                if s == seq {
                    assert_eq!(model.get(&(k.clone(), *seq)), Some(&Some(v.clone())));
                } else {
                    // Only through the fallback: the visible version at
                    // the snapshot.
                    assert!(fell_back);
                    assert_eq!(visible(&model, k, at), Some((*s, Some(v.clone()))));
                }
            }
            let kept = live
                .iter()
                .any(|&l| *seq <= l && visible(&model, k, l).is_some_and(|(s, _)| s == *seq));
            if let Some(Some(v)) = model.get(&(k.clone(), *seq)) {
                if kept {
                    assert!(!fell_back, "{k:?} at {seq} is still stored");
                    assert_eq!(r, &Some((*seq, v.clone())));
                }
            }
        }
        drop(snaps);
    }
}

#[test]
fn records_in_one_data_block_are_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests()
        .background_work(false)
        .memtable_size(1 << 20)
        .block_size(4096)
        .block_cache_bytes(1 << 20);
    let db = Db::open(dir.path(), opts).unwrap();
    // 40 records of ~50 bytes: one 4 KiB data block.
    for i in 0..40 {
        db.put(&key(i), format!("value-{i:040}").as_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    let v = db.current_version();
    let f = v.all_files().next().unwrap().1.clone();
    let t = db.table_cache().get(f.number, f.file_size).unwrap();
    assert_eq!(t.properties().num_data_blocks, 1);
    let keys: Vec<Vec<u8>> = (0..40).map(key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let versions = db.multi_get_with_seq(&refs).unwrap();
    // Every other record, in no particular order.
    let mut reqs: Vec<(&[u8], u64)> = refs
        .iter()
        .zip(&versions)
        .map(|(k, v)| (*k, v.as_ref().unwrap().0))
        .step_by(2)
        .collect();
    reqs.reverse();
    let snap = db.snapshot();
    let before = db.data_blocks_read();
    let (found, stats) = db.get_versions(&reqs, snap.sequence(), 1).unwrap();
    assert_eq!(db.data_blocks_read() - before, 1);
    assert_eq!(stats.data_blocks, 1);
    assert_eq!(stats.table_passes, 1);
    assert_eq!(stats.components_probed, reqs.len() as u64);
    assert_eq!(stats.bloom_probes, reqs.len() as u64);
    assert_eq!(stats.fallbacks, 0);
    for ((k, seq), f) in reqs.iter().zip(&found) {
        let (s, v) = f.as_ref().unwrap();
        assert_eq!(s, seq);
        let i: usize = String::from_utf8_lossy(&k[3..]).parse().unwrap();
        assert_eq!(v, format!("value-{i:040}").as_bytes());
    }
    // One at a time, the block is fetched once per record.
    let before = db.data_blocks_read();
    for r in &reqs {
        db.get_versions(&[*r], snap.sequence(), 1).unwrap();
    }
    assert_eq!(db.data_blocks_read() - before, reqs.len() as u64);
}
