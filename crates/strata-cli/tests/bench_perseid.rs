//! PERSEID's workloads (§5.2–§5.4) on a small scale: exact counts (0
//! mismatches) for every system, with the tiered primary and index-only
//! queries too.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod bench_support;

use bench_support::{bench_run, check_contract, system};

#[test]
fn upsert_skewed_secondary_keys_with_the_tiered_primary() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "perseid-upsert-skew-sec",
            "--records",
            "1500",
            "--queries",
            "30",
            "--top-k",
            "10",
            "--tiered",
            "--systems",
            "strata:perseid,strata:memory",
        ],
    );
    let systems = check_contract(&r, "perseid-upsert-skew-sec", 1500);
    assert_eq!(r["parameters"]["load_updates"], 1500);
    let p = system(systems, "strata:perseid");
    let classes: Vec<&str> = p["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["class"].as_str().unwrap())
        .collect();
    assert!(
        classes.contains(&"lookup") && classes.contains(&"range"),
        "{classes:?}"
    );
}

#[test]
fn mixed_balanced_index_only() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "perseid-mixed-balanced",
            "--records",
            "1000",
            "--ops",
            "400",
            "--top-k",
            "10",
            "--keys-only",
            "--systems",
            "strata:perseid,strata:memory",
        ],
    );
    let systems = check_contract(&r, "perseid-mixed-balanced", 1000);
    let p = system(systems, "strata:perseid");
    let ops: Vec<&str> = p["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"query") && ops.contains(&"get"), "{ops:?}");
}

#[test]
fn recovery_reports_the_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "perseid-recovery",
            "--records",
            "1000",
            "--systems",
            "strata:none,strata:perseid",
        ],
    );
    let systems = check_contract(&r, "perseid-recovery", 1000);
    assert!(
        system(systems, "strata:perseid")["reopen_seconds"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}
