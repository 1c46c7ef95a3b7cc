//! The mixed workloads (NEXT Table 2) on a small preload: per-interval
//! latencies, per-operation summaries, and every query and get checked
//! against the in-memory oracle and across systems (0 mismatches).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod bench_support;

use bench_support::{bench_run, check_contract, system};
use serde_json::Value;

fn mixed(workload: &str, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--workload",
        workload,
        "--records",
        "2000",
        "--ops",
        "600",
        "--queries",
        "50",
        "--systems",
        "strata:none,strata:next",
    ];
    args.extend_from_slice(extra);
    bench_run(dir.path(), &args)
}

fn op<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == name)
}

#[test]
fn write_heavy() {
    let r = mixed("mixed-write-heavy", &[]);
    let systems = check_contract(&r, "mixed-write-heavy", 2000);
    assert_eq!(r["parameters"]["op_counts"]["insert"], 480);
    assert_eq!(r["parameters"]["op_counts"]["query"], 120);
    let next = system(systems, "strata:next");
    assert_eq!(op(next, "insert").unwrap()["count"], 480);
    assert_eq!(op(next, "query").unwrap()["count"], 120);
    assert!(op(next, "update").is_none());
    // Default interval: ops / 50.
    let iv = next["mixed"].as_array().unwrap();
    assert_eq!(iv.len(), 50);
    assert_eq!(iv[49]["ops_done"], 600);
    assert!(next["mixed_seconds"].as_f64().unwrap() > 0.0);
    // One entry per queried attribute, at the small class by default.
    let qs = next["queries"].as_array().unwrap();
    let attrs: Vec<&str> = qs
        .iter()
        .map(|q| q["attribute"].as_str().unwrap())
        .collect();
    assert_eq!(attrs, ["user_id", "coordinates"]);
    assert!(qs.iter().all(|q| q["class"] == "small"));
    // No index, no queries: the baseline skips them.
    let none = system(systems, "strata:none");
    assert!(op(none, "query").is_none());
    assert!(none["queries"].as_array().unwrap().is_empty());
}

#[test]
fn read_heavy_with_gets_and_top_k() {
    let r = mixed(
        "mixed-read-heavy",
        &[
            "--get-fraction",
            "0.25",
            "--top-k",
            "10",
            "--interval",
            "100",
        ],
    );
    let systems = check_contract(&r, "mixed-read-heavy", 2000);
    assert_eq!(r["parameters"]["op_counts"]["get"], 120);
    assert_eq!(r["parameters"]["op_counts"]["query"], 360);
    assert_eq!(r["parameters"]["top_k"], 10);
    let next = system(systems, "strata:next");
    assert_eq!(op(next, "get").unwrap()["count"], 120);
    assert_eq!(next["mixed"].as_array().unwrap().len(), 6);
    for q in next["queries"].as_array().unwrap() {
        assert_eq!(q["top_k"], 10);
        assert!(q["results_mean"].as_f64().unwrap() <= 10.0);
    }
}

#[test]
fn update_heavy() {
    let r = mixed("mixed-update-heavy", &["--query-class", "medium"]);
    let systems = check_contract(&r, "mixed-update-heavy", 2000);
    let next = system(systems, "strata:next");
    assert_eq!(op(next, "update").unwrap()["count"], 240);
    assert_eq!(op(next, "insert").unwrap()["count"], 240);
    assert!(next["queries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|q| q["class"] == "medium"));
    let none = system(systems, "strata:none");
    assert_eq!(op(none, "update").unwrap()["count"], 240);
}

#[test]
fn mixed_only_flags_are_rejected_elsewhere() {
    let o = bench_support::strata(&[
        "bench",
        "run",
        "--workload",
        "static-tweets",
        "--ops",
        "10",
        "--out",
        "/nonexistent/never-created",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--ops applies to the mixed workloads only"),
        "{e}"
    );
}
