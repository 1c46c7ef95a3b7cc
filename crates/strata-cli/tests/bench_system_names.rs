//! `--systems` errors: peers without the `peers` feature, unknown names,
//! and a strategy the engine rejects (its message surfaces).

mod bench_support;

use bench_support::strata;

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
