//! Each engine hook fires with correct data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use strata_lsm::hooks::{
    CompactionContext, CompactionObserver, DropReason, EngineHooks, EntryRef, ExtState,
    InstallEvent, InstallOutcome, TableContext, TableObserver,
};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::sstable::BlockHandle;
use strata_lsm::version::FileMetaData;
use strata_lsm::{Db, Options};

#[derive(Default)]
struct Log {
    /// file number → (user key, seq, handle) per entry seen.
    entries: BTreeMap<u64, Vec<(Vec<u8>, SeqNo, BlockHandle)>>,
    finished_blocks: BTreeMap<u64, Vec<BlockHandle>>,
    dropped: Vec<(Vec<u8>, SeqNo, ValueKind, DropReason)>,
    installs: Vec<(Vec<u64>, Vec<u64>)>,
    recovered: Vec<Vec<u8>>,
}

struct TestHook {
    log: Arc<Mutex<Log>>,
}

struct Obs {
    file: u64,
    log: Arc<Mutex<Log>>,
    count: u64,
}

impl TableObserver for Obs {
    fn on_entry(&mut self, e: &EntryRef<'_>, block: BlockHandle) {
        self.count += 1;
        self.log
            .lock()
            .unwrap()
            .entries
            .entry(self.file)
            .or_default()
            .push((e.user_key.to_vec(), e.seq, block));
    }
    fn on_block_finished(&mut self, block: BlockHandle) {
        self.log
            .lock()
            .unwrap()
            .finished_blocks
            .entry(self.file)
            .or_default()
            .push(block);
    }
    fn finish(&mut self) -> strata_lsm::Result<Vec<(String, Vec<u8>)>> {
        Ok(vec![(
            "test.count".into(),
            self.count.to_le_bytes().to_vec(),
        )])
    }
}

struct Drops(Arc<Mutex<Log>>);

impl CompactionObserver for Drops {
    fn on_dropped(&mut self, e: &EntryRef<'_>, reason: DropReason) {
        self.0
            .lock()
            .unwrap()
            .dropped
            .push((e.user_key.to_vec(), e.seq, e.kind, reason));
    }
}

impl EngineHooks for TestHook {
    fn name(&self) -> &str {
        "test"
    }
    fn table_observer(&self, ctx: &TableContext) -> Option<Box<dyn TableObserver>> {
        Some(Box::new(Obs {
            file: ctx.file_number,
            log: self.log.clone(),
            count: 0,
        }))
    }
    fn compaction_observer(&self, _ctx: &CompactionContext) -> Option<Box<dyn CompactionObserver>> {
        Some(Box::new(Drops(self.log.clone())))
    }
    fn on_install(&self, ev: &InstallEvent<'_>) -> strata_lsm::Result<InstallOutcome> {
        let added: Vec<u64> = ev.added.iter().map(|(_, f)| f.number).collect();
        let removed: Vec<u64> = ev.removed.iter().map(|(_, n)| *n).collect();
        let prev = ev
            .previous
            .and_then(|s| s.downcast_ref::<u64>())
            .copied()
            .unwrap_or(0);
        self.log
            .lock()
            .unwrap()
            .installs
            .push((added.clone(), removed));
        Ok(InstallOutcome {
            payload: Some(format!("added {added:?}").into_bytes()),
            state: Some(Arc::new(prev + 1) as ExtState),
        })
    }
    fn on_recover(
        &self,
        payloads: &[Vec<u8>],
        _files: &[(usize, Arc<FileMetaData>)],
    ) -> strata_lsm::Result<Option<ExtState>> {
        self.log.lock().unwrap().recovered = payloads.to_vec();
        Ok(Some(Arc::new(1000u64) as ExtState))
    }
}

fn opts(log: &Arc<Mutex<Log>>) -> Options {
    Options::small_for_tests()
        .background_work(false)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100)
        .hook(Arc::new(TestHook { log: log.clone() }))
}

#[test]
fn table_observer_sees_every_entry_in_its_block() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let db = Db::open(dir.path(), opts(&log)).unwrap();
    for i in 0..500u32 {
        db.put(format!("key{i:04}").as_bytes(), &[b'v'; 60])
            .unwrap();
    }
    db.flush().unwrap();
    let version = db.current_version();
    let log = log.lock().unwrap();
    let mut checked = 0;
    for (_, f) in version.all_files() {
        let entries = &log.entries[&f.number];
        assert_eq!(entries.len() as u64, f.num_entries);
        // Every entry is in the block the observer was told.
        let mut blocks: BTreeMap<BlockHandle, Vec<(Vec<u8>, SeqNo)>> = BTreeMap::new();
        for (k, s, h) in entries {
            blocks.entry(*h).or_default().push((k.clone(), *s));
        }
        assert_eq!(
            blocks.keys().copied().collect::<Vec<_>>(),
            log.finished_blocks[&f.number]
        );
        for (h, want) in blocks {
            let got: Vec<(Vec<u8>, SeqNo)> = db
                .read_data_block(f.number, h)
                .unwrap()
                .into_iter()
                .map(|e| (e.user_key, e.seq))
                .collect();
            assert_eq!(got, want);
            checked += want.len();
        }
    }
    assert_eq!(checked, 500);
}

#[test]
fn dropped_versions_stream_reports_obsolete_entries() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let db = Db::open(dir.path(), opts(&log)).unwrap();
    db.put(b"a", b"1").unwrap(); // seq 1
    db.put(b"b", b"1").unwrap(); // seq 2
    db.flush().unwrap();
    db.put(b"a", b"2").unwrap(); // seq 3
    db.delete(b"b").unwrap(); // seq 4
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let mut dropped = log.lock().unwrap().dropped.clone();
    dropped.sort_by(|x, y| (&x.0, x.1).cmp(&(&y.0, y.1)));
    assert_eq!(
        dropped,
        vec![
            (b"a".to_vec(), 1, ValueKind::Value, DropReason::Shadowed),
            (b"b".to_vec(), 2, ValueKind::Value, DropReason::Shadowed),
            (
                b"b".to_vec(),
                4,
                ValueKind::Deletion,
                DropReason::ObsoleteTombstone
            ),
        ]
    );
    assert_eq!(db.get(b"a").unwrap(), Some(b"2".to_vec()));
    assert_eq!(db.get(b"b").unwrap(), None);
}

#[test]
fn snapshot_keeps_versions_out_of_the_dropped_stream() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let db = Db::open(dir.path(), opts(&log)).unwrap();
    db.put(b"a", b"1").unwrap();
    let snap = db.snapshot();
    db.put(b"a", b"2").unwrap();
    db.compact_range(None, None).unwrap();
    assert!(log.lock().unwrap().dropped.is_empty());
    assert_eq!(snap.get(b"a").unwrap(), Some(b"1".to_vec()));
    drop(snap);
    db.compact_range(None, None).unwrap();
    assert_eq!(log.lock().unwrap().dropped.len(), 1);
}

#[test]
fn a_snapshot_clone_keeps_versions_after_the_original_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let db = Db::open(dir.path(), opts(&log)).unwrap();
    db.put(b"a", b"1").unwrap();
    let snap = db.snapshot();
    let clone = snap.clone();
    // An older snapshot taken and dropped meanwhile (registered before
    // the clone's in the list) releases nothing of the clone's.
    let later = db.snapshot();
    drop(snap);
    db.put(b"a", b"2").unwrap();
    drop(later);
    db.compact_range(None, None).unwrap();
    assert!(log.lock().unwrap().dropped.is_empty());
    assert_eq!(clone.get(b"a").unwrap(), Some(b"1".to_vec()));
    drop(clone);
    db.compact_range(None, None).unwrap();
    assert_eq!(log.lock().unwrap().dropped.len(), 1);
}

#[test]
fn install_hook_payloads_and_state_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    {
        let db = Db::open(dir.path(), opts(&log)).unwrap();
        db.put(b"a", b"1").unwrap();
        db.flush().unwrap();
        db.put(b"b", b"1").unwrap();
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        let v = db.current_version();
        let state = v
            .ext
            .get("test")
            .unwrap()
            .downcast_ref::<u64>()
            .copied()
            .unwrap();
        // on_recover at creation (1000), then the install at open, two
        // flushes and one compaction.
        assert_eq!(state, 1004);
        let l = log.lock().unwrap();
        let (added, removed) = l.installs.last().unwrap().clone();
        assert_eq!(added.len(), 1);
        assert_eq!(removed.len(), 2, "{:?}", l.installs);
        // The named meta block was written into the table.
        let f = v.all_files().next().unwrap().1.clone();
        drop(l);
        let _ = f;
    }
    let log2 = Arc::new(Mutex::new(Log::default()));
    let db = Db::open(dir.path(), opts(&log2)).unwrap();
    let recovered = log2.lock().unwrap().recovered.clone();
    assert_eq!(recovered.len(), 4, "{recovered:?}");
    assert!(String::from_utf8_lossy(&recovered[1]).starts_with("added ["));
    let v = db.current_version();
    // on_recover's state, then the install at open.
    assert_eq!(
        v.ext.get("test").unwrap().downcast_ref::<u64>(),
        Some(&1001)
    );
}
