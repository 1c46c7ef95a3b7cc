//! Targeted extraction of indexed attributes from JSON records.
//!
//! A record is read in one pass that validates the whole document exactly
//! as a full parse into `serde_json::Value` would (same parser, same
//! number, string, UTF-8 and depth rules) but builds nothing except the
//! values at the wanted field paths. Building the full tree cost 1.1–1.3 µs
//! per tweet; this pass costs about 2,770 instructions per tweet (~400
//! bytes, ten members, one long text) with a wanted integer and a wanted
//! two-float array, measured with callgrind (NEXT paper §4's "no
//! significant overhead" needs index maintenance to stay this cheap). Most
//! of it is per-member scanning (key, separators, value dispatch, ~100
//! each); strings are scanned sixteen bytes at a time (SSE2 on x86_64,
//! about half an instruction a byte).
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
    /// The root's children: each top-level key and its node.
    top: Vec<(Box<[u8]>, usize)>,
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
    /// An array of exactly two numbers (a point: no allocation).
    Pair(f64, f64),
    /// A boolean or an object.
    Other,
}

/// An array's elements as numbers (`None` for a non-number), gathered
/// while the array is read: the first two inline, so that a point becomes
/// [`Leaf::Pair`] without an allocation.
#[derive(Default)]
struct NumsBuf {
    inline: [Option<f64>; 2],
    len: usize,
    /// Every element once there are more than two (then `inline` is unused).
    heap: Vec<Option<f64>>,
}

impl NumsBuf {
    fn push(&mut self, n: Option<f64>) {
        if self.heap.is_empty() {
            if let Some(slot) = self.inline.get_mut(self.len) {
                *slot = n;
                self.len += 1;
                return;
            }
            self.heap.extend_from_slice(&self.inline);
        }
        self.heap.push(n);
        self.len += 1;
    }

    fn into_leaf(self) -> Leaf {
        match (self.len, self.inline) {
            (2, [Some(x), Some(y)]) => Leaf::Pair(x, y),
            _ if !self.heap.is_empty() => Leaf::Nums(self.heap),
            _ => Leaf::Nums(self.inline.get(..self.len).unwrap_or_default().to_vec()),
        }
    }
}

/// One reading of a record for a [`Fields`] (see [`Fields::extract`]):
/// `Err` for a malformed document.
pub(crate) type Read = std::result::Result<Extracted, ()>;

/// The values one record holds at a [`Fields`]' paths.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    leaves: Leaves,
}

/// One leaf per slot: inline for up to [`INLINE_LEAVES`] slots (an index
/// or two on a table, the common case: no allocation per record).
#[derive(Debug, Clone)]
enum Leaves {
    Inline([Leaf; INLINE_LEAVES], usize),
    Heap(Vec<Leaf>),
}

/// Slots kept inline: a loader's key and two indexes' paths, or up to four
/// indexes of a table.
const INLINE_LEAVES: usize = 4;

impl Leaves {
    /// `n` absent leaves.
    fn new(n: usize) -> Leaves {
        if n <= INLINE_LEAVES {
            Leaves::Inline([const { Leaf::Absent }; INLINE_LEAVES], n)
        } else {
            Leaves::Heap(vec![Leaf::Absent; n])
        }
    }
}

impl std::ops::Deref for Leaves {
    type Target = [Leaf];

    fn deref(&self) -> &[Leaf] {
        match self {
            Leaves::Inline(a, n) => a.get(..*n).unwrap_or_default(),
            Leaves::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Leaves {
    fn deref_mut(&mut self) -> &mut [Leaf] {
        match self {
            Leaves::Inline(a, n) => a.get_mut(..*n).unwrap_or_default(),
            Leaves::Heap(v) => v,
        }
    }
}

impl Fields {
    /// The trie of `paths` (each non-empty; duplicates share a slot).
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a [String]>) -> Fields {
        let mut f = Fields {
            nodes: vec![Node::new(String::new())],
            slots: 0,
            top: Vec::new(),
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
        f.top = f
            .nodes
            .first()
            .map(|root| {
                root.children
                    .iter()
                    .filter_map(|&c| Some((f.nodes.get(c)?.seg.as_bytes().into(), c)))
                    .collect()
            })
            .unwrap_or_default();
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
        let mut leaves = Leaves::new(self.slots);
        if self.fast::<true>(raw, &mut leaves).is_some() {
            return Ok(Extracted { leaves });
        }
        // Not ASCII (or anything else the fast path leaves): UTF-8 checked
        // once here, then scanned again.
        if !raw.is_ascii() && std::str::from_utf8(raw).is_ok() {
            leaves.fill(Leaf::Absent);
            if self.fast::<false>(raw, &mut leaves).is_some() {
                return Ok(Extracted { leaves });
            }
        }
        self.slow(raw)
    }

    /// [`Fields::extract`] by the serde path alone.
    fn slow(&self, raw: &[u8]) -> std::result::Result<Extracted, ()> {
        let mut leaves = Leaves::new(self.slots);
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
        // The leaf as an array of exactly `N` finite numbers.
        fn finite<const N: usize>(l: &Leaf) -> Option<[f64; N]> {
            let mut out = [0.0; N];
            match l {
                Leaf::Pair(x, y) if N == 2 => {
                    for (o, x) in out.iter_mut().zip([*x, *y]) {
                        *o = x;
                    }
                }
                Leaf::Nums(v) if v.len() == N => {
                    for (o, x) in out.iter_mut().zip(v) {
                        *o = (*x)?;
                    }
                }
                _ => return None,
            }
            out.iter().all(|f| f.is_finite()).then_some(out)
        }
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
            KeyType::Point => match finite::<2>(leaf) {
                Some(p) => Ok(IndexValue::Point(p)),
                _ => Err(Skip::WrongType),
            },
            KeyType::Rect => match finite::<4>(leaf) {
                Some([x0, y0, x1, y1]) if x0 <= x1 && y0 <= y1 => {
                    Ok(IndexValue::Rect([x0, y0, x1, y1]))
                }
                _ => Err(Skip::WrongType),
            },
        }
    }
}

// ---- fast path ------------------------------------------------------------
//
// A byte scanner for the common case: an object document whose strings
// have no control characters and no surrogate escapes, whose top-level
// keys have no escapes, whose numbers cannot overflow an f64, nested at
// most `FAST_MAX_DEPTH` deep. It validates what it skips itself; it decodes
// a wanted top-level member itself when that is plain (an integer of at
// most 19 digits, a string without escapes, a literal, an array of numbers,
// an object with no wanted paths below) and hands the byte span of any
// other wanted value to the serde path above (the same `At` on the same
// bytes, so those values are the same by construction). Floats are always
// parsed by `serde_json`. It never decides that a document is malformed:
// at anything outside that case it gives up (`None`) and `extract` reads
// the document with the serde path, which decides.
// Invariant: `fast` returns `Some` only for documents `from_slice::<Value>`
// accepts (the `json_fields` fuzz target and the tests check it).
//
// UTF-8: outside strings the scanner accepts only ASCII bytes (structure,
// numbers, literals, whitespace), so a document is UTF-8 if its strings
// are. The first pass (`ASCII = true`) gives up at any byte >= 0x80 in a
// string, so an ASCII document (the common case) is never validated
// separately; a document that is not ASCII is checked with
// `str::from_utf8` and scanned again with `ASCII = false`.
//
// The scanner is written as functions of (bytes, position) returning the
// position after what they read, so that the position stays in a register.

/// Deepest nesting the fast path handles (`serde_json` rejects beyond 128).
const FAST_MAX_DEPTH: usize = 64;

/// Longest number token the fast path handles: with at most two exponent
/// digits, such a number is below 1e200 and parses to a finite f64.
const FAST_MAX_NUMBER: usize = 96;

/// Most digits of an integer decoded directly: below 10^19, it cannot
/// overflow a u64 (longer ones go to `serde_json`).
const FAST_MAX_INT_DIGITS: usize = 19;

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit set in the lowest byte of `x` (little-endian) that is `"`,
/// `\\`, a control character or, with `ASCII`, a byte >= 0x80; zero if
/// there is none. Bytes above the lowest such byte may be flagged too (a
/// borrow runs upward), so only the lowest is meaningful.
#[inline(always)]
fn special_mask<const ASCII: bool>(x: u64) -> u64 {
    // `x ^ 0x02` maps '"' to 0x20 and 0x00..=0x1f onto themselves, so one
    // "below 0x21" finds both; `x ^ '\\'` is zero at a backslash. A byte
    // below the lowest flagged one neither underflows nor has its high bit
    // set (it is ASCII, or masked out by `!x`), so no borrow reaches it.
    let a = (x ^ (ONES * 0x02)).wrapping_sub(ONES * 0x21)
        | (x ^ (ONES * u64::from(b'\\'))).wrapping_sub(ONES);
    if ASCII {
        (a | x) & HIGH
    } else {
        a & !x & HIGH
    }
}

/// The byte [`special_mask`] looks for.
fn is_special<const ASCII: bool>(c: u8) -> bool {
    c == b'"' || c == b'\\' || c < 0x20 || (ASCII && c >= 0x80)
}

/// The bits of the bytes of `c` that [`special_mask`] looks for, bit `k`
/// for byte `k` (exact: every such byte, no other).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
fn special_bits<const ASCII: bool>(c: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
        _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline (every x86_64 CPU has
    // it), so the intrinsics' target feature is always present; the
    // unaligned load reads exactly the 16 bytes `c` borrows.
    unsafe {
        let x = _mm_loadu_si128(c.as_ptr().cast());
        let quote = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8));
        let slash = _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8));
        let low = if ASCII {
            // Signed: below 0x20, or 0x80 and above (negative).
            _mm_cmplt_epi8(x, _mm_set1_epi8(0x20))
        } else {
            // Unsigned `x <= 0x1f`.
            _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1f)), x)
        };
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, slash), low)) as u32
    }
}

/// [`special_bits`] without SSE2 ([`special_bits_swar`]).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn special_bits<const ASCII: bool>(c: &[u8; 16]) -> u32 {
    special_bits_swar::<ASCII>(c)
}

/// [`special_bits`] on two `u64`s: the lowest set bit is exact, bits above
/// it may be set too. (Compiled everywhere so that x86_64 tests it.)
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
#[inline(always)]
fn special_bits_swar<const ASCII: bool>(c: &[u8; 16]) -> u32 {
    let x = u128::from_le_bytes(*c);
    let lo = special_mask::<ASCII>(x as u64);
    let hi = special_mask::<ASCII>((x >> 64) as u64);
    // One bit a byte: the high bit of each byte of the masks.
    let pack = |m: u64| ((m >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32;
    pack(lo) | (pack(hi) << 8)
}

/// Offset in `b` of the first byte at or after `i` that [`special_mask`]
/// looks for (`None` if there is none). The first sixteen bytes are looked
/// at inline (most keys and many values end there), the rest by
/// [`special_long`].
#[inline(always)]
fn special_from<const ASCII: bool>(b: &[u8], i: usize) -> Option<usize> {
    let Some(c) = b.get(i..).and_then(|r| r.first_chunk::<16>()) else {
        return special_long::<ASCII>(b, i);
    };
    let m = special_bits::<ASCII>(c);
    if m != 0 {
        return Some(i + m.trailing_zeros() as usize);
    }
    special_long::<ASCII>(b, i + 16)
}

/// [`special_from`], thirty-two bytes at a time (one branch a step).
#[inline(never)]
fn special_long<const ASCII: bool>(b: &[u8], i: usize) -> Option<usize> {
    let mut at = i;
    let mut pairs = b.get(i..)?.chunks_exact(32);
    for c in &mut pairs {
        let (lo, hi) = c.split_first_chunk::<16>()?;
        // The lowest set bit is exact in both halves (see `special_bits`).
        let m = special_bits::<ASCII>(lo) | special_bits::<ASCII>(hi.try_into().ok()?) << 16;
        if m != 0 {
            return Some(at + m.trailing_zeros() as usize);
        }
        at += 32;
    }
    let mut rest = pairs.remainder();
    if let Some((c, tail)) = rest.split_first_chunk::<16>() {
        let m = special_bits::<ASCII>(c);
        if m != 0 {
            return Some(at + m.trailing_zeros() as usize);
        }
        at += 16;
        rest = tail;
    }
    let mut j = 0;
    if let Some(c) = rest.first_chunk::<8>() {
        let m = special_mask::<ASCII>(u64::from_le_bytes(*c));
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        j = 8;
    }
    rest.get(j..)?
        .iter()
        .position(|&c| is_special::<ASCII>(c))
        .map(|p| at + j + p)
}

/// Offset in `b` of the first `"`, `\\` or control character (`None` if
/// there is none).
#[cfg(test)]
fn special_at(b: &[u8]) -> Option<usize> {
    special_from::<false>(b, 0)
}

/// Past whitespace at `i`. Compact JSON has none: one comparison finds
/// that (every whitespace byte is at most `b' '`).
#[inline(always)]
fn ws(b: &[u8], mut i: usize) -> usize {
    if b.get(i).is_some_and(|&c| c > b' ') {
        return i;
    }
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The string whose contents start at `i` (just past its opening quote):
/// the contents' end (its closing quote) and whether they hold no escape.
/// Inlined for the common case; [`string_hard`] does the rest.
#[inline(always)]
fn string<const ASCII: bool>(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let end = special_from::<ASCII>(b, i)?;
    if *b.get(end)? == b'"' {
        return Some((end, true));
    }
    string_hard::<ASCII>(b, end)
}

/// [`string`] from its first escape or other special byte at `i`.
#[inline(never)]
fn string_hard<const ASCII: bool>(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    loop {
        match *b.get(i)? {
            b'"' => return Some((i, false)),
            b'\\' => i = escape(b, i)?,
            // A control character (serde_json rejects it) or, with
            // `ASCII`, a non-ASCII byte (see above).
            _ => return None,
        }
        i = special_from::<ASCII>(b, i)?;
    }
}

/// Past the escape sequence at `i` (at its backslash).
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => {
            let mut v = 0u32;
            for &h in b.get(i + 2..i + 6)? {
                v = v * 16 + char::from(h).to_digit(16)?;
            }
            // Surrogates: left to serde_json's pairing rules.
            (!(0xD800..=0xDFFF).contains(&v)).then_some(i + 6)
        }
        _ => None,
    }
}

/// Past the run of ASCII digits at `i`, eight at a time.
#[inline(always)]
fn digits(b: &[u8], mut i: usize) -> usize {
    while let Some(c) = b.get(i..).and_then(|r| r.first_chunk::<8>()) {
        let x = u64::from_le_bytes(*c);
        // The high bit in the lowest byte outside b'0'..=b'9' (a byte
        // below 0x30 underflows, one above 0x39 reaches 0x80 when 0x46 is
        // added, one >= 0x80 has it); exact for the lowest such byte.
        let m = (x.wrapping_sub(ONES * 0x30) | x.wrapping_add(ONES * 0x46) | x) & HIGH;
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The number at `i`: its end and whether it is an integer (no fraction,
/// no exponent).
#[inline(always)]
fn number(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut i = start;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match *b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(b, i + 1),
        _ => return None,
    }
    let mut int = true;
    if b.get(i) == Some(&b'.') {
        int = false;
        let d = digits(b, i + 1);
        if d == i + 1 {
            return None;
        }
        i = d;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        int = false;
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let d = digits(b, i);
        if !(1..=2).contains(&(d - i)) {
            return None;
        }
        i = d;
    }
    (i - start <= FAST_MAX_NUMBER).then_some((i, int))
}

/// Past `word` at `i`.
#[inline(always)]
fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    let end = i.checked_add(word.len())?;
    (b.get(i..end)? == word).then_some(end)
}

/// Past the value at `i` (at depth `depth`), validated (scalars inline,
/// containers in [`container`]).
#[inline(always)]
fn skip<const ASCII: bool>(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string::<ASCII>(b, i + 1).map(|(end, _)| end + 1),
        b'-' | b'0'..=b'9' => number(b, i).map(|(end, _)| end),
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        b'n' => literal(b, i, b"null"),
        _ => container::<ASCII>(b, i, depth),
    }
}

/// After a member or element at `i`: `Some((true, j))` past a comma (and
/// whitespace: another follows at `j`), `Some((false, j))` past `close`,
/// `None` at anything else.
#[inline(always)]
fn more(b: &[u8], i: usize, close: u8) -> Option<(bool, usize)> {
    let i = ws(b, i);
    match *b.get(i)? {
        b',' => Some((true, ws(b, i + 1))),
        c if c == close => Some((false, i + 1)),
        _ => None,
    }
}

/// Past the object or array at `i` (at depth `depth`), validated.
#[inline(never)]
fn container<const ASCII: bool>(b: &[u8], i: usize, depth: usize) -> Option<usize> {
    if depth > FAST_MAX_DEPTH {
        return None;
    }
    match *b.get(i)? {
        b'{' => {
            let mut i = ws(b, i + 1);
            if b.get(i) == Some(&b'}') {
                return Some(i + 1);
            }
            loop {
                if *b.get(i)? != b'"' {
                    return None;
                }
                let (end, _) = string::<ASCII>(b, i + 1)?;
                i = ws(b, end + 1);
                if *b.get(i)? != b':' {
                    return None;
                }
                i = skip::<ASCII>(b, ws(b, i + 1), depth + 1)?;
                match more(b, i, b'}')? {
                    (true, j) => i = j,
                    (false, j) => return Some(j),
                }
            }
        }
        b'[' => {
            let mut i = ws(b, i + 1);
            if b.get(i) == Some(&b']') {
                return Some(i + 1);
            }
            loop {
                i = skip::<ASCII>(b, i, depth + 1)?;
                match more(b, i, b']')? {
                    (true, j) => i = j,
                    (false, j) => return Some(j),
                }
            }
        }
        _ => None,
    }
}

/// The leaf `serde_json` reads from the number token `tok` (checked by
/// [`number`]; `int` as it returned), if it is an integer of at most
/// [`FAST_MAX_INT_DIGITS`] digits; `None` to leave it to `serde_json`.
/// The rules are `serde_json`'s `parse_integer`/`parse_number`: a
/// non-negative integer is a u64; a negative one an i64 if its negation
/// fits, else an f64 (and `-0` is the f64 -0.0).
#[inline(always)]
fn int_leaf(tok: &[u8], int: bool) -> Option<Leaf> {
    if !int {
        return None;
    }
    let (neg, digits) = match tok.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, tok),
    };
    if digits.len() > FAST_MAX_INT_DIGITS {
        return None;
    }
    let mut v = 0u64;
    for &d in digits {
        v = v
            .wrapping_mul(10)
            .wrapping_add(u64::from(d.wrapping_sub(b'0')));
    }
    Some(if !neg {
        Leaf::UInt(v)
    } else {
        let n = (v as i64).wrapping_neg();
        if n >= 0 {
            Leaf::Float(-(v as f64))
        } else {
            Leaf::Int(n)
        }
    })
}

/// The leaf `serde_json` reads from the number token `tok` (checked by
/// [`number`]; `int` as it returned): [`int_leaf`], else, for a
/// non-integer, [`float_leaf`] or [`float_parsed`]; `None` to leave it to
/// `serde_json`.
#[inline(always)]
fn num_leaf(tok: &[u8], int: bool) -> Option<Leaf> {
    match int_leaf(tok, int) {
        Some(l) => Some(l),
        None if !int => float_leaf(tok).or_else(|| float_parsed(tok)),
        None => None,
    }
}

/// The `f64` leaf of the non-integer number token `tok` (checked by
/// [`number`], so at most [`FAST_MAX_NUMBER`] bytes with at most two
/// exponent digits: finite) by the standard library's parser. Both it and
/// `serde_json` with `float_roundtrip` round correctly, so they agree on
/// every token (zeros and their sign included; a unit test compares them
/// on generated tokens). Doubles printed in shortest form have 16–17
/// digits, beyond [`float_leaf`]'s fast path; `serde_json::from_slice`
/// spent about 160 instructions more on each of them (callgrind, 100 k
/// such tokens).
fn float_parsed(tok: &[u8]) -> Option<Leaf> {
    let v: f64 = std::str::from_utf8(tok).ok()?.parse().ok()?;
    v.is_finite().then_some(Leaf::Float(v))
}

/// The `f64` leaf of the non-integer number token `tok` (checked by
/// [`number`]) when Clinger's fast path applies: at most 19 digits
/// forming a mantissa `m` with `0 < m <= 2^53` and a decimal exponent `e`
/// with `|e| <= 22`. Then `m` and `10^|e|` are exact `f64`s and one
/// multiplication or division rounds correctly, as `serde_json` with
/// `float_roundtrip` (this crate's feature) does for every number: the two
/// agree. `None` otherwise (zeros included: their sign is left to
/// `serde_json`).
#[inline(always)]
fn float_leaf(tok: &[u8]) -> Option<Leaf> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (neg, rest) = match tok.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, tok),
    };
    // The digits from `i` on, accumulated into `m` (wrapping: more than
    // 19 digits in all are refused below): their end.
    let run = |mut i: usize, m: &mut u64| {
        while let Some(d) = rest
            .get(i)
            .map(|c| c.wrapping_sub(b'0'))
            .filter(|d| *d < 10)
        {
            *m = m.wrapping_mul(10).wrapping_add(u64::from(d));
            i += 1;
        }
        i
    };
    let mut m: u64 = 0;
    let int_end = run(0, &mut m);
    let mut end = int_end;
    let mut e10: i32 = 0;
    if rest.get(end) == Some(&b'.') {
        end = run(end + 1, &mut m);
        e10 = -i32::try_from(end - int_end - 1).ok()?;
    }
    let digits = end - usize::from(end > int_end);
    if digits > 19 {
        return None;
    }
    match rest.get(end..)? {
        [] => {}
        [b'e' | b'E', exp_part @ ..] => {
            let (eneg, ed) = match exp_part.split_first() {
                Some((b'-', d)) => (true, d),
                Some((b'+', d)) => (false, d),
                _ => (false, exp_part),
            };
            if ed.is_empty() || ed.len() > 2 {
                return None;
            }
            let mut e: i32 = 0;
            for &c in ed {
                if !c.is_ascii_digit() {
                    return None;
                }
                e = e * 10 + i32::from(c - b'0');
            }
            e10 += if eneg { -e } else { e };
        }
        _ => return None,
    }
    if m == 0 || m > 1 << 53 {
        return None;
    }
    let p = POW10.get(e10.unsigned_abs() as usize)?;
    let v = if e10 >= 0 { m as f64 * p } else { m as f64 / p };
    Some(Leaf::Float(if neg { -v } else { v }))
}

/// A leaf as an array element ends a path: its number, if it is one.
fn leaf_num(leaf: &Leaf) -> Option<f64> {
    match leaf {
        Leaf::Int(i) => Some(*i as f64),
        Leaf::UInt(u) => Some(*u as f64),
        Leaf::Float(f) => Some(*f),
        _ => None,
    }
}

impl Fields {
    /// The fast path of [`Fields::extract`] (see above): `None` to fall
    /// back to the serde path (or, with `ASCII`, to a second pass), with
    /// `leaves` in any state.
    fn fast<const ASCII: bool>(&self, b: &[u8], leaves: &mut [Leaf]) -> Option<()> {
        let mut i = ws(b, 0);
        if *b.get(i)? != b'{' {
            return None;
        }
        i = ws(b, i + 1);
        if b.get(i) == Some(&b'}') {
            i += 1;
        } else {
            loop {
                if *b.get(i)? != b'"' {
                    return None;
                }
                // A key with an escape (or anything else special) is left
                // to the serde path; unescaped, it is its raw bytes.
                let end = special_from::<ASCII>(b, i + 1)?;
                if *b.get(end)? != b'"' {
                    return None;
                }
                let key = b.get(i + 1..end)?;
                i = ws(b, end + 1);
                if *b.get(i)? != b':' {
                    return None;
                }
                i = ws(b, i + 1);
                i = match self.top_child(key) {
                    Some(c) => self.wanted::<ASCII>(b, i, c, leaves)?,
                    None => skip::<ASCII>(b, i, 1)?,
                };
                match more(b, i, b'}')? {
                    (true, j) => i = j,
                    (false, j) => {
                        i = j;
                        break;
                    }
                }
            }
        }
        (ws(b, i) == b.len()).then_some(())
    }

    /// The trie node of the top-level key `key`, if it is wanted.
    #[inline(always)]
    fn top_child(&self, key: &[u8]) -> Option<usize> {
        for (k, c) in &self.top {
            if k.len() == key.len() && k.first() == key.first() && **k == *key {
                return Some(*c);
            }
        }
        None
    }

    /// The member value at `i` (depth 1) at trie node `c`: decoded here
    /// when plain, else by the serde path on its bytes. Past it.
    #[inline(never)]
    fn wanted<const ASCII: bool>(
        &self,
        b: &[u8],
        i: usize,
        c: usize,
        leaves: &mut [Leaf],
    ) -> Option<usize> {
        const DEPTH: usize = 1;
        let node = self.nodes.get(c)?;
        // A duplicate key replaces everything the earlier one held (a
        // leaf without children is set below on every way to `Some`).
        if !node.children.is_empty() {
            self.clear(c, leaves);
        }
        let (next, leaf) = match *b.get(i)? {
            b'"' => {
                let (end, plain) = string::<ASCII>(b, i + 1)?;
                if node.leaf.is_none() {
                    return Some(end + 1);
                }
                if !plain {
                    return self.serde_value(b, i, end + 1, c, leaves);
                }
                let text = std::str::from_utf8(b.get(i + 1..end)?).ok()?;
                (end + 1, Leaf::Str(text.to_owned()))
            }
            b'-' | b'0'..=b'9' => {
                let (end, int) = number(b, i)?;
                match num_leaf(b.get(i..end)?, int) {
                    Some(l) => (end, l),
                    None => return self.serde_value(b, i, end, c, leaves),
                }
            }
            b't' => (literal(b, i, b"true")?, Leaf::Other),
            b'f' => (literal(b, i, b"false")?, Leaf::Other),
            b'n' => (literal(b, i, b"null")?, Leaf::Null),
            // No paths below: an array is its numbers, an object `Other`.
            b'[' if node.children.is_empty() => {
                let (end, nums) = self.nums::<ASCII>(b, i, DEPTH)?;
                (end, nums)
            }
            b'{' if node.children.is_empty() => (container::<ASCII>(b, i, DEPTH)?, Leaf::Other),
            _ => {
                let end = container::<ASCII>(b, i, DEPTH)?;
                return self.serde_value(b, i, end, c, leaves);
            }
        };
        if let Some(l) = node.leaf.and_then(|l| leaves.get_mut(l)) {
            *l = leaf;
        }
        Some(next)
    }

    /// The array at `i` (at depth `depth`) as a leaf: each element's
    /// number, `None` for a non-number (validated and skipped). Its end
    /// too.
    fn nums<const ASCII: bool>(&self, b: &[u8], i: usize, depth: usize) -> Option<(usize, Leaf)> {
        if depth > FAST_MAX_DEPTH || b.get(i) != Some(&b'[') {
            return None;
        }
        let mut i = ws(b, i + 1);
        let mut nums = NumsBuf::default();
        if b.get(i) == Some(&b']') {
            return Some((i + 1, nums.into_leaf()));
        }
        loop {
            let n = match *b.get(i)? {
                b'-' | b'0'..=b'9' => {
                    let (end, int) = number(b, i)?;
                    let tok = b.get(i..end)?;
                    i = end;
                    match num_leaf(tok, int) {
                        Some(l) => leaf_num(&l),
                        None => {
                            let mut de = serde_json::Deserializer::from_slice(tok);
                            let n = Both {
                                fields: self,
                                node: None,
                                leaves: &mut [],
                            }
                            .deserialize(&mut de)
                            .ok()?;
                            de.end().ok()?;
                            n
                        }
                    }
                }
                _ => {
                    i = skip::<ASCII>(b, i, depth + 1)?;
                    None
                }
            };
            nums.push(n);
            match more(b, i, b']')? {
                (true, j) => i = j,
                (false, j) => return Some((j, nums.into_leaf())),
            }
        }
    }

    /// The value `b[start..end]` at trie node `c`, read by the serde path.
    /// Past it.
    fn serde_value(
        &self,
        b: &[u8],
        start: usize,
        end: usize,
        c: usize,
        leaves: &mut [Leaf],
    ) -> Option<usize> {
        let mut de = serde_json::Deserializer::from_slice(b.get(start..end)?);
        At {
            fields: self,
            node: c,
            leaves,
        }
        .deserialize(&mut de)
        .ok()?;
        de.end().ok()?;
        Some(end)
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
        let mut nums = NumsBuf::default();
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
        self.set(nums.into_leaf());
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
        let n = leaf_num(&leaf);
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
        agree_bytes(raw.as_bytes(), paths)
    }

    /// [`agree`] on any bytes.
    fn agree_bytes(raw: &[u8], paths: &[&str]) -> bool {
        let paths: Vec<Vec<String>> = paths.iter().map(|p| parse_path(p).unwrap()).collect();
        let fields = Fields::new(paths.iter().map(|p| p.as_slice()));
        let full = serde_json::from_slice::<Value>(raw);
        let mut fast = vec![Leaf::Absent; fields.slots];
        // As `extract` does: the ASCII pass, then the UTF-8 one.
        let hit = fields.fast::<true>(raw, &mut fast).is_some()
            || (std::str::from_utf8(raw).is_ok() && {
                fast.fill(Leaf::Absent);
                fields.fast::<false>(raw, &mut fast).is_some()
            });
        if hit {
            assert!(full.is_ok(), "the fast path accepted {raw:?}");
            assert_eq!(
                fast,
                *fields.slow(raw).unwrap().leaves,
                "fast and serde paths differ on {raw:?}"
            );
        }
        let got = fields.extract(raw);
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
    fn floats_read_directly_are_serde_jsons() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut direct = 0;
        for i in 0..100_000 {
            // Tokens of JSON's grammar within `number`'s limits: up to 40
            // digits around the point, exponents of up to 2 digits; those
            // inside the fast path's limits and those beyond.
            let mut t = String::new();
            if next() % 2 == 0 {
                t.push('-');
            }
            let int_digits = 1 + next() % 20;
            for d in 0..int_digits {
                let c = (next() % 10) as u8;
                t.push(char::from(
                    b'0' + if d == 0 && int_digits > 1 {
                        c.max(1)
                    } else {
                        c
                    },
                ));
            }
            if i % 3 != 0 {
                t.push('.');
                for _ in 0..1 + next() % 20 {
                    t.push(char::from(b'0' + (next() % 10) as u8));
                }
            }
            if i % 3 != 1 {
                t.push(['e', 'E'][(next() % 2) as usize]);
                t.push_str(["", "+", "-"][(next() % 3) as usize]);
                t.push_str(&(next() % 100).to_string());
            }
            let Some((end, int)) = number(t.as_bytes(), 0) else {
                panic!("{t} is a number");
            };
            assert_eq!(end, t.len(), "{t}");
            let want: f64 = serde_json::from_str(&t).unwrap();
            match num_leaf(t.as_bytes(), int) {
                Some(Leaf::Float(v)) => {
                    direct += 1;
                    assert_eq!(v.to_bits(), want.to_bits(), "{t}");
                }
                Some(l) => assert_eq!(leaf_num(&l).map(f64::to_bits), Some(want.to_bits()), "{t}"),
                // Left to `serde_json`.
                None => {}
            }
            assert!(agree(&format!(r#"{{"f":{t},"a":[{t},1.5]}}"#), &["f", "a"]));
        }
        assert!(direct > 10_000, "{direct} read directly");
        for (t, want) in [
            ("-118.198796", -118.198796),
            ("33.975845", 33.975845),
            ("2.5e-3", 0.0025),
        ] {
            assert_eq!(float_leaf(t.as_bytes()), Some(Leaf::Float(want)), "{t}");
        }
        for t in ["0.0", "-0.0", "0e5", "-0E-2", "0.000"] {
            assert!(float_leaf(t.as_bytes()).is_none(), "{t}");
            let want: f64 = serde_json::from_str(t).unwrap();
            assert_eq!(
                num_leaf(t.as_bytes(), false)
                    .and_then(|l| leaf_num(&l))
                    .map(f64::to_bits),
                Some(want.to_bits()),
                "{t}"
            );
            agree(&format!(r#"{{"f":{t},"a":[{t}]}}"#), &["f", "a"]);
        }
        // Shortest forms of random doubles (16–17 digits: beyond
        // `float_leaf`, read by `float_parsed`), as generated tweets hold.
        let mut parsed = 0;
        for _ in 0..100_000 {
            let x = f64::from_bits(next());
            let t = format!("{x:?}");
            let Some((end, false)) = number(t.as_bytes(), 0) else {
                continue;
            };
            assert_eq!(end, t.len(), "{t}");
            let want: f64 = serde_json::from_str(&t).unwrap();
            parsed += usize::from(float_leaf(t.as_bytes()).is_none());
            let got = num_leaf(t.as_bytes(), false).and_then(|l| leaf_num(&l));
            assert_eq!(got.map(f64::to_bits), Some(want.to_bits()), "{t}");
        }
        assert!(parsed > 10_000, "{parsed} beyond the fast path");
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
        let mut next = below(0x9e37_79b9_7f4a_7c15);
        // As JSON: escaped and non-ASCII keys too (the first spells
        // `user_id`, which the fast path leaves to the serde path).
        const KEYS: [&str; 9] = [
            r#""a""#,
            r#""b""#,
            r#""0""#,
            r#""1""#,
            r#""user_id""#,
            r#""c""#,
            r#""us\u0065r_id""#,
            r#""é""#,
            r#""a\"b""#,
        ];
        const NUMS: [&str; 20] = [
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
            "9223372036854775807",
            "-9223372036854775808",
            "18446744073709551615",
            "-18446744073709551615",
            "1234567890123456789",
            "-1234567890123456789",
            "10000000000000000000",
            "-0.0",
        ];
        const STRS: [&str; 10] = [
            r#""x""#,
            r#""\u00e9""#,
            r#""\ud800""#,
            r#""\n\"""#,
            r#""""#,
            r#""é""#,
            r#""日本語のテキスト and some ASCII after it""#,
            r#""😀 emoji \" then escape""#,
            r#""a long plain string of more than sixteen bytes""#,
            r#""tab\there""#,
        ];
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
                        out.push_str(KEYS[next(KEYS.len() as u64) as usize]);
                        out.push(':');
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
        let paths = ["a", "a.b", "a.0", "b.a.c", "user_id", "0", "c.1", "é", "1"];
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
                // A stray non-ASCII or control byte (invalid UTF-8 inside
                // or outside a string, or a valid lead byte's start).
                2 if !raw.is_empty() => {
                    let i = next(raw.len() as u64) as usize;
                    raw.insert(i, [0x80, 0xc3, 0xe6, 0xff, 0x01, 0x1f][next(6) as usize]);
                }
                _ => {}
            }
            let Ok(text) = String::from_utf8(raw.clone()) else {
                agree_bytes(&raw, &paths);
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

    /// A deterministic generator (xorshift64 from `seed`) of numbers
    /// below its argument.
    fn below(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |n| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        }
    }

    /// Strings of up to ~150 bytes whose escapes, non-ASCII characters,
    /// raw control bytes and invalid UTF-8 fall on every side of the
    /// scanner's 16- and 32-byte steps, wanted and unwanted, in keys and
    /// values: the same answer as the full parse.
    #[test]
    fn long_strings_agree_with_full_parse() {
        let mut next = below(0x2545_f491_4f6c_dd1d);
        const PIECES: [&[u8]; 12] = [
            b"plain ascii ",
            b"x",
            b"\\\"",
            b"\\n",
            b"\\u00e9",
            b"\\ud83d\\ude00",
            "é".as_bytes(),
            "日本".as_bytes(),
            b"\x7f",
            b"\x1f",
            b"\xff",
            b"0123456789abcdef",
        ];
        fn string(next: &mut impl FnMut(u64) -> u64, out: &mut Vec<u8>) {
            out.push(b'"');
            let target = next(150) as usize;
            let start = out.len();
            while out.len() - start < target {
                // Mostly plain: a special piece one time in eight.
                let p = if next(8) == 0 {
                    PIECES[2 + next(PIECES.len() as u64 - 3) as usize]
                } else {
                    PIECES[[0, 1, 11][next(3) as usize]]
                };
                out.extend_from_slice(p);
            }
            out.push(b'"');
        }
        let (mut fast, mut valid) = (0, 0);
        for _ in 0..3_000 {
            let mut doc = b"{".to_vec();
            for (i, key) in [b"s".as_slice(), b"t", b"u"].iter().enumerate() {
                if i > 0 {
                    doc.push(b',');
                }
                if next(4) == 0 {
                    // A generated key instead of the member's own.
                    string(&mut next, &mut doc);
                } else {
                    doc.push(b'"');
                    doc.extend_from_slice(key);
                    doc.push(b'"');
                }
                doc.push(b':');
                string(&mut next, &mut doc);
            }
            doc.extend_from_slice(b",\"n\":1}");
            valid += usize::from(serde_json::from_slice::<Value>(&doc).is_ok());
            fast += usize::from(agree_bytes(&doc, &["s", "u", "n"]));
        }
        // Both kinds occur (1,206 valid, 693 by the fast path when
        // written), and the fast path answers for many.
        assert!(valid > 300 && valid < 2_900, "{valid} valid of 3,000");
        assert!(fast > 100, "fast path answered {fast}");
    }

    #[test]
    fn special_at_finds_the_first_special_byte() {
        let mut x: u64 = 88172645463325252;
        // (Fewer under Miri, which checks the SSE2 scan's loads.)
        for _ in 0..if cfg!(miri) { 200 } else { 20_000 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 72) as usize;
            let b: Vec<u8> = (0..len)
                .map(|i| {
                    let r = x.rotate_left(i as u32 * 7);
                    // Mostly plain bytes, sometimes special or high ones
                    // or any byte (the boundaries 0x1f/0x20, 0x7f/0x80).
                    match r % 24 {
                        0 => b'"',
                        1 => b'\\',
                        2 => (r >> 8) as u8 % 0x20,
                        3 => 0x80 | (r >> 8) as u8,
                        4 => (r >> 8) as u8,
                        5 => [0x1f, 0x20, 0x7f, 0x80, 0xff][(r >> 8) as usize % 5],
                        _ => b'a' + (r >> 8) as u8 % 26,
                    }
                })
                .collect();
            let naive = b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
            assert_eq!(special_at(&b), naive, "{b:?}");
            // With non-ASCII bytes special too, from every start.
            for i in 0..=b.len() {
                let naive = b
                    .get(i..)
                    .and_then(|r| r.iter().position(|&c| is_special::<true>(c)))
                    .map(|p| i + p);
                assert_eq!(special_from::<true>(&b, i), naive, "{b:?} from {i}");
            }
            // The portable block scan finds the same first byte.
            if let Some(c) = b.first_chunk::<16>() {
                let low = |m: u32| (m != 0).then(|| m.trailing_zeros());
                assert_eq!(
                    low(special_bits_swar::<true>(c)),
                    low(special_bits::<true>(c)),
                    "{c:?}"
                );
                assert_eq!(
                    low(special_bits_swar::<false>(c)),
                    low(special_bits::<false>(c)),
                    "{c:?}"
                );
            }
            // The digit run from the start (the bytes, mapped onto digits
            // and others).
            let d: Vec<u8> = b
                .iter()
                .map(|&c| if c % 3 == 0 { c } else { b'0' + c % 10 })
                .collect();
            let naive = d
                .iter()
                .position(|c| !c.is_ascii_digit())
                .unwrap_or(d.len());
            assert_eq!(digits(&d, 0), naive, "{d:?}");
        }
    }

    /// Integers decoded by the fast path itself: the u64/i64/f64 choice
    /// and the boundaries around it agree with serde_json (leading zeros
    /// and overlong ones are left to it).
    #[test]
    fn direct_integer_decoding_agrees_at_the_boundaries() {
        let paths = ["n", "p"];
        for (n, fast) in [
            ("0", true),
            ("-0", true),
            ("7", true),
            ("-1", true),
            ("9223372036854775807", true),
            ("9223372036854775808", true),
            ("-9223372036854775808", true),
            ("-9223372036854775809", true),
            ("1234567890123456789", true),
            ("9999999999999999999", true),
            ("-9999999999999999999", true),
            // 20 digits: left to serde_json (u64::MAX, u64::MAX + 1).
            ("18446744073709551615", true),
            ("18446744073709551616", true),
            ("-18446744073709551616", true),
            ("00", false),
            ("01", false),
            ("-01", false),
            ("-", false),
            ("1.", false),
            ("1e", false),
            ("1.5e3", true),
            ("-0.0", true),
        ] {
            let raw = format!(r#"{{"n": {n}, "p": [{n}, {n}], "x": {n}}}"#);
            assert_eq!(agree(&raw, &paths), fast, "{raw}");
        }
        let fields = Fields::new([parse_path("n").unwrap().as_slice()]);
        let leaf = |raw: &str| fields.extract(raw.as_bytes()).unwrap().leaves[0].clone();
        assert_eq!(leaf(r#"{"n":-0}"#), Leaf::Float(-0.0));
        assert!(matches!(leaf(r#"{"n":-0}"#), Leaf::Float(f) if f.is_sign_negative()));
        assert_eq!(leaf(r#"{"n":0}"#), Leaf::UInt(0));
        assert_eq!(leaf(r#"{"n":-9223372036854775808}"#), Leaf::Int(i64::MIN));
        assert_eq!(
            leaf(r#"{"n":9223372036854775807}"#),
            Leaf::UInt(i64::MAX as u64)
        );
        assert_eq!(leaf(r#"{"n":18446744073709551615}"#), Leaf::UInt(u64::MAX));
        assert_eq!(
            leaf(r#"{"n":18446744073709551616}"#),
            Leaf::Float(18446744073709551616.0)
        );
        assert_eq!(
            leaf(r#"{"n":-9223372036854775809}"#),
            Leaf::Float(-9223372036854775809.0)
        );
    }

    /// Non-ASCII text: UTF-8 is checked only when a string holds a
    /// non-ASCII byte (then the document is scanned again); invalid UTF-8
    /// inside or outside a string is malformed, as in the full parse.
    #[test]
    fn utf8_inside_and_outside_strings() {
        let paths = ["name", "é", "user_id"];
        for raw in [
            r#"{"name": "café", "user_id": 1}"#,
            r#"{"é": "日本語のテキスト, then more than sixteen bytes", "user_id": 2}"#,
            r#"{"user_id": 3, "text": "😀😀😀 emoji and \" escape", "name": "x"}"#,
            r#"{"name": "plain", "user_id": 4, "x": "ünïcödé"}"#,
        ] {
            assert!(agree(raw, &paths), "{raw}");
        }
        let cases: [&[u8]; 9] = [
            b"{\"name\": \"ab\xffcd\", \"user_id\": 1}",
            b"{\"name\": \"ab\xc3\", \"user_id\": 1}",
            b"{\"name\": \"\xed\xa0\x80\", \"user_id\": 1}",
            b"{\"name\": \"\xc0\xaf\", \"user_id\": 1}",
            b"{\"na\xffme\": 1, \"user_id\": 1}",
            b"{\"name\": 1, \xc3\xa9 \"user_id\": 1}",
            b"{\"name\": 1 \xff}",
            b"{\"name\": \"\xc3\xa9\"}\xff",
            b"{\"name\": \"\xc3\xa9\", \"x\": \"\xe6\x97\"}",
        ];
        for raw in cases {
            assert!(serde_json::from_slice::<Value>(raw).is_err(), "{raw:?}");
            assert!(!agree_bytes(raw, &paths), "{raw:?}");
        }
    }

    /// Escaped keys are left to the serde path (which matches them
    /// decoded); duplicate wanted keys: the last wins, in either path.
    #[test]
    fn escaped_and_duplicate_keys() {
        let paths = ["user_id", "coordinates", "a.b"];
        for raw in [
            r#"{"us\u0065r_id": 5}"#,
            r#"{"user_id": 1, "us\u0065r_id": 5}"#,
            r#"{"x\"y": 1, "user_id": 2}"#,
        ] {
            assert!(!agree(raw, &paths), "{raw}");
        }
        for raw in [
            r#"{"user_id": 1, "user_id": 2}"#,
            r#"{"user_id": 1, "user_id": "two"}"#,
            r#"{"user_id": "one", "user_id": null}"#,
            r#"{"coordinates": [1, 2], "coordinates": [3.5]}"#,
            r#"{"coordinates": [1, 2], "coordinates": {"0": 1}}"#,
            r#"{"a": {"b": 1}, "a": 2}"#,
            r#"{"a": {"b": 1}, "a": {"c": 2}}"#,
            r#"{"a": 2, "a": {"b": [1, 2]}}"#,
        ] {
            assert!(agree(raw, &paths), "{raw}");
        }
        let fields = Fields::new([parse_path("user_id").unwrap().as_slice()]);
        let got = fields.extract(br#"{"user_id": 1, "user_id": 2}"#).unwrap();
        assert_eq!(got.value(0, KeyType::I64), Ok(IndexValue::I64(2)));
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

    /// `n` chirp-like tweets (the fields and shapes of the LevelDB++
    /// traces: ten members, a two-float point, a ~250-byte text),
    /// deterministic.
    fn tweets(n: usize) -> Vec<String> {
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        const WORDS: [&str; 8] = [
            "dase", "ploothe", "shar", "histu", "gojind", "yot", "nenoomer", "brout",
        ];
        (0..n)
            .map(|i| {
                let text: Vec<&str> = (0..40).map(|_| WORDS[(next() % 8) as usize]).collect();
                format!(
                    r#"{{"Coordinates":[{}.{:06},{}.{:06}],"CreationTime":{},"FavoritesNum":{},"ID":{},"Lang":"en","Place":"Phnom Penh","RetweetsNum":{},"Source":"Twitter for Android","Text":"{}","UserID":{}}}"#,
                    next() % 360,
                    next() % 1_000_000,
                    next() % 90,
                    next() % 1_000_000,
                    1_546_300_800_000u64 + i as u64,
                    next() % 10,
                    1_000_000_000_000_000u64 + i as u64,
                    next() % 10,
                    text.join(" "),
                    next() % 3_000_000_000,
                )
            })
            .collect()
    }

    #[test]
    fn fast_path_answers_generated_tweets() {
        for t in tweets(200) {
            assert!(
                agree(&t, &["UserID", "Coordinates", "Place", "Text"]),
                "{t}"
            );
        }
    }

    /// A workload for measuring `Fields::extract` under callgrind
    /// (instruction counts, not time), ignored by default since it only
    /// measures. Extracts the paths in `STRATA_EXTRACT_PATHS`
    /// (comma-separated; default `UserID`) from 18,000 generated tweets, or
    /// from the JSON records of the chirp trace `STRATA_CHIRP` if set (the
    /// third tab-separated column of its `w` lines),
    /// `STRATA_EXTRACT_ROUNDS` times (default 5). Run with
    /// `valgrind --tool=callgrind <test binary> --ignored extract_workload`
    /// and divide `Fields::extract`'s inclusive count by its calls.
    #[test]
    #[ignore]
    fn extract_workload() {
        let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        let owned: Vec<Vec<u8>> = match std::env::var("STRATA_CHIRP") {
            Ok(path) => std::fs::read(path)
                .unwrap()
                .split(|&c| c == b'\n')
                .filter_map(|l| {
                    let mut cols = l.splitn(3, |&c| c == b'\t');
                    let (_, w, rec) = (cols.next()?, cols.next()?, cols.next()?);
                    (w == b"w").then(|| rec.to_vec())
                })
                .collect(),
            Err(_) => tweets(18_000).into_iter().map(String::into_bytes).collect(),
        };
        let records: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let paths: Vec<Vec<String>> = env("STRATA_EXTRACT_PATHS", "UserID")
            .split(',')
            .map(|p| parse_path(p).unwrap())
            .collect();
        let fields = Fields::new(paths.iter().map(|p| p.as_slice()));
        let rounds: usize = env("STRATA_EXTRACT_ROUNDS", "5").parse().unwrap();
        // Called through a pointer so that it is not inlined here.
        let extract: fn(&Fields, &[u8]) -> Read = std::hint::black_box(Fields::extract);
        let mut found = 0usize;
        for _ in 0..rounds {
            for r in &records {
                let got = extract(&fields, r).unwrap();
                found += usize::from(got.value(0, KeyType::I64).is_ok());
            }
        }
        assert_eq!(found, records.len() * rounds);
        eprintln!("{} records x {rounds}", records.len());
    }
}
