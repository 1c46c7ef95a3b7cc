//! Basic roundtrip of every data command through the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::process::Command;

use common::{check, ok, strata};

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

/// `strata bench` on 2,000 keys in a temporary directory, with `extra`
/// flags: its JSON report.
fn bench_json(extra: &[&str]) -> serde_json::Value {
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
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn bench_runs_small_in_a_temp_dir() {
    let json = bench_json(&[]);
    assert_eq!(json["fill_order"], "random");
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

/// `strata bench --sequential` fills in key order (db_bench's fillseq) and
/// reads every key back.
#[test]
fn bench_fills_in_key_order() {
    let json = bench_json(&["--sequential"]);
    assert_eq!(json["fill_order"], "sequential");
    assert_eq!(json["reads_found"], 500);
    assert_eq!(json["multiget_keys_found"], 800);
}

/// `strata sst`, `manifest` and `wal` read the files of a database with a
/// NEXT index, as text and as JSON.
#[test]
fn inspection_commands_show_tables_manifest_and_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    for i in 0..20 {
        ok(
            &db,
            &["put", &format!("k{i:02}"), &format!("{{\"u\":{}}}", i % 3)],
        );
    }
    ok(
        &db,
        &["index", "create", "by_u", "--field", "u", "--type", "i64"],
    );
    ok(
        &db,
        &[
            "index",
            "create",
            "emb_u",
            "--field",
            "u",
            "--type",
            "i64",
            "--strategy",
            "embedded",
        ],
    );
    ok(&db, &["put", "late", "{\"u\":7}"]);
    ok(&db, &["del", "k00"]);

    let files: Vec<_> = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // The table holding the 20 records (the one with the most entries; the
    // online builds put their index blocks in side files, so the table's own
    // size does not tell).
    let entries = |p: &std::path::Path| -> u64 {
        let out = check(&common::run(&["sst", p.to_str().unwrap(), "--json"]));
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        json["entries"].as_u64().unwrap()
    };
    let sst = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .max_by_key(|p| entries(p))
        .expect("a table");
    let text = check(&common::run(&["sst", sst.to_str().unwrap()]));
    assert!(text.contains("level "), "{text}");
    assert!(text.contains("bloom filter (strata.filter): yes"), "{text}");
    assert!(text.contains("NEXT directory of index"), "{text}");
    assert!(text.contains("i64 values"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&check(&common::run(&[
        "sst",
        sst.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    // The index was built online: the tables keep their data, and their
    // NEXT blocks are in side files beside them, shown with the table's.
    assert!(json["entries"].as_u64().unwrap() > 0, "{json}");
    assert!(json["level"].is_u64(), "{json}");
    assert!(
        json["smallest"]["key"].as_str().unwrap().starts_with('k'),
        "{json}"
    );
    let dir = json["meta_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().unwrap().ends_with(".dir"))
        .expect("a NEXT directory");
    let ranges = dir["directory"]["ranges"].as_array().unwrap();
    assert!(!ranges.is_empty(), "{dir}");
    assert!(ranges
        .iter()
        .all(|r| r["lo"].as_i64().unwrap() <= r["hi"].as_i64().unwrap()
            && r["hi"].as_i64().unwrap() <= 2));
    // The Embedded index's zone maps, decoded: every put of the table is
    // indexed (each has u), u is in 0..=7, the blocks add up.
    assert!(text.contains("indexed values in"), "{text}");
    let emb = json["meta_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().unwrap().starts_with("embedded."))
        .expect("an embedded index block");
    let zones = &emb["zone_maps"];
    let puts = json["entries"].as_u64().unwrap() - json["deletions"].as_u64().unwrap();
    assert_eq!(zones["indexed_values"].as_u64(), Some(puts), "{emb}");
    let (lo, hi) = (
        zones["zone"]["lo"].as_i64().unwrap(),
        zones["zone"]["hi"].as_i64().unwrap(),
    );
    assert!(0 <= lo && lo <= hi && hi <= 7, "{emb}");
    let blocks = zones["blocks"].as_array().unwrap();
    assert_eq!(
        blocks
            .iter()
            .map(|b| b["values"].as_u64().unwrap())
            .sum::<u64>(),
        puts,
        "{emb}"
    );
    assert!(blocks
        .iter()
        .all(|b| b["filter_bytes"].as_u64().unwrap() > 0));

    let text = check(&common::run(&["manifest", db.to_str().unwrap()]));
    assert!(text.contains("version edits"), "{text}");
    assert!(text.contains("ext strata.index("), "{text}");
    let lines = check(&common::run(&["manifest", db.to_str().unwrap(), "--json"]));
    let edits: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(edits
        .iter()
        .any(|e| !e["new_files"].as_array().unwrap().is_empty()));

    // The last write is in the live log (each open flushes the log it
    // replays into a table and starts a new one).
    let mut ops = Vec::new();
    for log in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
    {
        let text = check(&common::run(&["wal", log.to_str().unwrap()]));
        assert!(text.contains("records"), "{text}");
        for line in check(&common::run(&["wal", log.to_str().unwrap(), "--json"])).lines() {
            let rec: serde_json::Value = serde_json::from_str(line).unwrap();
            ops.extend(rec["ops"].as_array().unwrap().iter().cloned());
        }
    }
    assert!(
        ops.iter().any(|o| o["op"] == "del" && o["key"] == "k00"),
        "{ops:?}"
    );

    let o = common::run(&["sst", db.join("CURRENT").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
}
