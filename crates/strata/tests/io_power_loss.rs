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
//! `STRATA_POWER_LOSS_CYCLES` sets the cycles per strategy (default 3).

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
    writes: Vec<Write>,
    /// `writes[..durable]` must survive a power loss.
    durable: usize,
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
        let mut s = BTreeMap::new();
        for w in self.writes.iter().take(n) {
            apply(&mut s, w);
        }
        s
    }

    /// Checks that `db` holds a prefix of the writes with every durable
    /// one; the history becomes that prefix, all durable.
    fn check_and_settle(&mut self, db: &Db, what: &str) {
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db
            .iter(None, None)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
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
        self.writes.truncate(n);
        self.durable = n;
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
        assert!(
            names.iter().any(|n| n == name),
            "{what}: index {name} lost"
        );
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
    mut created: usize,
) -> usize {
    for _ in 0..steps {
        let r = rng.below(100);
        // The first index once there is data to build over, the second at
        // random.
        let create = (created == 0 && h.writes.len() > 40) || r < 2;
        if create && created < INDEXES.len() {
            let (name, path, ty) = INDEXES[created];
            db.create_index(spec_for(strategy, name, path, ty)).unwrap();
            created += 1;
        } else if r < 5 {
            db.flush().unwrap();
            h.durable = h.writes.len();
        } else if r < 6 {
            db.compact_range(None, None).unwrap();
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
            db.write(batch, WriteOptions::default().sync(sync)).unwrap();
            h.writes.push(w);
            if sync {
                h.durable = h.writes.len();
            }
        }
    }
    created
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
        h.check_and_settle(&db, &what);
        lost += before - h.writes.len();
        checks += check_indexes(&db, created, &what);
        // Writes work again, and the indexes stay exact.
        workload(&db, strategy, &mut rng, &mut h, 10, &mut serial, INDEXES.len());
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
    let mut strategies = 0;
    for (i, strategy) in STRATEGIES.iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != *strategy) {
            continue;
        }
        strategies += 1;
        let root = tempfile::tempdir().unwrap();
        let (l, c) = run(strategy, cycles, 100 + i as u64, root.path());
        lost += l;
        checks += c;
    }
    eprintln!(
        "{} power-loss cycles ({cycles} per strategy, {} strategies): 0 synced writes lost, \
         {lost} unsynced writes lost, {checks} index checks exact",
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
