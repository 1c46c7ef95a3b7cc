//! Hosted engines (column families, `strata_lsm::host`): their memtables
//! switch and flush with their host's, their compactions run on the host's
//! thread, and they have no WAL, writer queue or threads of their own.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::sync::Arc;

use strata_lsm::hooks::{EngineHandle, EngineHooks, HostRef};
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

/// Captures the host's handle when the host attaches its extensions.
struct Capture(HostRef);

impl EngineHooks for Capture {
    fn name(&self) -> &str {
        "capture"
    }
    fn attach(&self, engine: &EngineHandle) {
        let _ = self.0.set(engine.clone());
    }
}

/// Small tables and memtables, so a few hundred writes flush and compact.
fn small() -> Options {
    Options {
        memtable_size: 64 << 10,
        block_size: 1024,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 6,
        l0_stop_trigger: 10,
        max_bytes_for_level_base: 256 << 10,
        target_file_size: 64 << 10,
        ..Options::default()
    }
}

fn host_opts(host: &HostRef) -> Options {
    small().hook(Arc::new(Capture(host.clone())))
}

fn hosted_opts(host: &HostRef) -> Options {
    small().hosted_by(host.clone())
}

/// A host in `dir/host` and one engine it hosts in `dir/fam`.
fn host_and_family(dir: &std::path::Path) -> (Db, Db) {
    let host_ref = HostRef::default();
    let host = Db::open(dir.join("host"), host_opts(&host_ref)).unwrap();
    let fam = Db::open(dir.join("fam"), hosted_opts(&host_ref)).unwrap();
    (host, fam)
}

fn put(db: &Db, k: &[u8], v: &[u8]) {
    let mut b = WriteBatch::new();
    b.put(k, v);
    db.write(b, WriteOptions::default()).unwrap();
}

fn tables(db: &Db) -> usize {
    db.stats().levels.iter().map(|l| l.files).sum()
}

#[test]
fn hosted_memtable_flushes_with_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (host, fam) = host_and_family(dir.path());
    put(&fam, b"a", b"1");
    put(&host, b"x", b"1");
    assert_eq!(fam.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(tables(&fam), 0, "a hosted write creates no table");
    host.flush().unwrap();
    assert_eq!(
        tables(&fam),
        1,
        "the host's flush flushes the hosted memtable"
    );
    let s = fam.stats();
    assert_eq!((s.memtable_bytes, s.immutable_memtables), (0, 0), "{s:?}");
    // Written after the host's switch: stays in the hosted memtable until
    // the next one.
    put(&fam, b"b", b"2");
    assert_eq!(tables(&fam), 1);
    assert_eq!(fam.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    // From here the host's compaction thread may merge the hosted L0
    // tables at any time (l0_compaction_trigger is 2): flushes are counted
    // instead of tables.
    host.flush().unwrap();
    assert_eq!(fam.stats().io.flushes, 2);
    // A hosted engine's own flush works too (in the calling thread).
    put(&fam, b"c", b"3");
    let flushes = fam.stats().io.flushes;
    fam.flush().unwrap();
    let s = fam.stats();
    assert_eq!(s.io.flushes, flushes + 1, "{s:?}");
    assert_eq!((s.memtable_bytes, s.immutable_memtables), (0, 0), "{s:?}");
    assert_eq!(fam.get(b"c").unwrap().as_deref(), Some(&b"3"[..]));
}

#[test]
fn full_hosted_memtable_switches_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let (host, fam) = host_and_family(dir.path());
    // Fill the hosted memtable past its budget; the host's own stays tiny.
    let v = vec![7u8; 1000];
    for i in 0..100u32 {
        put(&fam, format!("k{i:05}").as_bytes(), &v);
    }
    assert_eq!(tables(&fam), 0);
    // The host's next write switches both memtables; its flush thread
    // flushes both.
    put(&host, b"x", b"1");
    host.wait_for_compactions().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while tables(&fam) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "hosted memtable never flushed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for i in 0..100u32 {
        assert_eq!(
            fam.get(format!("k{i:05}").as_bytes()).unwrap(),
            Some(v.clone())
        );
    }
}

#[test]
fn host_thread_compacts_hosted_engines() {
    let dir = tempfile::tempdir().unwrap();
    let host_ref = HostRef::default();
    let host = Db::open(dir.path().join("host"), host_opts(&host_ref)).unwrap();
    let fam = Db::open(dir.path().join("fam"), hosted_opts(&host_ref)).unwrap();
    let v = vec![3u8; 200];
    for round in 0..12u32 {
        for i in 0..50u32 {
            put(&fam, format!("k{i:05}").as_bytes(), &v);
        }
        put(&host, format!("h{round}").as_bytes(), b"1");
        host.flush().unwrap();
    }
    // 12 flushes of the same 50 keys: the host's compaction thread merges
    // the hosted L0 (trigger 2) without the hosted engine having threads.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let s = fam.stats();
        if s.levels[0].files < 2 && s.io.compactions > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hosted L0 never compacted: {:?}",
            s.levels
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for i in 0..50u32 {
        assert_eq!(
            fam.get(format!("k{i:05}").as_bytes()).unwrap(),
            Some(v.clone())
        );
    }
    // Closing the hosted engine while the host runs on is safe; the host
    // keeps working without it.
    drop(fam);
    for round in 0..3u32 {
        put(&host, format!("after{round}").as_bytes(), b"1");
        host.flush().unwrap();
    }
    host.wait_for_compactions().unwrap();
    let fam = Db::open(dir.path().join("fam"), hosted_opts(&host_ref)).unwrap();
    assert_eq!(fam.get(b"k00007").unwrap(), Some(v));
}

#[test]
fn hosted_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    // Before the host attached its extensions.
    let unset = HostRef::default();
    let e = Db::open(dir.path().join("a"), hosted_opts(&unset))
        .err()
        .unwrap();
    assert!(e.to_string().contains("not attached"), "{e}");
    // With a WAL.
    let host_ref = HostRef::default();
    let _host = Db::open(dir.path().join("host"), host_opts(&host_ref)).unwrap();
    let mut o = hosted_opts(&host_ref);
    o.wal = true;
    let e = Db::open(dir.path().join("b"), o).err().unwrap();
    assert!(e.to_string().contains("hosted"), "{e}");
}

/// `write_in_place` writes a batch as `write` does and hands it back
/// cleared, to a hosted engine (inserted in place) and to its host (the
/// batch's contents go through the writer queue); a refused batch is
/// cleared too and writes nothing.
#[test]
fn write_in_place_writes_and_leaves_the_batch_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let (host, fam) = host_and_family(dir.path());
    let mut b = WriteBatch::new();
    for round in 0..3u8 {
        for db in [&fam, &host] {
            b.put(&[b'k', round], &[round]).delete(b"gone");
            let before = db.last_sequence();
            db.write_in_place(&mut b, WriteOptions::default().min_sequence(before + 10))
                .unwrap();
            assert!(b.is_empty(), "round {round}: not cleared");
            assert_eq!(b.encoded_len(), WriteBatch::new().encoded_len());
            assert_eq!(db.last_sequence(), before + 11, "round {round}");
            assert_eq!(
                db.get(&[b'k', round]).unwrap().as_deref(),
                Some(&[round][..])
            );
        }
    }
    // Refused (merge operand without an operator): nothing written.
    for db in [&fam, &host] {
        b.put(b"first", b"v").merge(b"counter", b"1");
        let before = db.last_sequence();
        assert!(db.write_in_place(&mut b, WriteOptions::default()).is_err());
        assert!(b.is_empty());
        assert_eq!(db.last_sequence(), before);
        assert_eq!(db.get(b"first").unwrap(), None);
    }
    // Cleared before a flush, the hosted batch's entries are the table's.
    host.flush().unwrap();
    for round in 0..3u8 {
        assert_eq!(
            fam.get(&[b'k', round]).unwrap().as_deref(),
            Some(&[round][..])
        );
    }
}
