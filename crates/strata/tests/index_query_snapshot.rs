//! Every index query answers at one snapshot, whatever flushes and
//! compactions do while it runs.
//!
//! The scenario (reliability issue, item 1): version A (`u = 1`) of every
//! key sits in a deep level; version B (`u = 2`) of some keys is written and
//! acknowledged; a query for `u == 1` starts, and while it runs version C
//! (`u = 3`) of the same keys is written, flushed and compacted with B into
//! L1, a compaction that drops B unless the query's snapshot is pinned. A
//! query that validates against a fresh read view then finds A in the deep
//! level and accepts it. The test hook pauses each query after it has
//! pinned what it reads and runs that writer in the pause, so the race
//! happens in every run.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{key, spec_for, STRATEGIES};
use strata::{Db, IndexValue, KeyType, Options, QueryOptions};

const KEYS: u64 = 400;
const UPDATED: u64 = 60;

fn record(u: i64, version: &str) -> Vec<u8> {
    format!(
        r#"{{"u": {u}, "v": "{version}", "pad": "{}"}}"#,
        "x".repeat(40)
    )
    .into_bytes()
}

/// Runs the scenario for `strategy`; returns the keys of the `u == 1`
/// answer that are wrong (superseded or missing).
fn run(strategy: &str, limit: Option<usize>) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    // Large memtable and L0 trigger: no flush or compaction but ours.
    let opts = Options::default()
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100);
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    db.create_index(spec_for(strategy, "by_u", "u", KeyType::I64))
        .unwrap();

    // A in L2.
    for i in 0..KEYS {
        db.put(&key(i), &record(1, "A")).unwrap();
    }
    db.compact_level(0).unwrap();
    db.compact_level(1).unwrap();
    let v = db.current_version();
    assert!(!v.levels[2].is_empty() && v.levels[0].is_empty() && v.levels[1].is_empty());

    // B acknowledged, in L0.
    for i in 0..UPDATED {
        db.put(&key(i), &record(2, "B")).unwrap();
    }
    db.flush().unwrap();

    // During the query: C, flushed, and L0 (B and C) compacted into L1.
    let fired = Arc::new(AtomicBool::new(false));
    {
        let (db2, fired) = (Arc::downgrade(&db), fired.clone());
        db.set_query_pause_hook(Some(Arc::new(move || {
            if fired.swap(true, Ordering::SeqCst) {
                return;
            }
            let db = db2.upgrade().unwrap();
            for i in 0..UPDATED {
                db.put(&key(i), &record(3, "C")).unwrap();
            }
            db.flush().unwrap();
            db.compact_level(0).unwrap();
            db.wait_for_compactions().unwrap();
        })));
    }
    let mut q = QueryOptions::default();
    if let Some(k) = limit {
        q = q.limit(k);
    }
    let hits = db.lookup("by_u", IndexValue::I64(1), q).unwrap();
    db.set_query_pause_hook(None);
    assert!(
        fired.load(Ordering::SeqCst),
        "{strategy}: the hook never ran"
    );
    let v = db.current_version();
    assert!(
        !v.levels[1].is_empty() && v.levels[0].is_empty(),
        "{strategy}: the compaction into L1 did not happen"
    );

    // Whether the query's snapshot is before or after C, the answer is the
    // keys never updated, with their A value.
    let expected: BTreeMap<Vec<u8>, Vec<u8>> =
        (UPDATED..KEYS).map(|i| (key(i), record(1, "A"))).collect();
    let mut wrong = Vec::new();
    for h in &hits {
        if expected.get(h.key).map(Vec::as_slice) != h.value {
            wrong.push(format!("extra {}", String::from_utf8_lossy(h.key)));
        }
    }
    let want = limit.map_or(expected.len(), |k| k.min(expected.len()));
    if hits.len() != want {
        wrong.push(format!("{} hits, expected {want}", hits.len()));
    }
    wrong
}

#[test]
fn a_compaction_during_a_query_never_resurrects_superseded_versions() {
    let mut failures = Vec::new();
    for s in STRATEGIES {
        for limit in [None, Some(10)] {
            let wrong = run(s, limit);
            if !wrong.is_empty() {
                failures.push(format!(
                    "{s} limit {limit:?}: {} wrong, e.g. {:?}",
                    wrong.len(),
                    &wrong[..wrong.len().min(3)]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
