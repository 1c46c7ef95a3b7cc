//! `stress` is deterministic and `verify` accepts exactly the states it
//! should: the acknowledged state, plus-one-op, chained base states, and
//! (with `--prefix`) earlier prefixes; it rejects everything else.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use std::path::Path;
use std::process::Output;

use common::{ok, strata};

fn stress(db: &Path, seed: &str, ops: &str) -> String {
    ok(
        db,
        &[
            "stress",
            "--seed",
            seed,
            "--ops",
            ops,
            "--keys",
            "50",
            "--value-size",
            "20",
        ],
    )
}

fn verify(db: &Path, acked: &Path, seed: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "verify",
        "--acked",
        acked.to_str().unwrap(),
        "--seed",
        seed,
        "--keys",
        "50",
        "--value-size",
        "20",
    ];
    args.extend_from_slice(extra);
    strata(db, &args)
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines().take(n).map(|l| format!("{l}\n")).collect()
}

#[test]
fn stress_is_deterministic() {
    let tmp = tempfile::tempdir().unwrap();
    let a = stress(&tmp.path().join("a"), "3", "300");
    let b = stress(&tmp.path().join("b"), "3", "300");
    assert_eq!(a, b);
    assert_eq!(a.lines().count(), 300);
    assert!(a.lines().any(|l| l.contains(" batch ")));
    assert!(a.lines().any(|l| l.contains(" del ")));
    let c = stress(&tmp.path().join("c"), "4", "300");
    assert_ne!(a, c);
}

#[test]
fn verify_accepts_acked_and_next_op_only() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let out = stress(&db, "5", "200");
    let acked = tmp.path().join("acked");

    std::fs::write(&acked, &out).unwrap();
    let o = verify(&db, &acked, "5", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("200 ops acknowledged, next op applied: no"),
        "{s}"
    );

    // The last line was cut by the kill: op 199 is the unknown next op.
    std::fs::write(&acked, first_lines(&out, 199) + "ok 199 pu").unwrap();
    let o = verify(&db, &acked, "5", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("199 ops acknowledged, next op applied: yes"),
        "{s}"
    );

    // Two unacknowledged ops applied is not acceptable, even with --prefix.
    std::fs::write(&acked, first_lines(&out, 150)).unwrap();
    let o = verify(&db, &acked, "5", &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = verify(&db, &acked, "5", &["--prefix"]);
    assert_eq!(o.status.code(), Some(1));

    // Wrong workload parameters are an error, not a verdict.
    std::fs::write(&acked, &out).unwrap();
    let o = verify(&db, &acked, "6", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not match the workload"));

    // A value changed behind the workload's back is reported by key.
    let victim = out
        .lines()
        .rev()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|t| t[2] == "put" || t[2] == "del")
        .map(|t| t[3])
        .unwrap()
        .to_string();
    ok(&db, &["put", &victim, "tampered"]);
    let o = verify(&db, &acked, "5", &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&victim), "{err}");
}

#[test]
fn base_states_chain_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let (a1, s1) = (tmp.path().join("a1"), tmp.path().join("s1"));
    let (a2, s2) = (tmp.path().join("a2"), tmp.path().join("s2"));
    std::fs::write(&a1, stress(&db, "1", "100")).unwrap();
    let o = verify(&db, &a1, "1", &["--write-state", s1.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(&a2, stress(&db, "2", "100")).unwrap();

    // Without the base state the keys left by run 1 are unexplained.
    assert_eq!(verify(&db, &a2, "2", &[]).status.code(), Some(1));
    let o = verify(
        &db,
        &a2,
        "2",
        &[
            "--base-state",
            s1.to_str().unwrap(),
            "--write-state",
            s2.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // The state file lists exactly the live keys with their digests.
    let state = std::fs::read_to_string(&s2).unwrap();
    let scan = ok(&db, &["scan"]);
    assert_eq!(state.lines().count(), scan.lines().count());
    for (s, l) in state.lines().zip(scan.lines()) {
        assert_eq!(s.split('\t').next(), l.split('\t').next());
        assert_eq!(s.split('\t').nth(1).unwrap().len(), 16);
    }
}

#[test]
fn prefix_mode_accepts_lost_suffix() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let full = stress(&tmp.path().join("other"), "9", "100");
    // The database only got the first 60 ops (same seed: same ops).
    stress(&db, "9", "60");
    let acked = tmp.path().join("acked");
    std::fs::write(&acked, &full).unwrap();

    assert_eq!(verify(&db, &acked, "9", &[]).status.code(), Some(1));
    let o = verify(&db, &acked, "9", &["--prefix"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    // Op 60 may not change the state (a delete of an absent key), so the
    // longest matching prefix is at least 60.
    let j: u64 = s
        .split("recovered prefix: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no prefix in {s}"));
    assert!((60..100).contains(&j), "{s}");
}
