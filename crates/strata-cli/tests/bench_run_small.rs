//! `strata bench run` end to end on a small tweet set: results.json has the
//! contract's fields, every answer has the exact expected size, and NEXT
//! never reads fewer data blocks than the physical minimum.

use std::process::Command;

#[test]
fn static_tweets_small() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "bench",
            "run",
            "--workload",
            "static-tweets",
            "--records",
            "3000",
            "--queries",
            "5",
        ])
        .args([
            "--systems",
            "strata:none,strata:next,strata:next[delta=off]",
            "--top-k",
            "10",
            "--out",
        ])
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["workload"], "static-tweets");
    assert_eq!(r["records"], 3000);
    let systems = r["systems"].as_array().unwrap();
    assert_eq!(systems.len(), 3);
    assert!(
        systems[0]["queries"].as_array().unwrap().is_empty(),
        "no index, no queries"
    );
    for s in &systems[1..] {
        for f in [
            "ingest_seconds",
            "db_bytes",
            "index_bytes",
            "index_memory_bytes",
        ] {
            assert!(s[f].is_number(), "{f}");
        }
        let qs = s["queries"].as_array().unwrap();
        assert_eq!(qs.len(), 14, "7 query sets, with and without top-10");
        for q in qs {
            assert_eq!(q["mismatches"], 0, "{q}");
            assert!(
                q["blocks_read_mean"].as_f64().unwrap() >= q["min_blocks_mean"].as_f64().unwrap()
            );
            // The floor pass ran after the timed one: every answer with
            // results in tables has a floor.
            if q["results_mean"].as_f64().unwrap() > 0.0 {
                assert!(q["floor_us_mean"].as_f64().unwrap() > 0.0, "{q}");
                assert!(q["floor_multiple"].as_f64().unwrap() > 0.0, "{q}");
            }
            for f in [
                "attribute",
                "class",
                "count",
                "mean_us",
                "p50_us",
                "p99_us",
                "results_mean",
            ] {
                assert!(!q[f].is_null(), "{f}");
            }
        }
    }
}

#[test]
fn demo_writes_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["demo", "--records", "2000", "--queries", "3", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("strata:posting-lazy")
            && stdout.contains("strata:embedded")
            && stdout.contains("report:"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## user_id: mean latency"), "{report}");
    assert!(report.contains("Correctness: 0 queries"), "{report}");
}
