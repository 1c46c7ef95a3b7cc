//! `BatchContext::current_seqs` (where the records a batch replaces are,
//! without copying them) must name the same versions as
//! `BatchContext::current` and as a model of the writes, through
//! memtables, flushed and compacted tables, tombstones and merge operands,
//! for one-key and several-key batches; and so must what the insert
//! reports it shadowed (`EngineHooks::after_insert`) completed by the
//! older components.
#![allow(clippy::unwrap_used)] // the probe hook outside #[test] fns

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use strata_lsm::hooks::{BatchContext, BatchGuard, EngineHooks};
use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::Shadowed;
use strata_lsm::merge::MergeOperator;
use strata_lsm::{Db, Options, WriteBatch, WriteOptions};

/// Concatenates operands onto the base.
struct Concat;

impl MergeOperator for Concat {
    fn name(&self) -> &str {
        "concat"
    }

    fn full_merge(
        &self,
        _key: &[u8],
        base: Option<&[u8]>,
        operands: &[&[u8]],
    ) -> strata_lsm::error::Result<Option<Vec<u8>>> {
        let mut v = base.map(<[u8]>::to_vec).unwrap_or_default();
        for op in operands.iter().rev() {
            v.extend_from_slice(op);
        }
        Ok(Some(v))
    }

    fn partial_merge(&self, _key: &[u8], operands: &[&[u8]]) -> strata_lsm::error::Result<Vec<u8>> {
        Ok(operands
            .iter()
            .rev()
            .flat_map(|o| o.iter().copied())
            .collect())
    }
}

/// A key and its record (`None`: absent or deleted).
type KeyRecord = (Vec<u8>, Option<Vec<u8>>);

/// Looks up every batch's keys both ways; keeps what `current_seqs` said
/// for the last batch and every disagreement with `current`.
#[derive(Default)]
struct Probe {
    last: Mutex<Vec<(Vec<u8>, Option<SeqNo>)>>,
    /// The last batch's records as `current` read them.
    records: Mutex<Vec<KeyRecord>>,
    disagreements: Mutex<Vec<String>>,
}

impl EngineHooks for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn wants_batches(&self) -> bool {
        true
    }

    fn before_batch<'a>(
        &'a self,
        batch: &WriteBatch,
        cx: &BatchContext<'_>,
    ) -> strata_lsm::Result<Option<BatchGuard<'a>>> {
        let mut keys: Vec<&[u8]> = Vec::new();
        for op in batch.iter() {
            keys.push(op?.key());
        }
        let before = batch.sequence() - 1;
        let records = cx.current(&keys, before)?;
        let seqs = cx.current_seqs(&keys, before)?;
        let from_records: Vec<Option<SeqNo>> = records
            .iter()
            .map(|r| r.as_ref().map(|(s, _)| *s))
            .collect();
        if seqs != from_records {
            self.disagreements.lock().unwrap().push(format!(
                "keys {keys:?}: seqs {seqs:?}, records {from_records:?}"
            ));
        }
        *self.last.lock().unwrap() = keys.iter().map(|k| k.to_vec()).zip(seqs).collect();
        *self.records.lock().unwrap() = keys
            .iter()
            .map(|k| k.to_vec())
            .zip(records.into_iter().map(|r| r.map(|(_, v)| v)))
            .collect();
        Ok(None)
    }

    fn wants_shadowed(&self) -> bool {
        true
    }

    /// What the insert shadowed in the active memtable, else the older
    /// components, must give each key's version before the batch, as
    /// `before_batch` saw it.
    fn after_insert<'a>(
        &'a self,
        batch: &WriteBatch,
        shadowed: &[Option<Shadowed<'_>>],
        cx: &BatchContext<'_>,
    ) -> strata_lsm::Result<Option<BatchGuard<'a>>> {
        let before = self.last.lock().unwrap().clone();
        let mut seen: Vec<&[u8]> = Vec::new();
        for (op, sh) in batch.iter().zip(shadowed) {
            let key = op?.key();
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let found = match sh {
                Some(e) => (e.kind != ValueKind::Deletion).then_some(e.seq),
                None => cx.current_seqs(&[key], batch.sequence() - 1)?[0],
            };
            // The shadowed entry's value is the record `current` read.
            if let Some(e) = sh.filter(|e| e.kind == ValueKind::Value) {
                let records = self.records.lock().unwrap();
                let want = records
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, r)| r.as_deref());
                if want != Some(Some(e.value)) {
                    self.disagreements.lock().unwrap().push(format!(
                        "key {key:?}: shadowed value {:?}, record before {want:?}",
                        e.value
                    ));
                }
            }
            let want = before.iter().find(|(k, _)| k == key).and_then(|(_, s)| *s);
            if found != want {
                self.disagreements.lock().unwrap().push(format!(
                    "key {key:?}: after the insert {found:?} (shadowed {sh:?}), before {want:?}"
                ));
            }
        }
        if shadowed.len() != batch.len() {
            self.disagreements.lock().unwrap().push(format!(
                "{} shadowed for {} operations",
                shadowed.len(),
                batch.len()
            ));
        }
        Ok(None)
    }
}

#[test]
fn sequence_numbers_name_the_records_current_finds() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    let opts = Options::small_for_tests()
        .merge_operator(Arc::new(Concat))
        .hook(probe.clone());
    let db = Db::open(dir.path(), opts).unwrap();
    // Key → sequence number of its newest live version (read back after
    // every write).
    let mut model: BTreeMap<Vec<u8>, SeqNo> = BTreeMap::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let key = |i: u64| format!("k{i:04}").into_bytes();
    let mut checked = 0;
    for step in 0..5_000u64 {
        let mut b = WriteBatch::new();
        let n = if rnd() % 4 == 0 { 3 } else { 1 };
        let mut written = Vec::new();
        for _ in 0..n {
            // Several operations of one key in a batch now and then.
            let k = key(rnd() % if n > 1 { 5 } else { 300 });
            match rnd() % 10 {
                0..=5 => b.put(&k, format!("v{step}").as_bytes()),
                6 => b.delete(&k),
                _ => b.merge(&k, format!("m{step}").as_bytes()),
            };
            written.push(k);
        }
        db.write(b, WriteOptions::default()).unwrap();
        for (k, seen) in probe.last.lock().unwrap().iter() {
            assert_eq!(*seen, model.get(k).copied(), "key {k:?} at step {step}");
            checked += 1;
        }
        for k in &written {
            match db.multi_get_with_seq(&[k]).unwrap().remove(0) {
                Some((s, _)) => model.insert(k.clone(), s),
                None => model.remove(k),
            };
        }
        if step % 1_200 == 600 {
            db.flush().unwrap();
        }
        if step % 2_500 == 2_000 {
            db.compact_range(None, None).unwrap();
        }
    }
    assert!(checked > 5_000, "{checked} lookups checked");
    let d = probe.disagreements.lock().unwrap();
    assert!(
        d.is_empty(),
        "{} disagreements, first: {:?}",
        d.len(),
        d.first()
    );
}
