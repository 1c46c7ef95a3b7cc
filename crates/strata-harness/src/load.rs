//! `strata load`: [`strata::load`] with a progress bar, the CLI's hint on
//! bad records, and the wall time. The formats and what counts as a bad
//! record are documented in `strata::load`.

use std::path::PathBuf;
use std::time::Instant;

use strata::load::{load_file, LoadEvent, LoadOptions};
use strata::Db;

pub use strata::load::{csv_value, Format};

use crate::progress::Progress;
use crate::Error;

/// What to load, and how.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The input file.
    pub file: PathBuf,
    /// Field holding the primary key.
    pub key_field: String,
    /// Default: from the file extension ([`Format::of_path`]).
    pub format: Option<Format>,
    /// Skip bad records (counted) instead of stopping at the first.
    pub skip_bad: bool,
    /// Records per write batch (at least 1).
    pub batch: u64,
}

/// What a load did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Loaded {
    /// Records written.
    pub records: u64,
    /// Bytes of keys and values written.
    pub bytes: u64,
    /// Bad records skipped (`skip_bad`).
    pub skipped: u64,
    /// Wall time of the load, including the final flush, in seconds.
    pub seconds: f64,
}

/// Loads `cfg.file` into `db`. `warn` receives the first ten "skipping"
/// messages of a `skip_bad` load.
pub fn load(db: &Db, cfg: &LoadConfig, warn: &mut dyn FnMut(String)) -> Result<Loaded, Error> {
    let mut opts = LoadOptions::new(cfg.key_field.clone())
        .skip_bad(cfg.skip_bad)
        .batch(usize::try_from(cfg.batch.max(1)).unwrap_or(usize::MAX));
    if let Some(f) = cfg.format {
        opts = opts.format(f);
    }
    let t = Instant::now();
    let mut bar: Option<Progress> = None;
    let mut skipped = 0u64;
    let r = load_file(db, &cfg.file, &opts, &mut |ev| match ev {
        LoadEvent::Progress { read, total } => bar
            .get_or_insert_with(|| Progress::bytes("loading", total))
            .tick(read),
        LoadEvent::Skipped(m) => {
            skipped += 1;
            if skipped <= 10 {
                warn(format!("skipping {m}"));
            }
        }
        _ => {}
    });
    if let Some(mut b) = bar {
        b.finish();
    }
    match r {
        Ok(l) => Ok(Loaded {
            records: l.records,
            bytes: l.bytes,
            skipped: l.skipped,
            seconds: t.elapsed().as_secs_f64(),
        }),
        // Only a bad record can be skipped (its error ends with the count
        // `load_file` appends); a bad header or an unreadable file cannot.
        Err(strata::Error::InvalidArgument(m)) if !cfg.skip_bad && m.ends_with("were loaded)") => {
            Err(Error::Other(format!(
                "{m}; use --skip-bad to skip bad lines"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use strata::Options;

    /// A database loaded from a file (the database drops before its
    /// directory).
    struct Case {
        db: Db,
        result: Result<Loaded, Error>,
        warnings: Vec<String>,
        _dir: tempfile::TempDir,
    }

    fn load_str(name: &str, text: &str, skip_bad: bool) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        let db = Db::open(dir.path().join("db"), Options::small_for_tests()).unwrap();
        let mut warnings = Vec::new();
        let r = load(
            &db,
            &LoadConfig {
                file: f,
                key_field: "id".into(),
                format: None,
                skip_bad,
                batch: 2,
            },
            &mut |m| warnings.push(m),
        );
        Case {
            db,
            result: r,
            warnings,
            _dir: dir,
        }
    }

    fn value(db: &Db, key: &str) -> Value {
        serde_json::from_slice(&db.get(key.as_bytes()).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn csv_cells() {
        assert_eq!(csv_value("12"), Value::from(12));
        assert_eq!(csv_value("-1.5"), Value::from(-1.5));
        assert_eq!(csv_value("x1"), Value::from("x1"));
        assert_eq!(csv_value(""), Value::from(""));
        assert_eq!(csv_value("inf"), Value::from("inf"));
    }

    #[test]
    fn csv_quoted_fields_with_newlines_load() {
        let text = "id,n,label\r\na,5,\"two\nlines, and \"\"quotes\"\"\"\n\nb,7,\"x\r\ny\"\nc,-1.5,plain\n";
        let c = load_str("p.csv", text, false);
        assert_eq!(c.result.as_ref().unwrap().records, 3);
        assert_eq!(
            value(&c.db, "a"),
            serde_json::json!({"id": "a", "n": 5, "label": "two\nlines, and \"quotes\""})
        );
        assert_eq!(value(&c.db, "b")["label"], "x\r\ny");
        assert_eq!(value(&c.db, "c")["n"], -1.5);
    }

    #[test]
    fn csv_bad_records_name_their_line() {
        // Record a spans lines 2-3; the short record is on line 4.
        let text = "id,n\na,\"1\n\"\nb\nc,3\n";
        let c = load_str("p.csv", text, false);
        let e = c.result.as_ref().unwrap_err().to_string();
        assert!(e.contains("line 4: 1 fields, the header has 2"), "{e}");
        assert!(e.ends_with("use --skip-bad to skip bad lines"), "{e}");
        assert!(e.contains("1 records before it"), "{e}");
        assert!(c.db.get(b"a").unwrap().is_some());
        assert!(c.db.get(b"c").unwrap().is_none());
        let c = load_str("p.csv", text, true);
        assert_eq!(c.result.as_ref().unwrap().skipped, 1);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.db.get(b"c").unwrap().is_some());
    }

    /// Regressions (reliability issue, bad input): a 30-digit integer was
    /// stored as 1.2345678901234568e+29; a non-UTF-8 line stopped a
    /// `--skip-bad` load and lost the lines before it; a CSV header with a
    /// duplicate column silently dropped a value.
    #[test]
    fn bad_input_is_refused_or_kept_exact() {
        let big = "123456789012345678901234567890";
        let c = load_str("d.jsonl", &format!("{{\"id\": 1, \"n\": {big}}}\n"), false);
        c.result.as_ref().unwrap();
        let stored = c.db.get(b"1").unwrap().unwrap();
        assert!(String::from_utf8_lossy(&stored).contains(big), "{stored:?}");
        assert_eq!(csv_value(big), Value::from(big));
        assert_eq!(csv_value("18446744073709551615"), Value::from(u64::MAX));

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("u.jsonl");
        std::fs::write(&f, b"{\"id\": 1}\n{\"id\": \"\xff\xfe\"}\n{\"id\": 3}\n").unwrap();
        for skip_bad in [true, false] {
            let db = Db::open(
                dir.path().join(format!("db{skip_bad}")),
                Options::small_for_tests(),
            )
            .unwrap();
            let cfg = LoadConfig {
                file: f.clone(),
                key_field: "id".into(),
                format: None,
                skip_bad,
                batch: 100,
            };
            let r = load(&db, &cfg, &mut |_| {});
            assert!(db.get(b"1").unwrap().is_some(), "lines before are loaded");
            if skip_bad {
                assert_eq!(r.unwrap().skipped, 1);
                assert!(db.get(b"3").unwrap().is_some());
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("line 2: not UTF-8"), "{e}");
            }
        }

        for skip_bad in [true, false] {
            let c = load_str("p.csv", "id,n,n\na,1,2\n", skip_bad);
            let e = c.result.as_ref().unwrap_err().to_string();
            assert!(e.contains("column \"n\" appears twice"), "{e}");
            // --skip-bad cannot skip a header: no hint to use it.
            assert!(!e.contains("--skip-bad"), "{e}");
            assert!(c.db.get(b"a").unwrap().is_none());
        }
    }

    #[test]
    fn jsonl_records() {
        let c = load_str("d.jsonl", "{\"id\": 7, \"x\": [1, 2]}\n\n[1]\n", true);
        let r = c.result.as_ref().unwrap();
        assert_eq!((r.records, r.skipped), (1, 1));
        assert_eq!(value(&c.db, "7")["x"][1], 2);
        let c = load_str("d.jsonl", "{\"x\": 1}\n", false);
        let e = c.result.as_ref().unwrap_err().to_string();
        assert!(
            e.contains("line 1: no string or number field \"id\""),
            "{e}"
        );
    }
}
