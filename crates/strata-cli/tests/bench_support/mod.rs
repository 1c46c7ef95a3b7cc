//! Helpers shared by the `bench_*` tests: run `strata bench ...` and check
//! the results.json contract.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `strata ARGS`.
pub fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

/// Runs `strata bench run ARGS --out DIR/out --work-dir DIR/work`, which
/// must succeed; returns results.json.
pub fn bench_run(dir: &Path, args: &[&str]) -> Value {
    let out = dir.join("out");
    let work = dir.join("work");
    let mut all = vec!["bench", "run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--out",
        out.to_str().expect("utf-8 path"),
        "--work-dir",
        work.to_str().expect("utf-8 path"),
    ]);
    let o = strata(&all);
    ok(&o);
    results(&out)
}

/// Asserts success.
pub fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "strata failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Parses DIR/results.json.
pub fn results(out: &Path) -> Value {
    let bytes = std::fs::read(out.join("results.json")).expect("results.json");
    serde_json::from_slice(&bytes).expect("results.json is JSON")
}

const SYSTEM_FIELDS: [&str; 14] = [
    "system",
    "ingest_seconds",
    "settle_seconds",
    "reopen_seconds",
    "db_bytes",
    "index_bytes",
    "index_memory_bytes",
    "write_amplification",
    "queries",
    "mixed",
    "ops",
    "mixed_seconds",
    "params",
    "unknown",
];

const QUERY_FIELDS: [&str; 16] = [
    "attribute",
    "class",
    "top_k",
    "count",
    "mean_us",
    "p50_us",
    "p95_us",
    "p99_us",
    "results_mean",
    "blocks_read_mean",
    "min_blocks_mean",
    "index_blocks_mean",
    "stale_mean",
    "calibrated_mean",
    "mismatches",
    "unknown",
];

/// Checks the results.json contract and that no query or operation
/// returned a wrong count; returns the systems.
pub fn check_contract<'a>(r: &'a Value, workload: &str, records: u64) -> &'a Vec<Value> {
    assert_eq!(r["workload"], workload);
    assert_eq!(r["records"], records);
    for f in ["seed", "direct_io", "parameters"] {
        assert!(r.get(f).is_some(), "missing {f}");
    }
    let systems = r["systems"].as_array().expect("systems");
    assert!(!systems.is_empty());
    for s in systems {
        for f in SYSTEM_FIELDS {
            assert!(s.get(f).is_some(), "{}: missing {f}", s["system"]);
        }
        assert!(s["db_bytes"].as_u64().unwrap() > 0, "{}", s["system"]);
        for q in s["queries"].as_array().unwrap() {
            for f in QUERY_FIELDS {
                assert!(q.get(f).is_some(), "missing {f} in {q}");
            }
            assert_eq!(q["mismatches"], 0, "{}: {q}", s["system"]);
            assert!(q["count"].as_u64().unwrap() > 0);
            assert!(
                q["blocks_read_mean"].as_f64().unwrap() >= q["min_blocks_mean"].as_f64().unwrap(),
                "{q}"
            );
        }
        for o in s["ops"].as_array().unwrap() {
            for f in [
                "op",
                "count",
                "ops_per_sec",
                "mean_us",
                "p50_us",
                "p95_us",
                "p99_us",
            ] {
                assert!(o.get(f).is_some(), "missing {f} in {o}");
            }
            assert_eq!(o["mismatches"], 0, "{}: {o}", s["system"]);
        }
    }
    systems
}

/// The system named `name`.
pub fn system<'a>(systems: &'a [Value], name: &str) -> &'a Value {
    systems
        .iter()
        .find(|s| s["system"] == name)
        .unwrap_or_else(|| panic!("no system {name}"))
}
