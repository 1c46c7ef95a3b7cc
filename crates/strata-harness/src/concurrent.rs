//! `strata stress --threads N --seconds S`: concurrent writers and readers
//! on indexed data, every index answer checked at its own snapshot.
//!
//! Writers put, delete and batch-write JSON records whose indexed
//! attributes (`u`: i64, `c`: point) change with every write, on tiny
//! memtables and levels so that flushes and compactions run continuously.
//! Readers query an index ([`Db::query_snapshot`]: the answer and the
//! snapshot it was given at), scan the primary data at that same snapshot,
//! and compare: a full query must return exactly the scan's matching
//! records with their values; a top-K query the K newest of them (all if
//! fewer), newest first. Any difference is a violation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strata::attr::{extract, parse_path};
use strata::{Db, IndexValue, Options, Predicate, QueryOptions, StrategyKind, WriteBatch};
use strata_bench::rng::{mix64, SplitMix64};

use crate::stress::{create_stress_indexes, STRESS_INDEXES};
use crate::Error;

/// Parameters of one concurrent run.
#[derive(Debug, Clone, Copy)]
pub struct ConcurrentArgs {
    /// Threads in all: half write (at least one), the rest read (at least
    /// one).
    pub threads: usize,
    /// How long to run.
    pub duration: Duration,
    /// Strategy of the indexes.
    pub strategy: StrategyKind,
    /// Key space size.
    pub keys: u64,
    /// Seed of the threads' random choices (thread interleaving is not
    /// deterministic, so neither is a run).
    pub seed: u64,
    /// Tiny memtables and levels (continuous flushes and compactions).
    pub small: bool,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct ConcurrentReport {
    /// Write calls made (a put, a delete, or a batch of several).
    pub writes: u64,
    /// Index queries checked against a scan.
    pub queries: u64,
    /// Checked queries whose answer differed from the scan; 0 in a
    /// correct run.
    pub violations: u64,
    /// The first violations (at most 10), described.
    pub examples: Vec<String>,
}

/// Runs writers and checking readers on the database at `dir` (created if
/// missing) for `args.duration`.
pub fn run(dir: &Path, args: ConcurrentArgs) -> Result<ConcurrentReport, Error> {
    if args.threads < 2 {
        return Err(Error::Other(
            "--threads must be at least 2 (a writer and a reader)".into(),
        ));
    }
    let opts = if args.small {
        Options::small_for_tests()
    } else {
        Options::default()
    };
    let db = Db::open(dir, opts)?;
    create_stress_indexes(&db, args.strategy)?;
    let writers = (args.threads / 2).max(1);
    let readers = args.threads - writers;
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let queries = AtomicU64::new(0);
    let violations = AtomicU64::new(0);
    let examples: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let deadline = Instant::now() + args.duration;
    std::thread::scope(|s| {
        for t in 0..writers {
            let (db, stop, writes, first_error) = (&db, &stop, &writes, &first_error);
            s.spawn(move || {
                let mut rng = SplitMix64::new(mix64(args.seed ^ (t as u64) << 32));
                while !stop.load(Relaxed) && Instant::now() < deadline {
                    if let Err(e) = write_one(db, &mut rng, args.keys) {
                        record_error(first_error, e);
                        stop.store(true, Relaxed);
                    }
                    writes.fetch_add(1, Relaxed);
                }
            });
        }
        for t in 0..readers {
            let (db, stop, queries, violations, examples, first_error) =
                (&db, &stop, &queries, &violations, &examples, &first_error);
            s.spawn(move || {
                let mut rng = SplitMix64::new(mix64(args.seed ^ 0x7ead ^ (t as u64) << 40));
                while !stop.load(Relaxed) && Instant::now() < deadline {
                    match check_one(db, &mut rng) {
                        Ok(None) => {}
                        Ok(Some(v)) => {
                            violations.fetch_add(1, Relaxed);
                            let mut ex = examples.lock().unwrap_or_else(|e| e.into_inner());
                            if ex.len() < 10 {
                                ex.push(v);
                            }
                        }
                        Err(e) => {
                            record_error(first_error, e);
                            stop.store(true, Relaxed);
                        }
                    }
                    queries.fetch_add(1, Relaxed);
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok(ConcurrentReport {
        writes: writes.into_inner(),
        queries: queries.into_inner(),
        violations: violations.into_inner(),
        examples: examples.into_inner().unwrap_or_else(|e| e.into_inner()),
    })
}

fn record_error(slot: &Mutex<Option<Error>>, e: Error) {
    let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
    if s.is_none() {
        *s = Some(e);
    }
}

fn record(rng: &mut SplitMix64) -> Vec<u8> {
    let u = rng.below(50);
    let (x, y) = (rng.below(1000), rng.below(1000));
    let pad = rng.below(200);
    format!(
        r#"{{"u": {u}, "c": [{x}.5, {y}.25], "p": "{:0>1$}"}}"#,
        "", pad as usize
    )
    .into_bytes()
}

/// One write: a put (70%), a delete (15%) or a batch of 2–6 of them.
fn write_one(db: &Db, rng: &mut SplitMix64, keys: u64) -> Result<(), Error> {
    let key = |rng: &mut SplitMix64| format!("k{:06}", rng.below(keys)).into_bytes();
    let r = rng.below(100);
    if r < 70 {
        let k = key(rng);
        db.put(&k, &record(rng))?;
    } else if r < 85 {
        db.delete(&key(rng))?;
    } else {
        let mut b = WriteBatch::new();
        for _ in 0..2 + rng.below(5) {
            let k = key(rng);
            if rng.below(4) == 0 {
                b.delete(&k);
            } else {
                b.put(&k, &record(rng));
            }
        }
        db.write(b, Default::default())?;
    }
    Ok(())
}

/// One query checked against a scan at its snapshot: `Some(description)`
/// on a violation.
fn check_one(db: &Db, rng: &mut SplitMix64) -> Result<Option<String>, Error> {
    let (index, pred) = match rng.below(3) {
        0 => ("u", Predicate::Eq(IndexValue::I64(rng.below(50) as i64))),
        1 => {
            let lo = rng.below(50) as i64;
            let hi = lo + rng.below(5) as i64;
            (
                "u",
                Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)),
            )
        }
        _ => {
            let (x, y) = (rng.below(1000) as f64, rng.below(1000) as f64);
            let (w, h) = (rng.below(200) as f64, rng.below(200) as f64);
            ("c", Predicate::Within([x, y, x + w, y + h]))
        }
    };
    let limit = (rng.below(4) == 0).then_some(10);
    let opts = QueryOptions {
        limit,
        ..QueryOptions::default()
    };
    let (hits, snap) = db.query_snapshot(index, &pred, opts)?;
    let hits = hits.into_vec();
    let (_, field, ty) = STRESS_INDEXES
        .iter()
        .find(|(n, _, _)| *n == index)
        .copied()
        .ok_or_else(|| Error::Other(format!("no stress index {index}")))?;
    let path = parse_path(field)?;
    let mut expected: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for kv in snap.iter(None, None)? {
        let (k, v) = kv?;
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&v) else {
            continue;
        };
        if extract(&doc, &path, ty).is_ok_and(|a| pred.matches(&a)) {
            expected.insert(k, v);
        }
    }
    let what = || {
        format!(
            "{index} {pred:?} limit {limit:?} at snapshot {}",
            snap.sequence()
        )
    };
    let mut seen = BTreeMap::new();
    for h in &hits {
        match (expected.get(&h.key), &h.value) {
            (Some(want), Some(got)) if want == got => {}
            (Some(_), _) => {
                return Ok(Some(format!(
                    "{}: key {} returned with a superseded value",
                    what(),
                    String::from_utf8_lossy(&h.key)
                )))
            }
            (None, _) => {
                return Ok(Some(format!(
                    "{}: key {} returned but does not match at the snapshot",
                    what(),
                    String::from_utf8_lossy(&h.key)
                )))
            }
        }
        if seen.insert(h.key.clone(), ()).is_some() {
            return Ok(Some(format!(
                "{}: key {} returned twice",
                what(),
                String::from_utf8_lossy(&h.key)
            )));
        }
    }
    if hits
        .windows(2)
        .any(|w| w.first().map(|a| a.seq) < w.get(1).map(|b| b.seq))
    {
        return Ok(Some(format!("{}: hits not newest first", what())));
    }
    let want = limit.map_or(expected.len(), |k| k.min(expected.len()));
    if hits.len() != want {
        return Ok(Some(format!(
            "{}: {} hits, {} records match",
            what(),
            hits.len(),
            expected.len()
        )));
    }
    if limit.is_some() && hits.len() < expected.len() {
        // Top-K: no record left out is newer than the oldest returned.
        let oldest = hits.iter().map(|h| h.seq).min().unwrap_or(0);
        for k in expected.keys().filter(|k| !seen.contains_key(*k)) {
            let mut newest = 0;
            snap.for_each_version(k, &mut |seq, _, _| {
                newest = seq;
                Ok(false)
            })?;
            if newest > oldest {
                return Ok(Some(format!(
                    "{}: key {} (seq {newest}) left out for an older one (seq {oldest})",
                    what(),
                    String::from_utf8_lossy(k)
                )));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every strategy, two writers and two readers for a second each on
    /// tiny memtables: no violation (CI's short run; the long one is in
    /// docs/testing.md).
    #[test]
    fn every_strategy_answers_at_its_snapshot_under_concurrent_writes() {
        for kind in StrategyKind::ALL {
            let tmp = tempfile::tempdir().unwrap();
            let r = run(
                tmp.path(),
                ConcurrentArgs {
                    threads: 4,
                    duration: Duration::from_millis(1500),
                    strategy: kind,
                    keys: 300,
                    seed: 7,
                    small: true,
                },
            )
            .unwrap();
            assert!(r.writes > 0 && r.queries > 0, "{kind:?}: {r:?}");
            assert_eq!(r.violations, 0, "{kind:?}: {:?}", r.examples);
        }
    }
}
