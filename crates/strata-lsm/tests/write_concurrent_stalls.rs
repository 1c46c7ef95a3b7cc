//! Concurrent writers through group commit, memtable switches and L0
//! stalls: every acknowledged write is readable, and no writer is left
//! waiting (each wait has exactly one kind of event that ends it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

fn key(t: usize, i: usize) -> Vec<u8> {
    format!("t{t:02}-{i:06}").into_bytes()
}

fn run(opts: Options, threads: usize, per_thread: usize) {
    let t = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(t.path(), opts).unwrap());
    let handles: Vec<_> = (0..threads)
        .map(|th| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let mut b = WriteBatch::new();
                    b.put(&key(th, i), &[th as u8; 200]);
                    // A few synced writes: they must not join a group led
                    // by an unsynced one, nor be lost.
                    let sync = i % 97 == 0;
                    db.write(b, WriteOptions::default().sync(sync)).unwrap();
                    if th == 0 && i % 500 == 0 {
                        db.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    db.wait_for_compactions().unwrap();
    for th in 0..threads {
        for i in 0..per_thread {
            assert_eq!(
                db.get(&key(th, i)).unwrap(),
                Some(vec![th as u8; 200]),
                "thread {th} write {i}"
            );
        }
    }
    let last = db.last_sequence();
    assert_eq!(last, (threads * per_thread) as u64);
    drop(db);
    let db = Db::open(t.path(), Options::small_for_tests()).unwrap();
    assert_eq!(
        db.get(&key(threads - 1, per_thread - 1))
            .unwrap()
            .map(|v| v.len()),
        Some(200)
    );
}

#[test]
fn concurrent_writers_through_stalls() {
    // A tiny memtable and L0 triggers that stop writes often: writers
    // queue behind stalled leaders and wait for flushes and compactions.
    let opts = Options {
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 3,
        l0_stop_trigger: 4,
        max_immutable_memtables: 1,
        ..Options::small_for_tests()
    };
    run(opts, 6, 2_000);
}

#[test]
fn concurrent_writers_inline_work() {
    run(Options::small_for_tests().background_work(false), 4, 1_000);
}
