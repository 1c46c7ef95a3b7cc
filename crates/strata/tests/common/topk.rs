//! Helpers of the top-K behaviour tests (`index_next_topk`,
//! `index_embedded_topk`): records `{"u": .., "i": ..}` indexed as `by_u`.

use std::collections::BTreeMap;

use strata::{Db, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions};

pub fn record(u: i64, i: u64) -> Vec<u8> {
    format!(r#"{{"u": {u}, "i": {i}, "pad": "{}"}}"#, "x".repeat(60)).into_bytes()
}

/// Options whose tree shape the test decides: no background work, no
/// automatic L0 compaction.
pub fn opts() -> Options {
    Options::small_for_tests()
        .background_work(false)
        .l0_compaction_trigger(100)
        .l0_slowdown_trigger(100)
        .l0_stop_trigger(100)
}

/// A database with [`opts`] and index `by_u` of `strategy` on `u`.
pub fn open(dir: &std::path::Path, strategy: &str) -> Db {
    let db = Db::open(dir, opts()).unwrap();
    db.create_index(IndexSpec::field("by_u", "u", KeyType::I64).strategy(strategy))
        .unwrap();
    db
}

/// The model: key → (write order, u) of the live record.
pub type Model = BTreeMap<Vec<u8>, (u64, i64)>;

/// The keys of the `k` newest live records with `lo <= u <= hi`.
pub fn expected(model: &Model, lo: i64, hi: i64, k: usize) -> Vec<Vec<u8>> {
    let mut v: Vec<(u64, &Vec<u8>)> = model
        .iter()
        .filter(|(_, (_, u))| (lo..=hi).contains(u))
        .map(|(key, (order, _))| (*order, key))
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v.into_iter().take(k).map(|(_, k)| k.clone()).collect()
}

/// The keys `by_u` returns for `lo <= u <= hi` (top `k`), newest first
/// (checked), and the query's profile.
pub fn query(db: &Db, lo: i64, hi: i64, k: Option<usize>) -> (Vec<Vec<u8>>, strata::QueryProfile) {
    query_index(db, "by_u", lo, hi, k)
}

/// [`query`] on index `index` (an `i64` index of `u`).
pub fn query_index(
    db: &Db,
    index: &str,
    lo: i64,
    hi: i64,
    k: Option<usize>,
) -> (Vec<Vec<u8>>, strata::QueryProfile) {
    let pred = if lo == hi {
        Predicate::Eq(IndexValue::I64(lo))
    } else {
        Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi))
    };
    let mut o = QueryOptions::default();
    if let Some(k) = k {
        o = o.limit(k);
    }
    let (hits, p) = db.query_profiled(index, &pred, o).unwrap();
    let hits = hits.into_vec();
    for w in hits.windows(2) {
        assert!(w[0].seq > w[1].seq, "newest first");
    }
    (hits.into_iter().map(|h| h.key).collect(), p)
}
