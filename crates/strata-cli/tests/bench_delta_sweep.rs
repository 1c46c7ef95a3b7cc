//! `delta-sweep` (NEXT §6.4): without --systems it runs NEXT with δ off,
//! 1×, 4×, auto and 16× the data's mean value gap; relative values are
//! resolved per index and recorded in `params`.

mod bench_support;

use bench_support::{bench_run, check_contract, system};

#[test]
fn default_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "delta-sweep",
            "--records",
            "2000",
            "--queries",
            "3",
        ],
    );
    let systems = check_contract(&r, "delta-sweep", 2000);
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "strata:next[delta=off]",
            "strata:next[delta=1x]",
            "strata:next[delta=4x]",
            "strata:next[delta=auto]",
            "strata:next[delta=16x]"
        ]
    );
    let p = |name: &str, key: &str| -> f64 {
        system(systems, name)["params"][key]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    for key in ["user_id.delta", "coordinates.delta"] {
        let (one, four) = (
            p("strata:next[delta=1x]", key),
            p("strata:next[delta=4x]", key),
        );
        assert!(one > 0.0 && (four / one - 4.0).abs() < 1e-9, "{key}");
    }
    assert_eq!(
        system(systems, "strata:next[delta=auto]")["params"]["user_id.delta"],
        "auto"
    );
}

#[test]
fn per_index_delta_and_8x_equals_auto_on_one_table() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--workload",
            "delta-sweep",
            "--records",
            "2000",
            "--queries",
            "3",
            "--systems",
            "strata:next[delta=auto],strata:next[delta=8x],strata:next[delta=off;delta@user_id=100000]",
        ],
    );
    let systems = check_contract(&r, "delta-sweep", 2000);
    // The data fits one table: 8 × the data's mean gap is NEXT's auto δ.
    assert_eq!(
        system(systems, "strata:next[delta=auto]")["index_bytes"],
        system(systems, "strata:next[delta=8x]")["index_bytes"]
    );
    let s = system(systems, "strata:next[delta=off;delta@user_id=100000]");
    assert_eq!(s["params"]["user_id.delta"], "100000");
    assert_eq!(s["params"]["coordinates.delta"], "off");
}
