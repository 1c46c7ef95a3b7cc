//! A one-key `multi_get` (the lookup of the record every indexed put
//! replaces) takes a point-lookup path of its own: it must answer as the
//! batched path does and as a model of the operations, through memtables,
//! flushed and compacted tables, tombstones, merge operands and snapshots.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_lsm::merge::MergeOperator;
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

/// Appends operands to the base with a `+` between them.
struct Append;

impl MergeOperator for Append {
    fn name(&self) -> &str {
        "append"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> strata_lsm::error::Result<Option<Vec<u8>>> {
        let mut v = base.map(<[u8]>::to_vec).unwrap_or_default();
        for op in operands.iter().rev() {
            v.push(b'+');
            v.extend_from_slice(op);
        }
        Ok(Some(v))
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> strata_lsm::error::Result<Vec<u8>> {
        let mut v = Vec::new();
        for (i, op) in operands.iter().rev().enumerate() {
            if i > 0 {
                v.push(b'+');
            }
            v.extend_from_slice(op);
        }
        Ok(v)
    }
}

#[test]
fn one_key_lookups_answer_as_batches_and_the_model_do() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::small_for_tests().merge_operator(Arc::new(Append));
    let db = Db::open(dir.path(), opts).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let key = |i: u64| format!("k{i:04}").into_bytes();
    // (model at a snapshot, the snapshot), checked at the end.
    let mut pinned = Vec::new();
    for step in 0..6_000u64 {
        let k = key(rnd() % 400);
        match rnd() % 10 {
            0..=5 => {
                let v = format!("v{step}").into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k.clone(), v);
            }
            6 => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            _ => {
                let op = format!("m{step}").into_bytes();
                let mut b = WriteBatch::new();
                b.merge(&k, &op);
                db.write(b, WriteOptions::default()).unwrap();
                let mut v = model.get(&k).cloned().unwrap_or_default();
                v.push(b'+');
                v.extend_from_slice(&op);
                model.insert(k.clone(), v);
            }
        }
        if step % 1_500 == 700 {
            db.flush().unwrap();
        }
        if step % 2_000 == 1_999 {
            pinned.push((model.clone(), db.snapshot()));
        }
        if step % 97 == 0 {
            let probe = key(rnd() % 420);
            let other = key(rnd() % 420);
            let one = db.multi_get_with_seq(&[&probe]).unwrap();
            let two = db.multi_get_with_seq(&[&other, &probe]).unwrap();
            assert_eq!(one.len(), 1);
            assert_eq!(one[0], two[1], "key {probe:?} at step {step}");
            assert_eq!(
                one[0].as_ref().map(|(_, v)| v.clone()),
                model.get(&probe).cloned(),
                "key {probe:?} at step {step}"
            );
        }
    }
    db.wait_for_compactions().unwrap();
    for i in 0..420 {
        let k = key(i);
        let one = db.multi_get_with_seq(&[&k]).unwrap();
        assert_eq!(
            one[0].as_ref().map(|(_, v)| v.clone()),
            model.get(&k).cloned()
        );
    }
    for (m, snap) in &pinned {
        for i in 0..420 {
            let k = key(i);
            let one = db.multi_get_at_seq(&[&k], snap.sequence()).unwrap();
            let two = db.multi_get_at_seq(&[&k, &k], snap.sequence()).unwrap();
            assert_eq!(one[0], two[0]);
            assert_eq!(one[0].as_ref().map(|(_, v)| v.clone()), m.get(&k).cloned());
        }
    }
}
