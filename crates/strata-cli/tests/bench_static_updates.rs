//! `--update-fraction`: part of the load rewrites existing keys with new
//! attribute values; query sets are calibrated and counted on the final
//! records, so every answer must still have the exact size, and NEXT's
//! validation meets stale candidates.

mod bench_support;

use bench_support::{bench_run, check_contract, system};

#[test]
fn tweets_with_updates_count_on_final_records() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "static-tweets",
            "--records",
            "3000",
            "--queries",
            "5",
            "--update-fraction",
            "0.3",
            "--systems",
            "strata:none,strata:next",
            "--top-k",
            "10",
        ],
    );
    let systems = check_contract(&r, "static-tweets", 3000);
    assert_eq!(r["parameters"]["update_fraction"], 0.3);
    assert_eq!(r["parameters"]["load_writes"], 3000 + 1286);
    assert_eq!(r["parameters"]["load_updates"], 1286);
    let next = system(systems, "strata:next");
    let qs = next["queries"].as_array().unwrap();
    assert_eq!(qs.len(), 14, "7 sets, full and top-10");
    let stale: f64 = qs.iter().map(|q| q["stale_mean"].as_f64().unwrap()).sum();
    assert!(stale > 0.0, "updates leave stale index entries to validate");
}

#[test]
fn buildings_with_updates_count_on_final_records() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "static-buildings",
            "--records",
            "2000",
            "--queries",
            "5",
            "--update-fraction",
            "0.2",
            "--systems",
            "strata:next",
        ],
    );
    let systems = check_contract(&r, "static-buildings", 2000);
    assert_eq!(r["parameters"]["load_updates"], 500);
    assert_eq!(systems[0]["queries"].as_array().unwrap().len(), 6);
}

#[test]
fn update_fraction_is_validated() {
    let o = bench_support::strata(&[
        "bench",
        "run",
        "--update-fraction",
        "1",
        "--out",
        "/nonexistent/never-created",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--update-fraction must be in [0, 1)"), "{e}");
}
