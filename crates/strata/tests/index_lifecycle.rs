//! Index definitions over their life: creation over existing data, custom
//! (closure) extractors, skip counting, drop and reopen, bad input.

use std::sync::Arc;

use strata::{
    Db, Error, IndexSpec, IndexState, IndexValue, KeyType, Options, Predicate, QueryOptions,
};

fn opts() -> Options {
    Options::small_for_tests().background_work(false)
}

#[test]
fn closure_extractor_indexes_non_json_values() {
    let dir = tempfile::tempdir().unwrap();
    // Values are "name:score" text; the extractor parses the score.
    let f: strata::ExtractorFn = Arc::new(|v: &[u8]| {
        let s = std::str::from_utf8(v).ok()?;
        s.split_once(':')?
            .1
            .parse::<i64>()
            .ok()
            .map(IndexValue::I64)
    });
    let ext = strata::Extractors::new().add("score", f.clone());
    {
        let db = Db::open_with(dir.path(), opts(), ext.clone()).unwrap();
        for i in 0..300i64 {
            db.put(
                format!("k{i:03}").as_bytes(),
                format!("n{i}:{}", i % 10).as_bytes(),
            )
            .unwrap();
        }
        db.put(b"bad", b"no score here").unwrap();
        db.create_index(IndexSpec::custom("by_score", "score", KeyType::I64))
            .unwrap();
        let hits = db
            .lookup("by_score", IndexValue::I64(3), QueryOptions::default())
            .unwrap()
            .into_vec();
        assert_eq!(hits.len(), 30);
        assert!(hits.windows(2).all(|w| w[0].seq > w[1].seq), "newest first");
    }
    // The function must be registered again at open.
    let err = Db::open(dir.path(), opts()).err().unwrap();
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("score")),
        "{err}"
    );
    let db = Db::open_with(dir.path(), opts(), ext).unwrap();
    assert_eq!(
        db.lookup("by_score", IndexValue::I64(9), QueryOptions::default())
            .unwrap()
            .len(),
        30
    );
}

#[test]
fn skipped_values_are_counted_not_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.create_index(IndexSpec::field("by_u", "u", KeyType::I64))
        .unwrap();
    db.put(b"a", br#"{"u": 1}"#).unwrap();
    db.put(b"b", br#"{"v": 1}"#).unwrap(); // missing
    db.put(b"c", br#"{"u": "one"}"#).unwrap(); // wrong type
    db.put(b"d", b"{not json").unwrap(); // malformed
    let s = &db.indexes()[0].stats;
    assert_eq!(
        (
            s.indexed_writes,
            s.skipped_missing,
            s.skipped_wrong_type,
            s.skipped_malformed
        ),
        (1, 1, 1, 1)
    );
    let all = Predicate::Range(IndexValue::I64(i64::MIN), IndexValue::I64(i64::MAX));
    assert_eq!(
        db.query("by_u", &all, QueryOptions::default())
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        db.get(b"d").unwrap(),
        Some(b"{not json".to_vec()),
        "stored all the same"
    );
}

#[test]
fn drop_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        db.create_index(IndexSpec::field("a", "a", KeyType::I64))
            .unwrap();
        db.create_index(IndexSpec::field("b", "b", KeyType::String))
            .unwrap();
        for i in 0..200 {
            db.put(
                format!("k{i}").as_bytes(),
                format!(r#"{{"a": {i}, "b": "s{}"}}"#, i % 3).as_bytes(),
            )
            .unwrap();
        }
        db.flush().unwrap();
        db.drop_index("a").unwrap();
        assert!(matches!(db.drop_index("a"), Err(Error::NotFound(_))));
        assert!(matches!(
            db.lookup("a", IndexValue::I64(1), QueryOptions::default()),
            Err(Error::NotFound(_))
        ));
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    let names: Vec<String> = db.indexes().into_iter().map(|i| i.spec.name).collect();
    assert_eq!(names, ["b"]);
    assert_eq!(db.indexes()[0].state, IndexState::Ready);
    assert_eq!(
        db.lookup("b", IndexValue::Str("s1".into()), QueryOptions::default())
            .unwrap()
            .len(),
        67
    );
    // A new index may reuse the dropped name; it starts from scratch.
    db.create_index(IndexSpec::field("a", "a", KeyType::I64))
        .unwrap();
    assert_eq!(
        db.lookup("a", IndexValue::I64(5), QueryOptions::default())
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn bad_definitions_and_queries_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let bad = |spec: IndexSpec| matches!(db.create_index(spec), Err(Error::InvalidArgument(_)));
    assert!(bad(IndexSpec::field("", "a", KeyType::I64)));
    assert!(bad(IndexSpec::field("x y", "a", KeyType::I64)));
    assert!(bad(IndexSpec::field("x", "a..b", KeyType::I64)));
    assert!(bad(
        IndexSpec::field("x", "a", KeyType::I64).strategy("nope")
    ));
    assert!(bad(
        IndexSpec::field("x", "a", KeyType::I64).param("delta", "-3")
    ));
    assert!(bad(
        IndexSpec::field("x", "a", KeyType::I64).param("colour", "red")
    ));
    // Regression: mode=sync accepted validate=direct and ignored it.
    assert!(bad(IndexSpec::field("x", "a", KeyType::I64)
        .strategy("composite")
        .param("validate", "direct")));
    assert!(bad(IndexSpec::field("x", "a", KeyType::I64)
        .strategy("composite")
        .param("mode", "sync")
        .param("validate", "timestamp")));
    assert!(
        db.indexes().is_empty(),
        "a rejected definition leaves nothing behind"
    );
    db.create_index(IndexSpec::field("x", "a", KeyType::I64))
        .unwrap();
    assert!(
        bad(IndexSpec::field("x", "b", KeyType::I64)),
        "duplicate name"
    );
    let q = |p: Predicate| db.query("x", &p, QueryOptions::default());
    assert!(matches!(
        q(Predicate::Within([0.0, 0.0, 1.0, 1.0])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q(Predicate::Eq(IndexValue::Str("1".into()))),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        q(Predicate::Range(IndexValue::I64(5), IndexValue::I64(1))),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn interrupted_creation_is_finished_at_open() {
    // A definition logged as created but never marked ready (a crash during
    // the build) is rebuilt when the database is next opened.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..100 {
            db.put(
                format!("k{i}").as_bytes(),
                format!(r#"{{"a": {}}}"#, i % 4).as_bytes(),
            )
            .unwrap();
        }
        db.flush().unwrap();
        db.begin_index_for_tests(IndexSpec::field("a", "a", KeyType::I64))
            .unwrap();
        assert_eq!(db.indexes()[0].state, IndexState::Building);
        let err = db
            .lookup("a", IndexValue::I64(1), QueryOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("being built"), "{err}");
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.indexes()[0].state, IndexState::Ready);
    assert_eq!(
        db.lookup("a", IndexValue::I64(1), QueryOptions::default())
            .unwrap()
            .len(),
        25
    );
}

#[test]
fn writes_right_after_creation_are_found_before_any_flush() {
    // Regression: the memtable active when an index was created did not
    // index later writes, so they were missing until the next flush.
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.create_index(IndexSpec::field("a", "a", KeyType::I64))
        .unwrap();
    db.put(b"k1", br#"{"a": 1}"#).unwrap();
    assert_eq!(
        db.lookup("a", IndexValue::I64(1), QueryOptions::default())
            .unwrap()
            .len(),
        1
    );
    db.put(b"k0", br#"{"a": 0}"#).unwrap();
    db.create_index(IndexSpec::field("b", "a", KeyType::I64))
        .unwrap();
    db.put(b"k2", br#"{"a": 1}"#).unwrap();
    for name in ["a", "b"] {
        let keys: Vec<Vec<u8>> = db
            .lookup(name, IndexValue::I64(1), QueryOptions::default())
            .unwrap()
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(keys, vec![b"k2".to_vec(), b"k1".to_vec()], "{name}");
    }
}

/// A float attribute is indexed as exactly the f64 its JSON text denotes
/// (shortest round-trip text, as Python's `json.dumps` and Rust's `{}`
/// print it), so an equality query on that value finds the record. These
/// values parsed one ULP off before serde_json's `float_roundtrip`.
#[test]
fn float_attributes_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let xs = [
        1.4229436293244557f64,
        -1.9663148906708239,
        0.38976675466608235,
    ];
    for (i, x) in xs.iter().enumerate() {
        db.put(
            format!("k{i}").as_bytes(),
            format!("{{\"x\":{x}}}").as_bytes(),
        )
        .unwrap();
    }
    db.create_index(IndexSpec::field("x", "x", KeyType::F64))
        .unwrap();
    for (i, x) in xs.iter().enumerate() {
        let hits = db
            .lookup("x", IndexValue::F64(*x), QueryOptions::default())
            .unwrap()
            .into_vec();
        assert_eq!(hits.len(), 1, "{x}");
        assert_eq!(hits[0].key, format!("k{i}").into_bytes());
    }
}
