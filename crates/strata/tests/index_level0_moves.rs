//! Every strategy stays exact when level-0 tables move down whole instead
//! of being merged (keys written in order, an attribute that grows with
//! them, as time-ordered ids and timestamps do): the moved tables keep
//! their per-table structures (NEXT's blocks, embedded's zones, the
//! filter's ranges and marks), and the secondary trees move their own
//! tables too. Then updates and deletes spread over the key range make
//! the next level-0 tables overlap, so those are merged; every query is
//! checked against a model at each stage and after a reopen.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::{expected, key, spec_for, Model, Rng, STRATEGIES};
use strata::{Db, IndexValue, KeyType, Options, Predicate, QueryOptions};

fn record(t: i64, i: u64) -> Vec<u8> {
    format!(r#"{{"t": {t}, "i": {i}, "pad": "{}"}}"#, "x".repeat(60)).into_bytes()
}

fn check(db: &Db, model: &Model, rng: &mut Rng, strategy: &str, stage: &str) {
    for q in 0..12 {
        let lo = rng.below(2_200) as i64 - 100;
        let pred = if q % 4 == 0 {
            Predicate::Eq(IndexValue::I64(lo))
        } else {
            Predicate::Range(
                IndexValue::I64(lo),
                IndexValue::I64(lo + rng.below(300) as i64),
            )
        };
        let mut opts = QueryOptions::default();
        if q % 3 == 0 {
            opts = opts.limit(rng.below(7) as usize + 1);
        }
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = db
            .query("by_t", &pred, opts)
            .unwrap_or_else(|e| panic!("{strategy} {stage}: {e}"))
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        let want = expected(model, "t", KeyType::I64, &pred, opts);
        assert_eq!(got, want, "{strategy} {stage}: {pred:?} {opts:?}");
    }
}

#[test]
fn every_strategy_stays_exact_across_level0_moves_and_merges() {
    for strategy in STRATEGIES {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng::new(41);
        let mut model = Model::new();
        let mut order = 0u64;
        {
            let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
            db.create_index(spec_for(strategy, "by_t", "t", KeyType::I64))
                .unwrap();
            // In order: keys and attribute grow together.
            for i in 0..2_000u64 {
                let v = record(i as i64, i);
                db.put(&key(i), &v).unwrap();
                order += 1;
                model.insert(key(i), (order, v));
                if i % 100 == 99 {
                    db.flush().unwrap();
                }
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            let io = db.stats().io;
            assert!(io.compactions > 0, "{strategy}: {io:?}");
            assert_eq!(
                io.compaction_bytes_written, 0,
                "{strategy}: moved, not merged"
            );
            check(&db, &model, &mut rng, strategy, "after moves");

            // Updates (a new attribute) and deletes over the whole range.
            for n in 0..600u64 {
                let i = rng.below(2_000);
                order += 1;
                if n % 5 == 0 {
                    db.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    let v = record(rng.below(2_000) as i64, i);
                    db.put(&key(i), &v).unwrap();
                    model.insert(key(i), (order, v));
                }
                if n % 100 == 99 {
                    db.flush().unwrap();
                }
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            assert!(
                db.stats().io.compaction_bytes_written > 0,
                "{strategy}: overlapping tables merged"
            );
            check(&db, &model, &mut rng, strategy, "after merges");
        }
        let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
        check(&db, &model, &mut rng, strategy, "after reopen");
    }
}
