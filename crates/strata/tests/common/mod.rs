//! Helpers shared by the behaviour tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns
#![allow(dead_code)]

pub mod topk;

/// SplitMix64: tiny, deterministic, good enough for test workloads.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| b'a' + (self.below(26) as u8)).collect()
    }
}

/// Fixed-width key `k000123`.
pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

/// Copies a database directory (without its LOCK) as a crash would leave
/// it. An obsolete file the engine deletes meanwhile is skipped: a crash at
/// that instant may or may not have left it.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() == "LOCK" {
            continue;
        }
        if e.path().is_dir() {
            // A stand-alone index's trees.
            copy_dir(&e.path(), &to.join(e.file_name()));
            continue;
        }
        match std::fs::copy(e.path(), to.join(e.file_name())) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("copy {:?}: {err}", e.path()),
        }
    }
}

/// The attribute at `path` of a JSON record, as the index extracts it.
pub fn attr(value: &[u8], path: &str, ty: strata::KeyType) -> Option<strata::IndexValue> {
    let doc: serde_json::Value = serde_json::from_slice(value).ok()?;
    let path = strata::attr::parse_path(path).ok()?;
    strata::attr::extract(&doc, &path, ty).ok()
}

/// The records model of the index tests: key → (write order, record
/// bytes), the latest write of each live key.
pub type Model = std::collections::BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

/// What a query must return on `model`: the records whose attribute at
/// `path` matches `pred`, newest write first, at most `opts.limit`, values
/// omitted with `opts.keys_only`.
pub fn expected(
    model: &Model,
    path: &str,
    ty: strata::KeyType,
    pred: &strata::Predicate,
    opts: strata::QueryOptions,
) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut v: Vec<(u64, Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter(|(_, (_, val))| attr(val, path, ty).is_some_and(|a| pred.matches(&a)))
        .map(|(k, (o, val))| (*o, k.clone(), val.clone()))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    if let Some(k) = opts.limit {
        v.truncate(k);
    }
    v.into_iter()
        .map(|(_, k, val)| (k, if opts.keys_only { None } else { Some(val) }))
        .collect()
}

/// Every strategy variant the behaviour tests cover, as `name` or
/// `name[k=v;k=v]` (see [`spec_for`]). A new strategy joins by adding its
/// name here.
pub const STRATEGIES: &[&str] = &[
    // Secondary blocks kept in RAM within the default budget (all of
    // them, at these sizes): taken from the builder at a flush or
    // compaction, read from the table or side file at open or install.
    "next",
    // Secondary blocks read through the block cache.
    "next[pin=false]",
    "memory",
    "embedded",
    "composite",
    "composite[mode=validation]",
    "composite[mode=validation;validate=direct]",
    "composite[mode=validation;repair=off]",
    "deli",
    "posting-eager",
    "posting-lazy",
    "filter",
    "filter[maintain=validation]",
    "filter[maintain=eager]",
    "perseid",
    // Every clean page evicted at once: each access reads it back; the
    // persistent table merged into a new file at almost every flush.
    "perseid[page_cache_mb=0;merge_min_keys=4]",
];

/// The index spec of a [`STRATEGIES`] entry: `name` or `name[k=v;k=v]`.
pub fn spec_for(strategy: &str, name: &str, path: &str, ty: strata::KeyType) -> strata::IndexSpec {
    let (s, params) = match strategy.split_once('[') {
        Some((s, p)) => (s, p.trim_end_matches(']')),
        None => (strategy, ""),
    };
    let mut spec = strata::IndexSpec::field(name, path, ty).strategy(s);
    for kv in params.split(';').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap();
        spec = spec.param(k, v);
    }
    spec
}

/// `tests/proptest-regressions/<test file stem>.txt` of this crate, as an
/// absolute path. (proptest's default, `SourceParallel`, looks for a
/// `lib.rs` above the source and, finding none above `tests/`, writes
/// `tests/<name>.proptest-regressions` instead.)
fn regressions_file(source_file: &str) -> &'static str {
    let stem = std::path::Path::new(source_file)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("test source file name");
    let path = format!(
        "{}/tests/proptest-regressions/{stem}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    Box::leak(path.into_boxed_str())
}

/// The proptest configuration of the randomized model and oracle tests:
/// `default_cases` cases unless `PROPTEST_CASES` says otherwise (proptest's
/// other `PROPTEST_*` variables apply as usual), and failing cases saved
/// beside the test as `proptest-regressions/<test file>.txt`, which are
/// replayed first on every later run. `source_file` is the test's
/// `file!()` (the `proptest!` macro sets it itself).
pub fn proptest_config(
    default_cases: u32,
    source_file: &'static str,
) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    let default = proptest::test_runner::Config::default();
    proptest::test_runner::Config {
        cases,
        // proptest's automatic limit is 4 shrink steps per case, too few to
        // shrink a sequence of a few hundred operations (one step removes
        // or simplifies one); bounded by time instead, unless
        // `PROPTEST_MAX_SHRINK_ITERS` / `PROPTEST_MAX_SHRINK_TIME` say.
        max_shrink_iters: match default.max_shrink_iters {
            u32::MAX => 20_000,
            n => n,
        },
        max_shrink_time: match default.max_shrink_time {
            0 => 300_000,
            ms => ms,
        },
        source_file: Some(source_file),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(regressions_file(source_file)),
        )),
        ..default
    }
}

/// Runs `test` on `cases` values of `strategy` (see [`proptest_config`]).
/// A failing case (a panic) is shrunk to a minimal one, saved to the
/// regressions file, and reported in the panic message with `what`.
pub fn proptest_run<S: proptest::strategy::Strategy>(
    what: &str,
    cases: u32,
    source_file: &'static str,
    strategy: S,
    test: impl Fn(S::Value),
) {
    let mut runner = proptest::test_runner::TestRunner::new(proptest_config(cases, source_file));
    if let Err(e) = runner.run(&strategy, |v| {
        test(v);
        Ok(())
    }) {
        panic!("{what}: {e}");
    }
}
