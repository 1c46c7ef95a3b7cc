//! `strata bench trace --format chirp` writes a mixed workload as a chirp
//! trace; `strata bench replay` runs it on every system with exact
//! expectations; a malformed line is reported with its line number.

mod bench_support;

use bench_support::{check_contract, ok, results, strata, system};

#[test]
fn generated_trace_replays_with_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.chirp");
    let t = trace.to_str().unwrap();
    let o = strata(&[
        "bench",
        "trace",
        "--format",
        "chirp",
        "--workload",
        "mixed-update-heavy",
        "--records",
        "1500",
        "--ops",
        "500",
        "--get-fraction",
        "0.5",
        "--out",
        t,
    ]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("wrote 2000 lines"));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.lines().all(|l| l.split('\t').count() >= 3));
    assert!(text.contains("\trp\t") && text.contains("\trs\t"));

    let out = dir.path().join("out");
    let o = strata(&[
        "bench",
        "replay",
        t,
        "--format",
        "chirp",
        "--top-k",
        "10",
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let r = results(&out);
    // 1500 preload + 200 inserts: distinct keys written.
    let systems = check_contract(&r, "replay-chirp", 1700);
    assert_eq!(r["parameters"]["attribute"], "UserID");
    assert_eq!(r["parameters"]["top_k"], 10);
    let next = system(systems, "strata:next");
    let count = |op: &str| {
        next["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == op)
            .map(|o| o["count"].as_u64().unwrap())
    };
    assert_eq!(count("insert"), Some(1700));
    assert_eq!(count("update"), Some(200));
    assert_eq!(count("get"), Some(50));
    assert_eq!(count("query"), Some(50));
    let qs = next["queries"].as_array().unwrap();
    assert_eq!(qs.len(), 1);
    assert_eq!(qs[0]["class"], "range");
    assert_eq!(next["mixed"].as_array().unwrap().len(), 50);
}

#[test]
fn bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.chirp");
    std::fs::write(
        &trace,
        "00000000\tw\t{\"ID\": 1, \"UserID\": 5}\n00000001\trs\t5\n00000002\trs\t7\tx\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = strata(&[
        "bench",
        "replay",
        trace.to_str().unwrap(),
        "--format",
        "chirp",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.chirp:3: rs: upper bound \"x\" is not an integer"),
        "{e}"
    );
    assert!(!out.join("results.json").exists());
}

#[test]
fn hand_written_trace_with_string_ids() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.chirp");
    std::fs::write(
        &trace,
        "0\tw\t{\"ID\": \"a\", \"UserID\": 5}\n\
         1\tw\t{\"ID\": \"b\", \"UserID\": 5, \"Place\": null}\n\
         2\tw\t{\"ID\": \"c\", \"UserID\": \"not a number\"}\n\
         3\trs\t5\n\
         4\tw\t{\"ID\": \"a\", \"UserID\": 9}\n\
         5\trs\t5\n\
         6\trs\t0\t10\n\
         7\trp\ta\n\
         8\trp\tzzz\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = strata(&[
        "bench",
        "replay",
        trace.to_str().unwrap(),
        "--format",
        "chirp",
        "--systems",
        "strata:next,strata:memory",
        "--out",
        out.to_str().unwrap(),
    ]);
    ok(&o);
    let r = results(&out);
    let systems = check_contract(&r, "replay-chirp", 3);
    for s in systems {
        let qs = s["queries"].as_array().unwrap();
        // Lookups: 2 then 1 result; range [0, 10]: 2 results.
        assert_eq!(qs[0]["class"], "lookup");
        assert_eq!(qs[0]["results_mean"], 1.5);
        assert_eq!(qs[1]["results_mean"], 2.0);
        // LOOKUP and RANGELOOKUP also have their own rows in `ops`, with
        // the means of their own latencies, after the `query` row.
        let ops = s["ops"].as_array().unwrap();
        let row = |name: &str| ops.iter().find(|o| o["op"] == name).unwrap();
        assert_eq!(row("query")["count"], 3);
        assert_eq!(row("query:lookup")["count"], 2);
        assert_eq!(row("query:range")["count"], 1);
        assert_eq!(row("query:range")["mean_us"], qs[1]["mean_us"]);
        let means = |name: &str| row(name)["mean_us"].as_f64().unwrap();
        let whole = (2.0 * means("query:lookup") + means("query:range")) / 3.0;
        assert!((whole - means("query")).abs() < 1e-6 * whole.max(1.0));
        // Each row has the thread CPU time of its operations: positive,
        // and the class rows add up to the `query` row.
        let cpu = |name: &str| row(name)["cpu_mean_us"].as_f64().unwrap();
        for o in ops {
            assert!(o["cpu_mean_us"].as_f64().unwrap() > 0.0, "{o}");
        }
        let whole = (2.0 * cpu("query:lookup") + cpu("query:range")) / 3.0;
        assert!((whole - cpu("query")).abs() < 1e-6 * whole.max(1.0));
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("query:lookup") && report.contains("query:range"));
}
