//! Chirp traces (the Twitter-like workload generator used by NEXT §6.3,
//! LevelDB++ §5 and PERSEID §5): one operation per line, tab-separated,
//!
//! ```text
//! <ts>\tw\t<json>        write; the primary key is the JSON field "ID"
//! <ts>\trp\t<pk>         read on the primary key
//! <ts>\trs\t<k>          secondary lookup (attribute = k)
//! <ts>\trs\t<lo>\t<hi>   secondary range (lo <= attribute <= hi)
//! ```
//!
//! `<ts>` is a timestamp in milliseconds (decimal digits, often
//! zero-padded); secondary keys are integers. Parsing is strict: any other
//! shape is an error naming the line. A JSON `ID` may be an integer
//! (written as its decimal digits) or a non-empty string. Chirp's
//! two-key `rp` (a primary range scan) is rejected: the benchmark systems
//! have no scan operation. A final `\r` (CRLF files) is ignored.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use crate::gen::Tweet;
use serde_json::Value;

/// One parsed chirp line.
#[derive(Debug, Clone, PartialEq)]
pub enum ChirpOp {
    /// `w`: insert or replace the record whose primary key is its `ID`.
    Write {
        /// Timestamp, in milliseconds.
        ts_ms: u64,
        /// The `ID` field as bytes (an integer's decimal digits, or the
        /// string).
        key: Vec<u8>,
        /// The JSON document as written on the line.
        json: String,
        /// The secondary attribute, if present and an integer.
        attr: Option<i64>,
    },
    /// `rp`: read one record by primary key.
    ReadPrimary {
        /// Timestamp, in milliseconds.
        ts_ms: u64,
        /// The primary key as written on the line (non-empty).
        key: Vec<u8>,
    },
    /// `rs`: secondary lookup or inclusive range on the attribute.
    ReadSecondary {
        /// Timestamp, in milliseconds.
        ts_ms: u64,
        /// The looked-up value, or the range's lower bound.
        lo: i64,
        /// `None` for a point lookup; otherwise the inclusive upper bound
        /// (at least `lo`).
        hi: Option<i64>,
    },
}

fn parse_int(what: &str, s: &str) -> Result<i64, String> {
    s.parse::<i64>()
        .map_err(|_| format!("{what} {s:?} is not an integer"))
}

/// Parses one line (without its newline). `attribute` is the JSON field
/// of the secondary key.
pub fn parse_line(line: &str, attribute: &str) -> Result<ChirpOp, String> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() {
        return Err("empty line".into());
    }
    let mut parts = line.splitn(3, '\t');
    let ts = parts.next().unwrap_or("");
    let cmd = parts
        .next()
        .ok_or_else(|| format!("expected <timestamp>\\t<command>\\t<value>, got {line:?}"))?;
    let rest = parts.next();
    if ts.is_empty() || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("timestamp {ts:?} is not a number of milliseconds"));
    }
    let ts_ms: u64 = ts
        .parse()
        .map_err(|_| format!("timestamp {ts:?} is out of range"))?;
    let rest = rest.ok_or_else(|| format!("command {cmd:?} has no value"))?;
    match cmd {
        "w" => {
            let doc: Value =
                serde_json::from_str(rest).map_err(|e| format!("write: invalid JSON: {e}"))?;
            let obj = doc
                .as_object()
                .ok_or("write: the JSON value is not an object")?;
            let key = match obj.get("ID") {
                Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(other) => {
                    return Err(format!(
                        "write: \"ID\" must be an integer or a non-empty string, not {other}"
                    ))
                }
                None => return Err("write: the record has no \"ID\" field".into()),
            };
            Ok(ChirpOp::Write {
                ts_ms,
                key: key.into_bytes(),
                json: rest.to_string(),
                attr: obj.get(attribute).and_then(Value::as_i64),
            })
        }
        "rp" => {
            let mut keys = rest.split('\t');
            let key = keys.next().unwrap_or("");
            if key.is_empty() {
                return Err("rp: empty primary key".into());
            }
            if keys.next().is_some() {
                return Err("rp with two keys (a primary range scan) is not supported".into());
            }
            Ok(ChirpOp::ReadPrimary {
                ts_ms,
                key: key.as_bytes().to_vec(),
            })
        }
        "rs" => {
            let v: Vec<&str> = rest.split('\t').collect();
            match v[..] {
                [k] => Ok(ChirpOp::ReadSecondary {
                    ts_ms,
                    lo: parse_int("rs: secondary key", k)?,
                    hi: None,
                }),
                [lo, hi] => {
                    let (lo, hi) = (
                        parse_int("rs: lower bound", lo)?,
                        parse_int("rs: upper bound", hi)?,
                    );
                    if lo > hi {
                        return Err(format!("rs: lower bound {lo} is above upper bound {hi}"));
                    }
                    Ok(ChirpOp::ReadSecondary {
                        ts_ms,
                        lo,
                        hi: Some(hi),
                    })
                }
                _ => Err(format!(
                    "rs takes one key or two bounds, got {} values",
                    v.len()
                )),
            }
        }
        other => Err(format!("unknown command {other:?} (expected w, rp or rs)")),
    }
}

/// Reads a whole trace; errors are `FILE:LINE: problem`.
pub fn read_trace(path: &Path, attribute: &str) -> Result<Vec<ChirpOp>, String> {
    let f = File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::with_capacity(1 << 20, f).lines().enumerate() {
        let at = |m: String| format!("{}:{}: {m}", path.display(), i + 1);
        let line = line.map_err(|e| at(format!("read: {e}")))?;
        out.push(parse_line(&line, attribute).map_err(at)?);
    }
    if out.is_empty() {
        return Err(format!("{}: the trace is empty", path.display()));
    }
    Ok(out)
}

/// A generated tweet with chirp field names: `ID`, `UserID`,
/// `CreationTime`, `Coordinates`, `Text`, `Lang`, `RetweetsNum`,
/// `FavoritesNum`, `Place`, `Source`.
pub fn tweet_json(t: &Tweet) -> String {
    serde_json::json!({
        "ID": t.id,
        "UserID": t.user_id,
        "CreationTime": t.created_at,
        "Coordinates": t.coordinates,
        "Text": t.text,
        "Lang": t.lang,
        "RetweetsNum": t.retweet_count,
        "FavoritesNum": t.favorite_count,
        "Place": t.place,
        "Source": t.source,
    })
    .to_string()
}

/// Writes one `w` line: `<ts>\tw\t<json>`. The value must be single-line
/// JSON.
pub fn write_write(out: &mut dyn Write, ts_ms: u64, value: &[u8]) -> Result<(), String> {
    if value.contains(&b'\n') || value.contains(&b'\r') {
        return Err("a record contains a line break: it cannot be a chirp line".into());
    }
    out.write_all(format!("{ts_ms:08}\tw\t").as_bytes())
        .and_then(|_| out.write_all(value))
        .and_then(|_| out.write_all(b"\n"))
        .map_err(io_err)
}

/// Writes one `rp` line: `<ts>\trp\t<pk>`. The key must be UTF-8.
pub fn write_read_primary(out: &mut dyn Write, ts_ms: u64, key: &[u8]) -> Result<(), String> {
    let k = std::str::from_utf8(key).map_err(|_| "a primary key is not UTF-8".to_string())?;
    writeln!(out, "{ts_ms:08}\trp\t{k}").map_err(io_err)
}

/// Writes one `rs` line: a lookup (`hi` = `None`) or a range.
pub fn write_read_secondary(
    out: &mut dyn Write,
    ts_ms: u64,
    lo: i64,
    hi: Option<i64>,
) -> Result<(), String> {
    match hi {
        None => writeln!(out, "{ts_ms:08}\trs\t{lo}"),
        Some(hi) => writeln!(out, "{ts_ms:08}\trs\t{lo}\t{hi}"),
    }
    .map_err(io_err)
}

fn io_err(e: std::io::Error) -> String {
    format!("write trace: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<ChirpOp, String> {
        parse_line(line, "UserID")
    }

    #[test]
    fn parses_the_four_shapes() {
        let w =
            p("00000012\tw\t{\"UserID\": 30363580, \"Place\": null, \"ID\": 370802416255787008}")
                .unwrap();
        assert_eq!(
            w,
            ChirpOp::Write {
                ts_ms: 12,
                key: b"370802416255787008".to_vec(),
                json: "{\"UserID\": 30363580, \"Place\": null, \"ID\": 370802416255787008}".into(),
                attr: Some(30363580),
            }
        );
        // String ids; a missing or non-integer attribute is not indexed.
        let w = p("0\tw\t{\"ID\":\"a-1\",\"UserID\":\"x\"}").unwrap();
        assert!(matches!(w, ChirpOp::Write { ref key, attr: None, .. } if key == b"a-1"));
        assert_eq!(
            p("5\trp\t370802416691982336").unwrap(),
            ChirpOp::ReadPrimary {
                ts_ms: 5,
                key: b"370802416691982336".to_vec()
            }
        );
        assert_eq!(
            p("5\trs\t130288926").unwrap(),
            ChirpOp::ReadSecondary {
                ts_ms: 5,
                lo: 130288926,
                hi: None
            }
        );
        assert_eq!(
            p("5\trs\t-3\t7\r").unwrap(),
            ChirpOp::ReadSecondary {
                ts_ms: 5,
                lo: -3,
                hi: Some(7)
            }
        );
    }

    #[test]
    fn rejects_malformed_lines() {
        for (line, want) in [
            ("", "empty line"),
            ("00000000", "expected <timestamp>"),
            ("x1\tw\t{}", "timestamp \"x1\""),
            ("-1\trp\tk", "timestamp \"-1\""),
            ("99999999999999999999999\trp\tk", "out of range"),
            ("1\trp", "has no value"),
            ("1\tr\tk", "unknown command \"r\""),
            ("1\tw\t{\"ID\": 1", "invalid JSON"),
            ("1\tw\t[1]", "not an object"),
            ("1\tw\t{\"UserID\": 1}", "no \"ID\""),
            ("1\tw\t{\"ID\": 1.5}", "\"ID\" must be"),
            ("1\tw\t{\"ID\": \"\"}", "\"ID\" must be"),
            ("1\trp\t", "empty primary key"),
            ("1\trp\ta\tb", "primary range scan"),
            ("1\trs\tabc", "not an integer"),
            ("1\trs\t1\t2\t3", "got 3 values"),
            ("1\trs\t9\t2", "above upper bound"),
            ("1\trs\t", "not an integer"),
        ] {
            let e = p(line).expect_err(line);
            assert!(e.contains(want), "{line:?}: {e}");
        }
    }

    #[test]
    fn read_trace_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.chirp");
        std::fs::write(&f, "0\tw\t{\"ID\":1,\"UserID\":2}\n0\trs\t2\n0\trq\t1\n").unwrap();
        let e = read_trace(&f, "UserID").unwrap_err();
        assert!(
            e.ends_with("t.chirp:3: unknown command \"rq\" (expected w, rp or rs)"),
            "{e}"
        );
        std::fs::write(&f, "").unwrap();
        assert!(read_trace(&f, "UserID").unwrap_err().contains("empty"));
        assert!(read_trace(&dir.path().join("none"), "UserID")
            .unwrap_err()
            .starts_with("open "));
    }

    #[test]
    fn generated_tweets_round_trip() {
        let t = crate::gen::tweets(1, 3).next().unwrap();
        let line = format!("00000000\tw\t{}", tweet_json(&t));
        match p(&line).unwrap() {
            ChirpOp::Write { key, attr, .. } => {
                assert_eq!(key, t.id.to_string().into_bytes());
                assert_eq!(attr, Some(t.user_id));
            }
            other => panic!("{other:?}"),
        }
    }
}
