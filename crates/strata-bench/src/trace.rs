//! Benchmark traces: every workload of `strata bench run` and
//! `strata bench replay` is first written once, in memory, as a [`Trace`]
//! (a load phase, static query sets, and/or a mixed sequence of
//! operations, each query with its exact expected result count), and then
//! replayed identically by every system. Everything here is a pure
//! function of the workload parameters and the seed.

use std::collections::{BTreeMap, HashMap};

use crate::chirp::{self, ChirpOp};
use crate::gen::{self as g, Building, Dist, SyntheticRecord, Tweet};
use crate::queries::{self, Query, QuerySet};
use crate::rng::SplitMix64;
use crate::system::{AttrType, IndexDecl};
use serde_json::{json, Value};

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub struct Put {
    /// Primary key.
    pub key: Vec<u8>,
    /// The record's JSON document.
    pub value: Vec<u8>,
    /// The key was written before (an update rather than an insert).
    pub update: bool,
    /// Milliseconds since the first write (chirp timestamps).
    pub ts_ms: u64,
}

/// One operation of a mixed or replayed sequence.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Insert or update one record.
    Put(Put),
    /// Primary-key read.
    Get {
        /// Primary key read.
        key: Vec<u8>,
        /// The key is live at this point of the sequence.
        expect_found: bool,
    },
    /// A secondary query.
    Query {
        /// Position in [`Trace::labels`] (index and class of the query).
        label: usize,
        /// The query.
        query: Query,
        /// Exact result count at this point of the sequence, without a
        /// limit (`None`: not known, only cross-checked between systems).
        expected: Option<u64>,
    },
}

/// Operation kinds, as named in results.json (`ops[].op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// An [`Op::Put`] of a key not written before.
    Insert,
    /// An [`Op::Put`] of a key written before.
    Update,
    /// An [`Op::Get`].
    Get,
    /// An [`Op::Query`].
    Query,
}

impl OpKind {
    /// Every kind, in the order of results.json's `ops` entries.
    pub const ALL: [OpKind; 4] = [OpKind::Insert, OpKind::Update, OpKind::Get, OpKind::Query];

    /// The kind's name in results.json: `insert`, `update`, `get`, `query`.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Update => "update",
            OpKind::Get => "get",
            OpKind::Query => "query",
        }
    }
}

impl Op {
    /// The operation's kind (a put is an update if [`Put::update`]).
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Put(p) if p.update => OpKind::Update,
            Op::Put(_) => OpKind::Insert,
            Op::Get { .. } => OpKind::Get,
            Op::Query { .. } => OpKind::Query,
        }
    }
}

/// The attribute and class a mixed query belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// Name of the queried index.
    pub index: String,
    /// Selectivity class (`small`, `medium`, `large`; replay: `lookup`,
    /// `range`).
    pub class: String,
    /// Mean result count the class was calibrated to (mixed workloads), or
    /// the mean exact count over the trace (replay).
    pub calibrated_mean: f64,
}

/// A workload, written once and replayed by every system.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Workload name (results.json's `workload`).
    pub workload: String,
    /// Secondary indexes every system is opened with.
    pub indexes: Vec<IndexDecl>,
    /// Mean gap between neighbouring values, per index (for `delta=Nx`).
    pub gaps: BTreeMap<String, f64>,
    /// Writes before the measured phase (then settle and reopen).
    pub load: Vec<Put>,
    /// Static query sets (`attribute` = index name), with exact counts
    /// over the live records after the load.
    pub sets: Vec<QuerySet>,
    /// Run the static query sets round-robin (one query of each set in
    /// turn) rather than set after set.
    pub interleave: bool,
    /// The mixed / replayed sequence (after the load).
    pub ops: Vec<Op>,
    /// Index and class of the sequence's queries (the `label` of an
    /// [`Op::Query`] is a position in it).
    pub labels: Vec<Label>,
    /// Live records after the load (replay: distinct keys written).
    pub records: u64,
    /// Workload parameters, copied to results.json.
    pub parameters: BTreeMap<String, Value>,
}

// ------------------------------------------------------------ attributes

/// One attribute value of a generated record.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Attr {
    I64(i64),
    F64(f64),
    Point([f64; 2]),
    Rect([f64; 4]),
}

/// Mean gap between neighbouring values: `(max - min) / (n - 1)` for
/// numbers, `sqrt(area / n)` of the bounding box for points and
/// rectangles (the quantity NEXT's `delta=auto` multiplies by 8 per table).
fn mean_gap(values: &[Attr]) -> Option<f64> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut mbr = [
        f64::INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NEG_INFINITY,
    ];
    let mut spatial = false;
    for v in values {
        let r = match *v {
            Attr::I64(x) => {
                lo = lo.min(x as f64);
                hi = hi.max(x as f64);
                continue;
            }
            Attr::F64(x) => {
                lo = lo.min(x);
                hi = hi.max(x);
                continue;
            }
            Attr::Point([x, y]) => [x, y, x, y],
            Attr::Rect(r) => r,
        };
        spatial = true;
        mbr = [
            mbr[0].min(r[0]),
            mbr[1].min(r[1]),
            mbr[2].max(r[2]),
            mbr[3].max(r[3]),
        ];
    }
    let g = if spatial {
        ((mbr[2] - mbr[0]) * (mbr[3] - mbr[1]) / n as f64).sqrt()
    } else {
        (hi - lo) / (n - 1) as f64
    };
    (g.is_finite() && g > 0.0).then_some(g)
}

/// A generated record: its primary key, its JSON under another key, and
/// its indexed attributes (in index order).
trait Record {
    fn key(&self) -> u64;
    fn json_with_key(&self, key: u64) -> String;
    fn attrs(&self) -> Vec<Attr>;
    fn ts_ms(&self) -> u64 {
        0
    }
}

impl Record for Tweet {
    fn key(&self) -> u64 {
        self.id
    }
    fn json_with_key(&self, key: u64) -> String {
        Tweet {
            id: key,
            ..self.clone()
        }
        .to_json()
    }
    fn attrs(&self) -> Vec<Attr> {
        vec![
            Attr::I64(self.user_id),
            Attr::Point(self.coordinates),
            Attr::I64(self.created_at),
        ]
    }
    fn ts_ms(&self) -> u64 {
        u64::try_from(self.created_at - g::FIRST_CREATED_AT).unwrap_or(0)
    }
}

impl Record for Building {
    fn key(&self) -> u64 {
        self.id
    }
    fn json_with_key(&self, key: u64) -> String {
        Building {
            id: key,
            ..self.clone()
        }
        .to_json()
    }
    fn attrs(&self) -> Vec<Attr> {
        vec![Attr::Rect(self.bbox), Attr::F64(self.perimeter)]
    }
}

/// The distributions of the skew workload, with their field / index names.
pub const SKEW_FIELDS: [(&str, Dist); 4] = [
    ("uniform", Dist::Uniform),
    ("zipf05", Dist::Zipf(0.5)),
    ("zipf08", Dist::Zipf(0.8)),
    ("zipf10", Dist::Zipf(1.0)),
];

/// A synthetic record with one attribute per distribution (NEXT §6.5).
#[derive(Debug, Clone)]
struct SkewRecord {
    id: u64,
    attrs: [i64; 4],
    pad: String,
}

impl Record for SkewRecord {
    fn key(&self) -> u64 {
        self.id
    }
    fn json_with_key(&self, key: u64) -> String {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), json!(key));
        for ((name, _), v) in SKEW_FIELDS.iter().zip(self.attrs) {
            m.insert((*name).into(), json!(v));
        }
        m.insert("pad".into(), json!(self.pad));
        Value::Object(m).to_string()
    }
    fn attrs(&self) -> Vec<Attr> {
        self.attrs.iter().map(|&v| Attr::I64(v)).collect()
    }
}

/// `n` skew records: four independent synthetic streams (one per
/// distribution, seeds `seed + i`) zipped into one record; ids `1..=n`
/// zero-padded to 10 digits so key order is numeric order.
fn skew_records(seed: u64, n: u64) -> impl Iterator<Item = SkewRecord> {
    let mut streams: Vec<g::Synthetic> = SKEW_FIELDS
        .iter()
        .enumerate()
        .map(|(i, (_, d))| g::synthetic(seed.wrapping_add(i as u64), n, *d))
        .collect();
    std::iter::from_fn(move || {
        let rs: Vec<SyntheticRecord> = streams.iter_mut().map_while(|s| s.next()).collect();
        if rs.len() < SKEW_FIELDS.len() {
            return None;
        }
        Some(SkewRecord {
            id: rs[0].id,
            attrs: [rs[0].attr, rs[1].attr, rs[2].attr, rs[3].attr],
            pad: rs[0].pad.clone(),
        })
    })
}

fn skew_key(id: u64) -> Vec<u8> {
    format!("{id:010}").into_bytes()
}

fn tweet_key(id: u64) -> Vec<u8> {
    // Tweet and building ids have a fixed number of digits.
    id.to_string().into_bytes()
}

// ------------------------------------------------------------ static

/// Picks kind `k` of `remaining` with probability `remaining[k] / total`
/// (sampling without replacement: exact counts, uniformly interleaved);
/// kinds not in `allowed` are skipped. `None` when nothing is left.
fn deal(r: &mut SplitMix64, remaining: &mut [u64], allowed: &[bool]) -> Option<usize> {
    let total: u64 = remaining
        .iter()
        .zip(allowed)
        .filter(|(_, &a)| a)
        .map(|(c, _)| *c)
        .sum();
    if total == 0 {
        return None;
    }
    let mut x = r.below(total);
    for (k, c) in remaining.iter_mut().enumerate() {
        if !allowed[k] {
            continue;
        }
        if x < *c {
            *c -= 1;
            return Some(k);
        }
        x -= *c;
    }
    None
}

/// Updates that make `fraction` of `inserts + updates` writes updates.
fn updates_for(inserts: u64, fraction: f64) -> u64 {
    if fraction <= 0.0 {
        0
    } else {
        (inserts as f64 * fraction / (1.0 - fraction)).round() as u64
    }
}

/// The load of a static workload: `n` inserts and `updates` updates of an
/// already-written key (uniformly chosen) with the attributes and body of
/// a fresh record, uniformly interleaved. `stream` must yield at least
/// `n + updates` records. Returns the writes and the final attributes of
/// each live record (in insertion order).
fn static_load<R: Record>(
    mut stream: impl Iterator<Item = R>,
    n: u64,
    updates: u64,
    seed: u64,
    key_of: fn(u64) -> Vec<u8>,
) -> (Vec<Put>, Vec<Vec<Attr>>) {
    let mut r = SplitMix64::derive(seed, 0x00bd_a7e5);
    let mut remaining = [n, updates];
    let mut keys: Vec<u64> = Vec::with_capacity(n as usize);
    let mut live: Vec<Vec<Attr>> = Vec::with_capacity(n as usize);
    let mut puts = Vec::with_capacity((n + updates) as usize);
    loop {
        let allowed = [true, !keys.is_empty()];
        let Some(kind) = deal(&mut r, &mut remaining, &allowed) else {
            break;
        };
        let Some(rec) = stream.next() else { break };
        if kind == 0 {
            keys.push(rec.key());
            live.push(rec.attrs());
            puts.push(Put {
                key: key_of(rec.key()),
                value: rec.json_with_key(rec.key()).into_bytes(),
                update: false,
                ts_ms: rec.ts_ms(),
            });
        } else {
            let slot = r.below(keys.len() as u64) as usize;
            live[slot] = rec.attrs();
            puts.push(Put {
                key: key_of(keys[slot]),
                value: rec.json_with_key(keys[slot]).into_bytes(),
                update: true,
                ts_ms: rec.ts_ms(),
            });
        }
    }
    (puts, live)
}

fn column(live: &[Vec<Attr>], i: usize) -> Vec<Attr> {
    live.iter().map(|a| a[i]).collect()
}

fn ints(c: &[Attr]) -> Vec<i64> {
    c.iter()
        .filter_map(|a| match a {
            Attr::I64(v) => Some(*v),
            _ => None,
        })
        .collect()
}

fn decl(name: &str, ty: AttrType) -> IndexDecl {
    IndexDecl {
        name: name.to_string(),
        field: name.to_string(),
        ty,
    }
}

/// Parameters of the static workloads.
#[derive(Debug, Clone)]
pub struct StaticCfg {
    /// Live records after the load.
    pub records: u64,
    /// Queries per calibrated query set.
    pub queries: usize,
    /// Seed of the generators and query sets.
    pub seed: u64,
    /// Fraction of the load's writes that update an existing key, `[0, 1)`.
    pub update_fraction: f64,
}

fn base_parameters(c: &StaticCfg, updates: u64) -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("queries_per_set".into(), json!(c.queries)),
        ("update_fraction".into(), json!(c.update_fraction)),
        ("load_writes".into(), json!(c.records + updates)),
        ("load_updates".into(), json!(updates)),
    ])
}

/// Tweets with indexes on `user_id` and `coordinates` (and `created_at`
/// when `with_created_at`, queried round-robin: the multi-index workload).
pub fn static_tweets(workload: &str, c: &StaticCfg, with_created_at: bool) -> Trace {
    let updates = updates_for(c.records, c.update_fraction);
    let (load, live) = static_load(
        g::tweets(c.seed, c.records + updates),
        c.records,
        updates,
        c.seed,
        tweet_key,
    );
    let users = column(&live, 0);
    let coords = column(&live, 1);
    let points: Vec<[f64; 2]> = coords
        .iter()
        .filter_map(|a| match a {
            Attr::Point(p) => Some(*p),
            _ => None,
        })
        .collect();
    let mut sets =
        queries::tweet_query_sets_from(&ints(&users), &points, c.queries, c.seed ^ 0x5eed);
    let mut indexes = vec![
        decl("user_id", AttrType::I64),
        decl("coordinates", AttrType::Point),
    ];
    let mut gaps = BTreeMap::new();
    gaps.extend(mean_gap(&users).map(|g| ("user_id".to_string(), g)));
    gaps.extend(mean_gap(&coords).map(|g| ("coordinates".to_string(), g)));
    if with_created_at {
        let created = column(&live, 2);
        indexes.push(decl("created_at", AttrType::I64));
        gaps.extend(mean_gap(&created).map(|g| ("created_at".to_string(), g)));
        sets.extend(queries::int_query_sets(
            "created_at",
            &ints(&created),
            &queries::TWEET_USER_ID_TARGETS,
            c.queries,
            c.seed ^ 0xc7ea,
        ));
    }
    Trace {
        workload: workload.to_string(),
        indexes,
        gaps,
        load,
        sets,
        interleave: with_created_at,
        records: c.records,
        parameters: base_parameters(c, updates),
        ..Trace::default()
    }
}

/// Share of the live records a `time-range` query returns.
pub const TIME_RANGE_SHARE: f64 = 0.01;

/// The range-filter experiment (Luo & Carey §6.4.2): tweets whose
/// `created_at` follows insertion order (an update gives the record a new
/// `created_at`), loaded with `c.update_fraction` updates, one index on
/// `created_at`, and two query sets: `recent` (`created_at >= T`, about
/// the newest [`TIME_RANGE_SHARE`] of the live records) and `old`
/// (`created_at <= T`, about the oldest share). Each query moves its `T`
/// by up to ±20% of the share.
pub fn time_range(c: &StaticCfg) -> Trace {
    let updates = updates_for(c.records, c.update_fraction);
    let (load, live) = static_load(
        g::tweets(c.seed, c.records + updates),
        c.records,
        updates,
        c.seed,
        tweet_key,
    );
    let created = column(&live, 2);
    let mut sorted = ints(&created);
    sorted.sort_unstable();
    let n = sorted.len();
    let share = ((n as f64 * TIME_RANGE_SHARE).round() as usize).clamp(1, n.max(1));
    let mut r = SplitMix64::derive(c.seed, 0x7173_e7a9);
    let mut recent = Vec::with_capacity(c.queries);
    let mut old = Vec::with_capacity(c.queries);
    for _ in 0..c.queries {
        if n == 0 {
            break;
        }
        let jitter = share / 5;
        let m = (share + r.below(2 * jitter as u64 + 1) as usize)
            .saturating_sub(jitter)
            .clamp(1, n);
        let lo = sorted.get(n - m).copied().unwrap_or(i64::MIN);
        recent.push((Query::Range(lo, i64::MAX), m as u64));
        let hi = sorted.get(m - 1).copied().unwrap_or(i64::MAX);
        old.push((Query::Range(i64::MIN, hi), m as u64));
    }
    let set = |class: &str, qs: Vec<(Query, u64)>| {
        let counts: Vec<u64> = qs.iter().map(|q| q.1).collect();
        let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
        QuerySet {
            attribute: "created_at".into(),
            class: class.into(),
            target_mean: share as f64,
            achieved_mean: mean,
            clamped: false,
            param: 0.0,
            expected_counts: counts,
            queries: qs.into_iter().map(|q| q.0).collect(),
        }
    };
    let mut gaps = BTreeMap::new();
    gaps.extend(mean_gap(&created).map(|g| ("created_at".to_string(), g)));
    Trace {
        workload: "time-range".into(),
        indexes: vec![decl("created_at", AttrType::I64)],
        gaps,
        load,
        sets: vec![set("recent", recent), set("old", old)],
        records: c.records,
        parameters: base_parameters(c, updates),
        ..Trace::default()
    }
}

/// Buildings with indexes on `bbox` (rect) and `perimeter` (f64).
pub fn static_buildings(c: &StaticCfg) -> Trace {
    let updates = updates_for(c.records, c.update_fraction);
    let (load, live) = static_load(
        g::buildings(c.seed, c.records + updates),
        c.records,
        updates,
        c.seed,
        tweet_key,
    );
    let bbox = column(&live, 0);
    let perim = column(&live, 1);
    let rects: Vec<[f64; 4]> = bbox
        .iter()
        .filter_map(|a| match a {
            Attr::Rect(r) => Some(*r),
            _ => None,
        })
        .collect();
    let perims: Vec<f64> = perim
        .iter()
        .filter_map(|a| match a {
            Attr::F64(v) => Some(*v),
            _ => None,
        })
        .collect();
    let sets = queries::building_query_sets_from(&rects, &perims, c.queries, c.seed ^ 0x5eed);
    let mut gaps = BTreeMap::new();
    gaps.extend(mean_gap(&bbox).map(|g| ("bbox".to_string(), g)));
    gaps.extend(mean_gap(&perim).map(|g| ("perimeter".to_string(), g)));
    Trace {
        workload: "static-buildings".into(),
        indexes: vec![
            decl("bbox", AttrType::Rect),
            decl("perimeter", AttrType::F64),
        ],
        gaps,
        load,
        sets,
        records: c.records,
        parameters: base_parameters(c, updates),
        ..Trace::default()
    }
}

/// Synthetic records with one attribute per distribution (uniform, Zipf
/// 0.5/0.8/1.0 over `1..=10^8`, NEXT §6.5), each indexed; range sets with
/// the Tweet `user_id` targets and `eq` point lookups per attribute.
pub fn skew(c: &StaticCfg) -> Trace {
    let updates = updates_for(c.records, c.update_fraction);
    let (load, live) = static_load(
        skew_records(c.seed, c.records + updates),
        c.records,
        updates,
        c.seed,
        skew_key,
    );
    let mut indexes = Vec::new();
    let mut gaps = BTreeMap::new();
    let mut sets = Vec::new();
    for (i, (name, _)) in SKEW_FIELDS.iter().enumerate() {
        let col = column(&live, i);
        indexes.push(decl(name, AttrType::I64));
        gaps.extend(mean_gap(&col).map(|g| (name.to_string(), g)));
        let mut s = queries::synthetic_query_sets_from(
            &ints(&col),
            c.queries,
            c.seed ^ 0x5eed ^ ((i as u64) << 8),
        );
        for q in &mut s {
            q.attribute = name.to_string();
        }
        sets.extend(s);
    }
    let mut parameters = base_parameters(c, updates);
    parameters.insert(
        "distributions".into(),
        json!(SKEW_FIELDS
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_string()))
            .collect::<BTreeMap<_, _>>()),
    );
    Trace {
        workload: "skew".into(),
        indexes,
        gaps,
        load,
        sets,
        records: c.records,
        parameters,
        ..Trace::default()
    }
}

// ------------------------------------------------------------ mixed

/// Operation mixes of NEXT Table 2: (insert, query, update).
pub fn mixed_ratios(workload: &str) -> Option<[f64; 3]> {
    match workload {
        "mixed-write-heavy" => Some([0.8, 0.2, 0.0]),
        "mixed-read-heavy" => Some([0.2, 0.8, 0.0]),
        "mixed-update-heavy" => Some([0.4, 0.2, 0.4]),
        _ => None,
    }
}

/// How generated tweets are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Our generator's fields (`id`, `user_id`, `coordinates`, ...);
    /// queries alternate between `user_id` and `coordinates`.
    Native,
    /// Chirp field names (`ID`, `UserID`, ...); queries on `UserID` only
    /// (what a chirp trace can express).
    Chirp,
}

/// Parameters of the mixed workloads.
#[derive(Debug, Clone)]
pub struct MixedCfg {
    /// `mixed-write-heavy`, `mixed-read-heavy` or `mixed-update-heavy`
    /// (see [`mixed_ratios`]).
    pub workload: String,
    /// Tweets written before the sequence; at least 1.
    pub preload: u64,
    /// Operations of the sequence after the preload.
    pub ops: u64,
    /// Seed of the generators, query sets and operation mix.
    pub seed: u64,
    /// Queries per calibrated set (cycled through).
    pub queries: usize,
    /// `small`, `medium` or `large`.
    pub class: String,
    /// Fraction of the query share done as primary-key gets.
    pub get_fraction: f64,
    /// Field names of the written tweets and which attributes are queried.
    pub style: Style,
}

/// Points of one grid cell: (slot, point).
type Cell = Vec<(usize, [f64; 2])>;

/// Exact result counts of the mixed tweet workload, maintained under
/// inserts and updates: a value → count map for `user_id` and a uniform
/// grid of points for `coordinates` (cell side = the query window side, so
/// a window touches at most 3×3 cells).
struct TweetOracle {
    users: BTreeMap<i64, u64>,
    cell: f64,
    grid: HashMap<(i64, i64), Cell>,
    /// Current (user_id, coordinates) of each slot.
    slots: Vec<(i64, [f64; 2])>,
}

impl TweetOracle {
    fn new(cell: f64) -> TweetOracle {
        TweetOracle {
            users: BTreeMap::new(),
            cell: if cell.is_finite() && cell > 1e-9 {
                cell
            } else {
                1e-3
            },
            grid: HashMap::new(),
            slots: Vec::new(),
        }
    }

    fn cell_of(&self, x: f64, y: f64) -> (i64, i64) {
        (
            (x / self.cell).floor() as i64,
            (y / self.cell).floor() as i64,
        )
    }

    fn add(&mut self, slot: usize, user: i64, p: [f64; 2]) {
        *self.users.entry(user).or_default() += 1;
        let c = self.cell_of(p[0], p[1]);
        self.grid.entry(c).or_default().push((slot, p));
    }

    fn insert(&mut self, t: &Tweet) -> usize {
        let slot = self.slots.len();
        self.slots.push((t.user_id, t.coordinates));
        self.add(slot, t.user_id, t.coordinates);
        slot
    }

    fn update(&mut self, slot: usize, t: &Tweet) {
        let (u, p) = self.slots[slot];
        if let Some(c) = self.users.get_mut(&u) {
            *c -= 1;
            if *c == 0 {
                self.users.remove(&u);
            }
        }
        let cell = self.cell_of(p[0], p[1]);
        if let Some(v) = self.grid.get_mut(&cell) {
            if let Some(i) = v.iter().position(|(s, _)| *s == slot) {
                v.swap_remove(i);
            }
        }
        self.slots[slot] = (t.user_id, t.coordinates);
        self.add(slot, t.user_id, t.coordinates);
    }

    fn count(&self, q: &Query) -> Option<u64> {
        match *q {
            Query::Lookup(v) => Some(self.users.get(&v).copied().unwrap_or(0)),
            Query::Range(lo, hi) if lo <= hi => {
                Some(self.users.range(lo..=hi).map(|(_, c)| c).sum())
            }
            Query::Range(..) => Some(0),
            Query::Window(w) => {
                let (x0, y0) = self.cell_of(w[0], w[1]);
                let (x1, y1) = self.cell_of(w[2], w[3]);
                let mut n = 0;
                for cx in x0..=x1 {
                    for cy in y0..=y1 {
                        if let Some(v) = self.grid.get(&(cx, cy)) {
                            n += v
                                .iter()
                                .filter(|(_, p)| {
                                    w[0] <= p[0] && p[0] <= w[2] && w[1] <= p[1] && p[1] <= w[3]
                                })
                                .count() as u64;
                        }
                    }
                }
                Some(n)
            }
            Query::RangeF(..) => None,
        }
    }
}

/// A tweet as written in `style`.
fn tweet_json(t: &Tweet, style: Style) -> String {
    match style {
        Style::Native => t.to_json(),
        Style::Chirp => chirp::tweet_json(t),
    }
}

/// The mixed workloads (NEXT §6.3, Table 2): a preload of `preload` tweets,
/// then `ops` operations dealt in the workload's exact proportions,
/// uniformly interleaved. Inserts write the next generated tweet; updates
/// rewrite a uniformly chosen live key with a fresh tweet's body (NEXT:
/// "insert a different tweet with the selected primary key"); gets read a
/// uniformly chosen live key; queries take the next query of the class's
/// set (calibrated on the preload), alternating between attributes, and
/// carry the exact count at that point of the sequence.
pub fn mixed(c: &MixedCfg) -> Result<Trace, String> {
    let [pi, pq, pu] = mixed_ratios(&c.workload)
        .ok_or_else(|| format!("unknown mixed workload {:?}", c.workload))?;
    if c.preload == 0 {
        return Err("mixed workloads need --records of at least 1 (the preload)".into());
    }
    let class_idx = queries::CLASSES
        .iter()
        .position(|k| *k == c.class)
        .ok_or_else(|| {
            format!(
                "--query-class {:?}: expected one of {}",
                c.class,
                queries::CLASSES.join(", ")
            )
        })?;
    let inserts = (c.ops as f64 * pi).round() as u64;
    let updates = (c.ops as f64 * pu).round() as u64;
    let reads = c.ops.saturating_sub(inserts + updates);
    let gets = (reads as f64 * c.get_fraction).round() as u64;
    let queries_n = reads - gets;

    let mut stream = g::tweets(c.seed, c.preload + inserts + updates);
    let (user_field, coord_field) = match c.style {
        Style::Native => ("user_id", "coordinates"),
        Style::Chirp => ("UserID", "Coordinates"),
    };
    let mut load = Vec::with_capacity(c.preload as usize);
    // Primary keys (tweet ids) of the live records, by slot.
    let mut ids: Vec<u64> = Vec::with_capacity((c.preload + inserts) as usize);
    let mut pre: Vec<Tweet> = Vec::with_capacity(c.preload as usize);
    for t in stream.by_ref().take(c.preload as usize) {
        ids.push(t.id);
        load.push(Put {
            key: tweet_key(t.id),
            value: tweet_json(&t, c.style).into_bytes(),
            update: false,
            ts_ms: t.ts_ms(),
        });
        pre.push(t);
    }
    let users: Vec<i64> = pre.iter().map(|t| t.user_id).collect();
    let coords: Vec<[f64; 2]> = pre.iter().map(|t| t.coordinates).collect();
    let all = queries::tweet_query_sets_from(&users, &coords, c.queries.max(1), c.seed ^ 0x5eed);
    let pick = |attr: &str| {
        all.iter()
            .find(|s| s.attribute == attr && s.class == queries::CLASSES[class_idx])
            .cloned()
    };
    let mut sets: Vec<QuerySet> = Vec::new();
    sets.extend(pick("user_id"));
    if c.style == Style::Native {
        sets.extend(pick("coordinates"));
    }
    let cell = sets
        .iter()
        .find(|s| s.attribute == "coordinates")
        .map_or(1.0, |s| s.param);
    let mut oracle = TweetOracle::new(cell);
    for t in &pre {
        oracle.insert(t);
    }
    let labels: Vec<Label> = sets
        .iter()
        .map(|s| Label {
            index: if s.attribute == "user_id" {
                user_field.to_string()
            } else {
                coord_field.to_string()
            },
            class: s.class.clone(),
            calibrated_mean: s.achieved_mean,
        })
        .collect();
    let mut indexes = vec![decl(user_field, AttrType::I64)];
    let mut gaps = BTreeMap::new();
    let user_attrs: Vec<Attr> = users.iter().map(|&u| Attr::I64(u)).collect();
    gaps.extend(mean_gap(&user_attrs).map(|g| (user_field.to_string(), g)));
    if c.style == Style::Native {
        indexes.push(decl(coord_field, AttrType::Point));
        let pts: Vec<Attr> = coords.iter().map(|&p| Attr::Point(p)).collect();
        gaps.extend(mean_gap(&pts).map(|g| (coord_field.to_string(), g)));
    }
    drop(pre);

    let mut r = SplitMix64::derive(c.seed, 0x0003_13ed);
    let mut remaining = [inserts, updates, gets, queries_n];
    let mut next_q = vec![0usize; sets.len()];
    let mut n_queries = 0usize;
    let mut ops = Vec::with_capacity(c.ops as usize);
    while let Some(kind) = deal(&mut r, &mut remaining, &[true; 4]) {
        match kind {
            0 | 1 => {
                let Some(mut t) = stream.next() else { break };
                let update = kind == 1;
                if update {
                    let slot = r.below(ids.len() as u64) as usize;
                    oracle.update(slot, &t);
                    t.id = ids[slot];
                } else {
                    oracle.insert(&t);
                    ids.push(t.id);
                }
                ops.push(Op::Put(Put {
                    key: tweet_key(t.id),
                    value: tweet_json(&t, c.style).into_bytes(),
                    update,
                    ts_ms: t.ts_ms(),
                }));
            }
            2 => {
                let slot = r.below(ids.len() as u64) as usize;
                ops.push(Op::Get {
                    key: tweet_key(ids[slot]),
                    expect_found: true,
                });
            }
            _ => {
                if sets.is_empty() {
                    continue;
                }
                let label = n_queries % sets.len();
                n_queries += 1;
                let set = &sets[label];
                if set.queries.is_empty() {
                    continue;
                }
                let query = set.queries[next_q[label] % set.queries.len()];
                next_q[label] += 1;
                ops.push(Op::Query {
                    label,
                    query,
                    expected: oracle.count(&query),
                });
            }
        }
    }
    let parameters = BTreeMap::from([
        ("ops".into(), json!(c.ops)),
        ("mix_insert_query_update".into(), json!([pi, pq, pu])),
        ("query_class".into(), json!(c.class)),
        ("get_fraction".into(), json!(c.get_fraction)),
        ("queries_per_set".into(), json!(c.queries)),
        (
            "op_counts".into(),
            json!({"insert": inserts, "update": updates, "get": gets, "query": queries_n}),
        ),
    ]);
    Ok(Trace {
        workload: c.workload.clone(),
        indexes,
        gaps,
        load,
        ops,
        labels,
        records: c.preload,
        parameters,
        ..Trace::default()
    })
}

// ------------------------------------------------------------ replay

/// A chirp trace as a [`Trace`]: every line is an operation (no load
/// phase); writes are inserts or updates depending on whether the key was
/// written before; one integer index on `attribute`; gets and queries
/// carry exact expectations from an in-memory oracle (writes whose
/// attribute is absent or not an integer are not indexed).
pub fn from_chirp(ops: Vec<ChirpOp>, attribute: &str) -> Trace {
    let mut values: BTreeMap<i64, u64> = BTreeMap::new();
    let mut current: HashMap<Vec<u8>, Option<i64>> = HashMap::new();
    let mut out = Vec::with_capacity(ops.len());
    let mut all_attrs = Vec::new();
    // Label 0: point lookups, 1: ranges; (sum of expected, count).
    let mut sums = [(0u64, 0u64); 2];
    for op in ops {
        match op {
            ChirpOp::Write {
                ts_ms,
                key,
                json,
                attr,
            } => {
                let old = current.insert(key.clone(), attr);
                if let Some(Some(v)) = old {
                    if let Some(c) = values.get_mut(&v) {
                        *c -= 1;
                        if *c == 0 {
                            values.remove(&v);
                        }
                    }
                }
                if let Some(v) = attr {
                    *values.entry(v).or_default() += 1;
                    all_attrs.push(Attr::I64(v));
                }
                out.push(Op::Put(Put {
                    key,
                    value: json.into_bytes(),
                    update: old.is_some(),
                    ts_ms,
                }));
            }
            ChirpOp::ReadPrimary { key, .. } => {
                let expect_found = current.contains_key(&key);
                out.push(Op::Get { key, expect_found });
            }
            ChirpOp::ReadSecondary { lo, hi, .. } => {
                let (label, query, n) = match hi {
                    None => (0, Query::Lookup(lo), values.get(&lo).copied().unwrap_or(0)),
                    Some(hi) => (
                        1,
                        Query::Range(lo, hi),
                        values.range(lo..=hi).map(|(_, c)| c).sum(),
                    ),
                };
                sums[label].0 += n;
                sums[label].1 += 1;
                out.push(Op::Query {
                    label,
                    query,
                    expected: Some(n),
                });
            }
        }
    }
    let labels = ["lookup", "range"]
        .iter()
        .zip(sums)
        .map(|(class, (sum, n))| Label {
            index: attribute.to_string(),
            class: class.to_string(),
            calibrated_mean: if n == 0 { 0.0 } else { sum as f64 / n as f64 },
        })
        .collect();
    let mut gaps = BTreeMap::new();
    gaps.extend(mean_gap(&all_attrs).map(|g| (attribute.to_string(), g)));
    let kinds = OpKind::ALL.map(|k| (k, out.iter().filter(|o| o.kind() == k).count()));
    Trace {
        workload: "replay-chirp".into(),
        indexes: vec![decl(attribute, AttrType::I64)],
        gaps,
        ops: out,
        labels,
        records: current.len() as u64,
        parameters: BTreeMap::from([
            ("attribute".into(), json!(attribute)),
            (
                "op_counts".into(),
                json!(kinds
                    .iter()
                    .map(|(k, n)| (k.name().to_string(), *n))
                    .collect::<BTreeMap<_, _>>()),
            ),
        ]),
        ..Trace::default()
    }
}

/// Writes `trace` (load, then operations) as chirp lines; returns the
/// number of lines. Values must be single-line JSON; queries must be
/// integer lookups or ranges.
pub fn write_chirp(trace: &Trace, out: &mut dyn std::io::Write) -> Result<u64, String> {
    let mut ts = 0u64;
    let mut n = 0u64;
    for p in &trace.load {
        ts = ts.max(p.ts_ms);
        chirp::write_write(out, ts, &p.value)?;
        n += 1;
    }
    for op in &trace.ops {
        match op {
            Op::Put(p) => {
                ts = ts.max(p.ts_ms);
                chirp::write_write(out, ts, &p.value)?;
            }
            Op::Get { key, .. } => chirp::write_read_primary(out, ts, key)?,
            Op::Query { query, .. } => match *query {
                Query::Lookup(v) => chirp::write_read_secondary(out, ts, v, None)?,
                Query::Range(lo, hi) => chirp::write_read_secondary(out, ts, lo, Some(hi))?,
                other => {
                    return Err(format!(
                        "query {other:?} cannot be written to a chirp trace (integer keys only)"
                    ))
                }
            },
        }
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n: u64, f: f64) -> StaticCfg {
        StaticCfg {
            records: n,
            queries: 20,
            seed: 7,
            update_fraction: f,
        }
    }

    #[test]
    fn static_updates_are_counted_on_final_records() {
        let t = static_tweets("static-tweets", &cfg(1000, 0.5), false);
        assert_eq!(t.load.len(), 2000);
        assert_eq!(t.load.iter().filter(|p| p.update).count(), 1000);
        // The first write is an insert; every update's key was written.
        assert!(!t.load[0].update);
        let mut seen = std::collections::HashSet::new();
        let mut last: HashMap<&[u8], &[u8]> = HashMap::new();
        for p in &t.load {
            assert_eq!(p.update, !seen.insert(p.key.clone()));
            last.insert(&p.key, &p.value);
        }
        assert_eq!(seen.len(), 1000);
        // Expected counts are those of the last version of each key.
        let users: Vec<i64> = last
            .values()
            .map(|v| {
                let j: Value = serde_json::from_slice(v).unwrap();
                j["user_id"].as_i64().unwrap()
            })
            .collect();
        let set = &t.sets[0];
        assert_eq!(set.attribute, "user_id");
        for (q, want) in set.queries.iter().zip(&set.expected_counts) {
            let Query::Range(lo, hi) = *q else { panic!() };
            let n = users.iter().filter(|&&u| lo <= u && u <= hi).count() as u64;
            assert_eq!(n, *want);
        }
        // Keys in the value match the primary key.
        for p in &t.load {
            let j: Value = serde_json::from_slice(&p.value).unwrap();
            assert_eq!(j["id"].as_u64().unwrap().to_string().as_bytes(), &p.key[..]);
        }
        let t0 = static_tweets("static-tweets", &cfg(1000, 0.0), false);
        assert_eq!(t0.load.len(), 1000);
        assert!(t0.gaps["user_id"] > 0.0 && t0.gaps["coordinates"] > 0.0);
    }

    #[test]
    fn time_range_counts_recent_and_old_records_exactly() {
        let t = time_range(&cfg(2000, 0.5));
        assert_eq!(t.load.len(), 4000);
        assert_eq!(t.indexes.len(), 1);
        let mut last: HashMap<&[u8], i64> = HashMap::new();
        for p in &t.load {
            let j: Value = serde_json::from_slice(&p.value).unwrap();
            last.insert(&p.key, j["created_at"].as_i64().unwrap());
        }
        assert_eq!(last.len(), 2000);
        let classes: Vec<&str> = t.sets.iter().map(|s| s.class.as_str()).collect();
        assert_eq!(classes, ["recent", "old"]);
        for set in &t.sets {
            assert_eq!(set.queries.len(), 20);
            for (q, want) in set.queries.iter().zip(&set.expected_counts) {
                let Query::Range(lo, hi) = *q else { panic!() };
                let n = last.values().filter(|&&c| lo <= c && c <= hi).count() as u64;
                assert_eq!(n, *want, "{} {q:?}", set.class);
                // About 1% of the live records (±20%).
                assert!((16..=24).contains(&n), "{n}");
                match set.class.as_str() {
                    "recent" => assert_eq!(hi, i64::MAX),
                    _ => assert_eq!(lo, i64::MIN),
                }
            }
        }
    }

    #[test]
    fn skew_and_multi_index_shapes() {
        let t = skew(&cfg(500, 0.0));
        assert_eq!(t.indexes.len(), 4);
        assert_eq!(t.sets.len(), 16, "4 attributes × (3 ranges + eq)");
        let j: Value = serde_json::from_slice(&t.load[0].value).unwrap();
        for (name, _) in SKEW_FIELDS {
            assert!(j[name].as_i64().is_some(), "{name}");
        }
        assert_eq!(t.load[0].key, b"0000000001");
        let m = static_tweets("multi-index", &cfg(500, 0.0), true);
        assert!(m.interleave);
        assert_eq!(m.indexes[2].name, "created_at");
        assert!(m.sets.iter().any(|s| s.attribute == "created_at"));
    }

    #[test]
    fn mixed_counts_match_a_brute_force_replay() {
        for (w, style) in [
            ("mixed-update-heavy", Style::Native),
            ("mixed-read-heavy", Style::Chirp),
        ] {
            let c = MixedCfg {
                workload: w.into(),
                preload: 800,
                ops: 600,
                seed: 3,
                queries: 30,
                class: "medium".into(),
                get_fraction: 0.25,
                style,
            };
            let t = mixed(&c).unwrap();
            assert_eq!(t.ops.len(), 600);
            let (uf, cf) = if style == Style::Native {
                ("user_id", "coordinates")
            } else {
                ("UserID", "Coordinates")
            };
            let mut live: HashMap<Vec<u8>, Value> = HashMap::new();
            for p in &t.load {
                live.insert(p.key.clone(), serde_json::from_slice(&p.value).unwrap());
            }
            let mut queries = 0;
            for op in &t.ops {
                match op {
                    Op::Put(p) => {
                        assert_eq!(p.update, live.contains_key(&p.key));
                        live.insert(p.key.clone(), serde_json::from_slice(&p.value).unwrap());
                    }
                    Op::Get { key, expect_found } => {
                        assert!(*expect_found && live.contains_key(key))
                    }
                    Op::Query {
                        label,
                        query,
                        expected,
                    } => {
                        queries += 1;
                        let idx = &t.labels[*label].index;
                        let n = live
                            .values()
                            .filter(|v| match *query {
                                Query::Range(lo, hi) => {
                                    let u = v[uf].as_i64().unwrap();
                                    idx == uf && lo <= u && u <= hi
                                }
                                Query::Window(w) => {
                                    let x = v[cf][0].as_f64().unwrap();
                                    let y = v[cf][1].as_f64().unwrap();
                                    idx == cf && w[0] <= x && x <= w[2] && w[1] <= y && y <= w[3]
                                }
                                _ => false,
                            })
                            .count() as u64;
                        assert_eq!(Some(n), *expected, "{query:?}");
                    }
                }
            }
            assert!(queries > 0);
            if style == Style::Chirp {
                assert!(t.labels.iter().all(|l| l.index == "UserID"));
            }
        }
        let mut c = MixedCfg {
            workload: "mixed-write-heavy".into(),
            preload: 100,
            ops: 10,
            seed: 1,
            queries: 5,
            class: "tiny".into(),
            get_fraction: 0.0,
            style: Style::Native,
        };
        assert!(mixed(&c).is_err());
        c.class = "small".into();
        c.preload = 0;
        assert!(mixed(&c).is_err());
    }

    #[test]
    fn deal_gives_exact_counts() {
        let mut r = SplitMix64::new(1);
        let mut rem = [5, 3, 0, 2];
        let mut got = [0; 4];
        while let Some(k) = deal(&mut r, &mut rem, &[true; 4]) {
            got[k] += 1;
        }
        assert_eq!(got, [5, 3, 0, 2]);
        assert_eq!(updates_for(1000, 0.5), 1000);
        assert_eq!(updates_for(1000, 0.2), 250);
    }
}
