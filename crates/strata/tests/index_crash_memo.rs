//! Regression: after a crash, WAL replay must rebuild the update-memo
//! entries of the replayed writes, or a deleted record's older version is
//! returned by index queries.

mod common;

use common::copy_dir;
use strata::{Db, IndexSpec, KeyType, Options, QueryOptions, WriteBatch, WriteOptions};

#[test]
fn deleted_record_stays_deleted_after_crash_replay() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().background_work(false);
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    db.create_index(IndexSpec::field("p", "p", KeyType::Point))
        .unwrap();
    let mut b = WriteBatch::new();
    b.put(b"k", br#"{"p":[1,1]}"#);
    db.write(b, WriteOptions::default()).unwrap();
    let mut b = WriteBatch::new();
    b.delete(b"k");
    db.write(b, WriteOptions::default()).unwrap();
    let hits = |db: &Db| {
        db.within("p", [0.0, 0.0, 2.0, 2.0], QueryOptions::default())
            .unwrap()
            .len()
    };
    assert_eq!(hits(&db), 0);

    let crashed = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), crashed.path());
    drop(db);
    let db = Db::open(crashed.path(), opts).unwrap();
    assert_eq!(
        db.memo_stats().0,
        1,
        "the delete's memo entry is rebuilt from the WAL"
    );
    assert_eq!(hits(&db), 0);
    db.flush().unwrap();
    assert_eq!(hits(&db), 0);
}
