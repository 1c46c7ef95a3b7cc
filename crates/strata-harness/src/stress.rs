//! The deterministic workload shared by `stress` and `verify`.
//!
//! Operation `i` of a stress run is a pure function of `(seed, i, keys,
//! value_size)`: each operation draws from its own [`SplitMix64`] stream,
//! so `verify` can regenerate any single operation (in particular the one
//! after the last acknowledged) without replaying the run.
//!
//! Acknowledgement lines (one per operation, printed after the write
//! returned):
//!
//! ```text
//! ok <i> put <key> <digest>
//! ok <i> del <key>
//! ok <i> batch <n> put <key> <digest> del <key> ...
//! ```
//!
//! `<digest>` is the 64-bit FNV-1a hash of the value in 16 lowercase hex
//! digits.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use strata::{Db, IndexSpec, KeyType, Options, StrategyKind, WriteBatch, WriteOptions};
use strata_bench::rng::{mix64, SplitMix64};

use crate::Error;

/// 64-bit FNV-1a.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// The digest of a value as printed in acknowledgement lines and state files.
pub fn digest(value: &[u8]) -> String {
    format!("{:016x}", fnv1a(value))
}

/// Parameters that, with the seed, fully determine a stress run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Seed of every operation's random stream.
    pub seed: u64,
    /// Key space size: keys `k000000` .. `k{keys-1}`.
    pub keys: u64,
    /// Bytes of each value; with `index_strategy`, the JSON record is
    /// padded to this length before its closing `"}`.
    pub value_size: usize,
    /// With indexes of this strategy: values are JSON records
    /// `{"u": <0..50>, "c": [x, y], "p": "<padding>"}` whose attributes
    /// change with every write, indexed as `u` (i64) and `c` (point).
    pub index_strategy: Option<StrategyKind>,
}

/// The indexes a stress run with [`Workload::index_strategy`] creates:
/// (name, field, type).
pub const STRESS_INDEXES: [(&str, &str, KeyType); 2] =
    [("u", "u", KeyType::I64), ("c", "c", KeyType::Point)];

/// One put or delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// Write `value` under `key`.
    Put { key: String, value: Vec<u8> },
    /// Delete `key`.
    Del { key: String },
}

impl Mutation {
    /// The key written or deleted.
    pub(crate) fn key(&self) -> &str {
        match self {
            Mutation::Put { key, .. } | Mutation::Del { key } => key,
        }
    }

    /// What the key holds after this mutation: the value's digest or `None`.
    pub(crate) fn effect(&self) -> Option<String> {
        match self {
            Mutation::Put { value, .. } => Some(digest(value)),
            Mutation::Del { .. } => None,
        }
    }
}

/// One stress operation: a single write or an atomic batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// One put or delete.
    Single(Mutation),
    /// Several mutations written atomically, applied in order.
    Batch(Vec<Mutation>),
}

impl Op {
    /// The operation's mutations, in order.
    pub(crate) fn mutations(&self) -> &[Mutation] {
        match self {
            Op::Single(m) => std::slice::from_ref(m),
            Op::Batch(ms) => ms,
        }
    }
}

/// Fixed-width key name: `k` and six or more zero-padded digits.
pub fn key_name(n: u64) -> String {
    format!("k{n:06}")
}

impl Workload {
    fn op_rng(&self, index: u64) -> SplitMix64 {
        SplitMix64::new(mix64(self.seed ^ 0x5354_5241_5441_0001) ^ mix64(index))
    }

    /// The value written for `key` by operation `index`: `value_size`
    /// printable bytes.
    pub fn value(&self, index: u64, key: &str) -> Vec<u8> {
        const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut rng = SplitMix64::new(mix64(self.seed) ^ mix64(index ^ fnv1a(key.as_bytes())));
        let mut v = Vec::with_capacity(self.value_size);
        if self.index_strategy.is_some() {
            let u = rng.below(50);
            let (x, y) = (rng.below(1000), rng.below(1000));
            v.extend_from_slice(format!(r#"{{"u": {u}, "c": [{x}.5, {y}.25], "p": ""#).as_bytes());
        }
        while v.len() < self.value_size {
            let mut r = rng.next_u64();
            for _ in 0..8 {
                if v.len() == self.value_size {
                    break;
                }
                v.push(ALPHABET[(r % 36) as usize]);
                r /= 36;
            }
        }
        if self.index_strategy.is_some() {
            v.extend_from_slice(b"\"}");
        }
        v
    }

    fn mutation(&self, index: u64, rng: &mut SplitMix64, put: bool) -> Mutation {
        let key = key_name(rng.below(self.keys));
        if put {
            let value = self.value(index, &key);
            Mutation::Put { key, value }
        } else {
            Mutation::Del { key }
        }
    }

    /// Operation number `index`: ~55% put, ~20% delete, ~25% batch of 2..=8
    /// mixed puts (70%) and deletes (30%).
    pub(crate) fn op(&self, index: u64) -> Op {
        let mut rng = self.op_rng(index);
        let r = rng.below(100);
        if r < 55 {
            Op::Single(self.mutation(index, &mut rng, true))
        } else if r < 75 {
            Op::Single(self.mutation(index, &mut rng, false))
        } else {
            let n = 2 + rng.below(7);
            let ms = (0..n)
                .map(|_| {
                    let put = rng.below(10) < 7;
                    self.mutation(index, &mut rng, put)
                })
                .collect();
            Op::Batch(ms)
        }
    }
}

/// The acknowledgement line of operation `index` (without newline).
pub(crate) fn ack_line(index: u64, op: &Op) -> String {
    let mut s = format!("ok {index} ");
    let push = |s: &mut String, m: &Mutation| match m {
        Mutation::Put { key, value } => {
            // Writing to a String cannot fail.
            let _ = write!(s, "put {key} {}", digest(value));
        }
        Mutation::Del { key } => {
            let _ = write!(s, "del {key}");
        }
    };
    match op {
        Op::Single(m) => push(&mut s, m),
        Op::Batch(ms) => {
            let _ = write!(s, "batch {}", ms.len());
            for m in ms {
                s.push(' ');
                push(&mut s, m);
            }
        }
    }
    s
}

/// A parsed acknowledgement line: operation index and its effects in order
/// (key, digest or `None` for a delete), plus whether it was a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AckedOp {
    pub(crate) index: u64,
    pub(crate) batch: bool,
    pub(crate) effects: Vec<(String, Option<String>)>,
}

/// Effects of a generated operation, in the form of [`AckedOp`].
pub(crate) fn effects(op: &Op) -> Vec<(String, Option<String>)> {
    op.mutations()
        .iter()
        .map(|m| (m.key().to_string(), m.effect()))
        .collect()
}

fn parse_mutation<'a>(
    toks: &mut impl Iterator<Item = &'a str>,
) -> Result<(String, Option<String>), String> {
    match toks.next() {
        Some("put") => {
            let key = toks.next().ok_or("put without key")?;
            let d = toks.next().ok_or("put without digest")?;
            if d.len() != 16 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("bad digest {d:?}"));
            }
            Ok((key.to_string(), Some(d.to_ascii_lowercase())))
        }
        Some("del") => {
            let key = toks.next().ok_or("del without key")?;
            Ok((key.to_string(), None))
        }
        Some(t) => Err(format!("unknown operation {t:?}")),
        None => Err("missing operation".into()),
    }
}

/// Parses one complete acknowledgement line.
pub(crate) fn parse_ack_line(line: &str) -> Result<AckedOp, String> {
    let mut toks = line.split_ascii_whitespace();
    if toks.next() != Some("ok") {
        return Err("line does not start with \"ok\"".into());
    }
    let index: u64 = toks
        .next()
        .ok_or("missing op index")?
        .parse()
        .map_err(|_| "bad op index".to_string())?;
    let mut peek = toks.clone();
    let (batch, effects) = if peek.next() == Some("batch") {
        toks = peek;
        let n: usize = toks
            .next()
            .ok_or("batch without count")?
            .parse()
            .map_err(|_| "bad batch count".to_string())?;
        let mut effects = Vec::with_capacity(n);
        for _ in 0..n {
            effects.push(parse_mutation(&mut toks)?);
        }
        (true, effects)
    } else {
        (false, vec![parse_mutation(&mut toks)?])
    };
    if let Some(t) = toks.next() {
        return Err(format!("trailing token {t:?}"));
    }
    Ok(AckedOp {
        index,
        batch,
        effects,
    })
}

/// Parses the output of a (possibly killed) stress run: every complete
/// (newline-terminated) line; a final line without newline is the victim of
/// the kill and is ignored. Returns the operations and whether a partial
/// line was dropped.
pub(crate) fn parse_acked(text: &str) -> Result<(Vec<AckedOp>, bool), String> {
    let (complete, partial) = match text.rfind('\n') {
        Some(p) => (&text[..p + 1], !text[p + 1..].is_empty()),
        None => ("", !text.is_empty()),
    };
    let mut ops = Vec::new();
    for (n, line) in complete.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let op = parse_ack_line(line).map_err(|e| format!("line {}: {e}: {line:?}", n + 1))?;
        if op.index != ops.len() as u64 {
            return Err(format!(
                "line {}: expected op index {}, found {}",
                n + 1,
                ops.len(),
                op.index
            ));
        }
        ops.push(op);
    }
    Ok((ops, partial))
}

/// Key → digest of every live key.
pub(crate) type State = BTreeMap<String, String>;

/// Applies effects in order.
pub(crate) fn apply(state: &mut State, effects: &[(String, Option<String>)]) {
    for (k, d) in effects {
        match d {
            Some(d) => {
                state.insert(k.clone(), d.clone());
            }
            None => {
                state.remove(k);
            }
        }
    }
}

/// State file format: one `key<TAB>digest` line per live key, sorted by key;
/// empty lines and lines starting with `#` are ignored.
pub(crate) fn format_state(state: &State) -> String {
    let mut s = String::new();
    for (k, d) in state {
        s.push_str(k);
        s.push('\t');
        s.push_str(d);
        s.push('\n');
    }
    s
}

/// Parses a state file (format of [`format_state`]); errors name the line
/// of a missing tab, a digest that is not 16 hex digits, or a duplicate key.
pub(crate) fn parse_state(text: &str) -> Result<State, String> {
    let mut state = State::new();
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, d) = line
            .split_once('\t')
            .ok_or_else(|| format!("line {}: expected key<TAB>digest", n + 1))?;
        if d.len() != 16 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("line {}: bad digest {d:?}", n + 1));
        }
        if state
            .insert(k.to_string(), d.to_ascii_lowercase())
            .is_some()
        {
            return Err(format!("line {}: duplicate key {k:?}", n + 1));
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Workload {
        Workload {
            seed: 7,
            keys: 50,
            value_size: 33,
            index_strategy: None,
        }
    }

    #[test]
    fn fnv_known_values() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(digest(b"a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn ops_are_deterministic_and_mixed() {
        let w = w();
        let (mut puts, mut dels, mut batches) = (0, 0, 0);
        for i in 0..2000 {
            let op = w.op(i);
            assert_eq!(op, w.op(i));
            match &op {
                Op::Single(Mutation::Put { value, .. }) => {
                    assert_eq!(value.len(), 33);
                    puts += 1
                }
                Op::Single(Mutation::Del { .. }) => dels += 1,
                Op::Batch(ms) => {
                    assert!((2..=8).contains(&ms.len()));
                    batches += 1
                }
            }
            for m in op.mutations() {
                assert_eq!(m.key().len(), 7);
                assert!(m.key() < key_name(50).as_str());
            }
        }
        assert!((1000..1200).contains(&puts), "{puts}");
        assert!((300..500).contains(&dels), "{dels}");
        assert!((400..600).contains(&batches), "{batches}");
        let other = Workload { seed: 8, ..w };
        assert_ne!(
            (0..20).map(|i| w.op(i)).collect::<Vec<_>>(),
            (0..20).map(|i| other.op(i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn ack_lines_roundtrip() {
        let w = w();
        for i in 0..500 {
            let op = w.op(i);
            let line = ack_line(i, &op);
            let parsed = parse_ack_line(&line).unwrap();
            assert_eq!(parsed.index, i);
            assert_eq!(parsed.batch, matches!(op, Op::Batch(_)));
            assert_eq!(parsed.effects, effects(&op));
        }
    }

    #[test]
    fn partial_last_line_is_ignored() {
        let w = w();
        let mut text = String::new();
        for i in 0..3 {
            text.push_str(&ack_line(i, &w.op(i)));
            text.push('\n');
        }
        let full = text.clone();
        text.push_str("ok 3 pu");
        let (ops, partial) = parse_acked(&text).unwrap();
        assert_eq!(ops.len(), 3);
        assert!(partial);
        let (ops, partial) = parse_acked(&full).unwrap();
        assert_eq!(ops.len(), 3);
        assert!(!partial);
        assert_eq!(parse_acked("").unwrap().0.len(), 0);
        assert!(parse_acked("ok 1 del k000001\n").is_err());
        assert!(parse_acked("ok 0 frob k000001\n").is_err());
    }

    #[test]
    fn state_roundtrip() {
        let mut s = State::new();
        s.insert("k000001".into(), digest(b"x"));
        s.insert("k000002".into(), digest(b"y"));
        assert_eq!(parse_state(&format_state(&s)).unwrap(), s);
        assert!(parse_state("k1\tzz\n").is_err());
        assert!(parse_state("k1\n").is_err());
    }
}

/// Creates the [`STRESS_INDEXES`] of strategy `kind` that `db` does not
/// have yet (built over existing data); an index of the same name with
/// another strategy is an error.
pub fn create_stress_indexes(db: &Db, kind: StrategyKind) -> Result<(), Error> {
    let have = db.indexes();
    for (name, field, ty) in STRESS_INDEXES {
        match have.iter().find(|i| i.spec.name == name) {
            Some(i) if i.spec.strategy == kind.name() => {}
            Some(i) => {
                return Err(Error::Other(format!(
                    "the database has index {name:?} with strategy {}, not {}",
                    i.spec.strategy,
                    kind.name()
                )))
            }
            None => db.create_index(IndexSpec::field(name, field, ty).strategy(kind.name()))?,
        }
    }
    Ok(())
}

/// Runs operations `0..ops` of `w` on the database in `dir` (created if
/// missing; with `w.index_strategy`, its [`STRESS_INDEXES`] too), each
/// written with `sync`, and writes one acknowledgement line per operation
/// to `out` after the write returned, flushing each line with one write
/// call (so a kill cuts at most the last line). `small`: tiny memtables
/// and levels ([`Options::small_for_tests`]). A failed write to `out` is
/// returned as is, so a caller can tell a closed pipe from an engine error.
pub fn run(
    dir: &Path,
    w: Workload,
    ops: u64,
    sync: bool,
    small: bool,
    out: &mut dyn Write,
) -> Result<(), StressError> {
    let opts = if small {
        Options::small_for_tests()
    } else {
        Options::default()
    };
    let db = Db::open(dir, opts).map_err(|e| StressError::Db(e.into()))?;
    if let Some(kind) = w.index_strategy {
        create_stress_indexes(&db, kind).map_err(StressError::Db)?;
    }
    let wopts = WriteOptions::default().sync(sync);
    for i in 0..ops {
        let op = w.op(i);
        let written = match &op {
            Op::Single(Mutation::Put { key, value }) => db.put_opt(key.as_bytes(), value, wopts),
            Op::Single(Mutation::Del { key }) => db.delete_opt(key.as_bytes(), wopts),
            Op::Batch(ms) => {
                let mut b = WriteBatch::new();
                for m in ms {
                    match m {
                        Mutation::Put { key, value } => b.put(key.as_bytes(), value),
                        Mutation::Del { key } => b.delete(key.as_bytes()),
                    };
                }
                db.write(b, wopts)
            }
        };
        written.map_err(|e| StressError::Db(e.into()))?;
        let mut line = ack_line(i, &op);
        line.push('\n');
        out.write_all(line.as_bytes())
            .and_then(|_| out.flush())
            .map_err(StressError::Output)?;
    }
    Ok(())
}

/// Why [`run`] stopped.
#[derive(Debug)]
pub enum StressError {
    /// The database failed.
    Db(Error),
    /// Writing an acknowledgement line failed.
    Output(std::io::Error),
}
