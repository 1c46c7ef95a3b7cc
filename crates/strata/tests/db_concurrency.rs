//! Several writer and reader threads while flushes and compactions run.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::Rng;
use strata::{Db, Options, WriteBatch, WriteOptions};

#[test]
fn writers_and_readers_with_background_work() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::small_for_tests()).unwrap());
    let writers = 4;
    let per_writer = 3000u64;
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for w in 0..writers {
        let db = db.clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng::new(w);
            for i in 0..per_writer {
                // Each writer owns its keys; the value records the version.
                let k = format!("w{w}-{:05}", i % 500);
                let v = format!("{w}:{i}:{}", "x".repeat(rng.below(64) as usize));
                if i % 10 == 9 {
                    let mut b = WriteBatch::new();
                    b.put(k.as_bytes(), v.as_bytes());
                    b.put(format!("w{w}-batch").as_bytes(), v.as_bytes());
                    db.write(b, WriteOptions::default()).unwrap();
                } else {
                    db.put(k.as_bytes(), v.as_bytes()).unwrap();
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let db = db.clone();
        let stop = stop.clone();
        readers.push(std::thread::spawn(move || {
            let mut rng = Rng::new(100 + r);
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let w = rng.below(writers);
                let k = format!("w{w}-{:05}", rng.below(500));
                if let Some(v) = db.get(k.as_bytes()).unwrap() {
                    let s = String::from_utf8(v).unwrap();
                    assert!(s.starts_with(&format!("{w}:")), "value {s} under key {k}");
                }
                // A snapshot scan is internally consistent: sorted, no dups.
                if reads.is_multiple_of(200) {
                    let snap = db.snapshot();
                    let keys: Vec<Vec<u8>> = snap
                        .iter(None, None)
                        .unwrap()
                        .map(|r| r.unwrap().0)
                        .collect();
                    assert!(keys.windows(2).all(|p| p[0] < p[1]));
                }
                reads += 1;
            }
            reads
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    db.wait_for_compactions().unwrap();
    // The final value of every key is the last one its writer wrote.
    for w in 0..writers {
        for slot in 0..500u64 {
            let last = (0..per_writer).filter(|i| i % 500 == slot).max().unwrap();
            let v = db
                .get(format!("w{w}-{slot:05}").as_bytes())
                .unwrap()
                .unwrap();
            assert!(String::from_utf8(v)
                .unwrap()
                .starts_with(&format!("{w}:{last}:")));
        }
    }
    let stats = db.stats();
    assert!(
        stats.io.flushes > 0 && stats.io.compactions > 0,
        "{stats:?}"
    );
}

/// Regression: `Db::flush` switched the memtable without joining the writer
/// queue, while a write leader inserts into the memtable after releasing
/// the state lock; a flush racing a write could freeze and flush the
/// memtable before the leader's entries were in it, and those entries were
/// lost to reads (for good in a WAL-less secondary tree). Seen as a missing
/// index entry under load in `index_standalone`.
#[test]
fn flush_racing_writes_loses_nothing() {
    // The race is narrow: several rounds make a regression likely to show
    // (the unfixed engine lost entries in about one round in eight).
    for round in 0..8 {
        let wal = round % 2 == 0;
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Options::small_for_tests().wal(wal)).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    db.flush().unwrap();
                }
            })
        };
        let writers: Vec<_> = (0..2u64)
            .map(|w| {
                let db = db.clone();
                std::thread::spawn(move || {
                    // Large batches: a long insert after the state lock is
                    // released widens the window the race needs.
                    for b in 0..150u64 {
                        let mut batch = WriteBatch::new();
                        for i in b * 200..(b + 1) * 200 {
                            batch.put(format!("w{w}-{i:05}").as_bytes(), b"v");
                        }
                        db.write(batch, WriteOptions::default()).unwrap();
                    }
                })
            })
            .collect();
        for h in writers {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        flusher.join().unwrap();
        for w in 0..2u64 {
            for i in 0..150 * 200u64 {
                let k = format!("w{w}-{i:05}");
                assert!(
                    db.get(k.as_bytes()).unwrap().is_some(),
                    "wal={wal}: {k} lost"
                );
            }
        }
    }
}
