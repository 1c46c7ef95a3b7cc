//! PERSEID's workloads (Wang et al., USENIX ATC 2023, §5.1–§5.4) as
//! traces of `strata bench run`.
//!
//! Records (§5.1): a random 64-bit primary key (16 hex digits), a random
//! 64-bit secondary key `sk` drawn from a pool of `records / 25` values
//! (about 25 records per secondary key), and a body that makes the record
//! about 1 KB. One index, on `sk` (i64).
//!
//! Workloads (`--records N` live records after the load):
//! - `perseid-insert` (§5.2.1): N inserts.
//! - `perseid-upsert-uniform`, `perseid-upsert-skew-pri`,
//!   `perseid-upsert-skew-sec` (§5.2.1): N inserts and N updates, shuffled
//!   (`--update-fraction` changes the share; default 0.5); updates pick
//!   the primary key uniformly, or Zipf(0.99) (`skew-pri`); secondary keys
//!   are uniform over the pool, or Zipf(0.99) (`skew-sec`).
//! - Each static workload carries two query sets on `sk`: `lookup`
//!   (§5.2.2: equality on a live secondary key) and `range` (§5.2.3: the
//!   range of 20 consecutive live secondary keys); `--top-k 10,200` and
//!   `--keys-only` give the paper's top-K, index-only and non-index-only
//!   variants. Counts are exact over the final records.
//! - `perseid-mixed-write-heavy`, `perseid-mixed-balanced`,
//!   `perseid-mixed-read-heavy` (§5.3, Table 1): a preload of N records
//!   (upsert skew-pri / skew-sec shape), then `--ops` operations dealt in
//!   the table's proportions: upserts (half inserts, half Zipf(0.99)
//!   updates with Zipf(0.99) secondary keys), gets of a Zipf(0.99) live
//!   key, and lookups of a Zipf(0.99) secondary key with the exact count
//!   at that point. Index-only and non-index-only queries are one share
//!   here: `--keys-only` chooses for the whole run (a query of the trace
//!   carries no keys-only flag).
//! - `perseid-recovery` (§5.4): the Zipfian upsert load without queries;
//!   the run's `reopen s` is the recovery time.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use crate::queries::{Query, QuerySet};
use crate::rng::{SplitMix64, Zipf};
use crate::system::{AttrType, IndexDecl};
use crate::trace::{Label, Op, Put, StaticCfg, Trace};

/// Records per secondary key (§5.1: 100 M records over 4 M keys).
pub const RECORDS_PER_SKEY: u64 = 25;
/// Bytes of a record's JSON document (§5.1: 1 KB).
pub const RECORD_BYTES: usize = 1024;
/// Zipf exponent of the skewed workloads (§5.2.1).
pub const ZIPF: f64 = 0.99;
/// Secondary keys per range query (§5.2.3).
pub const RANGE_SKEYS: usize = 20;

/// The workloads of this module.
pub const WORKLOADS: [&str; 8] = [
    "perseid-insert",
    "perseid-upsert-uniform",
    "perseid-upsert-skew-pri",
    "perseid-upsert-skew-sec",
    "perseid-mixed-write-heavy",
    "perseid-mixed-balanced",
    "perseid-mixed-read-heavy",
    "perseid-recovery",
];

/// Table 1's operation ratios of a mixed workload: (upsert, get, query),
/// the query share being index-only plus non-index-only.
pub fn mixed_ratios(workload: &str) -> Option<[f64; 3]> {
    match workload {
        "perseid-mixed-write-heavy" => Some([0.70, 0.10, 0.20]),
        "perseid-mixed-balanced" => Some([0.45, 0.10, 0.45]),
        "perseid-mixed-read-heavy" => Some([0.20, 0.20, 0.60]),
        _ => None,
    }
}

/// Whether updates and secondary keys are skewed.
#[derive(Debug, Clone, Copy)]
struct Skew {
    pri: bool,
    sec: bool,
}

/// The record generator and the live state (for exact counts).
struct Gen {
    r: SplitMix64,
    pool: Vec<i64>,
    sk_zipf: Zipf,
    pk_zipf: Zipf,
    skew: Skew,
    /// Primary keys of the live records, by slot (insertion order).
    keys: Vec<u64>,
    /// Secondary key of each slot.
    live: Vec<i64>,
    /// Live records per secondary key.
    counts: HashMap<i64, u64>,
    pad: String,
}

fn key_of(pk: u64) -> Vec<u8> {
    format!("{pk:016x}").into_bytes()
}

impl Gen {
    fn new(seed: u64, records: u64, max_keys: u64, skew: Skew) -> Gen {
        let mut r = SplitMix64::derive(seed, 0x9e25_e1d0);
        let pool_n = (records / RECORDS_PER_SKEY).max(1);
        let pool: Vec<i64> = (0..pool_n).map(|_| r.next_u64() as i64).collect();
        // The body fills the record to about RECORD_BYTES.
        let pad = "x".repeat(RECORD_BYTES.saturating_sub(80));
        Gen {
            r,
            sk_zipf: Zipf::new(pool_n, ZIPF),
            pk_zipf: Zipf::new(max_keys.max(1), ZIPF),
            pool,
            skew,
            keys: Vec::new(),
            live: Vec::new(),
            counts: HashMap::new(),
            pad,
        }
    }

    fn skey(&mut self) -> i64 {
        let i = if self.skew.sec {
            self.sk_zipf.sample(&mut self.r) - 1
        } else {
            self.r.below(self.pool.len() as u64)
        };
        self.pool.get(i as usize).copied().unwrap_or(0)
    }

    /// A live slot: uniform, or Zipf(0.99) over slots (hot keys are the
    /// oldest) when `skewed`.
    fn slot(&mut self, skewed: bool) -> usize {
        let n = self.keys.len().max(1) as u64;
        let s = if skewed {
            (self.pk_zipf.sample(&mut self.r) - 1) % n
        } else {
            self.r.below(n)
        };
        s as usize
    }

    fn value(&self, pk: u64, sk: i64) -> Vec<u8> {
        json!({"id": format!("{pk:016x}"), "sk": sk, "body": self.pad})
            .to_string()
            .into_bytes()
    }

    fn insert(&mut self) -> Put {
        // Random 64-bit keys (§5.1): a collision is negligible at any
        // scale this harness runs.
        let pk = self.r.next_u64();
        let sk = self.skey();
        self.keys.push(pk);
        self.live.push(sk);
        *self.counts.entry(sk).or_default() += 1;
        Put {
            key: key_of(pk),
            value: self.value(pk, sk),
            update: false,
            ts_ms: 0,
        }
    }

    fn update(&mut self, skewed: bool) -> Put {
        let slot = self.slot(skewed);
        let sk = self.skey();
        let (Some(&pk), Some(old)) = (self.keys.get(slot), self.live.get_mut(slot)) else {
            return self.insert();
        };
        if let Some(c) = self.counts.get_mut(old) {
            *c = c.saturating_sub(1);
        }
        *old = sk;
        *self.counts.entry(sk).or_default() += 1;
        Put {
            key: key_of(pk),
            value: self.value(pk, sk),
            update: true,
            ts_ms: 0,
        }
    }

    /// `inserts` inserts and `updates` updates, shuffled (each write is an
    /// update with probability remaining updates / remaining writes).
    fn load(&mut self, inserts: u64, updates: u64) -> Vec<Put> {
        let (mut i, mut u) = (inserts, updates);
        let mut out = Vec::with_capacity((inserts + updates) as usize);
        while i + u > 0 {
            let update = !self.keys.is_empty() && self.r.below(i + u) < u;
            if update {
                u -= 1;
                out.push(self.update(self.skew.pri));
            } else {
                i -= 1;
                out.push(self.insert());
            }
        }
        out
    }

    /// Live secondary keys, sorted.
    fn live_skeys(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self
            .counts
            .iter()
            .filter(|(_, c)| **c > 0)
            .map(|(k, _)| *k)
            .collect();
        v.sort_unstable();
        v
    }
}

fn decl() -> IndexDecl {
    IndexDecl {
        name: "sk".into(),
        field: "sk".into(),
        ty: AttrType::I64,
    }
}

fn set(class: &str, qs: Vec<(Query, u64)>) -> QuerySet {
    let counts: Vec<u64> = qs.iter().map(|q| q.1).collect();
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    QuerySet {
        attribute: "sk".into(),
        class: class.into(),
        target_mean: mean,
        achieved_mean: mean,
        clamped: false,
        param: 0.0,
        expected_counts: counts,
        queries: qs.into_iter().map(|q| q.0).collect(),
    }
}

fn skew_of(workload: &str) -> Option<Skew> {
    Some(match workload {
        "perseid-insert" | "perseid-upsert-uniform" => Skew {
            pri: false,
            sec: false,
        },
        "perseid-upsert-skew-pri" | "perseid-recovery" => Skew {
            pri: true,
            sec: false,
        },
        "perseid-upsert-skew-sec" => Skew {
            pri: false,
            sec: true,
        },
        _ => return None,
    })
}

/// A static workload of this module (see the module doc); `None` for
/// another name.
pub fn static_trace(workload: &str, c: &StaticCfg) -> Option<Trace> {
    let skew = skew_of(workload)?;
    let updates = if workload == "perseid-insert" {
        0
    } else {
        let f = if c.update_fraction > 0.0 {
            c.update_fraction
        } else {
            0.5
        };
        (c.records as f64 * f / (1.0 - f)).round() as u64
    };
    let mut g = Gen::new(c.seed, c.records, c.records, skew);
    let load = g.load(c.records, updates);
    let mut sets = Vec::new();
    if workload != "perseid-recovery" {
        let skeys = g.live_skeys();
        let mut r = SplitMix64::derive(c.seed, 0x10c4_a7e5);
        let (mut lookups, mut ranges) = (Vec::new(), Vec::new());
        for _ in 0..c.queries {
            if skeys.is_empty() {
                break;
            }
            let i = r.below(skeys.len() as u64) as usize;
            let v = skeys[i];
            lookups.push((Query::Lookup(v), g.counts.get(&v).copied().unwrap_or(0)));
            let j = (i + RANGE_SKEYS - 1).min(skeys.len() - 1);
            let count = skeys[i..=j]
                .iter()
                .map(|k| g.counts.get(k).copied().unwrap_or(0))
                .sum();
            ranges.push((Query::Range(v, skeys[j]), count));
        }
        sets = vec![set("lookup", lookups), set("range", ranges)];
    }
    Some(Trace {
        workload: workload.into(),
        indexes: vec![decl()],
        gaps: BTreeMap::new(),
        load,
        sets,
        records: c.records,
        parameters: BTreeMap::from([
            ("queries_per_set".into(), json!(c.queries)),
            ("load_writes".into(), json!(c.records + updates)),
            ("load_updates".into(), json!(updates)),
            ("records_per_skey".into(), json!(RECORDS_PER_SKEY)),
            ("record_bytes".into(), json!(RECORD_BYTES)),
            ("skew_pri".into(), json!(skew.pri)),
            ("skew_sec".into(), json!(skew.sec)),
            ("zipf".into(), json!(ZIPF)),
        ]),
        ..Trace::default()
    })
}

/// A mixed workload of this module (§5.3): `preload` records loaded as
/// the Zipfian upsert (half updates), then `ops` operations in Table 1's
/// proportions (see the module doc). `None` for another name.
pub fn mixed_trace(workload: &str, preload: u64, ops: u64, seed: u64) -> Option<Trace> {
    let [pu, pg, _] = mixed_ratios(workload)?;
    let skew = Skew {
        pri: true,
        sec: true,
    };
    let upserts = (ops as f64 * pu).round() as u64;
    let gets = (ops as f64 * pg).round() as u64;
    let queries = ops.saturating_sub(upserts + gets);
    let mut g = Gen::new(seed, preload, preload + upserts, skew);
    let load = g.load(preload, preload);
    let mut r = SplitMix64::derive(seed, 0x3173_d0c5);
    let mut remaining = [upserts, gets, queries];
    let mut out = Vec::with_capacity(ops as usize);
    loop {
        let total: u64 = remaining.iter().sum();
        if total == 0 {
            break;
        }
        let mut x = r.below(total);
        let mut kind = 0;
        for (k, c) in remaining.iter().enumerate() {
            if x < *c {
                kind = k;
                break;
            }
            x -= *c;
        }
        if let Some(c) = remaining.get_mut(kind) {
            *c -= 1;
        }
        match kind {
            0 if r.below(2) == 0 => out.push(Op::Put(g.insert())),
            0 => out.push(Op::Put(g.update(true))),
            1 => {
                let slot = g.slot(true);
                let key = g.keys.get(slot).map_or_else(Vec::new, |k| key_of(*k));
                out.push(Op::Get {
                    key,
                    expect_found: true,
                });
            }
            _ => {
                let v = g.skey();
                out.push(Op::Query {
                    label: 0,
                    query: Query::Lookup(v),
                    expected: Some(g.counts.get(&v).copied().unwrap_or(0)),
                });
            }
        }
    }
    let mean = {
        let (n, s) = out.iter().fold((0u64, 0u64), |(n, s), o| match o {
            Op::Query {
                expected: Some(e), ..
            } => (n + 1, s + e),
            _ => (n, s),
        });
        s as f64 / n.max(1) as f64
    };
    Some(Trace {
        workload: workload.into(),
        indexes: vec![decl()],
        load,
        ops: out,
        labels: vec![Label {
            index: "sk".into(),
            class: "lookup".into(),
            calibrated_mean: mean,
        }],
        records: preload,
        parameters: BTreeMap::from([
            ("preload".into(), json!(preload)),
            ("ops".into(), json!(ops)),
            ("upserts".into(), json!(upserts)),
            ("gets".into(), json!(gets)),
            ("queries".into(), json!(queries)),
            ("zipf".into(), json!(ZIPF)),
        ]),
        ..Trace::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(records: u64) -> StaticCfg {
        StaticCfg {
            records,
            queries: 50,
            seed: 7,
            update_fraction: 0.0,
        }
    }

    /// Replays the writes and counts every query's answer by brute force.
    fn brute(load: &[Put]) -> BTreeMap<Vec<u8>, i64> {
        let mut live = BTreeMap::new();
        for p in load {
            let v: serde_json::Value = serde_json::from_slice(&p.value).unwrap();
            live.insert(p.key.clone(), v["sk"].as_i64().unwrap());
        }
        live
    }

    #[test]
    fn static_counts_are_exact_and_records_match_section_5_1() {
        for w in [
            "perseid-insert",
            "perseid-upsert-skew-pri",
            "perseid-upsert-skew-sec",
        ] {
            let t = static_trace(w, &cfg(2000)).unwrap();
            let live = brute(&t.load);
            assert_eq!(live.len(), 2000, "{w}");
            let updates = t.load.iter().filter(|p| p.update).count();
            assert_eq!(updates, if w == "perseid-insert" { 0 } else { 2000 });
            assert!(t
                .load
                .iter()
                .all(|p| p.value.len() >= 1000 && p.value.len() <= 1100));
            for s in &t.sets {
                for (q, want) in s.queries.iter().zip(&s.expected_counts) {
                    let n = live
                        .values()
                        .filter(|v| match *q {
                            Query::Lookup(x) => **v == x,
                            Query::Range(a, b) => a <= **v && **v <= b,
                            _ => false,
                        })
                        .count() as u64;
                    assert_eq!(n, *want, "{w} {q:?}");
                }
            }
            let distinct: std::collections::BTreeSet<i64> = live.values().copied().collect();
            if w != "perseid-upsert-skew-sec" {
                // About 25 records per secondary key (fewer keys drawn).
                assert!(distinct.len() > 2000 / 25 / 2, "{w}: {}", distinct.len());
            }
        }
    }

    #[test]
    fn mixed_counts_follow_the_sequence() {
        let t = mixed_trace("perseid-mixed-balanced", 1000, 2000, 3).unwrap();
        let mut live = brute(&t.load);
        let mut queries = 0;
        for op in &t.ops {
            match op {
                Op::Put(p) => {
                    let v: serde_json::Value = serde_json::from_slice(&p.value).unwrap();
                    assert_eq!(p.update, live.contains_key(&p.key));
                    live.insert(p.key.clone(), v["sk"].as_i64().unwrap());
                }
                Op::Get { key, expect_found } => {
                    assert_eq!(*expect_found, live.contains_key(key));
                }
                Op::Query {
                    query: Query::Lookup(x),
                    expected,
                    ..
                } => {
                    queries += 1;
                    let n = live.values().filter(|v| **v == *x).count() as u64;
                    assert_eq!(Some(n), *expected);
                }
                Op::Query { .. } => unreachable!(),
            }
        }
        assert!((850..=950).contains(&queries), "{queries}");
    }
}
