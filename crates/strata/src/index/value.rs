//! Attribute values: their types, extraction from JSON records, the
//! order-preserving byte encoding used on disk, and query predicates.
//!
//! Encoding (`docs/format/next.md`): `i64` is 8 bytes big-endian with the
//! sign bit flipped; `f64` is 8 bytes big-endian of the IEEE bits, all bits
//! flipped for negatives and the sign bit flipped otherwise (so bytewise
//! order is numeric order; NaN is never indexed); `string` is its UTF-8
//! bytes; `point` is two and `rect` four little-endian f64s.

#![deny(clippy::indexing_slicing)]

use serde::{Deserialize, Serialize};
use serde_json::Value;

use strata_lsm::error::{Error, Result};

/// The type of an indexed attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    /// JSON integer that fits in an `i64`.
    I64,
    /// Finite JSON number (integers included).
    F64,
    /// JSON string.
    String,
    /// JSON `[x, y]`.
    Point,
    /// JSON `[xmin, ymin, xmax, ymax]`.
    Rect,
}

impl KeyType {
    /// Every key type.
    pub const ALL: [KeyType; 5] = [
        KeyType::I64,
        KeyType::F64,
        KeyType::String,
        KeyType::Point,
        KeyType::Rect,
    ];

    /// Parses a key type name (`i64`, `f64`, `string`, `point`, `rect`);
    /// `Error::InvalidArgument` for any other.
    pub fn parse(s: &str) -> Result<KeyType> {
        match s {
            "i64" => Ok(KeyType::I64),
            "f64" => Ok(KeyType::F64),
            "string" => Ok(KeyType::String),
            "point" => Ok(KeyType::Point),
            "rect" => Ok(KeyType::Rect),
            _ => Err(Error::invalid(format!(
                "unknown key type {s:?} (expected i64, f64, string, point or rect)"
            ))),
        }
    }

    /// Bytes of every encoded value of this type (`None` for strings,
    /// whose encoding is their UTF-8 bytes).
    pub fn encoded_width(self) -> Option<usize> {
        match self {
            KeyType::I64 | KeyType::F64 => Some(8),
            KeyType::String => None,
            KeyType::Point => Some(16),
            KeyType::Rect => Some(32),
        }
    }

    /// The name [`KeyType::parse`] accepts.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeyType::I64 => "i64",
            KeyType::F64 => "f64",
            KeyType::String => "string",
            KeyType::Point => "point",
            KeyType::Rect => "rect",
        }
    }

    /// True for the spatial types (`point`, `rect`).
    pub fn is_spatial(&self) -> bool {
        matches!(self, KeyType::Point | KeyType::Rect)
    }
}

/// One attribute value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum IndexValue {
    /// An `i64` attribute.
    I64(i64),
    /// An `f64` attribute.
    F64(f64),
    /// A string attribute.
    Str(String),
    /// A point `[x, y]`.
    Point([f64; 2]),
    /// A rectangle `[xmin, ymin, xmax, ymax]`, min <= max.
    Rect([f64; 4]),
}

impl IndexValue {
    /// The key type this value has.
    pub fn key_type(&self) -> KeyType {
        match self {
            IndexValue::I64(_) => KeyType::I64,
            IndexValue::F64(_) => KeyType::F64,
            IndexValue::Str(_) => KeyType::String,
            IndexValue::Point(_) => KeyType::Point,
            IndexValue::Rect(_) => KeyType::Rect,
        }
    }

    /// Order-preserving encoding (scalars) or fixed-width coordinates
    /// (spatial).
    pub fn encode(&self) -> Vec<u8> {
        // At its final size: growing from empty was four reallocations
        // in every query's bounds.
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// The length of [`IndexValue::encode`]`(self)`.
    pub fn encoded_len(&self) -> usize {
        match self {
            IndexValue::I64(_) | IndexValue::F64(_) => 8,
            IndexValue::Str(s) => s.len(),
            IndexValue::Point(_) => 16,
            IndexValue::Rect(_) => 32,
        }
    }

    /// Appends [`IndexValue::encode`]`(self)` to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            IndexValue::I64(v) => out.extend_from_slice(&encode_i64(*v)),
            IndexValue::F64(v) => out.extend_from_slice(&encode_f64(*v)),
            IndexValue::Str(s) => out.extend_from_slice(s.as_bytes()),
            IndexValue::Point(c) => c
                .iter()
                .for_each(|c| out.extend_from_slice(&c.to_le_bytes())),
            IndexValue::Rect(c) => c
                .iter()
                .for_each(|c| out.extend_from_slice(&c.to_le_bytes())),
        }
    }

    /// True if [`IndexValue::decode`]`(ty, b)` succeeds, checked without
    /// building the value.
    pub fn is_encoding(ty: KeyType, b: &[u8]) -> bool {
        match ty.encoded_width() {
            Some(w) => b.len() == w,
            None => std::str::from_utf8(b).is_ok(),
        }
    }

    /// Inverse of [`IndexValue::encode`]; `Error::Corruption` on bad bytes.
    pub fn decode(ty: KeyType, b: &[u8]) -> Result<IndexValue> {
        let bad = || {
            Error::corruption(format!(
                "bad encoded {} value of {} bytes",
                ty.as_str(),
                b.len()
            ))
        };
        Ok(match ty {
            KeyType::I64 => {
                let a: [u8; 8] = b.try_into().map_err(|_| bad())?;
                IndexValue::I64((u64::from_be_bytes(a) ^ (1 << 63)) as i64)
            }
            KeyType::F64 => {
                let a: [u8; 8] = b.try_into().map_err(|_| bad())?;
                IndexValue::F64(decode_f64(a))
            }
            KeyType::String => IndexValue::Str(String::from_utf8(b.to_vec()).map_err(|_| bad())?),
            KeyType::Point => {
                let [x, y, ..] = Self::encoded_mbr(ty, b).ok_or_else(bad)?;
                IndexValue::Point([x, y])
            }
            KeyType::Rect => IndexValue::Rect(Self::encoded_mbr(ty, b).ok_or_else(bad)?),
        })
    }

    /// The MBR of an encoded point (16 bytes: `x`, `y`) or rectangle (32
    /// bytes), read in place: what [`IndexValue::mbr`] of its decoding
    /// gives. `None` for a scalar type or a wrong width.
    pub fn encoded_mbr(ty: KeyType, b: &[u8]) -> Option<[f64; 4]> {
        let f = |i: usize| -> Option<f64> {
            b.get(i * 8..i * 8 + 8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map(f64::from_le_bytes)
        };
        match (ty, b.len()) {
            (KeyType::Point, 16) => {
                let (x, y) = (f(0)?, f(1)?);
                Some([x, y, x, y])
            }
            (KeyType::Rect, 32) => Some([f(0)?, f(1)?, f(2)?, f(3)?]),
            _ => None,
        }
    }

    /// Bounding box `[xmin, ymin, xmax, ymax]` of a spatial value.
    pub fn mbr(&self) -> Option<[f64; 4]> {
        match self {
            IndexValue::Point([x, y]) => Some([*x, *y, *x, *y]),
            IndexValue::Rect(r) => Some(*r),
            _ => None,
        }
    }

    /// A number standing for a scalar's position on its axis, used only to
    /// measure gaps for value-aware splitting: the value itself for numbers,
    /// the first 8 bytes read big-endian for strings.
    pub fn gap_coordinate(&self) -> f64 {
        match self {
            IndexValue::I64(v) => *v as f64,
            IndexValue::F64(v) => *v,
            IndexValue::Str(s) => {
                let mut a = [0u8; 8];
                for (d, c) in a.iter_mut().zip(s.as_bytes()) {
                    *d = *c;
                }
                u64::from_be_bytes(a) as f64
            }
            IndexValue::Point([x, _]) => *x,
            IndexValue::Rect([x, ..]) => *x,
        }
    }

    /// Parses a value of type `ty` from command-line text (numbers in
    /// decimal, spatial values as comma-separated coordinates).
    pub fn parse(ty: KeyType, s: &str) -> Result<IndexValue> {
        let bad = || Error::invalid(format!("{s:?} is not a valid {} value", ty.as_str()));
        // NaN has no place in the order or on the plane: refused, as for
        // f64 values.
        let nums = || -> Result<Vec<f64>> {
            s.split(',')
                .map(|p| match p.trim().parse::<f64>() {
                    Ok(v) if !v.is_nan() => Ok(v),
                    _ => Err(bad()),
                })
                .collect()
        };
        Ok(match ty {
            KeyType::I64 => IndexValue::I64(s.trim().parse().map_err(|_| bad())?),
            KeyType::F64 => {
                let v: f64 = s.trim().parse().map_err(|_| bad())?;
                if v.is_nan() {
                    return Err(bad());
                }
                IndexValue::F64(v)
            }
            KeyType::String => IndexValue::Str(s.to_string()),
            KeyType::Point => match nums()?.as_slice() {
                [x, y] => IndexValue::Point([*x, *y]),
                _ => return Err(bad()),
            },
            KeyType::Rect => match nums()?.as_slice() {
                [a, b, c, d] if a <= c && b <= d => IndexValue::Rect([*a, *b, *c, *d]),
                _ => return Err(bad()),
            },
        })
    }
}

/// The order-preserving encoding of an `i64` (big-endian, sign bit
/// flipped): what [`IndexValue::encode`] gives for `I64`.
fn encode_i64(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The order-preserving encoding of an `f64`: what [`IndexValue::encode`]
/// gives for `F64`.
fn encode_f64(v: f64) -> [u8; 8] {
    let bits = v.to_bits();
    let t = if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    };
    t.to_be_bytes()
}

fn decode_f64(a: [u8; 8]) -> f64 {
    let t = u64::from_be_bytes(a);
    let bits = if t >> 63 == 1 { t ^ (1 << 63) } else { !t };
    f64::from_bits(bits)
}

/// Why a record was not indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The value is not a JSON document.
    Malformed,
    /// The attribute is absent (or null).
    Missing,
    /// The attribute has another type.
    WrongType,
}

/// Splits a field path like `place.bbox` or `coordinates.0`.
pub fn parse_path(path: &str) -> Result<Vec<String>> {
    if path.is_empty() || path.split('.').any(|p| p.is_empty()) {
        return Err(Error::invalid(format!("bad field path {path:?}")));
    }
    Ok(path.split('.').map(str::to_string).collect())
}

/// Extracts the attribute at `path` from a parsed document.
pub fn extract(doc: &Value, path: &[String], ty: KeyType) -> std::result::Result<IndexValue, Skip> {
    let mut v = doc;
    for seg in path {
        v = match v {
            Value::Object(m) => m.get(seg).ok_or(Skip::Missing)?,
            Value::Array(a) => seg
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get(i))
                .ok_or(Skip::Missing)?,
            _ => return Err(Skip::Missing),
        };
    }
    if v.is_null() {
        return Err(Skip::Missing);
    }
    let num = |v: &Value| v.as_f64().filter(|f| f.is_finite());
    match ty {
        KeyType::I64 => v.as_i64().map(IndexValue::I64).ok_or(Skip::WrongType),
        KeyType::F64 => num(v).map(IndexValue::F64).ok_or(Skip::WrongType),
        KeyType::String => v
            .as_str()
            .map(|s| IndexValue::Str(s.to_string()))
            .ok_or(Skip::WrongType),
        KeyType::Point => match v
            .as_array()
            .and_then(|a| a.iter().map(num).collect::<Option<Vec<f64>>>())
            .as_deref()
        {
            Some(&[x, y]) => Ok(IndexValue::Point([x, y])),
            _ => Err(Skip::WrongType),
        },
        KeyType::Rect => match v
            .as_array()
            .and_then(|a| a.iter().map(num).collect::<Option<Vec<f64>>>())
            .as_deref()
        {
            Some(&[x0, y0, x1, y1]) if x0 <= x1 && y0 <= y1 => {
                Ok(IndexValue::Rect([x0, y0, x1, y1]))
            }
            _ => Err(Skip::WrongType),
        },
    }
}

/// A query predicate on one index.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// Equal to the value (exact for floats and spatial values).
    Eq(IndexValue),
    /// Scalars in `[lo, hi]`, inclusive.
    Range(IndexValue, IndexValue),
    /// Points inside, or rectangles intersecting, `[xmin, ymin, xmax, ymax]`.
    Within([f64; 4]),
}

impl Predicate {
    /// Rejects predicates that do not fit an index of type `ty`.
    pub fn check(&self, ty: KeyType) -> Result<()> {
        let want = |v: &IndexValue| {
            let nan = match v {
                IndexValue::F64(x) => x.is_nan(),
                IndexValue::Point(p) => p.iter().any(|c| c.is_nan()),
                IndexValue::Rect(r) => r.iter().any(|c| c.is_nan()),
                _ => false,
            };
            if nan {
                Err(Error::invalid("NaN is not a value an index holds"))
            } else if v.key_type() == ty {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "index holds {} values, the query gives a {}",
                    ty.as_str(),
                    v.key_type().as_str()
                )))
            }
        };
        match self {
            Predicate::Eq(v) => want(v),
            Predicate::Range(lo, hi) => {
                if ty.is_spatial() {
                    return Err(Error::invalid(
                        "range queries need a scalar index; use within for spatial",
                    ));
                }
                want(lo)?;
                want(hi)?;
                if lo.encode() > hi.encode() {
                    return Err(Error::invalid("range with lo > hi"));
                }
                Ok(())
            }
            Predicate::Within(r) => {
                if !ty.is_spatial() {
                    return Err(Error::invalid("within queries need a point or rect index"));
                }
                if r.iter().any(|c| c.is_nan()) || r[0] > r[2] || r[1] > r[3] {
                    return Err(Error::invalid(
                        "within window must have xmin <= xmax and ymin <= ymax",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Does `v` satisfy the predicate?
    pub fn matches(&self, v: &IndexValue) -> bool {
        match self {
            Predicate::Eq(q) => match (q, v) {
                (IndexValue::F64(a), IndexValue::F64(b)) => a == b,
                _ => q == v,
            },
            Predicate::Range(lo, hi) => {
                let e = v.encode();
                lo.encode() <= e && e <= hi.encode()
            }
            Predicate::Within(w) => v.mbr().is_some_and(|m| intersects(&m, w)),
        }
    }

    /// Encoded scalar bounds `[lo, hi]` (for equality, `[v, v]`); `None`
    /// for spatial predicates.
    pub fn scalar_bounds(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        match self {
            Predicate::Eq(v) if !v.key_type().is_spatial() => Some((v.encode(), v.encode())),
            Predicate::Range(lo, hi) => Some((lo.encode(), hi.encode())),
            _ => None,
        }
    }

    /// Window for spatial predicates (for equality, the value's MBR).
    pub fn window(&self) -> Option<[f64; 4]> {
        match self {
            Predicate::Within(w) => Some(*w),
            Predicate::Eq(v) => v.mbr(),
            _ => None,
        }
    }
}

/// Closed-rectangle intersection. The four comparisons are combined with
/// `&`, not `&&`: whether two rectangles meet is data a branch predictor
/// cannot learn, and one branch per comparison mispredicted in the
/// searches that test many rectangles against one window.
#[inline]
pub fn intersects(a: &[f64; 4], b: &[f64; 4]) -> bool {
    (a[0] <= b[2]) & (b[0] <= a[2]) & (a[1] <= b[3]) & (b[1] <= a[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (reliability issue, bad input): `nan,1` was accepted as a
    /// point while NaN was refused elsewhere.
    #[test]
    fn nan_is_refused_in_every_type() {
        for (ty, s) in [
            (KeyType::F64, "nan"),
            (KeyType::Point, "nan,1"),
            (KeyType::Point, "1,NaN"),
            (KeyType::Rect, "0,0,nan,1"),
        ] {
            assert!(IndexValue::parse(ty, s).is_err(), "{s}");
        }
        let p = Predicate::Eq(IndexValue::Point([f64::NAN, 1.0]));
        assert!(p.check(KeyType::Point).is_err());
        let r = Predicate::Eq(IndexValue::Rect([0.0, 0.0, f64::NAN, 1.0]));
        assert!(r.check(KeyType::Rect).is_err());
        assert!(Predicate::Eq(IndexValue::Point([0.5, 1.0]))
            .check(KeyType::Point)
            .is_ok());
    }

    #[test]
    fn scalar_encoding_preserves_order() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(IndexValue::I64(w[0]).encode() < IndexValue::I64(w[1]).encode());
        }
        let floats = [
            f64::NEG_INFINITY,
            -1e9,
            -1.5,
            -0.0,
            0.0,
            1e-300,
            2.5,
            f64::INFINITY,
        ];
        for w in floats.windows(2) {
            assert!(
                IndexValue::F64(w[0]).encode() <= IndexValue::F64(w[1]).encode(),
                "{w:?}"
            );
        }
        for v in [
            IndexValue::I64(-42),
            IndexValue::F64(-2.25),
            IndexValue::Str("hé".into()),
            IndexValue::Point([1.0, -2.0]),
            IndexValue::Rect([0.0, 1.0, 2.0, 3.0]),
        ] {
            assert_eq!(IndexValue::decode(v.key_type(), &v.encode()).unwrap(), v);
            assert_eq!(v.encoded_len(), v.encode().len());
        }
        assert!(IndexValue::decode(KeyType::I64, b"short").is_err());
        assert!(IndexValue::decode(KeyType::String, &[0xff, 0xfe]).is_err());
    }

    #[test]
    fn extraction_types_and_skips() {
        let doc: Value = serde_json::from_str(r#"{"u": 5, "f": 2.5, "s": "x", "p": [1, 2], "r": [0, 0, 1, 1], "bad": [1, "a"], "n": null, "o": {"a": [10, 20]}}"#).unwrap();
        let p = |s: &str| parse_path(s).unwrap();
        assert_eq!(extract(&doc, &p("u"), KeyType::I64), Ok(IndexValue::I64(5)));
        assert_eq!(
            extract(&doc, &p("u"), KeyType::F64),
            Ok(IndexValue::F64(5.0))
        );
        assert_eq!(extract(&doc, &p("f"), KeyType::I64), Err(Skip::WrongType));
        assert_eq!(
            extract(&doc, &p("s"), KeyType::String),
            Ok(IndexValue::Str("x".into()))
        );
        assert_eq!(
            extract(&doc, &p("p"), KeyType::Point),
            Ok(IndexValue::Point([1.0, 2.0]))
        );
        assert_eq!(
            extract(&doc, &p("r"), KeyType::Rect),
            Ok(IndexValue::Rect([0.0, 0.0, 1.0, 1.0]))
        );
        assert_eq!(
            extract(&doc, &p("bad"), KeyType::Point),
            Err(Skip::WrongType)
        );
        assert_eq!(extract(&doc, &p("n"), KeyType::I64), Err(Skip::Missing));
        assert_eq!(extract(&doc, &p("zz"), KeyType::I64), Err(Skip::Missing));
        assert_eq!(
            extract(&doc, &p("o.a.1"), KeyType::I64),
            Ok(IndexValue::I64(20))
        );
        assert!(parse_path("a..b").is_err());
    }

    #[test]
    fn predicates() {
        let r = Predicate::Range(IndexValue::I64(-3), IndexValue::I64(3));
        assert!(
            r.matches(&IndexValue::I64(-3))
                && r.matches(&IndexValue::I64(3))
                && !r.matches(&IndexValue::I64(4))
        );
        assert!(r.check(KeyType::I64).is_ok());
        assert!(r.check(KeyType::Point).is_err());
        assert!(Predicate::Range(IndexValue::I64(3), IndexValue::I64(1))
            .check(KeyType::I64)
            .is_err());
        let w = Predicate::Within([0.0, 0.0, 1.0, 1.0]);
        assert!(w.matches(&IndexValue::Point([1.0, 0.5])));
        assert!(!w.matches(&IndexValue::Point([1.1, 0.5])));
        assert!(w.matches(&IndexValue::Rect([0.9, 0.9, 5.0, 5.0])));
        assert!(w.check(KeyType::I64).is_err());
        assert!(Predicate::Within([1.0, 0.0, 0.0, 1.0])
            .check(KeyType::Point)
            .is_err());
    }
}
