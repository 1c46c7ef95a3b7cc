//! The crash test: run `stress` against one database, SIGKILL it at a
//! random moment, and check with `verify` that recovery kept exactly the
//! acknowledged operations (plus possibly the one in flight), over many
//! cycles on the same directory.
//!
//! `STRATA_CRASH_CYCLES` overrides the number of cycles (default 20).
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// SplitMix64, for the kill delays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn cycles() -> u64 {
    std::env::var("STRATA_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn describe(o: &Output) -> String {
    format!(
        "{:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `stress` with `args` (after the seed), kills it after `delay`, and
/// returns the file holding its acknowledged output.
fn stress_and_kill(dir: &Path, db: &Path, cycle: u64, args: &[&str], delay: Duration) -> PathBuf {
    let acked = dir.join(format!("acked-{cycle}.txt"));
    let errs = dir.join(format!("stderr-{cycle}.txt"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .args([
            "stress",
            "--seed",
            &cycle.to_string(),
            "--ops",
            "100000",
            "--keys",
            "500",
        ])
        .args(args)
        .stdout(Stdio::from(File::create(&acked).unwrap()))
        .stderr(Stdio::from(File::create(&errs).unwrap()))
        .spawn()
        .expect("spawn stress");
    std::thread::sleep(delay);
    // SIGKILL on Unix; fails only if the child was already reaped.
    let _ = child.kill();
    let status = child.wait().unwrap();
    // Killed (no exit code) or, if it was very fast, finished cleanly.
    assert!(
        status.code().is_none() || status.success(),
        "cycle {cycle}: stress failed on its own: {status:?}\nstderr: {}",
        std::fs::read_to_string(&errs).unwrap_or_default()
    );
    acked
}

fn verify(db: &Path, acked: &Path, cycle: u64, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(db)
        .arg("verify")
        .arg("--acked")
        .arg(acked)
        .args(["--seed", &cycle.to_string(), "--keys", "500"])
        .args(extra)
        .output()
        .expect("run verify")
}

fn acked_ops(acked: &Path) -> usize {
    let text = std::fs::read_to_string(acked).unwrap_or_default();
    text.matches('\n').count()
}

#[test]
fn synced_writes_survive_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let mut rng = Rng(0xC0FFEE);
    let mut base: Option<PathBuf> = None;
    let mut total_acked = 0;
    let mut next_applied = 0;
    for cycle in 0..cycles() {
        let delay = Duration::from_millis(30 + rng.next() % 271);
        // Odd cycles use tiny memtables so kills also land in flushes and
        // compactions.
        let args: &[&str] = if cycle % 2 == 1 {
            &["--sync", "--small"]
        } else {
            &["--sync"]
        };
        let acked = stress_and_kill(tmp.path(), &db, cycle, args, delay);
        total_acked += acked_ops(&acked);

        let state = tmp.path().join(format!("state-{cycle}.txt"));
        let mut extra = vec!["--write-state".to_string(), state.display().to_string()];
        if let Some(b) = &base {
            extra.push("--base-state".into());
            extra.push(b.display().to_string());
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let o = verify(&db, &acked, cycle, &extra);
        assert!(
            o.status.success(),
            "cycle {cycle} (killed after {delay:?}): verify failed: {}",
            describe(&o)
        );
        if String::from_utf8_lossy(&o.stdout).contains("next op applied: yes") {
            next_applied += 1;
        }
        base = Some(state);
    }
    eprintln!(
        "{} cycles, {total_acked} acknowledged ops, next op applied in {next_applied}",
        cycles()
    );
    assert!(total_acked > 0, "no stress run acknowledged anything");
}

#[test]
fn unsynced_writes_recover_a_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let mut rng = Rng(0xBADC0DE);
    let mut base: Option<PathBuf> = None;
    let mut total_acked = 0;
    for cycle in 0..5 {
        let delay = Duration::from_millis(30 + rng.next() % 271);
        let args: &[&str] = if cycle % 2 == 1 { &["--small"] } else { &[] };
        let acked = stress_and_kill(tmp.path(), &db, cycle, args, delay);
        total_acked += acked_ops(&acked);
        let state = tmp.path().join(format!("state-{cycle}.txt"));
        let mut extra = vec![
            "--prefix".to_string(),
            "--write-state".to_string(),
            state.display().to_string(),
        ];
        if let Some(b) = &base {
            extra.push("--base-state".into());
            extra.push(b.display().to_string());
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let o = verify(&db, &acked, cycle, &extra);
        assert!(
            o.status.success(),
            "cycle {cycle} (killed after {delay:?}): verify --prefix failed: {}",
            describe(&o)
        );
        eprintln!(
            "cycle {cycle}: {}",
            String::from_utf8_lossy(&o.stdout).trim()
        );
        base = Some(state);
    }
    assert!(total_acked > 0, "no stress run acknowledged anything");
}

/// The crash pair with indexes: JSON records whose indexed attributes
/// change with every write, indexes of each strategy, and `verify`
/// checking every index against a full scan after each kill.
#[test]
fn indexes_stay_exact_across_sigkill_for_every_strategy() {
    let strategies = [
        "next",
        "embedded",
        "memory",
        "composite",
        "deli",
        "posting-eager",
        "posting-lazy",
        "filter",
    ];
    let mut rng = Rng(0x1DE7);
    let per_strategy = (cycles() / 5).max(3);
    for s in strategies {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("db");
        let mut base: Option<PathBuf> = None;
        let mut checked = 0;
        for cycle in 0..per_strategy {
            let delay = Duration::from_millis(60 + rng.next() % 300);
            let mut args = vec!["--sync", "--index-strategy", s];
            if cycle % 2 == 1 {
                args.push("--small");
            }
            let acked = stress_and_kill(tmp.path(), &db, cycle, &args, delay);
            let state = tmp.path().join(format!("state-{cycle}.txt"));
            let mut extra = vec![
                "--index-strategy".to_string(),
                s.to_string(),
                "--write-state".to_string(),
                state.display().to_string(),
            ];
            if let Some(b) = &base {
                extra.push("--base-state".into());
                extra.push(b.display().to_string());
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let o = verify(&db, &acked, cycle, &extra);
            assert!(
                o.status.success(),
                "{s} cycle {cycle} (killed after {delay:?}): verify failed: {}",
                describe(&o)
            );
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            if acked_ops(&acked) > 0 {
                assert!(out.contains("and 2 indexes"), "{s}: {out}");
                checked += 1;
            }
            base = Some(state);
        }
        assert!(checked > 0, "{s}: no cycle acknowledged a write");
    }
}
