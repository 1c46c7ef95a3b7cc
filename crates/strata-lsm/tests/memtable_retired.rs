//! A flushed memtable that a reader still holds is retired, not freed by
//! the reader: the engine frees it once the reader lets go (on the
//! obsolete-file pass the reader's release triggers, or at the next
//! flush), so a query or scan never pays for freeing a memtable's
//! entries.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use strata_lsm::{Db, Options};

#[test]
fn a_flushed_memtable_held_by_a_reader_is_freed_by_the_engine() {
    for background in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(
            dir.path(),
            Options::small_for_tests().background_work(background),
        )
        .unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i:04}").as_bytes(), b"v").unwrap();
        }
        let mut it = db.iter(None, None).unwrap();
        assert!(it.next().is_some());
        db.flush().unwrap();
        assert_eq!(db.stats().retired_memtables, 1, "background {background}");
        // The reader still reads the memtable it pinned.
        assert_eq!(it.count(), 99);
        // `it` was consumed (dropped) by `count`: its version died.
        db.wait_for_compactions().unwrap();
        assert_eq!(db.stats().retired_memtables, 0, "background {background}");
        // Without readers nothing waits.
        db.put(b"x", b"y").unwrap();
        db.flush().unwrap();
        assert_eq!(db.stats().retired_memtables, 0, "background {background}");
    }
}
