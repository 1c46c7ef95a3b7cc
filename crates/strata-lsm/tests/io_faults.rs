//! The engine under a fault-injecting file system (`io::fault::FaultFs`).
//!
//! * Every I/O site, one failure each: the `N`-th operation of each kind
//!   (open, create, read, write, sync, rename, directory sync, remove, list,
//!   create directory, lock) fails during a workload of writes, syncs,
//!   flushes, compactions, reads and reopens. No panic; reads return the
//!   right value or an error, never a wrong value; then a reopen on a
//!   healthy file system (after a simulated power loss for half of the
//!   cases) holds a prefix of the acknowledged writes that includes every
//!   durable one.
//! * Power loss: randomized cycles of writes (with and without `sync`),
//!   flushes and compactions, cut by a simulated power loss at a random
//!   point: every write acknowledged with `sync` (and every write before a
//!   completed flush) survives, and what survives is a prefix of the
//!   acknowledged writes in sequence order.
//!
//! `STRATA_POWER_LOSS_CYCLES` sets the number of power-loss cycles (default
//! 40) and `STRATA_IO_FAULT_STEPS` the number of `N` values tried per
//! operation kind (default 2, plus the last operation).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::path::Path;

use strata_lsm::io::fault::{FaultFs, Op};
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One acknowledged (or failed, hence uncertain) write: key → new value
/// (`None`: delete).
type Write = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The writes in acknowledgement order (= sequence order: one writer).
#[derive(Default, Clone)]
struct History {
    /// The state all settled writes produced (see `check_and_settle`).
    base: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Writes since the last settle.
    writes: Vec<Write>,
    /// `writes[..durable]` must survive any crash.
    durable: usize,
    /// The last write failed: it may or may not be in the database.
    last_uncertain: bool,
}

impl History {
    fn state_after(&self, n: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut s = self.base.clone();
        for w in self.writes.iter().take(n) {
            apply(&mut s, w);
        }
        s
    }

    /// The length of the prefix of the history that `db` holds; panics
    /// with a description if it holds none that includes the durable
    /// writes. Afterwards the history is that prefix, all of it durable.
    fn check_and_settle(&mut self, db: &Db, what: &str) -> usize {
        let got = scan(db);
        let mut s = self.state_after(self.durable);
        let mut found = None;
        for n in self.durable..=self.writes.len() {
            if n > self.durable {
                apply(&mut s, &self.writes[n - 1]);
            }
            if s == got {
                found = Some(n);
            }
        }
        let Some(n) = found else {
            let want = self.state_after(self.durable);
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .take(5)
                .collect();
            panic!(
                "{what}: the database ({} keys) is no prefix of the {} writes with the {} durable \
                 ones; durable keys missing or different: {missing:?}",
                got.len(),
                self.writes.len(),
                self.durable,
            );
        };
        // Fold the surviving prefix into the base: checks stay linear in
        // the writes of one cycle.
        self.base = got;
        self.writes.clear();
        self.durable = 0;
        self.last_uncertain = false;
        n
    }
}

fn apply(s: &mut BTreeMap<Vec<u8>, Vec<u8>>, w: &Write) {
    for (k, v) in w {
        match v {
            Some(v) => s.insert(k.clone(), v.clone()),
            None => s.remove(k),
        };
    }
}

fn scan(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.iter(None, None)
        .unwrap()
        .map(|r| r.unwrap())
        .collect::<BTreeMap<_, _>>()
}

fn options(fs: &FaultFs, background: bool) -> Options {
    Options::small_for_tests()
        .memtable_size(4 << 10)
        .background_work(background)
        .file_system(fs.as_fs())
}

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("k{:03}", rng.below(150)).into_bytes()
}

/// Random writes (and flushes, compactions, reads) until `steps` are done
/// or an operation fails. Returns the error, if any.
fn workload(
    db: &Db,
    rng: &mut Rng,
    h: &mut History,
    steps: usize,
    serial: &mut u64,
) -> Result<(), String> {
    for _ in 0..steps {
        let r = rng.below(100);
        if r < 4 {
            db.flush().map_err(|e| format!("flush: {e}"))?;
            // A completed flush makes every earlier write durable: the old
            // WAL is synced when the memtable is switched.
            h.durable = h.writes.len();
        } else if r < 6 {
            db.compact_range(None, None)
                .map_err(|e| format!("compact: {e}"))?;
            h.durable = h.writes.len();
        } else if r < 20 {
            // A read: the right value or an error, never a wrong value.
            let k = key(rng);
            let want = h.state_after(h.writes.len()).get(&k).cloned();
            match db.get(&k) {
                Ok(v) if !h.last_uncertain => assert_eq!(v, want, "get {k:?}"),
                _ => {}
            }
        } else {
            let sync = rng.chance(15);
            let mut w: Write = Vec::new();
            let mut batch = WriteBatch::new();
            for _ in 0..1 + rng.below(3) {
                let k = key(rng);
                *serial += 1;
                if rng.chance(15) {
                    batch.delete(&k);
                    w.push((k, None));
                } else {
                    let v = format!("v{serial}-{}", "x".repeat(rng.below(200) as usize));
                    batch.put(&k, v.as_bytes());
                    w.push((k, Some(v.into_bytes())));
                }
            }
            let res = db.write(batch, WriteOptions::default().sync(sync));
            h.writes.push(w);
            if let Err(e) = res {
                h.last_uncertain = true;
                return Err(format!("write: {e}"));
            }
            if sync {
                h.durable = h.writes.len();
            }
        }
    }
    Ok(())
}

/// Opens on a healthy file system.
fn open(dir: &Path, fs: &FaultFs, background: bool) -> Db {
    Db::open(dir, options(fs, background)).unwrap()
}

#[test]
fn power_loss_keeps_synced_writes_and_a_prefix() {
    let cycles = env_usize("STRATA_POWER_LOSS_CYCLES", 40);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    let fs = FaultFs::new(root.path().join("trash"));
    let mut rng = Rng::new(7);
    let mut h = History::default();
    let mut serial = 0;
    let mut lost = 0usize;
    for cycle in 0..cycles {
        let background = rng.chance(50);
        let db = open(&dir, &fs, background);
        let _ = h.check_and_settle(&db, &format!("cycle {cycle}, after reopen"));
        let steps = 20 + rng.below(300) as usize;
        workload(&db, &mut rng, &mut h, steps, &mut serial)
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        let before = h.writes.len();
        fs.power_loss().unwrap();
        drop(db);
        fs.revive();
        let db = open(&dir, &fs, background);
        let kept = h.check_and_settle(&db, &format!("cycle {cycle}, after power loss"));
        lost += before - kept;
        drop(db);
    }
    eprintln!("{cycles} power-loss cycles, {lost} unsynced writes lost in all");
}

const SESSIONS: usize = 3;
const STEPS: usize = 50;

/// The fault workload: `SESSIONS` sessions (open, work, close) on a new
/// database, stopping at the first failure.
fn faulty_sessions(dir: &Path, fs: &FaultFs, background: bool, rng: &mut Rng, h: &mut History) {
    let mut serial = 0;
    for _ in 0..SESSIONS {
        let db = match Db::open(dir, options(fs, background)) {
            Ok(db) => db,
            Err(_) => return,
        };
        if workload(&db, rng, h, STEPS, &mut serial).is_err() {
            // Failed writes leave the database read-only or retry; either
            // way nothing acknowledged may be lost.
            return;
        }
    }
}

/// Runs the fault workload once with `op`'s `nth` operation failing;
/// returns the number of failures injected (0 or 1).
fn one_fault(op: Op, nth: u64, background: bool, power_loss: bool) -> u64 {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("db");
    let fs = FaultFs::new(root.path().join("trash"));
    let mut rng = Rng::new(1);
    let mut h = History::default();
    fs.fail(op, nth);
    faulty_sessions(&dir, &fs, background, &mut rng, &mut h);
    let injected = fs.injected();
    fs.clear_faults();
    if power_loss {
        fs.power_loss().unwrap();
        fs.revive();
    } else {
        // Without a crash every acknowledged write is still there.
        h.durable = h.writes.len() - usize::from(h.last_uncertain);
    }
    let db = open(&dir, &fs, background);
    let _ = h.check_and_settle(
        &db,
        &format!("{op:?} #{nth} failed (background {background}, power loss {power_loss})"),
    );
    // And the database works again.
    let mut serial = 1 << 40;
    workload(&db, &mut rng, &mut h, 30, &mut serial).unwrap();
    injected
}

#[test]
fn every_io_site_fails_cleanly() {
    let steps = env_usize("STRATA_IO_FAULT_STEPS", 2) as u64;
    // Operations of each kind in a fault-free run of the same workload.
    let counts: BTreeMap<Op, u64> = {
        let root = tempfile::tempdir().unwrap();
        let fs = FaultFs::new(root.path().join("trash"));
        let mut h = History::default();
        faulty_sessions(
            &root.path().join("db"),
            &fs,
            false,
            &mut Rng::new(1),
            &mut h,
        );
        Op::ALL.iter().map(|&op| (op, fs.count(op))).collect()
    };
    let mut runs = 0;
    let mut fired = 0;
    for (&op, &count) in &counts {
        assert!(count > 0, "the workload never does {op:?}");
        // The first and the last operation, and `steps` between.
        let mut ns: Vec<u64> = (0..steps).map(|i| 1 + i * count / steps).collect();
        ns.push(count);
        ns.dedup();
        for nth in ns {
            for (background, power_loss) in [(false, nth % 2 == 0), (true, nth % 2 == 1)] {
                fired += one_fault(op, nth, background, power_loss);
                runs += 1;
            }
        }
    }
    eprintln!(
        "{runs} runs with one injected fault ({fired} fired); operations per kind: {counts:?}"
    );
}

/// Regression: a creation that failed after writing its MANIFEST but
/// before CURRENT left `MANIFEST-000002`, and every later open failed
/// ("create manifest: File exists").
#[test]
fn failed_creation_leaves_a_directory_that_opens() {
    for op in [Op::Write, Op::Sync, Op::Rename, Op::SyncDir] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let fs = FaultFs::new(root.path().join("trash"));
        fs.fail(op, 1);
        assert!(Db::open(&dir, options(&fs, false)).is_err(), "{op:?}");
        assert_eq!(fs.injected(), 1);
        let db = open(&dir, &fs, false);
        db.put(b"k", b"v").unwrap();
        drop(db);
        assert_eq!(open(&dir, &fs, false).get(b"k").unwrap().unwrap(), b"v");
    }
}

/// A MANIFEST edit whose append succeeded but whose sync failed may be in
/// the file: the tables it names must not be deleted as obsolete, and the
/// database must reopen with every acknowledged write.
#[test]
fn failed_manifest_sync_loses_no_table() {
    for background in [false, true] {
        for op in [Op::Sync, Op::Write, Op::SyncDir] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("db");
            let fs = FaultFs::new(root.path().join("trash"));
            let db = open(&dir, &fs, background);
            for i in 0..200u32 {
                db.put(format!("a{i:04}").as_bytes(), &[b'x'; 100]).unwrap();
            }
            db.flush().unwrap();
            if op == Op::SyncDir {
                fs.fail(op, 1);
            } else {
                fs.fail_on(op, 1, "MANIFEST");
            }
            for i in 0..200u32 {
                let _ = db.put(format!("b{i:04}").as_bytes(), &[b'y'; 100]);
            }
            let _ = db.flush();
            assert_eq!(fs.injected(), 1, "{op:?}");
            // Whatever the database made of the failure, more work (a
            // retried flush, compactions, obsolete-file deletion) ...
            for i in 0..200u32 {
                let _ = db.put(format!("c{i:04}").as_bytes(), &[b'z'; 100]);
            }
            let _ = db.flush();
            let _ = db.compact_range(None, None);
            let acked: Vec<Vec<u8>> = scan_keys(&db);
            drop(db);
            // ... leaves a database that opens with what it acknowledged.
            let db = Db::open(&dir, options(&fs, background))
                .unwrap_or_else(|e| panic!("{op:?} (background {background}): reopen: {e}"));
            let got = scan_keys(&db);
            for k in &acked {
                assert!(
                    got.contains(k),
                    "{op:?} (background {background}): {k:?} lost"
                );
            }
        }
    }
}

fn scan_keys(db: &Db) -> Vec<Vec<u8>> {
    db.iter(None, None)
        .map(|it| it.filter_map(|r| r.ok()).map(|(k, _)| k).collect())
        .unwrap_or_default()
}

/// A failed WAL append or sync: the write returns the error, later writes
/// fail with `Error::Background` (read-only until reopen, reads still
/// work), and a reopen holds every write acknowledged before it. A failed
/// table write or sync during a flush with background threads does the
/// same; without background threads the call returns the error and the
/// next call retries the flush.
#[test]
fn failed_wal_or_flush_makes_writes_fail_until_reopen() {
    for (op, needle, background) in [
        (Op::Write, ".log", false),
        (Op::Sync, ".log", false),
        (Op::Write, ".sst", true),
        (Op::Sync, ".sst", true),
        (Op::Write, ".sst", false),
    ] {
        let what = format!("{op:?} of {needle} (background {background})");
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("db");
        let fs = FaultFs::new(root.path().join("trash"));
        let db = open(&dir, &fs, background);
        db.put(b"before", b"1").unwrap();
        fs.fail_on(op, 1, needle);
        let sync = WriteOptions::default().sync(true);
        let mut failed = None;
        for i in 0..200u32 {
            let k = format!("k{i:03}");
            match db.put_opt(k.as_bytes(), &[b'v'; 100], sync) {
                Ok(()) => {}
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
            if needle == ".sst" && i % 20 == 19 {
                if let Err(e) = db.flush() {
                    failed = Some((i + 1, e));
                    break;
                }
            }
        }
        let (first_failed, e) = failed.unwrap_or_else(|| panic!("{what}: no error surfaced"));
        assert_eq!(fs.injected(), 1, "{what}");
        assert!(!e.to_string().is_empty());
        assert_eq!(
            db.get(b"before").unwrap().as_deref(),
            Some(&b"1"[..]),
            "{what}"
        );
        let again = db.put(b"after", b"2");
        if background || needle == ".log" {
            assert!(
                matches!(again, Err(strata_lsm::Error::Background(_))),
                "{what}: {again:?}"
            );
        } else {
            // Inline work: the flush is retried by the next call.
            assert!(again.is_ok(), "{what}: {again:?}");
        }
        drop(db);
        let db = open(&dir, &fs, background);
        assert!(db.get(b"before").unwrap().is_some(), "{what}");
        for i in 0..first_failed {
            let k = format!("k{i:03}");
            assert!(db.get(k.as_bytes()).unwrap().is_some(), "{what}: {k} lost");
        }
        db.put(b"reopened", b"3").unwrap();
    }
}
