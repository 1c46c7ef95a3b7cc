//! `skew` (NEXT §6.5): one record carries a uniform and three Zipf
//! attributes, each indexed; ranges and point lookups on each have exact
//! expected counts.

mod bench_support;

use bench_support::{bench_run, check_contract, system};

#[test]
fn skew_small() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "skew",
            "--records",
            "2000",
            "--queries",
            "5",
            "--systems",
            "strata:next",
        ],
    );
    let systems = check_contract(&r, "skew", 2000);
    assert_eq!(
        r["parameters"]["indexes"],
        serde_json::json!(["uniform", "zipf05", "zipf08", "zipf10"])
    );
    let qs = system(systems, "strata:next")["queries"]
        .as_array()
        .unwrap();
    assert_eq!(qs.len(), 16, "4 attributes × (small, medium, large, eq)");
    for attr in ["uniform", "zipf05", "zipf08", "zipf10"] {
        let classes: Vec<&str> = qs
            .iter()
            .filter(|q| q["attribute"] == attr)
            .map(|q| q["class"].as_str().unwrap())
            .collect();
        assert_eq!(classes, ["small", "medium", "large", "eq"], "{attr}");
    }
}
