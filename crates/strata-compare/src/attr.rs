//! Attribute extraction and query predicates, with the same semantics as
//! Strata's own indexes (`strata::index::value::extract`) so that every
//! peer indexes exactly the records Strata indexes:
//!
//! * the attribute is the top-level JSON field [`IndexDecl::field`];
//! * a missing field, `null`, a value of the wrong type or a malformed
//!   document is not indexed (the record is still stored);
//! * `I64` takes JSON integers that fit an `i64`; `F64` any finite number;
//!   `Point` `[x, y]` and `Rect` `[xmin, ymin, xmax, ymax]` (with
//!   `xmin <= xmax`, `ymin <= ymax`) of finite numbers.
//!
//! Query semantics (`strata_bench::queries`): ranges are inclusive, a
//! window contains points on its border and intersects rectangles that
//! touch it.

use serde_json::Value;
use strata_bench::queries::Query;
use strata_bench::system::{AttrType, IndexDecl, SysResult};

use crate::encode::normalize_zero;

/// One extracted attribute value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Attr {
    I64(i64),
    F64(f64),
    Point([f64; 2]),
    Rect([f64; 4]),
}

impl Attr {
    /// The bounding box `[xmin, ymin, xmax, ymax]` of a spatial value.
    pub fn bbox(&self) -> Option<[f64; 4]> {
        match *self {
            Attr::Point([x, y]) => Some([x, y, x, y]),
            Attr::Rect(r) => Some(r),
            _ => None,
        }
    }
}

/// Parses a record once for all its indexes; `None` if it is not JSON.
pub fn parse_doc(value: &[u8]) -> Option<Value> {
    serde_json::from_slice(value).ok()
}

/// The attribute of `doc` for index `decl`, or `None` if not indexed.
pub fn extract(doc: &Value, decl: &IndexDecl) -> Option<Attr> {
    let v = doc.as_object()?.get(&decl.field)?;
    let num = |v: &Value| v.as_f64().filter(|f| f.is_finite());
    let nums = |v: &Value| -> Option<Vec<f64>> { v.as_array()?.iter().map(num).collect() };
    match decl.ty {
        AttrType::I64 => v.as_i64().map(Attr::I64),
        AttrType::F64 => num(v).map(|f| Attr::F64(normalize_zero(f))),
        AttrType::Point => match nums(v)?.as_slice() {
            &[x, y] => Some(Attr::Point([x, y])),
            _ => None,
        },
        AttrType::Rect => match nums(v)?.as_slice() {
            &[x0, y0, x1, y1] if x0 <= x1 && y0 <= y1 => Some(Attr::Rect([x0, y0, x1, y1])),
            _ => None,
        },
    }
}

/// The attributes of a raw record for every index, in index order.
pub fn extract_all(value: &[u8], indexes: &[IndexDecl]) -> Vec<Option<Attr>> {
    match parse_doc(value) {
        Some(doc) => indexes.iter().map(|d| extract(&doc, d)).collect(),
        None => vec![None; indexes.len()],
    }
}

/// A query normalised to the type of the index it runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pred {
    /// `lo <= v <= hi` (empty when `lo > hi`).
    I64Range(i64, i64),
    /// `lo <= v <= hi` (zeros normalised; empty when `lo > hi`).
    F64Range(f64, f64),
    /// Points inside, or rectangles intersecting, the closed window.
    Window([f64; 4]),
}

impl Pred {
    /// `q` as a predicate on an index of type `ty`. Integer queries on a
    /// float index compare numerically; a float range on an integer index
    /// keeps the integers inside it. Spatial queries on scalar indexes and
    /// the reverse are errors.
    pub fn new(ty: AttrType, q: &Query) -> SysResult<Pred> {
        let scalar_only = || {
            Err(format!(
                "query {q:?} does not fit an index of type {ty:?} (windows need point or rect indexes)"
            ))
        };
        match (ty, *q) {
            (AttrType::I64, Query::Lookup(v)) => Ok(Pred::I64Range(v, v)),
            (AttrType::I64, Query::Range(lo, hi)) => Ok(Pred::I64Range(lo, hi)),
            (AttrType::I64, Query::RangeF(lo, hi)) => {
                if lo.is_nan() || hi.is_nan() {
                    return Ok(Pred::I64Range(1, 0));
                }
                // `as` saturates, which is what a clamp to the i64 domain
                // wants; ceil/floor keep exactly the integers in [lo, hi].
                Ok(Pred::I64Range(lo.ceil() as i64, hi.floor() as i64))
            }
            (AttrType::F64, Query::Lookup(v)) => Ok(Pred::F64Range(v as f64, v as f64)),
            (AttrType::F64, Query::Range(lo, hi)) => Ok(Pred::F64Range(lo as f64, hi as f64)),
            (AttrType::F64, Query::RangeF(lo, hi)) => {
                Ok(Pred::F64Range(normalize_zero(lo), normalize_zero(hi)))
            }
            (AttrType::Point | AttrType::Rect, Query::Window(w)) => Ok(Pred::Window(w)),
            (AttrType::Point | AttrType::Rect, _) => Err(format!(
                "query {q:?} does not fit a {ty:?} index (it takes windows)"
            )),
            (_, Query::Window(_)) => scalar_only(),
        }
    }

    /// True if no value can match.
    pub fn is_empty(&self) -> bool {
        match *self {
            Pred::I64Range(lo, hi) => lo > hi,
            Pred::F64Range(lo, hi) => lo.is_nan() || hi.is_nan() || lo > hi,
            Pred::Window([x0, y0, x1, y1]) => !(x0 <= x1 && y0 <= y1),
        }
    }

    /// True if `a` satisfies the predicate.
    pub fn matches(&self, a: &Attr) -> bool {
        match (*self, *a) {
            (Pred::I64Range(lo, hi), Attr::I64(v)) => lo <= v && v <= hi,
            (Pred::F64Range(lo, hi), Attr::F64(v)) => lo <= v && v <= hi,
            (Pred::Window(w), Attr::Point([x, y])) => {
                w[0] <= x && x <= w[2] && w[1] <= y && y <= w[3]
            }
            (Pred::Window(w), Attr::Rect(r)) => {
                r[0] <= w[2] && w[0] <= r[2] && r[1] <= w[3] && w[1] <= r[3]
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(ty: AttrType) -> IndexDecl {
        IndexDecl {
            name: "i".into(),
            field: "f".into(),
            ty,
        }
    }

    #[test]
    fn extraction_follows_strata() {
        let d = |s: &str| parse_doc(s.as_bytes()).unwrap_or(Value::Null);
        let i = decl(AttrType::I64);
        assert_eq!(extract(&d(r#"{"f":3}"#), &i), Some(Attr::I64(3)));
        assert_eq!(extract(&d(r#"{"f":3.5}"#), &i), None);
        assert_eq!(extract(&d(r#"{"f":null}"#), &i), None);
        assert_eq!(extract(&d(r#"{"g":1}"#), &i), None);
        assert_eq!(extract(&d(r#"[1]"#), &i), None);
        let f = decl(AttrType::F64);
        assert_eq!(extract(&d(r#"{"f":3}"#), &f), Some(Attr::F64(3.0)));
        assert_eq!(
            extract(&d(r#"{"f":-0.0}"#), &f).map(|a| match a {
                Attr::F64(v) => v.to_bits(),
                _ => 1,
            }),
            Some(0)
        );
        let p = decl(AttrType::Point);
        assert_eq!(
            extract(&d(r#"{"f":[1,2]}"#), &p),
            Some(Attr::Point([1.0, 2.0]))
        );
        assert_eq!(extract(&d(r#"{"f":[1,2,3]}"#), &p), None);
        assert_eq!(extract(&d(r#"{"f":[1,"a"]}"#), &p), None);
        let r = decl(AttrType::Rect);
        assert_eq!(
            extract(&d(r#"{"f":[0,0,1,1]}"#), &r),
            Some(Attr::Rect([0.0, 0.0, 1.0, 1.0]))
        );
        assert_eq!(extract(&d(r#"{"f":[2,0,1,1]}"#), &r), None);
        assert_eq!(extract_all(b"not json", &[i]), vec![None]);
    }

    #[test]
    fn predicates() {
        let p = Pred::new(AttrType::I64, &Query::RangeF(1.5, 3.0)).ok();
        assert_eq!(p, Some(Pred::I64Range(2, 3)));
        assert!(Pred::new(AttrType::I64, &Query::Window([0.0; 4])).is_err());
        assert!(Pred::new(AttrType::Point, &Query::Lookup(1)).is_err());
        let w = Pred::Window([0.0, 0.0, 1.0, 1.0]);
        assert!(w.matches(&Attr::Point([1.0, 0.0])));
        assert!(!w.matches(&Attr::Point([1.5, 0.0])));
        assert!(w.matches(&Attr::Rect([1.0, 1.0, 2.0, 2.0])));
        assert!(!w.matches(&Attr::Rect([1.1, 0.0, 2.0, 2.0])));
        assert!(Pred::I64Range(3, 2).is_empty());
    }
}
