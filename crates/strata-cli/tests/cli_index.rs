//! The index commands end to end: load (JSONL and CSV, bad lines), index
//! create/list/drop, query (all predicates, negative numbers, limit,
//! keys-only) and check.

mod common;

use common::{check, strata};

#[test]
fn load_index_query_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let data = dir.path().join("t.jsonl");
    let mut lines = String::new();
    for i in 0..500 {
        lines.push_str(&format!(
            "{{\"id\": {i}, \"user_id\": {}, \"coordinates\": [{}.5, {}.5], \"name\": \"u{}\"}}\n",
            i % 20 - 10,
            i % 30,
            i % 7,
            i % 5
        ));
    }
    // A later line with the same key is an update.
    lines.push_str(
        "{\"id\": 3, \"user_id\": -99, \"coordinates\": [100.0, 100.0], \"name\": \"z\"}\n",
    );
    std::fs::write(&data, lines).unwrap();

    check(&strata(
        &db,
        &[
            "index", "create", "by_user", "--field", "user_id", "--type", "i64",
        ],
    ));
    let loaded = check(&strata(
        &db,
        &["load", data.to_str().unwrap(), "--key-field", "id"],
    ));
    assert!(loaded.starts_with("loaded 501 records"), "{loaded}");
    check(&strata(
        &db,
        &[
            "index",
            "create",
            "by_loc",
            "--field",
            "coordinates",
            "--type",
            "point",
            "--param",
            "delta=off",
        ],
    ));
    check(&strata(
        &db,
        &[
            "index", "create", "by_name", "--field", "name", "--type", "string",
        ],
    ));
    let list = check(&strata(&db, &["index", "list"]));
    assert_eq!(
        list.lines().filter(|l| l.contains("ready")).count(),
        3,
        "{list}"
    );

    let q = check(&strata(&db, &["query", "by_user", "--eq", "-99"]));
    assert_eq!(
        q.trim(),
        r#"{"key":"3","value":{"coordinates":[100.0,100.0],"id":3,"name":"z","user_id":-99}}"#
    );
    let q = check(&strata(
        &db,
        &["query", "by_user", "--range", "-10", "-9", "--keys-only"],
    ));
    assert_eq!(q.lines().count(), 50);
    assert!(q
        .lines()
        .all(|l| l.starts_with("{\"key\":") && !l.contains("value")));
    let q = check(&strata(
        &db,
        &[
            "query",
            "by_user",
            "--range",
            "-99",
            "9",
            "--limit",
            "3",
            "--keys-only",
        ],
    ));
    assert_eq!(
        q, "{\"key\":\"3\"}\n{\"key\":\"499\"}\n{\"key\":\"498\"}\n",
        "newest first"
    );
    let q = check(&strata(
        &db,
        &[
            "query",
            "by_user",
            "--range",
            "-10",
            "9",
            "--limit",
            "2",
            "--keys-only",
        ],
    ));
    assert_eq!(
        q, "{\"key\":\"499\"}\n{\"key\":\"498\"}\n",
        "the updated record left the range"
    );
    let q = check(&strata(
        &db,
        &[
            "query",
            "by_loc",
            "--within",
            "-1",
            "-1",
            "0.6",
            "0.6",
            "--keys-only",
        ],
    ));
    // i % 30 == 0 and i % 7 == 0: i in {0, 210, 420}.
    assert_eq!(q.lines().count(), 3, "{q}");
    let q = check(&strata(
        &db,
        &["query", "by_name", "--eq", "u1", "--keys-only"],
    ));
    assert_eq!(q.lines().count(), 100);
    check(&strata(&db, &["check"]));

    let bad = strata(&db, &["query", "by_user", "--within", "0", "0", "1", "1"]);
    assert_eq!(bad.status.code(), Some(2));
    let missing = strata(&db, &["query", "nope", "--eq", "1"]);
    assert_eq!(missing.status.code(), Some(2));
    check(&strata(&db, &["index", "drop", "by_name"]));
    assert_eq!(check(&strata(&db, &["index", "list"])).lines().count(), 3);
}

/// Regression (reliability issue, bad input): loading a file that does not
/// exist created an empty database directory.
#[test]
fn load_of_a_missing_file_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let missing = dir.path().join("nope.jsonl");
    let o = strata(
        &db,
        &["load", missing.to_str().unwrap(), "--key-field", "id"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nope.jsonl"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!db.exists(), "no database directory was created");
}

#[test]
fn load_reports_bad_lines_and_reads_csv() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let data = dir.path().join("bad.jsonl");
    std::fs::write(&data, "{\"id\": 1}\n{\"id\": 2}\n{oops\n{\"id\": 4}\n").unwrap();
    let o = strata(&db, &["load", data.to_str().unwrap(), "--key-field", "id"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 3"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        strata(&db, &["get", "2"]).status.success(),
        "lines before the bad one are loaded"
    );
    assert!(
        !strata(&db, &["get", "4"]).status.success(),
        "nothing after it"
    );
    let o = check(&strata(
        &db,
        &[
            "load",
            data.to_str().unwrap(),
            "--key-field",
            "id",
            "--skip-bad",
        ],
    ));
    assert!(
        o.contains("loaded 3 records") && o.contains("skipped 1"),
        "{o}"
    );

    let csv = dir.path().join("p.csv");
    std::fs::write(&csv, "id,score,label\na,-2.5,\"x, y\"\nb,7,z\n").unwrap();
    check(&strata(
        &db,
        &["load", csv.to_str().unwrap(), "--key-field", "id"],
    ));
    check(&strata(
        &db,
        &[
            "index", "create", "by_score", "--field", "score", "--type", "f64",
        ],
    ));
    let q = check(&strata(&db, &["query", "by_score", "--range", "-3", "0"]));
    assert_eq!(
        q.trim(),
        r#"{"key":"a","value":{"id":"a","label":"x, y","score":-2.5}}"#
    );
}

#[test]
fn load_csv_with_line_breaks_in_quoted_fields() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let csv = dir.path().join("multi.csv");
    std::fs::write(
        &csv,
        "id,score,note\r\na,1,\"first line\nsecond, \"\"quoted\"\"\"\r\nb,2,plain\n",
    )
    .unwrap();
    let o = check(&strata(
        &db,
        &["load", csv.to_str().unwrap(), "--key-field", "id"],
    ));
    assert!(o.contains("loaded 2 records"), "{o}");
    let v = check(&strata(&db, &["get", "a"]));
    let v: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
    assert_eq!(v["note"], "first line\nsecond, \"quoted\"");
    assert_eq!(v["score"], 1);
}

/// `index list` shows a `perseid` index's pages: in RAM, checked in the
/// page file, read without a check; nothing for other strategies.
#[test]
fn index_list_shows_a_perseid_index_pages() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let data = dir.path().join("t.jsonl");
    let lines: String = (0..300)
        .map(|i| format!("{{\"id\": {i}, \"u\": {}}}\n", i % 13))
        .collect();
    std::fs::write(&data, lines).unwrap();
    check(&strata(
        &db,
        &[
            "index",
            "create",
            "by_u",
            "--field",
            "u",
            "--type",
            "i64",
            "--strategy",
            "perseid",
        ],
    ));
    check(&strata(
        &db,
        &["index", "create", "by_id", "--field", "id", "--type", "i64"],
    ));
    check(&strata(
        &db,
        &["load", data.to_str().unwrap(), "--key-field", "id"],
    ));
    // A new process: the pages are in the file, read on demand.
    let q = check(&strata(&db, &["query", "by_u", "--eq", "5", "--keys-only"]));
    assert_eq!(q.lines().count(), 23, "{q}");
    let list = check(&strata(&db, &["index", "list"]));
    let pages: Vec<&str> = list.lines().filter(|l| l.contains("pages:")).collect();
    assert_eq!(pages.len(), 1, "{list}");
    assert!(pages[0].contains("bytes in RAM (clean budget 0)"), "{list}");
}
