//! Targeted extraction of indexed attributes from JSON records.
//!
//! A record is read in one pass that validates the whole document exactly
//! as a full parse into `serde_json::Value` would (same parser, same
//! number, string, UTF-8 and depth rules) but builds nothing except the
//! values at the wanted field paths. Building the full tree cost 1.1–1.3 µs
//! per tweet, about three times the cost of this pass (NEXT paper §4's
//! "no significant overhead" needs index maintenance to stay this cheap).
//!
//! Contract: for every document and every path,
//! `Fields::extract(raw)` then [`Extracted::value`] returns exactly what
//! `value::extract(&serde_json::from_slice(raw)?, path, ty)` returns, and a
//! document that `from_slice::<Value>` rejects is `Err(())` (malformed).
//! Duplicate object keys follow `serde_json::Map`: the last one wins.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::value::{IndexValue, KeyType, Skip};

/// The set of field paths wanted from each record: a trie of path
/// segments, node 0 the document root.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    nodes: Vec<Node>,
    /// Number of leaf slots (distinct paths).
    slots: usize,
}

#[derive(Debug, Clone)]
struct Node {
    seg: String,
    /// `seg` as an array position, if it is one.
    pos: Option<usize>,
    children: Vec<usize>,
    /// The slot of the path ending here.
    leaf: Option<usize>,
}

/// What a record holds at one wanted path.
#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    /// Nothing: the path leads nowhere (or through a non-container).
    Absent,
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    /// An array: each element as a number (`None` for a non-number).
    Nums(Vec<Option<f64>>),
    /// A boolean or an object.
    Other,
}

/// One reading of a record for a [`Fields`] (see [`Fields::extract`]):
/// `Err` for a malformed document.
pub(crate) type Read = std::result::Result<Extracted, ()>;

/// The values one record holds at a [`Fields`]' paths.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    leaves: Vec<Leaf>,
}

impl Fields {
    /// The trie of `paths` (each non-empty; duplicates share a slot).
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a [String]>) -> Fields {
        let mut f = Fields {
            nodes: vec![Node::new(String::new())],
            slots: 0,
        };
        for p in paths {
            let mut n = 0;
            for seg in p {
                n = match f.child(n, seg) {
                    Some(c) => c,
                    None => {
                        f.nodes.push(Node::new(seg.clone()));
                        let c = f.nodes.len() - 1;
                        if let Some(node) = f.nodes.get_mut(n) {
                            node.children.push(c);
                        }
                        c
                    }
                };
            }
            if let Some(node) = f.nodes.get_mut(n) {
                if n != 0 && node.leaf.is_none() {
                    node.leaf = Some(f.slots);
                    f.slots += 1;
                }
            }
        }
        f
    }

    /// True if no path is wanted.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    fn child(&self, n: usize, seg: &str) -> Option<usize> {
        self.child_bytes(n, seg.as_bytes())
    }

    fn child_bytes(&self, n: usize, seg: &[u8]) -> Option<usize> {
        self.nodes
            .get(n)?
            .children
            .iter()
            .copied()
            .find(|&c| self.nodes.get(c).is_some_and(|c| c.seg.as_bytes() == seg))
    }

    /// The slot of `path`, if it is one of the set's.
    pub fn slot(&self, path: &[String]) -> Option<usize> {
        let mut n = 0;
        for seg in path {
            n = self.child(n, seg)?;
        }
        self.nodes.get(n)?.leaf
    }

    /// Reads `raw` once: the values at every path, or `Err(())` for a
    /// document a full JSON parse rejects.
    pub fn extract(&self, raw: &[u8]) -> std::result::Result<Extracted, ()> {
        let mut leaves = vec![Leaf::Absent; self.slots];
        if self.fast(raw, &mut leaves).is_some() {
            return Ok(Extracted { leaves });
        }
        self.slow(raw)
    }

    /// [`Fields::extract`] by the serde path alone.
    fn slow(&self, raw: &[u8]) -> std::result::Result<Extracted, ()> {
        let mut leaves = vec![Leaf::Absent; self.slots];
        let mut de = serde_json::Deserializer::from_slice(raw);
        At {
            fields: self,
            node: 0,
            leaves: &mut leaves,
        }
        .deserialize(&mut de)
        .map_err(|_| ())?;
        de.end().map_err(|_| ())?;
        Ok(Extracted { leaves })
    }

    /// Resets the slots of the paths at and below `n` (a duplicate object
    /// key replaces everything the earlier one held).
    fn clear(&self, n: usize, leaves: &mut [Leaf]) {
        let Some(node) = self.nodes.get(n) else {
            return;
        };
        if let Some(l) = node.leaf.and_then(|s| leaves.get_mut(s)) {
            *l = Leaf::Absent;
        }
        for &c in &node.children {
            self.clear(c, leaves);
        }
    }
}

impl Node {
    fn new(seg: String) -> Node {
        Node {
            pos: seg.parse().ok(),
            seg,
            children: Vec::new(),
            leaf: None,
        }
    }
}

impl Extracted {
    /// The value at the path of `slot` as the text of a primary key: a
    /// string as is, a number as `serde_json` prints it (integers in
    /// decimal); `None` for anything else or nothing.
    pub fn key_text(&self, slot: usize) -> Option<String> {
        match self.leaves.get(slot)? {
            Leaf::Str(s) => Some(s.clone()),
            Leaf::Int(i) => Some(i.to_string()),
            Leaf::UInt(u) => Some(u.to_string()),
            Leaf::Float(f) => serde_json::Number::from_f64(*f).map(|n| n.to_string()),
            _ => None,
        }
    }

    /// The attribute of type `ty` at the path of `slot` (see
    /// [`Fields::slot`]), with the rules of `value::extract`.
    pub fn value(&self, slot: usize, ty: KeyType) -> std::result::Result<IndexValue, Skip> {
        let leaf = self.leaves.get(slot).unwrap_or(&Leaf::Absent);
        let num = |l: &Leaf| {
            match l {
                Leaf::Int(i) => Some(*i as f64),
                Leaf::UInt(u) => Some(*u as f64),
                Leaf::Float(f) => Some(*f),
                _ => None,
            }
            .filter(|f| f.is_finite())
        };
        let nums = |l: &Leaf| match l {
            Leaf::Nums(v) => v
                .iter()
                .map(|x| x.filter(|f| f.is_finite()))
                .collect::<Option<Vec<f64>>>(),
            _ => None,
        };
        match leaf {
            Leaf::Absent | Leaf::Null => return Err(Skip::Missing),
            _ => {}
        }
        match ty {
            KeyType::I64 => match leaf {
                Leaf::Int(i) => Ok(IndexValue::I64(*i)),
                Leaf::UInt(u) => i64::try_from(*u)
                    .map(IndexValue::I64)
                    .map_err(|_| Skip::WrongType),
                _ => Err(Skip::WrongType),
            },
            KeyType::F64 => num(leaf).map(IndexValue::F64).ok_or(Skip::WrongType),
            KeyType::String => match leaf {
                Leaf::Str(s) => Ok(IndexValue::Str(s.clone())),
                _ => Err(Skip::WrongType),
            },
            KeyType::Point => match nums(leaf).as_deref() {
                Some(&[x, y]) => Ok(IndexValue::Point([x, y])),
                _ => Err(Skip::WrongType),
            },
            KeyType::Rect => match nums(leaf).as_deref() {
                Some(&[x0, y0, x1, y1]) if x0 <= x1 && y0 <= y1 => {
                    Ok(IndexValue::Rect([x0, y0, x1, y1]))
                }
                _ => Err(Skip::WrongType),
            },
        }
    }
}

// ---- fast path ------------------------------------------------------------
//
// A byte scanner for the common case: an object document whose strings are
// valid UTF-8 with no control characters and no surrogate escapes, whose
// numbers cannot overflow an f64, nested at most `FAST_MAX_DEPTH` deep.
// It validates what it skips itself and hands the byte span of each wanted
// value to the serde path above (the same `At` on the same bytes, so the
// values are the same by construction). It never decides that a document
// is malformed: at anything outside that case it gives up (`None`) and
// `extract` reads the document with the serde path, which decides.
// Invariant: `fast` returns `Some` only for documents `from_slice::<Value>`
// accepts (the `json_fields` fuzz target and the tests check it).

/// Deepest nesting the fast path handles (`serde_json` rejects beyond 128).
const FAST_MAX_DEPTH: usize = 64;

/// Longest number token the fast path handles: with at most two exponent
/// digits, such a number is below 1e200 and parses to a finite f64.
const FAST_MAX_NUMBER: usize = 96;

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

/// Offset in `b` of the first `"`, `\\` or control character (`None` if
/// there is none), eight bytes at a time.
fn special_at(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // High bit set in each byte of `x` below `n` (exact for the lowest
    // such byte, which is all that is used).
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let eq = |x: u64, c: u8| below(x ^ (ONES * u64::from(c)), 1);
    let mut at = 0;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let x = u64::from_le_bytes(c.try_into().ok()?);
        let m = eq(x, b'"') | eq(x, b'\\') | below(x, 0x20);
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| at + p)
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string at `i` (at its opening quote); returns its raw contents
    /// and whether it holds an escape. The document was checked to be
    /// UTF-8 as a whole, so the contents are (they are cut at ASCII
    /// quotes).
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i += special_at(self.b.get(self.i..)?)?;
            match self.peek()? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.b.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            let v = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                            // Surrogates: left to serde_json's pairing rules.
                            if (0xD800..=0xDFFF).contains(&v) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                // A control character: serde_json rejects it.
                _ => return None,
            }
        }
        let raw = self.b.get(start..self.i)?;
        self.i += 1;
        Some((raw, escaped))
    }

    fn number(&mut self) -> Option<()> {
        let start = self.i;
        let digits = |s: &mut Scan<'_>| {
            let from = s.i;
            while s.peek().is_some_and(|c| c.is_ascii_digit()) {
                s.i += 1;
            }
            s.i - from
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if !(1..=2).contains(&digits(self)) {
                return None;
            }
        }
        (self.i - start <= FAST_MAX_NUMBER).then_some(())
    }

    /// After a member or element: `Some(true)` past a comma (another
    /// follows), `Some(false)` past `close`, `None` at anything else.
    fn more(&mut self, close: u8) -> Option<bool> {
        self.ws();
        let c = self.peek()?;
        self.i += 1;
        if c == b',' {
            self.ws();
            Some(true)
        } else {
            (c == close).then_some(false)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.b.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// Skips and validates one value at depth `depth`.
    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > FAST_MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => {
                self.i += 1;
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.value(depth + 1)?;
                    if !self.more(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.value(depth + 1)?;
                    if !self.more(b']')? {
                        return Some(());
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }
}

impl Fields {
    /// The fast path of [`Fields::extract`] (see above): `None` to fall
    /// back to the serde path, with `leaves` in any state.
    fn fast(&self, raw: &[u8], leaves: &mut [Leaf]) -> Option<()> {
        std::str::from_utf8(raw).ok()?;
        let mut s = Scan { b: raw, i: 0 };
        s.ws();
        s.eat(b'{')?;
        s.ws();
        if s.eat(b'}').is_none() {
            loop {
                let (key, escaped) = s.string()?;
                if escaped {
                    return None;
                }
                s.ws();
                s.eat(b':')?;
                s.ws();
                // (`key` is UTF-8: the document is, and it is cut at quotes.)
                let child = self.child_bytes(0, key);
                let start = s.i;
                s.value(1)?;
                if let Some(c) = child {
                    // The wanted value's bytes, read by the serde path.
                    let span = raw.get(start..s.i)?;
                    self.clear(c, leaves);
                    let mut de = serde_json::Deserializer::from_slice(span);
                    At {
                        fields: self,
                        node: c,
                        leaves,
                    }
                    .deserialize(&mut de)
                    .ok()?;
                    de.end().ok()?;
                }
                if !s.more(b'}')? {
                    break;
                }
            }
        }
        s.ws();
        (s.i == raw.len()).then_some(())
    }
}

/// The value at trie node `node`: descends into the children, captures
/// the leaf, validates and drops everything else.
struct At<'f, 'l> {
    fields: &'f Fields,
    node: usize,
    leaves: &'l mut [Leaf],
}

impl<'de> DeserializeSeed<'de> for At<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl At<'_, '_> {
    fn node(&self) -> Option<&Node> {
        self.fields.nodes.get(self.node)
    }

    fn set(&mut self, leaf: Leaf) {
        if let Some(l) = self
            .node()
            .and_then(|n| n.leaf)
            .and_then(|s| self.leaves.get_mut(s))
        {
            *l = leaf;
        }
    }

    fn is_leaf(&self) -> bool {
        self.node().is_some_and(|n| n.leaf.is_some())
    }
}

impl<'de> Visitor<'de> for At<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<(), E> {
        self.set(Leaf::Other);
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(mut self, v: i64) -> Result<(), E> {
        self.set(Leaf::Int(v));
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(mut self, v: u64) -> Result<(), E> {
        self.set(Leaf::UInt(v));
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(mut self, v: f64) -> Result<(), E> {
        self.set(Leaf::Float(v));
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(mut self, v: &str) -> Result<(), E> {
        if self.is_leaf() {
            self.set(Leaf::Str(v.to_string()));
        }
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.set(Leaf::Null);
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let leaf = self.is_leaf();
        let mut nums = Vec::new();
        let mut i = 0usize;
        loop {
            let child = self.node().and_then(|n| {
                n.children
                    .iter()
                    .copied()
                    .find(|&c| self.fields.nodes.get(c).and_then(|c| c.pos) == Some(i))
            });
            let more = match (child, leaf) {
                (Some(c), false) => seq
                    .next_element_seed(At {
                        fields: self.fields,
                        node: c,
                        leaves: self.leaves,
                    })?
                    .is_some(),
                (None, false) => seq.next_element::<Validate>()?.is_some(),
                // A path ends here: keep the element as a number (a node
                // both leaf and inner is handled by `Both`).
                (c, true) => match seq.next_element_seed(Both {
                    fields: self.fields,
                    node: c,
                    leaves: self.leaves,
                })? {
                    Some(n) => {
                        nums.push(n);
                        true
                    }
                    None => false,
                },
            };
            if !more {
                break;
            }
            i += 1;
        }
        self.set(Leaf::Nums(nums));
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(child) = map.next_key_seed(KeySeed {
            fields: self.fields,
            node: self.node,
        })? {
            match child {
                Some(c) => {
                    self.fields.clear(c, self.leaves);
                    map.next_value_seed(At {
                        fields: self.fields,
                        node: c,
                        leaves: self.leaves,
                    })?;
                }
                None => {
                    map.next_value::<Validate>()?;
                }
            }
        }
        self.set(Leaf::Other);
        Ok(())
    }
}

/// An element of an array that ends a path: its number, if it is one, and
/// (when the array's node also has children) the descent into the child at
/// this position.
struct Both<'f, 'l> {
    fields: &'f Fields,
    node: Option<usize>,
    leaves: &'l mut [Leaf],
}

impl<'de> DeserializeSeed<'de> for Both<'_, '_> {
    type Value = Option<f64>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<f64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl Both<'_, '_> {
    /// Captures a scalar at the child (if any) and returns it as a number.
    fn scalar(self, leaf: Leaf) -> Option<f64> {
        let n = match &leaf {
            Leaf::Int(i) => Some(*i as f64),
            Leaf::UInt(u) => Some(*u as f64),
            Leaf::Float(f) => Some(*f),
            _ => None,
        };
        if let Some(c) = self.node {
            let mut at = At {
                fields: self.fields,
                node: c,
                leaves: self.leaves,
            };
            at.set(leaf);
        }
        n
    }
}

impl<'de> Visitor<'de> for Both<'_, '_> {
    type Value = Option<f64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Option<f64>, E> {
        Ok(self.scalar(Leaf::Other))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Option<f64>, E> {
        Ok(self.scalar(Leaf::Int(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Option<f64>, E> {
        Ok(self.scalar(Leaf::UInt(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Option<f64>, E> {
        Ok(self.scalar(Leaf::Float(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<f64>, E> {
        match self.node {
            Some(_) => Ok(self.scalar(Leaf::Str(v.to_string()))),
            None => Ok(None),
        }
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<f64>, E> {
        Ok(self.scalar(Leaf::Null))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<f64>, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<f64>, A::Error> {
        match self.node {
            Some(c) => At {
                fields: self.fields,
                node: c,
                leaves: self.leaves,
            }
            .visit_seq(seq)?,
            None => {
                Validate.visit_seq(seq)?;
            }
        }
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<f64>, A::Error> {
        match self.node {
            Some(c) => At {
                fields: self.fields,
                node: c,
                leaves: self.leaves,
            }
            .visit_map(map)?,
            None => {
                Validate.visit_map(map)?;
            }
        }
        Ok(None)
    }
}

/// An object key, matched against the children of trie node `node`
/// without being copied: the matching child, if any.
struct KeySeed<'f> {
    fields: &'f Fields,
    node: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.fields.child(self.node, v))
    }
}

/// A value that is parsed and checked as a full parse would (numbers
/// converted, strings decoded) but kept nowhere. Unlike
/// `serde::de::IgnoredAny`, which `serde_json` skips without decoding
/// (accepting e.g. `1e400` or lone surrogate escapes that a full parse
/// rejects), this goes through `deserialize_any`.
struct Validate;

impl<'de> serde::Deserialize<'de> for Validate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Validate, D::Error> {
        d.deserialize_any(Validate)
    }
}

impl<'de> Visitor<'de> for Validate {
    type Value = Validate;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Validate, E> {
        Ok(Validate)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Validate, A::Error> {
        while seq.next_element::<Validate>()?.is_some() {}
        Ok(Validate)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Validate, A::Error> {
        while map.next_key::<ValidKey>()?.is_some() {
            map.next_value::<Validate>()?;
        }
        Ok(Validate)
    }
}

/// An object key checked as a full parse would and dropped.
struct ValidKey;

impl<'de> serde::Deserialize<'de> for ValidKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ValidKey, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ValidKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<ValidKey, E> {
                Ok(ValidKey)
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::value::{extract, parse_path};
    use serde_json::Value;

    /// Targeted extraction agrees with the full parse on `raw` for `paths`,
    /// and the fast path, when it answers, with the serde path. True if the
    /// fast path answered.
    fn agree(raw: &str, paths: &[&str]) -> bool {
        let paths: Vec<Vec<String>> = paths.iter().map(|p| parse_path(p).unwrap()).collect();
        let fields = Fields::new(paths.iter().map(|p| p.as_slice()));
        let full = serde_json::from_slice::<Value>(raw.as_bytes());
        let mut fast = vec![Leaf::Absent; fields.slots];
        let hit = fields.fast(raw.as_bytes(), &mut fast).is_some();
        if hit {
            assert!(full.is_ok(), "the fast path accepted {raw:?}");
            assert_eq!(
                fast,
                fields.slow(raw.as_bytes()).unwrap().leaves,
                "fast and serde paths differ on {raw:?}"
            );
        }
        let got = fields.extract(raw.as_bytes());
        match (&full, &got) {
            (Err(_), Err(())) => return hit,
            (Ok(_), Ok(_)) => {}
            _ => panic!("validity differs on {raw:?}: full {full:?}, targeted {got:?}"),
        }
        let (doc, got) = (full.unwrap(), got.unwrap());
        for p in &paths {
            let slot = fields.slot(p).unwrap();
            for ty in KeyType::ALL {
                assert_eq!(
                    got.value(slot, ty),
                    extract(&doc, p, ty),
                    "{raw:?} path {p:?} as {ty:?}"
                );
            }
        }
        hit
    }

    #[test]
    fn agrees_with_full_parse() {
        let paths = [
            "user_id",
            "coordinates",
            "coordinates.0",
            "place.bbox",
            "a.b.c",
            "name",
            "0",
        ];
        for raw in [
            r#"{"user_id": 7, "coordinates": [1.5, -2], "name": "x", "place": {"bbox": [0, 0, 1, 1]}}"#,
            r#"{"user_id": -7, "coordinates": [1.5], "place": {"bbox": [1, 0, 0, 1]}}"#,
            r#"{"user_id": 18446744073709551615, "coordinates": [1, 2, 3]}"#,
            r#"{"user_id": 9223372036854775807, "coordinates": null}"#,
            r#"{"user_id": 1.0, "coordinates": "1,2", "name": 5}"#,
            r#"{"user_id": 123456789012345678901234567890}"#,
            r#"{"user_id": null, "name": null, "a": {"b": {"c": "deep"}}}"#,
            r#"{"a": {"b": 1}, "a": 5}"#,
            r#"{"a": 5, "a": {"b": {"c": 2}}}"#,
            r#"{"a": {"b": {"c": 1}}, "a": {"b": {}}}"#,
            r#"{"user_id": 1, "user_id": "two"}"#,
            r#"{"coordinates": [true, 2]}"#,
            r#"{"coordinates": [[1], 2]}"#,
            r#"{"coordinates": [1e308, 2]}"#,
            r#"{"coordinates": {"0": 4}}"#,
            r#"{"0": 1}"#,
            r#"[1, 2]"#,
            r#"5"#,
            r#""str""#,
            r#"{"user_id": 1, "other": 1e400}"#,
            r#"{"user_id": 1, "other": "\ud800"}"#,
            r#"{"user_id": 1, "other": "\ud83d\ude00 ok"}"#,
            r#"{"user_id": 1, "other": [1, 2,]}"#,
            r#"{"user_id": 1} trailing"#,
            r#"{"user_id": 1}   "#,
            r#"{"user_id": 1, "x": tru}"#,
            r#"{"user_id": 1,}"#,
            r#"{"user_id": 1, "bad\u0000key": 2}"#,
            r#"{"name": "caf\u00e9", "user_id": -0}"#,
            r#"{"user_id": 1e2, "coordinates": [-0.0, 1e-320]}"#,
            "",
            "{",
        ] {
            agree(raw, &paths);
        }
    }

    #[test]
    fn invalid_utf8_and_deep_nesting_are_malformed_as_in_full_parse() {
        let paths = [parse_path("user_id").unwrap()];
        let fields = Fields::new(paths.iter().map(|p| p.as_slice()));
        let mut raw = br#"{"user_id": 1, "x": ""#.to_vec();
        raw.extend_from_slice(&[0xff, 0xfe]);
        raw.extend_from_slice(br#""}"#);
        assert!(serde_json::from_slice::<Value>(&raw).is_err());
        assert!(fields.extract(&raw).is_err());
        let deep = format!(
            r#"{{"user_id": 1, "x": {}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(
            serde_json::from_slice::<Value>(deep.as_bytes()).is_err(),
            fields.extract(deep.as_bytes()).is_err()
        );
    }

    #[test]
    fn unwanted_path_is_not_a_slot() {
        let p = parse_path("a.b").unwrap();
        let fields = Fields::new([p.as_slice()]);
        assert_eq!(fields.slot(&p), Some(0));
        assert_eq!(fields.slot(&parse_path("a").unwrap()), None);
        assert!(!fields.is_empty());
        assert!(Fields::new([]).is_empty());
    }

    /// Random documents (duplicate keys, nesting, every number form,
    /// escapes) and random damage: targeted and full reading agree.
    #[test]
    fn agrees_with_full_parse_on_random_documents() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        const KEYS: [&str; 6] = ["a", "b", "0", "1", "user_id", "c"];
        const NUMS: [&str; 12] = [
            "0",
            "-0",
            "7",
            "-7",
            "1.5",
            "1e2",
            "-2.5e-3",
            "1e400",
            "18446744073709551616",
            "9223372036854775808",
            "-9223372036854775809",
            "123456789012345678901234567890",
        ];
        const STRS: [&str; 5] = [r#""x""#, r#""\u00e9""#, r#""\ud800""#, r#""\n\"""#, r#""""#];
        fn gen(next: &mut dyn FnMut(u64) -> u64, depth: u32, out: &mut String) {
            let k = if depth > 3 { next(4) } else { next(7) };
            match k {
                0 => out.push_str(NUMS[next(NUMS.len() as u64) as usize]),
                1 => out.push_str(STRS[next(STRS.len() as u64) as usize]),
                2 => out.push_str(["null", "true", "false"][next(3) as usize]),
                3 => out.push_str(NUMS[next(5) as usize]),
                4 | 5 => {
                    out.push('{');
                    for i in 0..next(4) {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&format!("{:?}:", KEYS[next(KEYS.len() as u64) as usize]));
                        gen(next, depth + 1, out);
                    }
                    out.push('}');
                }
                _ => {
                    out.push('[');
                    for i in 0..next(5) {
                        if i > 0 {
                            out.push(',');
                        }
                        gen(next, depth + 1, out);
                    }
                    out.push(']');
                }
            }
        }
        let paths = ["a", "a.b", "a.0", "b.a.c", "user_id", "0", "c.1"];
        let (mut valid, mut fast) = (0, 0);
        for _ in 0..20_000 {
            let mut doc = String::new();
            gen(&mut next, 0, &mut doc);
            let mut raw = doc.into_bytes();
            match next(10) {
                0 if !raw.is_empty() => {
                    let n = next(raw.len() as u64) as usize;
                    raw.truncate(n);
                }
                1 if !raw.is_empty() => {
                    let i = next(raw.len() as u64) as usize;
                    raw.insert(i, b",}]:\\"[next(5) as usize]);
                }
                _ => {}
            }
            let Ok(text) = String::from_utf8(raw) else {
                continue;
            };
            if text.starts_with('{') && serde_json::from_str::<Value>(&text).is_ok() {
                valid += 1;
                fast += usize::from(agree(&text, &paths));
            } else {
                agree(&text, &paths);
            }
        }
        // The fast path answers for most valid objects (it leaves surrogate
        // escapes, 3-digit exponents and deep nesting to the serde path).
        assert!(fast * 2 > valid, "fast path answered {fast} of {valid}");
    }

    #[test]
    fn special_at_finds_the_first_special_byte() {
        let mut x: u64 = 88172645463325252;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 40) as usize;
            let b: Vec<u8> = (0..len)
                .map(|i| {
                    let r = x.rotate_left(i as u32 * 7);
                    // Mostly plain bytes, sometimes special or high ones.
                    match r % 16 {
                        0 => b'"',
                        1 => b'\\',
                        2 => (r >> 8) as u8 % 0x20,
                        3 => 0x80 | (r >> 8) as u8,
                        _ => b'a' + (r >> 8) as u8 % 26,
                    }
                })
                .collect();
            let naive = b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
            assert_eq!(special_at(&b), naive, "{b:?}");
        }
    }

    #[test]
    fn fast_path_answers_typical_records() {
        let tweet = r#"{"id":1000000000000000,"user_id":744140241,"created_at":1546300800000,"coordinates":[-118.198796,33.975845],"text":"goomanend \"q\" \u00e9 https://t.co/x #tag","lang":"en","retweet_count":0,"place":"Los Angeles","nested":{"a":[1,2,{"b":null}],"c":true}}"#;
        assert!(agree(
            tweet,
            &["user_id", "coordinates", "place", "nested.a"]
        ));
        for raw in [
            r#"{"user_id": 1, "other": 1e400}"#,
            r#"{"user_id": 1, "other": "\ud800"}"#,
            "{\"user_id\": 1, \"x\": \"a\u{1}b\"}",
            r#"{"user_id": 01}"#,
            r#"[1]"#,
        ] {
            assert!(!agree(raw, &["user_id"]), "{raw}");
        }
    }
}
