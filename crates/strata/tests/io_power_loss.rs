//! Simulated power losses (`lsm::io::fault::FaultFs`) under every index
//! strategy: randomized cycles of writes with and without `sync`, deletes,
//! flushes, compactions and index creations, each cycle cut by a power loss
//! at a random point (every byte not synced and every name change not made
//! durable by a directory sync is dropped), then a reopen. After each:
//!
//! * every write acknowledged with `sync` (and every write before a
//!   completed flush) is present, and the data is a prefix of the
//!   acknowledged writes in sequence order;
//! * every index whose `create_index` returned exists, and every index
//!   passes `check_index` (exact answers against a full scan);
//! * queries and writes work again.
//!
//! `STRATA_POWER_LOSS_CYCLES` sets the cycles per strategy (default 3),
//! `STRATA_POWER_LOSS_SEED` the first strategy's seed (default 100; the
//! others follow it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{spec_for, Rng, STRATEGIES};
use strata::lsm::io::fault::FaultFs;
use strata::{Db, KeyType, Options, WriteBatch, WriteOptions};

type Write = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// The writes in acknowledgement (= sequence) order; one writer.
#[derive(Default)]
struct History {
    /// The state all settled writes produced (see `check_and_settle`).
    base: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Writes since the last settle.
    writes: Vec<Write>,
    /// `writes[..durable]` must survive a power loss.
    durable: usize,
    /// The last write failed: it may or may not be in the database.
    uncertain: bool,
}

fn apply(s: &mut BTreeMap<Vec<u8>, Vec<u8>>, w: &Write) {
    for (k, v) in w {
        match v {
            Some(v) => s.insert(k.clone(), v.clone()),
            None => s.remove(k),
        };
    }
}

impl History {
    fn state_after(&self, n: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut s = self.base.clone();
        for w in self.writes.iter().take(n) {
            apply(&mut s, w);
        }
        s
    }

    /// Checks that `db` holds a prefix of the writes with every durable
    /// one; the history becomes that prefix, all durable.
    fn check_and_settle(&mut self, db: &Db, what: &str) -> usize {
        let got: BTreeMap<Vec<u8>, Vec<u8>> =
            db.iter(None, None).unwrap().map(|r| r.unwrap()).collect();
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
            let missing: Vec<String> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .take(5)
                .collect();
            panic!(
                "{what}: the data ({} keys) is no prefix of the {} writes holding the {} durable \
                 ones; missing or different: {missing:?}",
                got.len(),
                self.writes.len(),
                self.durable
            );
        };
        // Fold the surviving prefix into the base: checks stay linear in
        // the writes of one cycle.
        self.base = got;
        self.writes.clear();
        self.durable = 0;
        self.uncertain = false;
        n
    }
}

fn options(fs: &FaultFs, background: bool) -> Options {
    Options::small_for_tests()
        .memtable_size(4 << 10)
        .background_work(background)
        .file_system(fs.as_fs())
}

/// The indexes a run creates, in order: (name, attribute, type).
const INDEXES: [(&str, &str, KeyType); 2] = [("u", "u", KeyType::I64), ("c", "c", KeyType::Point)];

fn check_indexes(db: &Db, created: usize, what: &str) -> usize {
    let names: Vec<String> = db.indexes().into_iter().map(|i| i.spec.name).collect();
    for (name, _, _) in INDEXES.iter().take(created) {
        assert!(names.iter().any(|n| n == name), "{what}: index {name} lost");
        let c = db.check_index(name).unwrap();
        assert!(c.ok(), "{what}: index {name}: {c:?}");
    }
    created.min(INDEXES.len())
}

/// Random writes, deletes, flushes, compactions; index creations when
/// `create_at` says so. Returns the number of indexes created so far.
#[allow(clippy::too_many_arguments)]
fn workload(
    db: &Db,
    strategy: &str,
    rng: &mut Rng,
    h: &mut History,
    steps: usize,
    serial: &mut u64,
    created: usize,
) -> usize {
    try_workload(db, strategy, rng, h, steps, serial, &mut { created }).unwrap()
}

/// [`workload`] stopping at the first error (a failed write stays in the
/// history as uncertain: it may or may not be in the database).
#[allow(clippy::too_many_arguments)]
fn try_workload(
    db: &Db,
    strategy: &str,
    rng: &mut Rng,
    h: &mut History,
    steps: usize,
    serial: &mut u64,
    created: &mut usize,
) -> Result<usize, String> {
    for _ in 0..steps {
        let r = rng.below(100);
        // The first index once there is data to build over, the second at
        // random.
        let create = (*created == 0 && h.writes.len() > 40) || r < 2;
        if create && *created < INDEXES.len() {
            let (name, path, ty) = INDEXES[*created];
            db.create_index(spec_for(strategy, name, path, ty))
                .map_err(|e| format!("create index {name}: {e}"))?;
            *created += 1;
        } else if r < 5 {
            db.flush().map_err(|e| format!("flush: {e}"))?;
            h.durable = h.writes.len();
        } else if r < 6 {
            db.compact_range(None, None)
                .map_err(|e| format!("compact: {e}"))?;
            h.durable = h.writes.len();
        } else {
            let sync = rng.chance(15);
            let mut w: Write = Vec::new();
            let mut batch = WriteBatch::new();
            for _ in 0..1 + rng.below(3) {
                let k = format!("k{:03}", rng.below(120)).into_bytes();
                *serial += 1;
                if rng.chance(15) {
                    batch.delete(&k);
                    w.push((k, None));
                } else {
                    let v = format!(
                        r#"{{"u":{},"c":[{},{}],"n":{serial},"pad":"{}"}}"#,
                        rng.below(20),
                        rng.below(10),
                        rng.below(10),
                        "x".repeat(rng.below(150) as usize)
                    );
                    batch.put(&k, v.as_bytes());
                    w.push((k, Some(v.into_bytes())));
                }
            }
            let res = db.write(batch, WriteOptions::default().sync(sync));
            h.writes.push(w);
            if let Err(e) = res {
                h.uncertain = true;
                return Err(format!("write: {e}"));
            }
            if sync {
                h.durable = h.writes.len();
            }
        }
    }
    Ok(*created)
}

/// `cycles` power-loss cycles on one database with indexes of `strategy`.
/// Returns the unsynced writes lost and the index checks passed.
fn run(strategy: &str, cycles: usize, seed: u64, root: &Path) -> (usize, usize) {
    let dir = root.join("db");
    let fs = FaultFs::new(root.join("trash"));
    let mut rng = Rng::new(seed);
    let mut h = History::default();
    let mut serial = 0;
    let mut created = 0;
    let mut lost = 0;
    let mut checks = 0;
    for cycle in 0..cycles {
        let what = format!("{strategy}, cycle {cycle}");
        let background = rng.chance(50);
        let db = Db::open(&dir, options(&fs, background)).unwrap();
        let steps = 20 + rng.below(200) as usize;
        created = workload(&db, strategy, &mut rng, &mut h, steps, &mut serial, created);
        if std::env::var_os("STRATA_POWER_LOSS_CHECK_BEFORE").is_some() {
            check_indexes(&db, created, &format!("{what}, before the power loss"));
        }
        let before = h.writes.len();
        fs.power_loss().unwrap();
        drop(db);
        fs.revive();
        let db = Db::open(&dir, options(&fs, background))
            .unwrap_or_else(|e| panic!("{what}: reopen after power loss: {e}"));
        let kept = h.check_and_settle(&db, &what);
        lost += before - kept;
        checks += check_indexes(&db, created, &what);
        // Writes work again, and the indexes stay exact.
        workload(
            &db,
            strategy,
            &mut rng,
            &mut h,
            10,
            &mut serial,
            INDEXES.len(),
        );
        checks += check_indexes(&db, created, &format!("{what}, after more writes"));
    }
    (lost, checks)
}

#[test]
fn power_loss_keeps_synced_writes_and_exact_indexes_for_every_strategy() {
    let cycles: usize = std::env::var("STRATA_POWER_LOSS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (mut lost, mut checks) = (0, 0);
    let only = std::env::var("STRATA_POWER_LOSS_STRATEGY").ok();
    // Soaks vary the seeds (the default runs the seeds CI always ran).
    let base_seed: u64 = std::env::var("STRATA_POWER_LOSS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut strategies = 0;
    for (i, strategy) in STRATEGIES.iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != *strategy) {
            continue;
        }
        strategies += 1;
        let root = tempfile::tempdir().unwrap();
        let (l, c) = run(strategy, cycles, base_seed + i as u64, root.path());
        lost += l;
        checks += c;
    }
    eprintln!(
        "{} power-loss cycles ({cycles} per strategy, {} strategies, seeds from {base_seed}): \
         0 synced writes lost, {lost} unsynced writes lost, {checks} index checks exact",
        cycles * strategies,
        strategies
    );
}

/// Regression: a flushed table's NEXT memo block named the latest write of
/// a key even when that write was still in the active memtable and its WAL
/// not synced. After a power loss that write was gone, the recovered memo
/// still named it, and the key's surviving version was treated as stale:
/// missing from the index. The engine now syncs the WAL before installing
/// the tables of a flush or compaction when extensions are registered.
#[test]
fn next_memo_names_no_write_lost_in_a_power_loss() {
    // The first run that failed: NEXT, seed 100, cycle 8 (a record missing
    // from index u after the power loss).
    let root = tempfile::tempdir().unwrap();
    run("next", 9, 100, root.path());
}

/// Every I/O site under indexes: each operation kind failing at its first,
/// middle and last occurrence in a workload of writes, index creations,
/// flushes, compactions and reopens (the secondary trees of `composite`
/// share the file system). No panic; then a healthy reopen (after a power
/// loss for half of the cases) holds a prefix of the acknowledged writes
/// with every durable one, every index whose creation returned exists,
/// every index passes `check_index`, and writes work again.
/// `STRATA_IO_FAULT_STRATEGIES=all` runs every strategy (default: next,
/// composite).
#[test]
fn every_io_site_fails_cleanly_with_indexes() {
    use strata::lsm::io::fault::Op;
    let all = std::env::var("STRATA_IO_FAULT_STRATEGIES").is_ok_and(|v| v == "all");
    let strategies: Vec<&str> = if all {
        STRATEGIES.to_vec()
    } else {
        vec!["next", "composite"]
    };
    let session = |dir: &Path, fs: &FaultFs, strategy: &str, h: &mut History| -> usize {
        let mut rng = Rng::new(5);
        let (mut serial, mut created) = (0, 0);
        for _ in 0..3 {
            let Ok(db) = Db::open(dir, options(fs, false)) else {
                break;
            };
            if try_workload(&db, strategy, &mut rng, h, 60, &mut serial, &mut created).is_err() {
                break;
            }
        }
        created
    };
    let (mut runs, mut fired) = (0, 0);
    for strategy in strategies {
        let counts: Vec<(Op, u64)> = {
            let root = tempfile::tempdir().unwrap();
            let fs = FaultFs::new(root.path().join("trash"));
            session(
                &root.path().join("db"),
                &fs,
                strategy,
                &mut History::default(),
            );
            Op::ALL.iter().map(|&op| (op, fs.count(op))).collect()
        };
        for (op, count) in counts {
            let mut ns = vec![1, count.div_ceil(2), count];
            ns.dedup();
            for nth in ns.into_iter().filter(|&n| n > 0) {
                let what = format!("{strategy}: {op:?} #{nth} of {count} failed");
                let root = tempfile::tempdir().unwrap();
                let dir = root.path().join("db");
                let fs = FaultFs::new(root.path().join("trash"));
                let mut h = History::default();
                fs.fail(op, nth);
                let created = session(&dir, &fs, strategy, &mut h);
                fired += fs.injected();
                runs += 1;
                fs.clear_faults();
                if nth % 2 == 0 {
                    fs.power_loss().unwrap();
                    fs.revive();
                } else {
                    h.durable = h.writes.len() - usize::from(h.uncertain);
                }
                let db = Db::open(&dir, options(&fs, false))
                    .unwrap_or_else(|e| panic!("{what}: healthy reopen: {e}"));
                let _ = h.check_and_settle(&db, &what);
                let names: Vec<String> = db.indexes().into_iter().map(|i| i.spec.name).collect();
                for (name, _, _) in INDEXES.iter().take(created) {
                    assert!(names.iter().any(|n| n == name), "{what}: index {name} lost");
                }
                for name in &names {
                    let c = db.check_index(name).unwrap();
                    assert!(c.ok(), "{what}: index {name}: {c:?}");
                }
                let mut rng = Rng::new(9);
                let mut serial = 1 << 40;
                workload(
                    &db,
                    strategy,
                    &mut rng,
                    &mut h,
                    20,
                    &mut serial,
                    INDEXES.len(),
                );
            }
        }
    }
    eprintln!("{runs} runs with one injected fault under indexes ({fired} fired)");
}

/// Regression: a secondary tree made entries durable (building an index
/// over existing data, or flushing or compacting on its own) for primary
/// writes whose WAL was not synced; after a power loss the tree held
/// entries of lost writes and lacked those of the versions that survived
/// (`check_index`: missing and extra keys, or "index holds key ... at seq
/// N, the data has M"). Trees now sync the primary's WAL before they
/// install tables.
#[test]
fn secondary_trees_are_never_ahead_of_the_durable_wal() {
    for strategy in ["composite", "deli", "posting-eager", "posting-lazy"] {
        for background in [false, true] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("db");
            let fs = FaultFs::new(root.path().join("trash"));
            let db = Db::open(&dir, options(&fs, background)).unwrap();
            for i in 0..20u64 {
                let v = format!(r#"{{"u":{}}}"#, i % 3);
                db.put_opt(
                    format!("k{i:02}").as_bytes(),
                    v.as_bytes(),
                    WriteOptions::default().sync(true),
                )
                .unwrap();
            }
            // Newer versions, not synced, then an index built over them.
            for i in 0..20u64 {
                let v = format!(r#"{{"u":{}}}"#, 10 + i % 3);
                db.put(format!("k{i:02}").as_bytes(), v.as_bytes()).unwrap();
            }
            db.create_index(spec_for(strategy, "u", "u", KeyType::I64))
                .unwrap();
            fs.power_loss().unwrap();
            drop(db);
            fs.revive();
            let db = Db::open(&dir, options(&fs, background)).unwrap();
            let c = db.check_index("u");
            assert!(
                c.as_ref().is_ok_and(|c| c.ok()),
                "{strategy} (background {background}): {c:?}"
            );
        }
    }
}
