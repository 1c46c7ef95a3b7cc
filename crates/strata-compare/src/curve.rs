//! Hilbert-curve keys for spatial attributes on peers without a spatial
//! index (fjall, RocksDB).
//!
//! A point is quantised onto a `2^ORDER × 2^ORDER` grid over the lon/lat
//! domain `[-180, 180] × [-90, 90]` (coordinates outside are clamped onto
//! the border cells, which keeps every query correct, only less selective)
//! and keyed by its cell's position on the Hilbert curve. A window query is
//! decomposed into at most [`MAX_RANGES`] curve ranges by walking the
//! quadtree from the root and splitting only the cells the window partly
//! covers; each range is one index scan, and the candidates it returns are
//! filtered exactly on the coordinates stored in the index entry.
//!
//! Quantisation is monotone (never decreasing in the coordinate), so a point
//! inside a window always falls in a cell inside the window's cell range:
//! the decomposition can return extra candidates, never miss one.
//!
//! Rectangles are keyed by their centre; a window is then widened by the
//! largest half-extent ever indexed (kept by the caller), which is the
//! usual "centre + max extent" trick: complete, but loose when sizes vary
//! a lot.

/// Bits per axis (cells are ~2.1e-5° of longitude, ~2.3 m at the equator).
pub const ORDER: u32 = 24;
/// Upper bound on the ranges one window is decomposed into.
pub const MAX_RANGES: usize = 64;

/// The quantised domain: `[xmin, ymin, xmax, ymax]`.
pub const DOMAIN: [f64; 4] = [-180.0, -90.0, 180.0, 90.0];

const CELLS: u64 = 1 << ORDER;

/// The cell column/row of coordinate `v` on an axis `[lo, hi]`
/// (monotone, clamped, NaN to 0).
fn quantize(v: f64, lo: f64, hi: f64) -> u32 {
    if v.is_nan() || v <= lo {
        return 0;
    }
    if v >= hi {
        return (CELLS - 1) as u32;
    }
    let c = ((v - lo) / (hi - lo) * CELLS as f64) as u64;
    c.min(CELLS - 1) as u32
}

/// The grid cell of point `(x, y)`.
pub fn cell(x: f64, y: f64) -> (u32, u32) {
    (
        quantize(x, DOMAIN[0], DOMAIN[2]),
        quantize(y, DOMAIN[1], DOMAIN[3]),
    )
}

/// Position of cell `(x, y)` on the Hilbert curve of order `order`
/// (`x, y < 2^order`), in `[0, 4^order)`.
pub fn hilbert(x: u32, y: u32, order: u32) -> u64 {
    let (mut x, mut y) = (u64::from(x), u64::from(y));
    let mask = if order == 0 { 0 } else { (1u64 << order) - 1 };
    let mut d = 0u64;
    let mut s = if order == 0 { 0 } else { 1u64 << (order - 1) };
    while s > 0 {
        let rx = u64::from(x & s != 0);
        let ry = u64::from(y & s != 0);
        d += s * s * ((3 * rx) ^ ry);
        if ry == 0 {
            if rx == 1 {
                x ^= mask;
                y ^= mask;
            }
            std::mem::swap(&mut x, &mut y);
        }
        s >>= 1;
    }
    d
}

/// Curve key of point `(x, y)`.
pub fn point_key(x: f64, y: f64) -> u64 {
    let (cx, cy) = cell(x, y);
    hilbert(cx, cy, ORDER)
}

/// Curve key of a rectangle: the key of its centre.
pub fn rect_key(r: &[f64; 4]) -> u64 {
    point_key(r[0] / 2.0 + r[2] / 2.0, r[1] / 2.0 + r[3] / 2.0)
}

/// Half-extents `(x, y)` of a rectangle.
pub fn half_extent(r: &[f64; 4]) -> (f64, f64) {
    ((r[2] - r[0]) / 2.0, (r[3] - r[1]) / 2.0)
}

/// `w` widened by the half-extents `ext` (plus a margin against rounding
/// in the centre computation), for finding rectangles by their centres.
pub fn widen(w: &[f64; 4], ext: (f64, f64)) -> [f64; 4] {
    let m = |e: f64, a: f64, b: f64| e + 1e-9 * (1.0 + e + a.abs().max(b.abs()));
    let mx = m(ext.0, w[0], w[2]);
    let my = m(ext.1, w[1], w[3]);
    [w[0] - mx, w[1] - my, w[2] + mx, w[3] + my]
}

/// Half-open key ranges `[start, end)` covering every cell the closed window
/// `w` touches, sorted and merged, at most about [`MAX_RANGES`] of them.
/// An empty or NaN window gives no range.
pub fn window_ranges(w: &[f64; 4]) -> Vec<(u64, u64)> {
    if !(w[0] <= w[2] && w[1] <= w[3]) {
        return Vec::new();
    }
    let (qx0, qy0) = cell(w[0], w[1]);
    let (qx1, qy1) = cell(w[2], w[3]);
    let mut done: Vec<(u64, u64)> = Vec::new();
    // Cells partly covered at the current level: (cx, cy) at `level`.
    let mut partial: Vec<(u32, u32)> = vec![(0, 0)];
    let mut level = 0u32;
    loop {
        let shift = ORDER - level;
        let span = |cx: u32, cy: u32| {
            let d = hilbert(cx, cy, level);
            (d << (2 * shift), (d + 1) << (2 * shift))
        };
        let mut next = Vec::new();
        for &(cx, cy) in &partial {
            // The cell covers grid columns [x0, x1] and rows [y0, y1].
            let x0 = u64::from(cx) << shift;
            let y0 = u64::from(cy) << shift;
            let x1 = x0 + (1u64 << shift) - 1;
            let y1 = y0 + (1u64 << shift) - 1;
            let (ax0, ay0, ax1, ay1) = (
                u64::from(qx0),
                u64::from(qy0),
                u64::from(qx1),
                u64::from(qy1),
            );
            if x1 < ax0 || ax1 < x0 || y1 < ay0 || ay1 < y0 {
                continue;
            }
            if ax0 <= x0 && x1 <= ax1 && ay0 <= y0 && y1 <= ay1 {
                done.push(span(cx, cy));
            } else {
                next.push((cx, cy));
            }
        }
        if next.is_empty() {
            break;
        }
        if level == ORDER || done.len() + 4 * next.len() > MAX_RANGES {
            done.extend(next.iter().map(|&(cx, cy)| span(cx, cy)));
            break;
        }
        partial = next
            .iter()
            .flat_map(|&(cx, cy)| {
                [(0, 0), (0, 1), (1, 0), (1, 1)].map(|(dx, dy)| (2 * cx + dx, 2 * cy + dy))
            })
            .collect();
        level += 1;
    }
    done.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(done.len());
    for (s, e) in done {
        match merged.last_mut() {
            Some(last) if last.1 >= s => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn hilbert_is_a_bijection_with_unit_steps() {
        let order = 4;
        let n = 1u32 << order;
        let mut by_d = vec![None; (n * n) as usize];
        for x in 0..n {
            for y in 0..n {
                let d = hilbert(x, y, order) as usize;
                assert!(by_d[d].is_none());
                by_d[d] = Some((x, y));
            }
        }
        let cells: Vec<(u32, u32)> = by_d.into_iter().flatten().collect();
        for w in cells.windows(2) {
            let dist = w[0].0.abs_diff(w[1].0) + w[0].1.abs_diff(w[1].1);
            assert_eq!(dist, 1, "{w:?}");
        }
    }

    #[test]
    fn hilbert_prefix_is_the_parent_cell() {
        let mut st = 7;
        for _ in 0..1000 {
            let x = (next(&mut st) % CELLS) as u32;
            let y = (next(&mut st) % CELLS) as u32;
            let d = hilbert(x, y, ORDER);
            for level in [0, 1, 5, 13, 23, 24] {
                let s = ORDER - level;
                assert_eq!(d >> (2 * s), hilbert(x >> s, y >> s, level));
            }
        }
    }

    #[test]
    fn window_ranges_cover_every_point_inside() {
        let mut st = 11;
        let f = |st: &mut u64| (next(st) % 1_000_000) as f64 / 1_000_000.0;
        for i in 0..200 {
            let cx = -180.0 + 360.0 * f(&mut st);
            let cy = -90.0 + 180.0 * f(&mut st);
            let side = 10f64.powf(-4.0 + 5.0 * f(&mut st));
            let w = [cx - side, cy - side / 2.0, cx + side, cy + side / 2.0];
            let ranges = window_ranges(&w);
            assert!(!ranges.is_empty() && ranges.len() <= MAX_RANGES, "{i}");
            for _ in 0..50 {
                let x = w[0] + (w[2] - w[0]) * f(&mut st);
                let y = w[1] + (w[3] - w[1]) * f(&mut st);
                for (px, py) in [(x, y), (w[0], w[1]), (w[2], w[3]), (w[0], w[3])] {
                    let k = point_key(px, py);
                    assert!(
                        ranges.iter().any(|&(s, e)| s <= k && k < e),
                        "{w:?} {px} {py}"
                    );
                }
            }
        }
        assert!(window_ranges(&[1.0, 0.0, 0.0, 1.0]).is_empty());
        assert_eq!(
            window_ranges(&[-500.0, -500.0, 500.0, 500.0]),
            vec![(0, CELLS * CELLS)]
        );
    }
}
