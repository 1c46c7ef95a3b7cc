//! Helpers shared by the CLI tests: run the `strata` binary and check it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `strata ARGS` (no `--db`).
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

/// Runs `strata --db DB ARGS`.
pub fn strata(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run strata")
}

/// Asserts success and returns stdout.
pub fn check(o: &Output) -> String {
    assert!(
        o.status.success(),
        "strata failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

/// `strata --db DB ARGS`, which must succeed; returns stdout.
pub fn ok(db: &Path, args: &[&str]) -> String {
    check(&strata(db, args))
}
