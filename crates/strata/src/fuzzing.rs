//! Fuzz target bodies for the index layer's decoders of bytes read from
//! disk, the targeted JSON reader, and a model target (feature `testing`).
//! With the engine's ([`strata_lsm::fuzzing`]) they are every target of the
//! `fuzz/` crate; `tests/fuzz_corpus_replay.rs` replays the saved corpus.
//! Contract: no panic, no hang, no allocation sized by an unchecked length;
//! `json_fields` and `model` also assert agreement with their oracles.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;

use crate::index::fields::Fields;
use crate::index::value::{extract, parse_path, IndexValue, KeyType, Predicate};
use crate::index::{embedded, entries, filter, memo, next, posting, tree};
use crate::{Db, IndexSpec, Options, QueryOptions, StrategyKind};

pub use strata_lsm::fuzzing::Target;

/// Every target: the engine's, then the index layer's.
pub fn targets() -> Vec<Target> {
    let mut t = strata_lsm::fuzzing::TARGETS.to_vec();
    t.extend_from_slice(INDEX_TARGETS);
    t
}

/// The index layer's targets.
pub const INDEX_TARGETS: &[Target] = &[
    ("next_directory", next_directory),
    ("next_secondary_block", next_secondary_block),
    ("embedded_zone_maps", embedded_zone_maps),
    ("range_filter", range_filter),
    ("memo_block", memo_block),
    ("posting_list", posting_list),
    ("standalone_entry", standalone_entry),
    ("index_value", index_value),
    ("json_fields", json_fields),
    ("model", model),
];

/// The key type chosen by the first byte, and the rest.
fn typed(data: &[u8]) -> Option<(KeyType, &[u8])> {
    let (&b, rest) = data.split_first()?;
    Some((KeyType::ALL[b as usize % KeyType::ALL.len()], rest))
}

/// NEXT's per-table directory (global index slices).
pub fn next_directory(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        let _ = next::table::decode_dir(rest, ty);
    }
}

/// NEXT's secondary index block.
pub fn next_secondary_block(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        let Ok(b) = next::table::SecBlock::parse(rest, ty) else {
            return;
        };
        for i in 0..b.len().min(1 << 16) {
            let _ = b.entry(i);
        }
        let pred = match ty {
            KeyType::I64 => Predicate::Range(IndexValue::I64(-5), IndexValue::I64(5)),
            KeyType::F64 => Predicate::Range(IndexValue::F64(-1.0), IndexValue::F64(1.0)),
            KeyType::String => {
                Predicate::Range(IndexValue::Str("a".into()), IndexValue::Str("m".into()))
            }
            _ => Predicate::Within([0.0, 0.0, 10.0, 10.0]),
        };
        let probe = next::table::Probe::new(&pred, ty);
        let _ = b.for_each_match(0, b.len(), &probe, |_| Ok(()));
    }
}

/// The embedded strategy's zone maps and Bloom filters.
pub fn embedded_zone_maps(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        let _ = embedded::decode(rest, ty, "fuzz");
    }
}

/// The filter strategy's per-table blocks (range filter and deletion
/// marks; the values block).
pub fn range_filter(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        let _ = filter::decode(rest, ty, "fuzz");
        let _ = filter::decode_values(rest, ty, "fuzz", |_, _| true);
    }
}

/// The update memo's per-table block.
pub fn memo_block(data: &[u8]) {
    let _ = memo::decode_block(data);
}

/// Posting lists (eager) and lazy fragments.
pub fn posting_list(data: &[u8]) {
    let _ = posting::decode_list(data);
    let _ = posting::decode_lazy(data);
}

/// A stand-alone index tree's entry key (sort key, primary key, sequence).
pub fn standalone_entry(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        let _ = entries::decode_entry(ty, rest);
        let _ = tree::sort_key_len(ty, rest);
        let _ = tree::read_seq(rest, data.len().is_multiple_of(2));
    }
}

/// An encoded attribute value.
pub fn index_value(data: &[u8]) {
    if let Some((ty, rest)) = typed(data) {
        if let Ok(v) = IndexValue::decode(ty, rest) {
            let _ = v.encode();
        }
    }
}

/// The targeted JSON reader agrees with a full parse on any bytes.
pub fn json_fields(data: &[u8]) {
    let paths: Vec<Vec<String>> = ["a", "a.b", "a.0", "user_id", "coordinates", "0", "b.1.c"]
        .iter()
        .map(|p| parse_path(p).unwrap())
        .collect();
    let fields = Fields::new(paths.iter().map(|p| p.as_slice()));
    let full = serde_json::from_slice::<serde_json::Value>(data);
    let got = fields.extract(data);
    match (full, got) {
        (Err(_), Err(())) => {}
        (Ok(doc), Ok(got)) => {
            for p in &paths {
                let slot = fields.slot(p).unwrap();
                for ty in KeyType::ALL {
                    assert_eq!(
                        got.value(slot, ty),
                        extract(&doc, p, ty),
                        "path {p:?} {ty:?}"
                    );
                }
            }
        }
        (full, got) => panic!(
            "validity differs: full {:?}, targeted {:?}",
            full.is_ok(),
            got.is_ok()
        ),
    }
}

/// Random operations on a database with an index of a strategy chosen by
/// the first byte, checked against a model after every query, flush,
/// compaction, reopen and simulated power loss. Files go through a
/// `FaultFs`; after a power loss the database must hold the model's state
/// after some operation since the last flush (unsynced writes form a
/// prefix; flushed ones survive), and the index must agree with it.
pub fn model(data: &[u8]) {
    use strata_lsm::io::fault::FaultFs;

    let Some((&s, ops)) = data.split_first() else {
        return;
    };
    let kinds = StrategyKind::ALL;
    let kind = kinds[s as usize % kinds.len()];
    let root = std::env::temp_dir().join(format!("strata-fuzz-model-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join("db");
    let fs = FaultFs::new(root.join("trash"));
    let opts = || {
        Options {
            memtable_size: 4096,
            ..Options::default()
        }
        .file_system(fs.as_fs())
    };
    let mut db = Db::open(&dir, opts()).unwrap();
    db.create_index(IndexSpec::field("u", "u", KeyType::I64).strategy(kind.name()))
        .unwrap();
    db.flush().unwrap();
    let mut model: BTreeMap<u8, i64> = BTreeMap::new();
    // The model after each operation since the last flush (oldest first):
    // the states a power loss may return to.
    let mut since_flush: Vec<BTreeMap<u8, i64>> = vec![model.clone()];
    // The keys whose index answer `u` must match the model's.
    let check = |db: &Db, model: &BTreeMap<u8, i64>, u: i64| {
        let mut got: Vec<Vec<u8>> = db
            .query(
                "u",
                &Predicate::Eq(IndexValue::I64(u)),
                QueryOptions::default(),
            )
            .unwrap()
            .into_iter()
            .map(|h| h.key)
            .collect();
        got.sort();
        let want: Vec<Vec<u8>> = model
            .iter()
            .filter(|(_, v)| **v == u)
            .map(|(k, _)| vec![b'k', *k])
            .collect();
        assert_eq!(got, want, "{kind:?} u == {u}");
    };
    for op in ops.chunks(2).take(400) {
        let (a, b) = (op[0], op.get(1).copied().unwrap_or(0));
        let key = [b'k', b % 32];
        match a % 8 {
            0..=3 => {
                let u = i64::from(a / 8 % 4);
                db.put(&key, format!("{{\"u\": {u}}}").as_bytes()).unwrap();
                model.insert(b % 32, u);
                since_flush.push(model.clone());
            }
            4 => {
                db.delete(&key).unwrap();
                model.remove(&(b % 32));
                since_flush.push(model.clone());
            }
            5 => {
                db.flush().unwrap();
                since_flush = vec![model.clone()];
            }
            6 if a & 0x80 != 0 => {
                // Power loss: the state must be one the model went through
                // since the last flush.
                fs.power_loss().unwrap();
                drop(db);
                fs.revive();
                db = Db::open(&dir, opts()).unwrap();
                let mut state = BTreeMap::new();
                for kv in db.iter(None, None).unwrap() {
                    let (k, v) = kv.unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&v).unwrap();
                    state.insert(k[1], v["u"].as_i64().unwrap());
                }
                assert!(
                    since_flush.contains(&state),
                    "{kind:?}: after a power loss the data is no state since the last flush"
                );
                model = state;
                since_flush = vec![model.clone()];
                for u in 0..4 {
                    check(&db, &model, u);
                }
            }
            6 => {
                drop(db);
                db = Db::open(&dir, opts()).unwrap();
            }
            _ => check(&db, &model, i64::from(b % 4)),
        }
    }
    drop(db);
    let _ = std::fs::remove_dir_all(&root);
}

/// Runs target `name` on `data` (the `fuzz/` crate's entry point).
///
/// # Panics
/// On an unknown target name, and wherever the target finds a bug.
pub fn run(name: &str, data: &[u8]) {
    let body = targets()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no fuzz target {name:?}"));
    body(data);
}
