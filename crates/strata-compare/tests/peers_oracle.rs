//! Every peer against an in-memory oracle: random puts, updates that change
//! the indexed attributes, deletes, a settle, a clean reopen and a reopen
//! as after a crash, on ~2,000 records with an i64, an f64, a point and a
//! rect index. After each phase every query's records (keys and values, in
//! newest-first order, cut at top-K) must equal the oracle's.
//!
//! Run with `cargo test -p strata-compare --features sqlite,fjall[,rocksdb]`;
//! without features this file compiles to nothing.
#![cfg(any(feature = "sqlite", feature = "fjall", feature = "rocksdb"))]

use std::collections::BTreeMap;
use std::path::Path;

use strata_bench::queries::Query;
use strata_bench::rng::SplitMix64;
use strata_bench::system::{AttrType, BenchSystem, IndexDecl, SystemOptions};
use strata_compare::Record;

/// What the test needs beyond [`BenchSystem`].
trait Peer: BenchSystem {
    fn records(&mut self, index: &str, q: &Query, k: Option<usize>) -> Result<Vec<Record>, String>;
    fn crash_reopen(&mut self) -> Result<(), String>;
}

#[cfg(feature = "sqlite")]
impl Peer for strata_compare::sqlite::SqlitePeer {
    fn records(&mut self, index: &str, q: &Query, k: Option<usize>) -> Result<Vec<Record>, String> {
        let (r, st) = self.query_records(index, q, k)?;
        assert_eq!(st.results, r.len() as u64);
        Ok(r)
    }
    fn crash_reopen(&mut self) -> Result<(), String> {
        self.reopen_as_after_crash()
    }
}

#[cfg(any(feature = "fjall", feature = "rocksdb"))]
impl<B: strata_compare::kv::Backend> Peer for strata_compare::kv::KvPeer<B> {
    fn records(&mut self, index: &str, q: &Query, k: Option<usize>) -> Result<Vec<Record>, String> {
        let (r, st) = self.query_records(index, q, k)?;
        assert_eq!(st.results, r.len() as u64);
        Ok(r)
    }
    fn crash_reopen(&mut self) -> Result<(), String> {
        self.reopen_as_after_crash()
    }
}

fn decls() -> Vec<IndexDecl> {
    let d = |name: &str, field: &str, ty| IndexDecl {
        name: name.into(),
        field: field.into(),
        ty,
    };
    vec![
        d("by_n", "n", AttrType::I64),
        d("by_f", "f", AttrType::F64),
        d("by_loc", "loc", AttrType::Point),
        d("by_box", "box", AttrType::Rect),
    ]
}

/// A record as the oracle sees it: the attributes it was generated with
/// (`None` where the document does not carry a valid one).
#[derive(Clone, Debug)]
struct Rec {
    seq: u64,
    doc: Vec<u8>,
    n: Option<i64>,
    f: Option<f64>,
    loc: Option<[f64; 2]>,
    bbox: Option<[f64; 4]>,
}

const CENTRES: [[f64; 2]; 4] = [[2.35, 48.85], [-74.0, 40.7], [139.7, 35.7], [179.9, -89.9]];

fn coord(r: &mut SplitMix64) -> [f64; 2] {
    if r.next_u64().is_multiple_of(20) {
        // Outside the lon/lat domain: clamped by the curve, still exact.
        return [200.0 + r.f64() * 10.0, -95.0];
    }
    let c = CENTRES[(r.next_u64() % 4) as usize];
    [c[0] + (r.f64() - 0.5) * 0.2, c[1] + (r.f64() - 0.5) * 0.2]
}

fn small_n(r: &mut SplitMix64) -> i64 {
    match r.next_u64() % 50 {
        0 => i64::MIN,
        1 => i64::MAX,
        _ => (r.next_u64() % 100) as i64 - 50,
    }
}

/// A random document; some fields missing, null, mistyped or invalid.
fn gen_doc(r: &mut SplitMix64, key: u64) -> Rec {
    if r.next_u64().is_multiple_of(100) {
        return Rec {
            seq: 0,
            doc: b"{not json".to_vec(),
            n: None,
            f: None,
            loc: None,
            bbox: None,
        };
    }
    let mut fields = vec![format!("\"key\":{key}")];
    let mut rec = Rec {
        seq: 0,
        doc: Vec::new(),
        n: None,
        f: None,
        loc: None,
        bbox: None,
    };
    match r.next_u64() % 10 {
        0 => {}
        1 => fields.push("\"n\":null".into()),
        2 => fields.push("\"n\":\"seven\"".into()),
        3 => fields.push("\"n\":2.5".into()),
        _ => {
            let n = small_n(r);
            fields.push(format!("\"n\":{n}"));
            rec.n = Some(n);
        }
    }
    match r.next_u64() % 10 {
        0 => {}
        1 => {
            fields.push("\"f\":-0.0".into());
            rec.f = Some(0.0);
        }
        _ => {
            let f = ((r.next_u64() % 2000) as f64 - 1000.0) / 8.0;
            fields.push(format!("\"f\":{f:?}"));
            rec.f = Some(f);
        }
    }
    match r.next_u64() % 10 {
        0 => {}
        1 => fields.push("\"loc\":[1.0]".into()),
        _ => {
            let p = coord(r);
            fields.push(format!("\"loc\":[{:?},{:?}]", p[0], p[1]));
            rec.loc = Some(p);
        }
    }
    match r.next_u64() % 10 {
        0 => {}
        1 => fields.push("\"box\":[2.0,0.0,1.0,1.0]".into()),
        k => {
            let c = coord(r);
            // Mostly small boxes, a few large ones (the extents trick).
            let (hx, hy) = if k == 2 {
                (r.f64() * 0.5, r.f64() * 0.3)
            } else {
                (r.f64() * 0.01, r.f64() * 0.01)
            };
            let b = [c[0] - hx, c[1] - hy, c[0] + hx, c[1] + hy];
            fields.push(format!(
                "\"box\":[{:?},{:?},{:?},{:?}]",
                b[0], b[1], b[2], b[3]
            ));
            rec.bbox = Some(b);
        }
    }
    fields.push(format!(
        "\"pad\":\"{}\"",
        "x".repeat((r.next_u64() % 200) as usize)
    ));
    rec.doc = format!("{{{}}}", fields.join(",")).into_bytes();
    rec
}

struct Oracle {
    recs: BTreeMap<Vec<u8>, Rec>,
    seq: u64,
}

impl Oracle {
    fn put(&mut self, key: &[u8], mut rec: Rec) {
        self.seq += 1;
        rec.seq = self.seq;
        self.recs.insert(key.to_vec(), rec);
    }

    fn query(&self, index: &str, q: &Query, k: Option<usize>) -> Vec<Record> {
        let inside =
            |w: &[f64; 4], x: f64, y: f64| w[0] <= x && x <= w[2] && w[1] <= y && y <= w[3];
        let hit = |r: &Rec| match (index, q) {
            ("by_n", Query::Lookup(v)) => r.n == Some(*v),
            ("by_n", Query::Range(lo, hi)) => r.n.is_some_and(|n| *lo <= n && n <= *hi),
            ("by_n", Query::RangeF(lo, hi)) => {
                r.n.is_some_and(|n| *lo <= n as f64 && n as f64 <= *hi)
            }
            ("by_f", Query::RangeF(lo, hi)) => r.f.is_some_and(|f| *lo <= f && f <= *hi),
            ("by_f", Query::Lookup(v)) => r.f == Some(*v as f64),
            ("by_loc", Query::Window(w)) => r.loc.is_some_and(|p| inside(w, p[0], p[1])),
            ("by_box", Query::Window(w)) => r
                .bbox
                .is_some_and(|b| b[0] <= w[2] && w[0] <= b[2] && b[1] <= w[3] && w[1] <= b[3]),
            _ => panic!("oracle: unexpected query {index} {q:?}"),
        };
        let mut v: Vec<(&Vec<u8>, &Rec)> = self.recs.iter().filter(|(_, r)| hit(r)).collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1.seq));
        if let Some(k) = k {
            v.truncate(k);
        }
        v.into_iter()
            .map(|(k, r)| (k.clone(), r.doc.clone()))
            .collect()
    }
}

fn random_window(r: &mut SplitMix64) -> [f64; 4] {
    let c = coord(r);
    let side = match r.next_u64() % 6 {
        0 => 0.0,
        1 => 1e-4,
        2 => 0.01,
        3 => 0.05,
        4 => 0.3,
        _ => 400.0,
    };
    [
        c[0] - side,
        c[1] - side * 0.7,
        c[0] + side,
        c[1] + side * 0.7,
    ]
}

fn random_query(r: &mut SplitMix64) -> (&'static str, Query) {
    match r.next_u64() % 8 {
        0 => ("by_n", Query::Lookup(small_n(r))),
        1 => {
            let a = small_n(r);
            let b = a.saturating_add((r.next_u64() % 30) as i64);
            ("by_n", Query::Range(a, b))
        }
        2 => ("by_n", Query::Range(i64::MIN, i64::MAX)),
        3 => ("by_n", Query::RangeF(-3.5, 7.2)),
        4 => {
            let lo = ((r.next_u64() % 2000) as f64 - 1000.0) / 8.0;
            ("by_f", Query::RangeF(lo, lo + (r.next_u64() % 40) as f64))
        }
        5 => ("by_f", Query::RangeF(-0.0, 0.0)),
        6 => ("by_loc", Query::Window(random_window(r))),
        _ => ("by_box", Query::Window(random_window(r))),
    }
}

fn check_queries(p: &mut dyn Peer, o: &Oracle, r: &mut SplitMix64, phase: &str) {
    let mut nonempty = 0;
    for qi in 0..150 {
        let (index, q) = random_query(r);
        let k = match qi % 4 {
            0 => None,
            1 => Some(1),
            2 => Some(10),
            _ => Some(100),
        };
        let want = o.query(index, &q, k);
        let got = p
            .records(index, &q, k)
            .unwrap_or_else(|e| panic!("{phase}: {index} {q:?}: {e}"));
        nonempty += usize::from(!want.is_empty());
        assert_eq!(
            got.len(),
            want.len(),
            "{}: {phase}: {index} {q:?} top {k:?}: count",
            p.name()
        );
        assert!(
            got == want,
            "{}: {phase}: {index} {q:?} top {k:?}: records or order differ",
            p.name()
        );
        let stats = p
            .query(index, &q, k)
            .unwrap_or_else(|e| panic!("{phase}: {e}"));
        assert_eq!(stats.results, want.len() as u64);
        // Where a peer counts blocks, a query that fetched records from
        // flushed tables read some.
        let on_disk = phase == "after settle" || phase == "after reopen";
        if let (Some(d), false, true) = (stats.data_blocks_read, want.is_empty(), on_disk) {
            assert!(
                d > 0,
                "{}: {phase}: {index} {q:?}: no data block read",
                p.name()
            );
        }
        if qi < 2 {
            eprintln!("{}: {phase}: {index} {q:?} top {k:?}: {stats:?}", p.name());
        }
    }
    assert!(
        nonempty > 50,
        "{phase}: too few non-empty queries ({nonempty}) to be a test"
    );
    for key in 0..50u64 {
        let key = key.to_be_bytes();
        let got = p.get(&key).unwrap_or_else(|e| panic!("{phase}: get: {e}"));
        assert_eq!(
            got,
            o.recs.get(&key[..]).map(|r| r.doc.clone()),
            "{phase}: get"
        );
    }
}

fn mutate(p: &mut dyn Peer, o: &mut Oracle, r: &mut SplitMix64, ops: usize, keys: u64) {
    for _ in 0..ops {
        let key = (r.next_u64() % keys).to_be_bytes();
        if r.next_u64().is_multiple_of(6) {
            p.delete(&key).unwrap_or_else(|e| panic!("delete: {e}"));
            o.recs.remove(&key[..]);
        } else {
            let rec = gen_doc(r, u64::from_be_bytes(key));
            p.put(&key, &rec.doc).unwrap_or_else(|e| panic!("put: {e}"));
            o.put(&key, rec);
        }
    }
}

fn run(p: &mut dyn Peer, dir: &Path) {
    let mut r = SplitMix64::new(0x5EED);
    let mut o = Oracle {
        recs: BTreeMap::new(),
        seq: 0,
    };
    // Load ~2,000 records, then updates (attributes change) and deletes.
    for key in 0..2000u64 {
        let rec = gen_doc(&mut r, key);
        p.put(&key.to_be_bytes(), &rec.doc)
            .unwrap_or_else(|e| panic!("put: {e}"));
        o.put(&key.to_be_bytes(), rec);
    }
    check_queries(p, &o, &mut r, "after load");
    mutate(p, &mut o, &mut r, 1500, 2200);
    check_queries(p, &o, &mut r, "after updates");

    p.settle().unwrap_or_else(|e| panic!("settle: {e}"));
    let s = p.sizes().unwrap_or_else(|e| panic!("sizes: {e}"));
    eprintln!("{}: sizes after settle: {s:?}", p.name());
    assert!(s.db_bytes > 0 && s.db_bytes <= strata_bench::system::dir_bytes(dir));
    if let Some(b) = s.index_bytes {
        assert!(b > 0 && b < s.db_bytes, "index bytes {b} of {}", s.db_bytes);
    }
    if let Some(w) = s.write_amplification {
        assert!(w > 0.5, "write amplification {w}");
    }
    check_queries(p, &o, &mut r, "after settle");

    p.reopen().unwrap_or_else(|e| panic!("reopen: {e}"));
    check_queries(p, &o, &mut r, "after reopen");
    // Writes after the reopen must be newer than everything before it.
    mutate(p, &mut o, &mut r, 600, 2200);
    check_queries(p, &o, &mut r, "after reopen and updates");

    p.crash_reopen()
        .unwrap_or_else(|e| panic!("crash reopen: {e}"));
    mutate(p, &mut o, &mut r, 300, 2200);
    check_queries(p, &o, &mut r, "after crash reopen and updates");

    // Misuse is an error, not a panic.
    assert!(p.query("nope", &Query::Lookup(1), None).is_err());
    assert!(p.query("by_n", &Query::Window([0.0; 4]), None).is_err());
    assert!(p.query("by_loc", &Query::Lookup(1), None).is_err());
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("strata-compare-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_matches_oracle() {
    let dir = temp_dir("sqlite");
    let mut p = strata_compare::sqlite::SqlitePeer::open(&dir, &decls(), &SystemOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    run(&mut p, &dir);
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "fjall")]
#[test]
fn fjall_matches_oracle() {
    let dir = temp_dir("fjall");
    let mut p =
        strata_compare::fjall_peer::FjallPeer::open(&dir, &decls(), &SystemOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
    run(&mut p, &dir);
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_matches_oracle() {
    let dir = temp_dir("rocksdb");
    let mut p =
        strata_compare::rocksdb_peer::RocksPeer::open(&dir, &decls(), &SystemOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
    run(&mut p, &dir);
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_fn_opens_every_compiled_peer() {
    for name in strata_compare::available() {
        let dir = temp_dir(&format!("openfn-{name}"));
        let open = strata_compare::open_fn(name).unwrap_or_else(|| panic!("{name}"));
        let mut s =
            open(&dir, &decls(), &SystemOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.name(), name);
        s.put(b"k", br#"{"n":1,"loc":[1.0,2.0]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let st = s
            .query("by_n", &Query::Lookup(1), Some(5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(st.results, 1);
        let st = s
            .query("by_loc", &Query::Window([0.0, 0.0, 1.0, 2.0]), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(st.results, 1);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
