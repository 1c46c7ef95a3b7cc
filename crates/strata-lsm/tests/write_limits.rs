//! A batch with a key or value over the limits, or with a merge operand
//! on a database without a merge operator, is refused whole: nothing of
//! it is written and the sequence does not move. The writer checks a
//! batch from the summary the batch keeps as operations are appended.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use strata_lsm::options::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
use strata_lsm::{Db, Error, Options, WriteBatch, WriteOptions};

fn refused(db: &Db, b: WriteBatch, what: &str) {
    let before = db.last_sequence();
    match db.write(b, WriteOptions::default()) {
        Err(e @ Error::InvalidArgument(_)) => {
            assert!(e.to_string().contains(what), "{e}")
        }
        other => panic!("expected a refusal naming {what:?}, got {other:?}"),
    }
    assert_eq!(db.last_sequence(), before);
    assert_eq!(db.get(b"first").unwrap(), None);
}

#[test]
fn oversized_or_unsupported_batches_are_refused_whole() {
    let t = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().background_work(false);
    let db = Db::open(t.path(), opts.clone()).unwrap();

    // The offending operation last, after one that alone would be fine.
    let mut b = WriteBatch::new();
    b.put(b"first", b"v")
        .put(&vec![b'k'; MAX_KEY_SIZE + 1], b"v");
    refused(&db, b, &format!("key of {} bytes", MAX_KEY_SIZE + 1));

    let mut b = WriteBatch::new();
    b.put(b"first", b"v").delete(&vec![b'k'; MAX_KEY_SIZE + 7]);
    refused(&db, b, &format!("key of {} bytes", MAX_KEY_SIZE + 7));

    let mut b = WriteBatch::new();
    b.put(b"first", b"v")
        .put(b"second", &vec![0u8; MAX_VALUE_SIZE + 1]);
    refused(&db, b, "value of");

    // Appending carries the offending operation along.
    let mut big = WriteBatch::new();
    big.put(&vec![b'k'; MAX_KEY_SIZE + 2], b"v");
    let mut b = WriteBatch::new();
    b.put(b"first", b"v");
    b.append(&big);
    refused(&db, b, &format!("key of {} bytes", MAX_KEY_SIZE + 2));

    let mut b = WriteBatch::new();
    b.put(b"first", b"v").merge(b"counter", b"1");
    refused(&db, b, "merge");

    // At the limits, and after a clear, a batch is written.
    let mut b = WriteBatch::new();
    b.put(&vec![b'k'; MAX_KEY_SIZE + 1], b"v");
    b.clear();
    b.put(b"first", b"v").put(&vec![b'k'; MAX_KEY_SIZE], b"w");
    db.write(b, WriteOptions::default()).unwrap();
    assert_eq!(db.get(b"first").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(
        db.get(&vec![b'k'; MAX_KEY_SIZE]).unwrap().as_deref(),
        Some(&b"w"[..])
    );
}
