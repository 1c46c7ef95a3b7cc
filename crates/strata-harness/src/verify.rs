//! `strata verify`: the crash-test checker.
//!
//! Expected state = base state (`--base-state`, or empty) + the complete
//! acknowledged lines of `--acked`, in order. The recovered database must
//! hold exactly that state, or that state plus the one operation after the
//! last acknowledged (it may have been applied before the kill, but its line
//! was never printed), applied atomically. With `--prefix` (for unsynced
//! runs) any state after `j` operations, `0 <= j <= acked + 1`, is accepted.
//!
//! The unknown next operation is regenerated from the workload parameters,
//! which must be those of the stress run; every acknowledged line is checked
//! against its regenerated operation, so a parameter mix-up is reported
//! instead of a bogus verdict.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use strata::{Db, Options};

use crate::stress::{self, State, Workload};
use crate::Error;

/// Arguments of `strata verify`.
pub struct VerifyArgs {
    /// The stress run's output (acknowledgement lines; a final line
    /// without newline is ignored).
    pub acked: PathBuf,
    /// The stress run's parameters (every acknowledged line must match
    /// the operation they generate).
    pub workload: Workload,
    /// State file of the database before the stress run (default: empty).
    pub base_state: Option<PathBuf>,
    /// Where to write the recovered state as a state file, if the check
    /// passes (the next run's `base_state`).
    pub write_state: Option<PathBuf>,
    /// Accept the state after any prefix of the operations (unsynced
    /// runs), not only after the acknowledged ones (or one more).
    pub prefix: bool,
}

/// What a successful verification found.
#[derive(Debug)]
pub struct Verdict {
    /// Indexes found exact against a full scan (every index of the
    /// database).
    pub indexes_checked: usize,
    /// Keys compared: those of the base state, of every acknowledged
    /// operation and of the next one, and every key in the database.
    pub keys_checked: usize,
    /// Complete acknowledgement lines read.
    pub acked: u64,
    /// Number of operations whose effects the database shows (`acked` or
    /// `acked + 1` without `--prefix`).
    pub applied: u64,
    /// The acknowledgement file ended in a line without newline (ignored).
    pub partial_line: bool,
    /// Indexes rebuilt from the primary at open because their own files
    /// failed their checks (name, reason): exact, but the files were
    /// damaged.
    pub rebuilt_at_open: Vec<(String, String)>,
}

fn read_text(path: &Path) -> Result<String, Error> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::Other(format!("read {}: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn show(d: Option<&String>) -> &str {
    d.map(String::as_str).unwrap_or("absent")
}

/// Reads every live key of the database (full scan) and cross-checks the
/// scan against `get` and `multi_get` for `extra_keys` and every scanned key.
fn read_actual(db: &Db, extra_keys: &BTreeSet<String>) -> Result<State, Error> {
    let mut actual = State::new();
    let mut raw: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for item in db.iter(None, None)? {
        let (k, v) = item?;
        let key = String::from_utf8_lossy(&k).into_owned();
        actual.insert(key.clone(), stress::digest(&v));
        raw.insert(key, k);
    }
    let mut keys: Vec<Vec<u8>> = extra_keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    keys.extend(raw.values().cloned());
    keys.sort();
    keys.dedup();
    let mut problems = Vec::new();
    for chunk in keys.chunks(16) {
        let refs: Vec<&[u8]> = chunk.iter().map(|k| k.as_slice()).collect();
        let multi = db.multi_get(&refs)?;
        for (k, m) in chunk.iter().zip(multi) {
            let name = String::from_utf8_lossy(k).into_owned();
            let scanned = actual.get(&name);
            let got = db.get(k)?.map(|v| stress::digest(&v));
            let multi = m.map(|v| stress::digest(&v));
            if got.as_ref() != scanned || multi.as_ref() != scanned {
                problems.push(format!(
                    "  {name}: scan {}, get {}, multi_get {}",
                    show(scanned),
                    show(got.as_ref()),
                    show(multi.as_ref())
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(Error::Failed(format!(
            "scan, get and multi_get disagree on {} keys:\n{}",
            problems.len(),
            problems.join("\n")
        )));
    }
    Ok(actual)
}

/// Checks every index of `db` against a full scan (exact answers, nothing
/// missing, nothing extra); a run with [`Workload::index_strategy`] must
/// have its indexes once it acknowledged a write (`wrote`): stress creates
/// them before its first write.
fn check_indexes(db: &Db, w: Workload, wrote: bool) -> Result<usize, Error> {
    let infos = db.indexes();
    if w.index_strategy.is_some() && wrote {
        for (name, _, _) in stress::STRESS_INDEXES {
            if !infos.iter().any(|i| i.spec.name == name) {
                return Err(Error::Failed(format!(
                    "index {name:?} of the stress run is missing after recovery"
                )));
            }
        }
    }
    let mut bad = Vec::new();
    for info in &infos {
        let c = db.check_index(&info.spec.name)?;
        if !c.ok() {
            bad.push(format!(
                "  index {:?} ({}): expected {}, found {}; missing {:?}; extra {:?}",
                c.index, info.spec.strategy, c.expected, c.found, c.missing, c.extra
            ));
        }
    }
    if !bad.is_empty() {
        return Err(Error::Failed(format!(
            "indexes disagree with a full scan:\n{}",
            bad.join("\n")
        )));
    }
    Ok(infos.len())
}

/// Checks the database at `db_path` against `args` (see the module docs).
/// Returns [`Error::Failed`] if the recovered state matches no acceptable
/// state, scan, `get` and `multi_get` disagree, or an index is missing or
/// disagrees with a full scan; [`Error::Other`] if an input file is
/// unreadable or malformed or does not match the workload; [`Error::Db`]
/// if the database cannot be opened or read.
pub fn run(db_path: &Path, args: &VerifyArgs) -> Result<Verdict, Error> {
    let w = args.workload;
    let text = read_text(&args.acked)?;
    let (acked, partial_line) = stress::parse_acked(&text)
        .map_err(|e| Error::Other(format!("{}: {e}", args.acked.display())))?;
    for a in &acked {
        let op = w.op(a.index);
        if a.effects != stress::effects(&op) || a.batch != matches!(op, stress::Op::Batch(_)) {
            return Err(Error::Other(format!(
                "{}: op {} does not match the workload (--seed {} --keys {} --value-size {}); \
                 pass the stress run's parameters",
                args.acked.display(),
                a.index,
                w.seed,
                w.keys,
                w.value_size
            )));
        }
    }
    let m = acked.len() as u64;
    let next = stress::effects(&w.op(m));
    let base = match &args.base_state {
        Some(p) => stress::parse_state(&read_text(p)?)
            .map_err(|e| Error::Other(format!("{}: {e}", p.display())))?,
        None => State::new(),
    };

    // Every key the check is about.
    let mut keys: BTreeSet<String> = base.keys().cloned().collect();
    for a in &acked {
        keys.extend(a.effects.iter().map(|(k, _)| k.clone()));
    }
    keys.extend(next.iter().map(|(k, _)| k.clone()));

    let db = Db::open(db_path, Options::default())?;
    let actual = read_actual(&db, &keys)?;
    let indexes_checked = check_indexes(&db, w, !acked.is_empty() || !base.is_empty())?;
    let rebuilt_at_open = db
        .indexes()
        .into_iter()
        .filter_map(|i| Some((i.spec.name, i.stats.rebuilt_at_open?)))
        .collect();
    drop(db);
    keys.extend(actual.keys().cloned());

    // Walk the candidate states after j = 0 ..= m+1 operations, keeping the
    // set of keys where the candidate differs from the database.
    let mut cand = base.clone();
    let mut diff: HashSet<String> = keys
        .iter()
        .filter(|k| cand.get(*k) != actual.get(*k))
        .cloned()
        .collect();
    let allowed = |j: u64| args.prefix || j >= m;
    let mut matched: Option<u64> = None;
    let mut closest = (usize::MAX, 0u64);
    let mut expected_acked = State::new();
    let all_ops = acked
        .iter()
        .map(|a| a.effects.as_slice())
        .chain([next.as_slice()]);
    for (j, effects) in (0u64..).zip(all_ops) {
        if allowed(j) {
            if diff.is_empty() {
                matched = Some(j);
            }
            if diff.len() <= closest.0 {
                closest = (diff.len(), j);
            }
        }
        if j == m {
            expected_acked = cand.clone();
        }
        stress::apply(&mut cand, effects);
        for (k, _) in effects {
            if cand.get(k) == actual.get(k) {
                diff.remove(k);
            } else {
                diff.insert(k.clone());
            }
        }
    }
    // The next op counts as applied only if the state without it does not
    // match (a delete of an absent key changes nothing).
    if diff.is_empty() && matched.is_none() {
        matched = Some(m + 1);
    }
    if diff.len() <= closest.0 {
        closest = (diff.len(), m + 1);
    }

    let Some(applied) = matched else {
        let mut msg = format!(
            "recovered state matches no acceptable state ({} keys, {m} ops acknowledged{})\n\
             mismatches against the state after all {m} acknowledged ops:\n",
            keys.len(),
            if partial_line {
                ", partial last line ignored"
            } else {
                ""
            }
        );
        for k in &keys {
            let (e, a) = (expected_acked.get(k), actual.get(k));
            if e != a {
                let _ = writeln!(msg, "  {k}: expected {}, found {}", show(e), show(a));
            }
        }
        let _ = write!(msg, "with the next op (#{m}) applied:");
        for (k, _) in &next {
            let _ = write!(
                msg,
                " {k} expected {} found {};",
                show(cand.get(k)),
                show(actual.get(k))
            );
        }
        let _ = write!(msg, " ({} keys differ)", diff.len());
        if args.prefix {
            let _ = write!(
                msg,
                "\nclosest prefix: {} ops ({} keys differ)",
                closest.1, closest.0
            );
        }
        return Err(Error::Failed(msg));
    };

    if let Some(p) = &args.write_state {
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, stress::format_state(&actual))
            .and_then(|_| std::fs::rename(&tmp, p))
            .map_err(|e| Error::Other(format!("write {}: {e}", p.display())))?;
    }
    Ok(Verdict {
        indexes_checked,
        keys_checked: keys.len(),
        acked: m,
        applied,
        partial_line,
        rebuilt_at_open,
    })
}
