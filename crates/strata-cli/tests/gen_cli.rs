//! `strata gen`: JSONL output, determinism, query-set files, bad flags.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::path::Path;

use common::{check, run as strata};

fn ok(args: &[&str]) -> String {
    check(&strata(args))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .expect("read output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn tweets_jsonl_and_query_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.jsonl");
    let b = tmp.path().join("b.jsonl");
    let c = tmp.path().join("c.jsonl");
    let q = tmp.path().join("q");
    let stdout = ok(&[
        "gen",
        "tweets",
        "--records",
        "3000",
        "--seed",
        "5",
        "--out",
        s(&a),
        "--queries",
        s(&q),
        "--query-count",
        "200",
    ]);
    assert!(stdout.contains("wrote 3000 records"), "{stdout}");
    ok(&[
        "gen",
        "tweets",
        "--records",
        "3000",
        "--seed",
        "5",
        "--out",
        s(&b),
    ]);
    ok(&[
        "gen",
        "tweets",
        "--records",
        "3000",
        "--seed",
        "6",
        "--out",
        s(&c),
    ]);
    let ba = std::fs::read(&a).unwrap();
    assert_eq!(ba, std::fs::read(&b).unwrap(), "same seed, same bytes");
    assert_ne!(ba, std::fs::read(&c).unwrap(), "other seed, other bytes");
    // Regression: --seed was required although the README's usage line
    // omits it; the default is seed 1.
    let d = tmp.path().join("d.jsonl");
    let e = tmp.path().join("e.jsonl");
    ok(&["gen", "tweets", "--records", "300", "--out", s(&d)]);
    ok(&[
        "gen",
        "tweets",
        "--records",
        "300",
        "--seed",
        "1",
        "--out",
        s(&e),
    ]);
    assert_eq!(std::fs::read(&d).unwrap(), std::fs::read(&e).unwrap());

    let recs = lines(&a);
    assert_eq!(recs.len(), 3000);
    let mut prev = 0u64;
    for r in &recs {
        let id = r["id"].as_u64().expect("numeric id");
        assert!(id > prev);
        prev = id;
        assert!(r["user_id"].is_i64());
        assert_eq!(r["coordinates"].as_array().map(Vec::len), Some(2));
    }

    for attr in ["user_id", "coordinates"] {
        for class in ["small", "medium", "large"] {
            let p = q.join(format!("{attr}-{class}.json"));
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("query file")).unwrap();
            assert_eq!(v["attribute"], attr);
            assert_eq!(v["class"], class);
            assert_eq!(v["queries"].as_array().map(Vec::len), Some(200));
            assert_eq!(v["expected_counts"].as_array().map(Vec::len), Some(200));
            assert!(v["achieved_mean"].as_f64().is_some());
        }
    }
    assert!(q.join("user_id-eq.json").exists());
    // 11349 is more than 3000 tweets: flagged, not silently wrong.
    let large: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(q.join("user_id-large.json")).unwrap())
            .unwrap();
    assert_eq!(large["clamped"], true);
}

#[test]
fn buildings_and_synthetic() {
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("b.jsonl");
    let q = tmp.path().join("q");
    ok(&[
        "gen",
        "buildings",
        "--records",
        "2000",
        "--seed",
        "1",
        "--out",
        s(&b),
        "--queries",
        s(&q),
        "--query-count",
        "50",
    ]);
    let recs = lines(&b);
    assert_eq!(recs.len(), 2000);
    for r in &recs {
        let bb: Vec<f64> = r["bbox"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert!(bb[0] <= bb[2] && bb[1] <= bb[3]);
    }
    for f in ["bbox-small", "bbox-large", "perimeter-medium"] {
        assert!(q.join(format!("{f}.json")).exists(), "{f}");
    }

    let z = tmp.path().join("z.jsonl");
    ok(&[
        "gen",
        "synthetic",
        "--records",
        "2000",
        "--seed",
        "1",
        "--zipf",
        "0.8",
        "--out",
        s(&z),
    ]);
    let u = tmp.path().join("u.jsonl");
    ok(&[
        "gen",
        "synthetic",
        "--records",
        "2000",
        "--seed",
        "1",
        "--uniform",
        "--out",
        s(&u),
    ]);
    assert_ne!(std::fs::read(&z).unwrap(), std::fs::read(&u).unwrap());
    for r in lines(&z) {
        let a = r["attr"].as_i64().unwrap();
        assert!((1..=100_000_000).contains(&a));
    }
}

#[test]
fn bad_flags_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("x.jsonl");
    let o = strata(&[
        "gen",
        "tweets",
        "--records",
        "10",
        "--seed",
        "1",
        "--zipf",
        "1.0",
        "--out",
        s(&f),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("apply to `synthetic` only"));
    let o = strata(&[
        "gen",
        "synthetic",
        "--records",
        "10",
        "--seed",
        "1",
        "--zipf",
        "-1",
        "--out",
        s(&f),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = strata(&[
        "gen",
        "synthetic",
        "--records",
        "10",
        "--seed",
        "1",
        "--zipf",
        "1",
        "--uniform",
        "--out",
        s(&f),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let o = strata(&[
        "gen",
        "tweets",
        "--records",
        "10",
        "--seed",
        "1",
        "--out",
        "/nonexistent-dir/x.jsonl",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("error:"));
}
