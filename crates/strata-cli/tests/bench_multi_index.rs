//! `multi-index` (NEXT §6.6, Table 5): tweets with user_id, coordinates and
//! created_at indexes, queried round-robin.

mod bench_support;

use bench_support::{bench_run, check_contract, system};

#[test]
fn three_indexes_queried_interleaved() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "multi-index",
            "--records",
            "2000",
            "--queries",
            "5",
        ],
    );
    let systems = check_contract(&r, "multi-index", 2000);
    assert_eq!(
        r["parameters"]["indexes"],
        serde_json::json!(["user_id", "coordinates", "created_at"])
    );
    let qs = system(systems, "strata:next")["queries"]
        .as_array()
        .unwrap();
    assert_eq!(qs.len(), 11, "user_id 4 sets, coordinates 3, created_at 4");
    assert_eq!(
        qs.iter().filter(|q| q["attribute"] == "created_at").count(),
        4
    );
}
