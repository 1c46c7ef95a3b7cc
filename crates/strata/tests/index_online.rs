//! Online index builds: `create_index` on a loaded database builds without
//! pausing writes. NEXT and embedded (NEXT §5) give every existing table
//! the index's structures in a side file, without rewriting data; the
//! other strategies scan a snapshot while writes go on. Queries in the
//! middle of a build (the build held at its test hook) must be exact at
//! their snapshot while writes, flushes and compactions go on; a
//! per-table build stopped in the middle resumes at reopen with the tables
//! it covered; concurrent writers lose nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use common::{attr, key, spec_for, Rng, STRATEGIES};
use strata::{Db, IndexState, IndexValue, KeyType, Options, Predicate, QueryOptions, Snapshot};

/// The strategies built table by table.
const PER_TABLE: &[&str] = &["next", "next[pin=false]", "embedded"];
/// Strategies built by rewriting every table (a full compaction): no
/// build step to hold, so the held-build test leaves them out (their
/// builds are covered by the oracle and `index_filter`).
const REWRITTEN: &[&str] = &[
    "filter",
    "filter[maintain=validation]",
    "filter[maintain=eager]",
];

fn opts() -> Options {
    Options::small_for_tests().background_work(false)
}

fn doc(n: i64, pad: usize) -> Vec<u8> {
    format!(r#"{{"n": {n}, "pad": "{}"}}"#, "x".repeat(pad)).into_bytes()
}

/// Records of `snap` whose attribute `n` matches `pred`: (seq, key, value).
fn expected(snap: &Snapshot, pred: &Predicate) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let mut it = snap.iter(None, None).unwrap();
    let mut out = Vec::new();
    while let Some(r) = it.next_versioned() {
        let (k, seq, v) = r.unwrap();
        if attr(&v, "n", KeyType::I64).is_some_and(|a| pred.matches(&a)) {
            out.push((seq, k, v));
        }
    }
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    out
}

/// Checks index `name` on several predicates, with and without a limit,
/// against a scan at each query's own snapshot.
fn check_exact(db: &Db, name: &str, rng: &mut Rng) {
    let name_ = name;
    let name = &format!("{name} ({})", db.indexes()[0].spec.strategy);
    for _ in 0..6 {
        let lo = rng.below(20) as i64;
        let pred = if rng.chance(50) {
            Predicate::Eq(IndexValue::I64(lo))
        } else {
            Predicate::Range(
                IndexValue::I64(lo),
                IndexValue::I64(lo + rng.below(6) as i64),
            )
        };
        for limit in [None, Some(1), Some(7)] {
            let opts = match limit {
                Some(k) => QueryOptions::default().limit(k),
                None => QueryOptions::default(),
            };
            let (hits, snap) = db.query_snapshot(name_, &pred, opts).unwrap();
            let want = expected(&snap, &pred);
            let got: Vec<(u64, Vec<u8>, Vec<u8>)> = hits
                .into_iter()
                .map(|h| (h.seq, h.key, h.value.unwrap()))
                .collect();
            match limit {
                None => {
                    let mut g = got.clone();
                    g.sort_by_key(|e| std::cmp::Reverse(e.0));
                    if g != want {
                        let gk: Vec<_> = g
                            .iter()
                            .map(|e| (e.0, String::from_utf8_lossy(&e.1).into_owned()))
                            .collect();
                        let wk: Vec<_> = want
                            .iter()
                            .map(|e| (e.0, String::from_utf8_lossy(&e.1).into_owned()))
                            .collect();
                        eprintln!(
                            "extra {:?}",
                            gk.iter().filter(|x| !wk.contains(x)).collect::<Vec<_>>()
                        );
                        eprintln!(
                            "missing {:?}",
                            wk.iter().filter(|x| !gk.contains(x)).collect::<Vec<_>>()
                        );
                        eprintln!(
                            "snapshot {} info {:?}",
                            snap.sequence(),
                            db.indexes()[0].state
                        );
                    }
                    assert_eq!(g, want, "{name} {pred:?}");
                }
                Some(k) => {
                    assert_eq!(got.len(), want.len().min(k), "{name} {pred:?} limit {k}");
                    // Sequence numbers are unique: the newest k exactly.
                    let top: Vec<_> = want.iter().take(k).cloned().collect();
                    let mut g = got.clone();
                    g.sort_by_key(|e| std::cmp::Reverse(e.0));
                    assert_eq!(g, top, "{name} {pred:?} limit {k}");
                }
            }
        }
    }
}

/// A loaded database: tables on L0, L1 and L2, keys with several versions
/// across and within tables (a snapshot held across updates keeps old
/// versions through compactions), deletes, and an unflushed memtable.
fn load(db: &Db, rng: &mut Rng) {
    for round in 0..6 {
        for i in 0..250u64 {
            let k = key(rng.below(900));
            if rng.chance(8) {
                db.delete(&k).unwrap();
            } else {
                db.put(&k, &doc(rng.below(20) as i64, 60 + (i % 30) as usize))
                    .unwrap();
            }
        }
        let held = db.snapshot();
        for _ in 0..60 {
            db.put(&key(rng.below(900)), &doc(rng.below(20) as i64, 3))
                .unwrap();
        }
        db.flush().unwrap();
        match round {
            1 => db.compact_level(0).unwrap(),
            3 => {
                db.compact_level(0).unwrap();
                db.compact_level(1).unwrap();
            }
            _ => {}
        }
        drop(held);
    }
    for _ in 0..80 {
        db.put(&key(rng.below(900)), &doc(rng.below(20) as i64, 1))
            .unwrap();
    }
}

fn side_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".idx"))
        .collect();
    v.sort();
    v
}

/// The build is held before its 2nd and 4th tables (scan builds: chunks of
/// records); meanwhile queries are exact, progress is listed (per-table
/// builds), and writes, flushes and compactions go on.
#[test]
fn queries_in_the_middle_of_a_build_are_exact() {
    for strategy in STRATEGIES.iter().filter(|s| !REWRITTEN.contains(s)) {
        let per_table = PER_TABLE.contains(strategy);
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        let mut rng = Rng::new(7);
        load(&db, &mut rng);
        let before = db.stats();
        let tables = db.current_version().all_files().count();
        assert!(tables >= 5, "{tables} tables");

        let (paused_tx, paused_rx) = mpsc::channel::<u64>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let paused_tx = Mutex::new(paused_tx);
        // A failed check drops `go_tx`: the build then stops instead of
        // waiting forever.
        db.set_build_pause_hook(Some(Arc::new(move |_, done| {
            if done == 1 || done == 3 {
                let sent = paused_tx.lock().unwrap().send(done).is_ok();
                return sent && go_rx.lock().unwrap().recv().is_ok();
            }
            true
        })));
        let spec = spec_for(strategy, "by_n", "n", KeyType::I64);
        std::thread::scope(|s| {
            let go_tx = go_tx;
            let builder = s.spawn(|| db.create_index(spec));
            for stop in [1u64, 3] {
                assert_eq!(paused_rx.recv().unwrap(), stop);
                let info = &db.indexes()[0];
                assert_eq!(info.state, IndexState::Building, "{strategy}");
                if per_table {
                    let p = info.stats.build.expect("progress while building");
                    assert_eq!(p.tables_done, stop, "{strategy}");
                    assert!(p.tables_total > p.tables_done, "{strategy} {p:?}");
                    assert!(p.bytes_written > 0, "{strategy}");
                }
                if stop == 1 && per_table {
                    // No table rewritten: only the memtable written before
                    // the index was flushed.
                    let d = db.stats().io.delta(&before.io);
                    assert_eq!(d.compaction_bytes_written, 0, "{strategy}");
                }
                check_exact(&db, "by_n", &mut rng);
                // Writes, a flush and a compaction while the build waits.
                for _ in 0..150 {
                    let k = key(rng.below(1000));
                    if rng.chance(10) {
                        db.delete(&k).unwrap();
                    } else {
                        db.put(&k, &doc(rng.below(20) as i64, 2)).unwrap();
                    }
                }
                check_exact(&db, "by_n", &mut rng);
                db.flush().unwrap();
                db.compact_level(0).unwrap();
                check_exact(&db, "by_n", &mut rng);
                go_tx.send(()).unwrap();
            }
            builder.join().unwrap().unwrap();
        });
        db.set_build_pause_hook(None);
        let info = &db.indexes()[0];
        assert_eq!(info.state, IndexState::Ready, "{strategy}");
        assert!(info.stats.build.is_none());
        check_exact(&db, "by_n", &mut rng);
        assert!(db.check_index("by_n").unwrap().ok(), "{strategy}");
        assert_eq!(!side_files(dir.path()).is_empty(), per_table, "{strategy}");
        drop(db);
        // Side files are found again at open.
        let db = Db::open(dir.path(), opts()).unwrap();
        check_exact(&db, "by_n", &mut rng);
        // A table compacted away takes its side file with it.
        db.compact_range(None, None).unwrap();
        check_exact(&db, "by_n", &mut rng);
        assert_eq!(side_files(dir.path()), Vec::<String>::new(), "{strategy}");
        drop(db);
        let db = Db::open(dir.path(), opts()).unwrap();
        check_exact(&db, "by_n", &mut rng);
    }
}

/// A build stopped after two tables (as a crash there would leave it) is
/// finished at the next open; the tables covered keep their side files.
#[test]
fn an_interrupted_build_resumes_where_it_stopped() {
    for strategy in PER_TABLE {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(11);
        let covered = {
            let db = Db::open(dir.path(), opts()).unwrap();
            load(&db, &mut rng);
            db.set_build_pause_hook(Some(Arc::new(|_, done| done < 2)));
            let spec = spec_for(strategy, "by_n", "n", KeyType::I64);
            let err = db.create_index(spec).unwrap_err();
            assert!(err.to_string().contains("stopped"), "{err}");
            let p = db.indexes()[0].stats.build.unwrap();
            assert_eq!(p.tables_done, 2, "{strategy}");
            // Still queryable, exactly, half built.
            check_exact(&db, "by_n", &mut rng);
            let sides = side_files(dir.path());
            assert_eq!(sides.len(), 2, "{strategy}");
            sides
                .into_iter()
                .map(|n| {
                    let m = std::fs::metadata(dir.path().join(&n)).unwrap();
                    (n, m.modified().unwrap())
                })
                .collect::<BTreeMap<_, _>>()
        };
        let db = Db::open(dir.path(), opts()).unwrap();
        assert_eq!(db.indexes()[0].state, IndexState::Ready, "{strategy}");
        for (n, t) in &covered {
            let m = std::fs::metadata(dir.path().join(n)).unwrap();
            assert_eq!(m.modified().unwrap(), *t, "{strategy}: {n} rewritten");
        }
        assert!(side_files(dir.path()).len() > covered.len());
        check_exact(&db, "by_n", &mut rng);
        assert!(db.check_index("by_n").unwrap().ok());
    }
}

/// Writers run through the whole build (slowed down per table or chunk so
/// they overlap it), with background flushes and compactions: nothing is
/// lost or stale afterwards, and queries during the build are exact.
#[test]
fn concurrent_writers_during_a_build() {
    for strategy in STRATEGIES {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
        let mut rng = Rng::new(3);
        load(&db, &mut rng);
        db.set_build_pause_hook(Some(Arc::new(|_, _| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            true
        })));
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut rng = Rng::new(99);
                let mut n = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || n < 2000 {
                    let k = key(rng.below(1200));
                    if rng.chance(10) {
                        db.delete(&k).unwrap();
                    } else {
                        db.put(&k, &doc(rng.below(20) as i64, 8)).unwrap();
                    }
                    n += 1;
                }
            });
            let querier = s.spawn(|| {
                let mut rng = Rng::new(5);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    // Queryable once the build has started.
                    let probe = db.query(
                        "by_n",
                        &Predicate::Eq(IndexValue::I64(1)),
                        QueryOptions::default(),
                    );
                    match probe {
                        Ok(_) => check_exact(&db, "by_n", &mut rng),
                        // Not created yet, or (scan builds) not started.
                        Err(e) => {
                            let e = e.to_string();
                            assert!(e.contains("being built") || e.contains("not found"), "{e}")
                        }
                    }
                    std::thread::yield_now();
                }
            });
            let spec = spec_for(strategy, "by_n", "n", KeyType::I64);
            db.create_index(spec).unwrap();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            writer.join().unwrap();
            querier.join().unwrap();
        });
        db.wait_for_compactions().unwrap();
        check_exact(&db, "by_n", &mut rng);
        assert!(db.check_index("by_n").unwrap().ok(), "{strategy}");
    }
}

/// The gate's state: (armed, entered, released).
type GateState = Arc<(Mutex<(bool, bool, bool)>, std::sync::Condvar)>;

/// Holds the first compaction output table armed for, in its observer's
/// `finish` (after every extension's observer was created), until
/// released.
struct Gate {
    state: GateState,
}

struct GateObserver {
    state: GateState,
}

impl strata::lsm::sstable::observer::TableObserver for GateObserver {
    fn on_entry(
        &mut self,
        _: &strata::lsm::sstable::observer::EntryRef<'_>,
        _: strata::lsm::sstable::BlockHandle,
    ) {
    }
    fn finish(&mut self) -> strata::Result<Vec<(String, Vec<u8>)>> {
        let (m, cv) = &*self.state;
        let mut s = m.lock().unwrap();
        s.1 = true;
        cv.notify_all();
        while !s.2 {
            s = cv.wait(s).unwrap();
        }
        Ok(Vec::new())
    }
}

impl strata::lsm::hooks::EngineHooks for Gate {
    fn name(&self) -> &str {
        "test.gate"
    }
    fn table_observer(
        &self,
        ctx: &strata::lsm::hooks::TableContext,
    ) -> Option<Box<dyn strata::lsm::sstable::observer::TableObserver>> {
        let mut s = self.state.0.lock().unwrap();
        if ctx.reason != strata::lsm::hooks::TableReason::Compaction || !s.0 {
            return None;
        }
        s.0 = false;
        Some(Box::new(GateObserver {
            state: self.state.clone(),
        }))
    }
}

/// Regression: a compaction that began before `create_index` writes its
/// tables without the new index's blocks; if it installed them after the
/// build's last pass, the index was marked ready while a live table lacked
/// its structures (queries skipped the table; reopen refused the
/// database: "table N lacks the block ... of ready index").
#[test]
fn a_compaction_begun_before_the_index_is_covered_by_its_build() {
    for strategy in PER_TABLE {
        let dir = tempfile::tempdir().unwrap();
        let state: GateState =
            Arc::new((Mutex::new((false, false, false)), std::sync::Condvar::new()));
        let mut o = Options::small_for_tests();
        o.hooks.push(Arc::new(Gate {
            state: state.clone(),
        }));
        let db = Db::open(dir.path(), o.clone()).unwrap();
        let mut rng = Rng::new(5);
        for i in 0..600u64 {
            db.put(&key(rng.below(400)), &doc((i % 20) as i64, 40))
                .unwrap();
            if i % 150 == 149 {
                db.flush().unwrap();
            }
        }
        db.wait_for_compactions().unwrap();
        state.0.lock().unwrap().0 = true;
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|s| {
            let compaction = s.spawn(|| db.compact_range(None, None));
            {
                let (m, cv) = &*state;
                let mut g = m.lock().unwrap();
                while !g.1 {
                    g = cv.wait(g).unwrap();
                }
            }
            let build = s.spawn(|| {
                let r = db.create_index(spec_for(strategy, "by_n", "n", KeyType::I64));
                let _ = done_tx.send(());
                r
            });
            // A fixed build finishes only after the held compaction; an
            // unfixed one before it. Release it either way.
            let _ = done_rx.recv_timeout(std::time::Duration::from_millis(500));
            let (m, cv) = &*state;
            m.lock().unwrap().2 = true;
            cv.notify_all();
            compaction.join().unwrap().unwrap();
            build.join().unwrap().unwrap();
        });
        check_exact(&db, "by_n", &mut rng);
        drop(db);
        let db = Db::open(dir.path(), o).unwrap_or_else(|e| panic!("{strategy}: reopen: {e}"));
        assert_eq!(db.indexes()[0].state, IndexState::Ready, "{strategy}");
        check_exact(&db, "by_n", &mut rng);
        assert!(db.check_index("by_n").unwrap().ok(), "{strategy}");
    }
}

/// An online scan build that starts while a write is between its notes
/// (`before_batch`) and its index maintenance (`after_insert`, for the
/// strategies that read the record a write replaces): the build must wait
/// for the write. Otherwise it clears its structure and scans a snapshot
/// taken before the write is published, and re-adds the version the write
/// replaced after the write has removed it (regression: the sync guard was
/// taken for the maintenance only, after the insert; found by
/// `concurrent_writers_during_a_build` under load).
#[test]
fn a_scan_build_waits_for_a_write_between_its_notes_and_its_maintenance() {
    use std::time::Duration;
    for strategy in ["memory", "composite", "posting-eager"] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..50 {
            db.put(&key(i), &doc(1, 8)).unwrap();
        }
        db.flush().unwrap();
        // Defined, maintained by writes, not built.
        db.begin_index_for_tests(spec_for(strategy, "by_n", "n", KeyType::I64))
            .unwrap();
        let (paused_tx, paused_rx) = mpsc::channel::<()>();
        let (snap_tx, snap_rx) = mpsc::channel::<()>();
        let paused_tx = Mutex::new(Some(paused_tx));
        let snap_rx = Mutex::new(snap_rx);
        // The write says it is paused, then waits until the build has taken
        // its snapshot, or 500 ms: a build that waits for the write takes
        // none meanwhile.
        db.set_maintenance_pause_hook(Some(Arc::new(move || {
            if let Some(tx) = paused_tx.lock().unwrap().take() {
                tx.send(()).unwrap();
                let _ = snap_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_millis(500));
            }
        })));
        // Runs first once the build has its snapshot.
        let snap_tx = Mutex::new(Some(snap_tx));
        db.set_build_pause_hook(Some(Arc::new(move |_, _| {
            if let Some(tx) = snap_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            true
        })));
        std::thread::scope(|s| {
            let writer = s.spawn(|| db.put(&key(7), &doc(2, 8)).unwrap());
            paused_rx.recv().unwrap();
            db.resume_index_builds_for_tests().unwrap();
            writer.join().unwrap();
        });
        db.set_maintenance_pause_hook(None);
        db.set_build_pause_hook(None);
        let keys = |n: i64| -> Vec<Vec<u8>> {
            let hits = db
                .lookup("by_n", IndexValue::I64(n), QueryOptions::default())
                .unwrap();
            let mut k: Vec<Vec<u8>> = hits.into_iter().map(|h| h.key).collect();
            k.sort();
            k
        };
        let ones: Vec<Vec<u8>> = (0..50).filter(|&i| i != 7).map(key).collect();
        assert_eq!(keys(1), ones, "{strategy}: n = 1");
        assert_eq!(keys(2), vec![key(7)], "{strategy}: n = 2");
        assert!(db.check_index("by_n").unwrap().ok(), "{strategy}");
    }
}
