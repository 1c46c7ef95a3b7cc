//! Basic roundtrip of every data command through the binary.

mod common;

use std::process::Command;

use common::{ok, strata};

#[test]
fn put_get_del_scan_stats_compact_roundtrip() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");

    ok(&db, &["put", "a", "1"]);
    ok(&db, &["put", "b", "2", "--sync"]);
    ok(&db, &["put", "c", "3"]);
    ok(&db, &["put", "a", "one"]);
    assert_eq!(ok(&db, &["get", "a"]), "one\n");
    assert_eq!(ok(&db, &["get", "b"]), "2\n");

    ok(&db, &["del", "b"]);
    let o = strata(&db, &["get", "b"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "not found: b\n");
    assert!(o.stdout.is_empty());

    assert_eq!(ok(&db, &["scan"]), "a\tone\nc\t3\n");
    assert_eq!(ok(&db, &["scan", "--from", "b"]), "c\t3\n");
    assert_eq!(ok(&db, &["scan", "--to", "c"]), "a\tone\n");
    assert_eq!(ok(&db, &["scan", "--limit", "1"]), "a\tone\n");
    assert_eq!(ok(&db, &["scan", "--from", "a", "--to", "a"]), "");

    let json: serde_json::Value = serde_json::from_str(&ok(&db, &["stats", "--json"])).unwrap();
    assert!(json["levels"].is_array(), "{json}");
    assert!(json["io"]["data_blocks"]["disk"].is_u64(), "{json}");
    let table = ok(&db, &["stats"]);
    assert!(table.contains("write amplification"), "{table}");
    assert!(table.contains("L0"), "{table}");

    ok(&db, &["compact"]);
    let json: serde_json::Value = serde_json::from_str(&ok(&db, &["stats", "--json"])).unwrap();
    let files: u64 = json["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["files"].as_u64().unwrap())
        .sum();
    assert!(files >= 1, "compaction left no table: {json}");
    assert!(json["table_bytes"].as_u64().unwrap() > 0, "{json}");

    // Everything survives the flush and compaction, and deletes stay deleted.
    assert_eq!(ok(&db, &["scan"]), "a\tone\nc\t3\n");
    assert_eq!(strata(&db, &["get", "b"]).status.code(), Some(1));
    ok(&db, &["put", "b", "again"]);
    assert_eq!(ok(&db, &["scan"]), "a\tone\nb\tagain\nc\t3\n");
}

#[test]
fn get_of_missing_key_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    ok(&db, &["put", "x", "y"]);
    let o = strata(&db, &["get", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&o.stderr), "not found: nope\n");
}

#[test]
fn errors_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    // Reading commands do not create a database.
    let o = strata(&tmp.path().join("missing"), &["get", "a"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error: "));
    assert!(!tmp.path().join("missing").exists());

    // --db is required outside bench.
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["get", "a"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--db"));
}

#[test]
fn bench_runs_small_in_a_temp_dir() {
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "bench",
            "--records",
            "2000",
            "--reads",
            "500",
            "--multigets",
            "50",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["reads_found"], 500);
    assert_eq!(json["multiget_keys_found"], 800);
    assert!(
        json["space_amplification"].as_f64().unwrap() > 0.0,
        "{json}"
    );
    assert!(
        json["write_amplification"].as_f64().unwrap() > 0.0,
        "{json}"
    );
}
