//! The sketch of a table's spatial slices: every entry of every global
//! entry (slice) quantized to a 256 × 256 grid over its slice's envelope,
//! kept in RAM beside the envelopes (block `next.<id>.sketch`,
//! `docs/format/next.md`).
//!
//! Slices follow the Hilbert curve and hold at most `slice` entries; one
//! that crosses a jump of the curve, or follows a road, has a bounding box
//! that is mostly empty, so a small window meets many envelopes whose
//! slices hold none of its points (NEXT §3.2 reads one secondary block per
//! met slice). A window meets a slice's sketch only if one of the slice's
//! quantized entries meets the window's quantized box; every other slice
//! is skipped without reading its secondary block.
//!
//! Exactness: the quantization ([`grid_col`]) never decreases as the
//! coordinate grows, so an entry inside (or intersecting) a window has
//! quantized coordinates between (or overlapping) those of the window's
//! corners clipped to the envelope. A slice holding a match is never
//! skipped.

use strata_lsm::coding::{get_varint64, put_varint64};
use strata_lsm::error::{Error, Result};

/// One spatial slice as the directory describes it: its envelope and its
/// number of entries (`end − start`); `None` for a global entry that is
/// not spatial.
pub type SliceShape = Option<([f64; 4], u32)>;

/// Version byte of the sketch block.
const SKETCH_VERSION: u8 = 1;
/// Parts per axis of a slice's grid.
const GRID: u32 = 256;

/// The quantized entries of each spatial slice of one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Sketch {
    /// Bytes per entry: 2 when every entry is a point (column, row), else 4
    /// (column and row of the lower corner, then of the upper corner).
    width: usize,
    /// Start in `bytes` of each global entry's entries, then the end.
    offsets: Vec<u32>,
    bytes: Vec<u8>,
}

/// The column (or row) of coordinate `v` in the grid of [`GRID`] equal
/// parts of `[lo, hi]`, clamped to the grid: non-decreasing in `v` (each
/// floating-point step is), so a value between two others lies in a part
/// between theirs; a degenerate or NaN span is one part.
fn grid_col(lo: f64, hi: f64, v: f64) -> u8 {
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 {
        return 0;
    }
    // No `floor`: for x in (0, GRID - 1), `x as u8` truncates, which is
    // the floor of a positive number (the libm call was 2% of a small
    // window's top-10 query); NaN and x <= 0 take part 0, as before.
    let x = (v - lo) / span * f64::from(GRID);
    if x >= f64::from(GRID - 1) {
        (GRID - 1) as u8
    } else if x > 0.0 {
        x as u8
    } else {
        0
    }
}

/// `m` (inside envelope `r`) on the grid over `r`: lower column and row,
/// upper column and row.
fn quantize(r: &[f64; 4], m: &[f64; 4]) -> [u8; 4] {
    [
        grid_col(r[0], r[2], m[0]),
        grid_col(r[1], r[3], m[1]),
        grid_col(r[0], r[2], m[2]),
        grid_col(r[1], r[3], m[3]),
    ]
}

impl Sketch {
    /// The sketch of `slices` (the global entries of a spatial index, in
    /// directory order) whose members' bounding boxes are `mbrs`, slice
    /// after slice. `None` when it cannot be exact: a slice that is not
    /// spatial, a NaN coordinate, or a count that does not add up.
    pub fn build(slices: &[SliceShape], mbrs: &[[f64; 4]]) -> Option<Sketch> {
        let total: usize = slices
            .iter()
            .map(|e| e.map_or(0, |(_, n)| n as usize))
            .sum();
        if total != mbrs.len() || mbrs.iter().flatten().any(|c| c.is_nan()) {
            return None;
        }
        let points = mbrs.iter().all(|m| m[0] == m[2] && m[1] == m[3]);
        let width = if points { 2 } else { 4 };
        let mut offsets = Vec::with_capacity(slices.len() + 1);
        let mut bytes = Vec::with_capacity(total * width);
        let mut members = mbrs.iter();
        for e in slices {
            offsets.push(u32::try_from(bytes.len()).ok()?);
            let (r, n) = (*e)?;
            for m in members.by_ref().take(n as usize) {
                let q = quantize(&r, m);
                bytes.extend_from_slice(q.get(..width)?);
            }
        }
        offsets.push(u32::try_from(bytes.len()).ok()?);
        Some(Sketch {
            width,
            offsets,
            bytes,
        })
    }

    /// False only if no entry of global entry `i` (envelope `r`) can meet
    /// window `w` (see the module documentation); true when unsure (a NaN
    /// corner, an entry out of range).
    #[inline]
    pub fn may_meet(&self, i: usize, r: &[f64; 4], w: &[f64; 4]) -> bool {
        if w.iter().any(|c| c.is_nan()) {
            return true;
        }
        let clipped = [
            w[0].max(r[0]),
            w[1].max(r[1]),
            w[2].min(r[2]),
            w[3].min(r[3]),
        ];
        if clipped[0] > clipped[2] || clipped[1] > clipped[3] {
            return false;
        }
        let q = quantize(r, &clipped);
        let (Some(&a), Some(&b)) = (self.offsets.get(i), self.offsets.get(i + 1)) else {
            return true;
        };
        let Some(s) = self.bytes.get(a as usize..b as usize) else {
            return true;
        };
        // Every entry tested, the tests combined without branches (`&`,
        // `|`): most slices a window's envelope meets hold none of its
        // points, so an early exit saves little and its data-dependent
        // branches mispredict.
        if self.width == 2 {
            s.chunks_exact(2).fold(false, |hit, p| match p {
                [x, y] => hit | ((q[0] <= *x) & (*x <= q[2]) & (q[1] <= *y) & (*y <= q[3])),
                _ => true,
            })
        } else {
            s.chunks_exact(4).fold(false, |hit, p| match p {
                [x0, y0, x1, y1] => {
                    hit | ((*x0 <= q[2]) & (*x1 >= q[0]) & (*y0 <= q[3]) & (*y1 >= q[1]))
                }
                _ => true,
            })
        }
    }

    /// Bytes of RAM held.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len() + self.offsets.len() * 4 + std::mem::size_of::<Self>()
    }

    /// The block: `u8 version ‖ u8 width ‖ varint global entries ‖ varint
    /// entries ‖ entries × width bytes`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 12);
        out.push(SKETCH_VERSION);
        out.push(self.width as u8);
        put_varint64(&mut out, self.offsets.len().saturating_sub(1) as u64);
        put_varint64(&mut out, (self.bytes.len() / self.width) as u64);
        out.extend_from_slice(&self.bytes);
        out
    }

    /// Decodes the sketch block of a table whose directory's global
    /// entries hold `counts` entries each; every count is checked against
    /// the directory's.
    pub fn decode(src: &[u8], counts: &[u32]) -> Result<Sketch> {
        let bad = |what: String| Error::corruption(format!("bad NEXT sketch block: {what}"));
        let [version, width, rest @ ..] = src else {
            return Err(bad("truncated header".into()));
        };
        if *version != SKETCH_VERSION {
            return Err(bad(format!(
                "unknown version {version} (this build reads {SKETCH_VERSION})"
            )));
        }
        let width = usize::from(*width);
        if width != 2 && width != 4 {
            return Err(bad(format!("entry width {width}")));
        }
        let mut rest = rest;
        let slices = get_varint64(&mut rest).ok_or_else(|| bad("truncated".into()))?;
        let count = get_varint64(&mut rest).ok_or_else(|| bad("truncated".into()))?;
        let total: u64 = counts.iter().map(|&n| u64::from(n)).sum();
        if slices != counts.len() as u64 || count != total {
            return Err(bad(format!(
                "{slices} slices of {count} entries for a directory of {} slices of {total}",
                counts.len()
            )));
        }
        if Some(rest.len() as u64) != count.checked_mul(width as u64) {
            return Err(bad(format!(
                "{} bytes for {count} entries of {width}",
                rest.len()
            )));
        }
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        let mut at = 0u64;
        for &n in counts {
            offsets.push(u32::try_from(at).map_err(|_| bad("too large".into()))?);
            at += u64::from(n) * width as u64;
        }
        offsets.push(u32::try_from(at).map_err(|_| bad("too large".into()))?);
        Ok(Sketch {
            width,
            offsets,
            bytes: rest.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(start: u32, end: u32, r: [f64; 4]) -> SliceShape {
        Some((r, end - start))
    }

    fn counts(slices: &[SliceShape]) -> Vec<u32> {
        slices.iter().map(|s| s.map_or(0, |(_, n)| n)).collect()
    }

    #[test]
    fn sketch_meets_exactly_what_may_match_and_round_trips() {
        let r = [0.0, 0.0, 256.0, 256.0];
        let entries = vec![slice(0, 2, r), slice(2, 3, [10.0, 10.0, 10.0, 10.0])];
        let pts = [
            [0.5, 0.5, 0.5, 0.5],
            [200.5, 100.5, 200.5, 100.5],
            [10.0; 4],
        ];
        let s = Sketch::build(&entries, &pts).unwrap();
        assert_eq!(s.width, 2);
        assert!(s.may_meet(0, &r, &[0.0, 0.0, 1.0, 1.0]));
        assert!(s.may_meet(0, &r, &[200.2, 100.2, 200.7, 100.7]));
        assert!(!s.may_meet(0, &r, &[100.0, 100.0, 150.0, 150.0]));
        assert!(!s.may_meet(0, &r, &[300.0, 0.0, 400.0, 10.0]));
        assert!(s.may_meet(0, &r, &[f64::NAN, 0.0, 1.0, 1.0]));
        // A degenerate envelope: one part per axis.
        assert!(s.may_meet(1, &[10.0, 10.0, 10.0, 10.0], &[9.0, 9.0, 11.0, 11.0]));
        assert_eq!(Sketch::decode(&s.encode(), &counts(&entries)).unwrap(), s);
        // Rectangles: width 4, intersection semantics.
        let rects = [
            [1.0, 1.0, 5.0, 5.0],
            [100.0, 100.0, 120.0, 101.0],
            [10.0; 4],
        ];
        let s = Sketch::build(&entries, &rects).unwrap();
        assert_eq!(s.width, 4);
        assert!(s.may_meet(0, &r, &[4.5, 4.5, 50.0, 50.0]));
        assert!(s.may_meet(0, &r, &[110.0, 90.0, 111.0, 100.5]));
        assert!(!s.may_meet(0, &r, &[6.5, 6.5, 50.0, 50.0]));
        assert_eq!(Sketch::decode(&s.encode(), &counts(&entries)).unwrap(), s);
    }

    #[test]
    fn sketch_refuses_what_it_cannot_make_exact_and_corrupt_blocks() {
        let r = [0.0, 0.0, 1.0, 1.0];
        let entries = vec![slice(0, 2, r)];
        assert!(Sketch::build(&entries, &[[0.5; 4]]).is_none());
        assert!(Sketch::build(&entries, &[[0.5; 4], [f64::NAN, 0.0, 0.0, 0.0]]).is_none());
        let s = Sketch::build(&entries, &[[0.5; 4], [0.25; 4]]).unwrap();
        let good = s.encode();
        assert!(Sketch::decode(&good, &counts(&[slice(0, 3, r)])).is_err());
        assert!(Sketch::decode(&good, &counts(&[slice(0, 1, r), slice(1, 2, r)])).is_err());
        assert!(Sketch::decode(&good[..good.len() - 1], &counts(&entries)).is_err());
        for (at, v) in [(0, 9), (1, 3)] {
            let mut bad = good.clone();
            bad[at] = v;
            assert!(Sketch::decode(&bad, &counts(&entries)).is_err());
        }
        assert!(Sketch::decode(&[], &counts(&entries)).is_err());
    }

    #[test]
    fn grid_col_is_monotone_and_clamped() {
        let mut prev = 0;
        for i in -10..=2000 {
            let c = grid_col(-3.0, 7.0, -3.0 + f64::from(i) * 0.005);
            assert!(c >= prev);
            prev = c;
        }
        assert_eq!(prev, 255);
        assert_eq!(grid_col(0.0, 1.0, -5.0), 0);
        assert_eq!(grid_col(0.0, 1.0, 1.0), 255);
        assert_eq!(grid_col(1.0, 1.0, 1.0), 0);
    }

    #[test]
    fn grid_col_is_the_floor_of_the_scaled_coordinate() {
        let reference = |lo: f64, hi: f64, v: f64| -> u8 {
            let span = hi - lo;
            if span.is_nan() || span <= 0.0 {
                return 0;
            }
            let c = ((v - lo) / span * f64::from(GRID)).floor();
            if c >= f64::from(GRID - 1) {
                (GRID - 1) as u8
            } else if c > 0.0 {
                c as u8
            } else {
                0
            }
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let lo = (x % 2000) as f64 / 7.0 - 100.0;
            let hi = lo + ((x >> 16) % 1000) as f64 / 13.0;
            let v = lo - 1.0 + ((x >> 32) % 5000) as f64 / 2000.0 * (hi - lo + 2.0);
            assert_eq!(grid_col(lo, hi, v), reference(lo, hi, v), "{lo} {hi} {v}");
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0] {
            assert_eq!(grid_col(0.0, 1.0, v), reference(0.0, 1.0, v));
        }
    }
}
