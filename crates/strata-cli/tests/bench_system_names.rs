//! `--systems` errors: peers without the `peers` feature, unknown names,
//! and a strategy the engine rejects (its message surfaces).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod bench_support;

use bench_support::{bench_run, strata};

fn run_err(systems: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let o = strata(&[
        "bench",
        "run",
        "--records",
        "200",
        "--queries",
        "2",
        "--systems",
        systems,
        "--out",
        dir.path().join("out").to_str().unwrap(),
        "--work-dir",
        dir.path().join("work").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{systems}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn peers_need_the_feature() {
    if cfg!(feature = "peers") {
        return;
    }
    let e = run_err("strata:next,sqlite");
    assert!(
        e.contains(
            "system \"sqlite\" is a peer: rebuild with `--features peers` (see docs/benchmarks.md)"
        ),
        "{e}"
    );
}

#[test]
fn unknown_systems_and_strategies() {
    let e = run_err("postgres");
    assert!(e.contains("unknown system \"postgres\""), "{e}");
    let e = run_err("strata:next[delta@bbox=1]");
    assert!(e.contains("no index \"bbox\""), "{e}");
    // Strategy names pass through to the engine, which rejects this one.
    let e = run_err("strata:no-such-strategy[mode=validation;validate=timestamp]");
    assert!(
        e.contains("strata:no-such-strategy[mode=validation;validate=timestamp]: create index")
            && e.contains("no-such-strategy"),
        "{e}"
    );
}

#[test]
fn aliases_and_index_scopes_run_under_their_own_labels() {
    let dir = tempfile::tempdir().unwrap();
    let r = bench_run(
        dir.path(),
        &[
            "--records",
            "300",
            "--queries",
            "2",
            "--systems",
            "strata:noindex,strata:eager,strata:next[delta=off]@user_id",
        ],
    );
    let systems = r["systems"].as_array().unwrap();
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "strata:noindex",
            "strata:eager",
            "strata:next[delta=off]@user_id"
        ]
    );
    // The scope applies delta=off to user_id only.
    let params = &systems[2]["params"];
    assert_eq!(params["user_id.delta"], "off", "{params}");
    assert!(params.get("coordinates.delta").is_none(), "{params}");
}
