//! Query sets calibrated against generated data (NEXT, SIGMOD 2025 §6.2.1).
//!
//! The paper builds, per attribute, three workloads of 1000 queries whose
//! centres are sampled from the data and whose window size is fixed per
//! workload, giving mean result counts of (Tweet) 108/1107/11349 for
//! `UserID` ranges, 56/350/14887 for `Coordinates` windows, and (OSM
//! buildings) 17/608/18753 for bounding-box windows, 403/3929/40064 for
//! `perimeter` ranges. Our data is smaller and synthetic, so instead of the
//! paper's widths we keep its *mean result counts* and find the width by
//! bisection so that the mean over the query set is within ±10% of the
//! target ([`TOLERANCE`]); a target the data cannot reach (more than the
//! records, or fewer than the width-0 mean) is clamped and flagged.
//!
//! Semantics (the engine and every peer must match them):
//! * [`Query::Range`]`(lo, hi)` / [`Query::RangeF`]: `lo <= v <= hi`;
//! * [`Query::Window`]`([xmin, ymin, xmax, ymax])`: points with
//!   `xmin <= x <= xmax && ymin <= y <= ymax`; rectangles that intersect the
//!   window (closed boxes: touching counts);
//! * [`Query::Lookup`]`(v)`: `v == value`.
//!
//! Counting uses a sorted copy and binary search for numbers, and a
//! uniform grid over item centres for windows: items are sorted by
//! row-major cell key, so the cells of one grid row inside a window form a
//! contiguous slice found by binary search; cells fully inside the window
//! are counted wholesale, the rest checked exactly. The cell size follows
//! the window size (a power of two, 1/8–1/4 of the window side plus the
//! rectangle margin), with one grid per size cached, so a count costs
//! O(rows · log n + border items). Rectangles are bucketed by size class
//! (power of two of their half-extent) so the margin for a class is that
//! class's largest half-extent, not the global one.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::gen::{Building, SyntheticRecord, Tweet};
use crate::rng::SplitMix64;

/// Relative tolerance on the achieved mean result count.
pub const TOLERANCE: f64 = 0.10;

/// Paper targets (NEXT §6.2.1): Tweet `user_id` ranges.
pub const TWEET_USER_ID_TARGETS: [f64; 3] = [108.0, 1107.0, 11349.0];
/// Paper targets: Tweet `coordinates` windows.
pub const TWEET_COORDINATES_TARGETS: [f64; 3] = [56.0, 350.0, 14887.0];
/// Paper targets: OSM buildings `bbox` windows.
pub const BUILDING_BBOX_TARGETS: [f64; 3] = [17.0, 608.0, 18753.0];
/// Paper targets: OSM buildings `perimeter` ranges.
pub const BUILDING_PERIMETER_TARGETS: [f64; 3] = [403.0, 3929.0, 40064.0];
/// Class names, in target order.
pub const CLASSES: [&str; 3] = ["small", "medium", "large"];

/// One query on a secondary attribute.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Query {
    /// Equality on an integer attribute.
    Lookup(i64),
    /// Inclusive integer range `[lo, hi]`.
    Range(i64, i64),
    /// Inclusive float range `[lo, hi]`.
    RangeF(f64, f64),
    /// Closed window `[xmin, ymin, xmax, ymax]`.
    Window([f64; 4]),
}

/// The result of a calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibrated<P> {
    /// The width (ranges) or side (windows) that was found.
    pub param: P,
    /// Mean result count of `queries` over the data.
    pub achieved_mean: f64,
    /// True if `achieved_mean` is outside ±[`TOLERANCE`] of the target
    /// (the target is unreachable with this data).
    pub clamped: bool,
    /// The queries, in sampling order.
    pub queries: Vec<Query>,
}

/// A named, calibrated query set as written by `strata gen --queries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuerySet {
    /// Queried attribute (`user_id`, `coordinates`, `bbox`, ...).
    pub attribute: String,
    /// `small`, `medium`, `large`, or `eq` for point lookups.
    pub class: String,
    /// Requested mean result count (for `eq`: the achieved one).
    pub target_mean: f64,
    /// Mean result count over the data.
    pub achieved_mean: f64,
    /// True if the target could not be reached within ±10%.
    pub clamped: bool,
    /// Range width (integer ranges: `hi - lo`), range width (floats) or
    /// window side in degrees; 0 for lookups.
    pub param: f64,
    /// Exact result count of each query over the generated data.
    pub expected_counts: Vec<u64>,
    /// The queries.
    pub queries: Vec<Query>,
}

impl QuerySet {
    /// A set from a calibration and the exact count of each of its queries.
    fn calibrated<P: Into<f64>>(
        attribute: &str,
        class: &str,
        target: f64,
        c: Calibrated<P>,
        expected_counts: Vec<u64>,
    ) -> QuerySet {
        QuerySet {
            attribute: attribute.to_string(),
            class: class.to_string(),
            target_mean: target,
            achieved_mean: c.achieved_mean,
            clamped: c.clamped,
            param: c.param.into(),
            expected_counts,
            queries: c.queries,
        }
    }

    /// File name used by `strata gen --queries DIR`: `<attribute>-<class>.json`.
    pub fn file_name(&self) -> String {
        format!("{}-{}.json", self.attribute, self.class)
    }
}

// ------------------------------------------------------------ counting

/// Exact counts over a sorted copy of integer values.
#[derive(Debug, Clone)]
pub struct IntCounter {
    sorted: Vec<i64>,
}

impl IntCounter {
    /// Indexes `values` (copied and sorted).
    pub fn new(values: &[i64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        IntCounter { sorted }
    }

    /// Number of values in `[lo, hi]` (0 if `lo > hi`).
    pub fn count(&self, lo: i64, hi: i64) -> u64 {
        if lo > hi {
            return 0;
        }
        let a = self.sorted.partition_point(|&v| v < lo);
        let b = self.sorted.partition_point(|&v| v <= hi);
        (b - a) as u64
    }

    /// Result count of `q` (0 for window queries).
    pub fn count_query(&self, q: &Query) -> u64 {
        match *q {
            Query::Lookup(v) => self.count(v, v),
            Query::Range(lo, hi) => self.count(lo, hi),
            _ => 0,
        }
    }
}

/// Exact counts over a sorted copy of the finite float values.
#[derive(Debug, Clone)]
pub struct FloatCounter {
    sorted: Vec<f64>,
}

impl FloatCounter {
    /// Indexes the finite values of `values`.
    pub fn new(values: &[f64]) -> Self {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_unstable_by(f64::total_cmp);
        FloatCounter { sorted }
    }

    /// Number of values in `[lo, hi]` (0 if `lo > hi` or either is NaN).
    pub fn count(&self, lo: f64, hi: f64) -> u64 {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return 0;
        }
        let a = self.sorted.partition_point(|&v| v < lo);
        let b = self.sorted.partition_point(|&v| v <= hi);
        (b - a) as u64
    }
}

/// One grid over item centres at a fixed cell size.
#[derive(Debug, Clone)]
struct Grid {
    cell: f64,
    x0: f64,
    y0: f64,
    ncx: i64,
    ncy: i64,
    /// `(cy << 32) | cx`, sorted.
    keys: Vec<u64>,
    /// Indexes into the size class's items, in key order.
    order: Vec<usize>,
}

/// Grids cached per size class (each costs 16 bytes per item).
const MAX_GRIDS_PER_CLASS: usize = 3;

/// Largest number of cells per grid axis (keys pack two 32-bit indexes).
const MAX_CELLS_PER_AXIS: f64 = (1u64 << 30) as f64;

fn centre(r: &[f64; 4]) -> [f64; 2] {
    [(r[0] + r[2]) / 2.0, (r[1] + r[3]) / 2.0]
}

fn intersects(r: &[f64; 4], q: &[f64; 4]) -> bool {
    r[0] <= q[2] && r[2] >= q[0] && r[1] <= q[3] && r[3] >= q[1]
}

impl Grid {
    fn build(items: &[[f64; 4]], bounds: [f64; 4], cell: f64) -> Grid {
        let x0 = bounds[0];
        let y0 = bounds[1];
        let ncx = (((bounds[2] - x0) / cell).floor() as i64 + 1).max(1);
        let ncy = (((bounds[3] - y0) / cell).floor() as i64 + 1).max(1);
        let mut keyed: Vec<(u64, usize)> = items
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let [cx, cy] = centre(r);
                let ix = (((cx - x0) / cell).floor() as i64).clamp(0, ncx - 1) as u64;
                let iy = (((cy - y0) / cell).floor() as i64).clamp(0, ncy - 1) as u64;
                ((iy << 32) | ix, i)
            })
            .collect();
        keyed.sort_unstable();
        let (keys, order) = keyed.into_iter().unzip();
        Grid {
            cell,
            x0,
            y0,
            ncx,
            ncy,
            keys,
            order,
        }
    }

    fn cell_x(&self, x: f64) -> i64 {
        ((x - self.x0) / self.cell)
            .floor()
            .clamp(-4.0, self.ncx as f64 + 4.0) as i64
    }

    fn cell_y(&self, y: f64) -> i64 {
        ((y - self.y0) / self.cell)
            .floor()
            .clamp(-4.0, self.ncy as f64 + 4.0) as i64
    }

    fn pos(&self, cy: i64, cx: i64, inclusive: bool) -> usize {
        let k = ((cy as u64) << 32) | cx as u64;
        if inclusive {
            self.keys.partition_point(|&x| x <= k)
        } else {
            self.keys.partition_point(|&x| x < k)
        }
    }

    fn exact(&self, items: &[[f64; 4]], range: std::ops::Range<usize>, q: &[f64; 4]) -> u64 {
        self.order[range]
            .iter()
            .filter(|&&i| intersects(&items[i], q))
            .count() as u64
    }

    /// Items (of `items`, the slice the grid was built on) intersecting
    /// `q`, given that every item's half-extents are at most `(mx, my)`.
    fn count(&self, items: &[[f64; 4]], q: &[f64; 4], mx: f64, my: f64) -> u64 {
        // Centres of intersecting items lie in q grown by the margins; one
        // extra cell on each side absorbs rounding in the cell assignment.
        let ax = (self.cell_x(q[0] - mx) - 1).max(0);
        let bx = (self.cell_x(q[2] + mx) + 1).min(self.ncx - 1);
        let ay = (self.cell_y(q[1] - my) - 1).max(0);
        let by = (self.cell_y(q[3] + my) + 1).min(self.ncy - 1);
        if ax > bx || ay > by {
            return 0;
        }
        // Cells whose every centre is inside q (two cells of safety): all
        // their items intersect q.
        // (cell_x clamps only far outside the grid, where every grid cell
        // is on the inner side of that edge.)
        let ix0 = (self.cell_x(q[0]) + 2).max(ax);
        let ix1 = (self.cell_x(q[2]) - 2).min(bx);
        let iy0 = self.cell_y(q[1]) + 2;
        let iy1 = self.cell_y(q[3]) - 2;
        let mut n = 0;
        for cy in ay..=by {
            let start = self.pos(cy, ax, false);
            let end = self.pos(cy, bx, true);
            if start == end {
                continue;
            }
            if cy >= iy0 && cy <= iy1 && ix0 <= ix1 {
                let a = self.pos(cy, ix0, false);
                let b = self.pos(cy, ix1, true);
                n += (b - a) as u64;
                n += self.exact(items, start..a, q) + self.exact(items, b..end, q);
            } else {
                n += self.exact(items, start..end, q);
            }
        }
        n
    }
}

/// Items of one size class and their grids by cell exponent.
#[derive(Debug, Clone)]
struct SizeClass {
    items: Vec<[f64; 4]>,
    mx: f64,
    my: f64,
    grids: HashMap<i32, Grid>,
}

/// Counts rectangles (points are degenerate rectangles) intersecting
/// windows, exactly, with grids built lazily per window size.
#[derive(Debug, Clone)]
pub struct WindowCounter {
    classes: BTreeMap<i32, SizeClass>,
    /// Bounds of all centres.
    bounds: [f64; 4],
    /// Smallest cell exponent (keeps cells per axis ≤ 2^30).
    min_exp: i32,
    len: usize,
}

impl WindowCounter {
    /// Indexes points `[x, y]`; non-finite points are ignored.
    pub fn from_points(points: &[[f64; 2]]) -> Self {
        let rects: Vec<[f64; 4]> = points.iter().map(|p| [p[0], p[1], p[0], p[1]]).collect();
        Self::from_rects(&rects)
    }

    /// Indexes rectangles `[xmin, ymin, xmax, ymax]`; rectangles with a
    /// non-finite coordinate or `min > max` are ignored.
    pub fn from_rects(rects: &[[f64; 4]]) -> Self {
        let mut classes: BTreeMap<i32, SizeClass> = BTreeMap::new();
        let mut bounds = [
            f64::INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NEG_INFINITY,
        ];
        let mut len = 0;
        for r in rects {
            if !r.iter().all(|v| v.is_finite()) || r[0] > r[2] || r[1] > r[3] {
                continue;
            }
            len += 1;
            let [cx, cy] = centre(r);
            bounds = [
                bounds[0].min(cx),
                bounds[1].min(cy),
                bounds[2].max(cx),
                bounds[3].max(cy),
            ];
            let hx = (r[2] - r[0]) / 2.0;
            let hy = (r[3] - r[1]) / 2.0;
            let h = hx.max(hy);
            let class = if h > 0.0 {
                (h.log2().ceil() as i32).clamp(-60, 60)
            } else {
                i32::MIN
            };
            let c = classes.entry(class).or_insert_with(|| SizeClass {
                items: Vec::new(),
                mx: 0.0,
                my: 0.0,
                grids: HashMap::new(),
            });
            c.items.push(*r);
            c.mx = c.mx.max(hx);
            c.my = c.my.max(hy);
        }
        if len == 0 {
            bounds = [0.0; 4];
        }
        let extent = (bounds[2] - bounds[0])
            .max(bounds[3] - bounds[1])
            .max(f64::MIN_POSITIVE);
        let min_exp = (extent / MAX_CELLS_PER_AXIS).log2().ceil() as i32;
        WindowCounter {
            classes,
            bounds,
            min_exp: min_exp.max(-1000),
            len,
        }
    }

    /// Number of indexed items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Largest side needed for any window centred in the data to cover
    /// every item.
    fn full_side(&self) -> f64 {
        let mut m = (self.bounds[2] - self.bounds[0]).max(self.bounds[3] - self.bounds[1]);
        for c in self.classes.values() {
            m = m.max(2.0 * c.mx).max(2.0 * c.my);
        }
        2.0 * m + 1e-9
    }

    /// Items intersecting the closed window `q = [xmin, ymin, xmax, ymax]`.
    pub fn count(&mut self, q: &[f64; 4]) -> u64 {
        if q.iter().any(|v| v.is_nan()) {
            return 0;
        }
        let side = (q[2] - q[0]).max(q[3] - q[1]);
        let bounds = self.bounds;
        let min_exp = self.min_exp;
        // One cell covers all centres.
        let max_exp = self.min_exp + 31;
        let mut n = 0;
        for c in self.classes.values_mut() {
            let eff = side + 2.0 * c.mx.max(c.my);
            let exp = if eff.is_infinite() {
                max_exp
            } else if eff > 0.0 {
                ((eff / 8.0).log2().floor() as i32).clamp(min_exp, max_exp)
            } else {
                min_exp
            };
            if !c.grids.contains_key(&exp) && c.grids.len() >= MAX_GRIDS_PER_CLASS {
                // Evict the cached size least like the one needed now.
                if let Some(&far) = c.grids.keys().max_by_key(|&&k| (k - exp).abs()) {
                    c.grids.remove(&far);
                }
            }
            let items = &c.items;
            let grid = c
                .grids
                .entry(exp)
                .or_insert_with(|| Grid::build(items, bounds, 2f64.powi(exp)));
            n += grid.count(items, q, c.mx, c.my);
        }
        n
    }

    /// Brute-force count (for tests and spot checks).
    pub fn count_brute(&self, q: &[f64; 4]) -> u64 {
        self.classes
            .values()
            .flat_map(|c| c.items.iter())
            .filter(|r| intersects(r, q))
            .count() as u64
    }
}

// --------------------------------------------------------- calibration

/// `count` indexes into `0..len`, uniformly with replacement.
fn sample_indexes(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut r = SplitMix64::derive(seed, 0x7175_6572);
    (0..count).map(|_| r.below(len as u64) as usize).collect()
}

fn within(mean: f64, target: f64) -> bool {
    (mean - target).abs() <= TOLERANCE * target
}

/// Bisection on a continuous parameter in `[0, hi]` for a non-decreasing
/// `mean_at`: geometric steps (the right parameter spans many orders of
/// magnitude), stopping within 1% of the target. Returns the parameter
/// whose mean is closest to the target, that mean and whether it is
/// outside the tolerance.
fn bisect_f64(hi: f64, target: f64, mut mean_at: impl FnMut(f64) -> f64) -> (f64, f64, bool) {
    let m0 = mean_at(0.0);
    if m0 >= target {
        return (0.0, m0, !within(m0, target));
    }
    let mhi = mean_at(hi);
    if mhi <= target {
        return (hi, mhi, !within(mhi, target));
    }
    let mut best = if (m0 - target).abs() <= (mhi - target).abs() {
        (0.0, m0)
    } else {
        (hi, mhi)
    };
    let (mut lo, mut up) = (hi * 1e-15, hi);
    for _ in 0..120 {
        let mid = (lo * up).sqrt();
        let m = mean_at(mid);
        if (m - target).abs() < (best.1 - target).abs() {
            best = (mid, m);
        }
        if (m - target).abs() <= 0.01 * target || up / lo - 1.0 < 1e-12 {
            break;
        }
        if m < target {
            lo = mid;
        } else {
            up = mid;
        }
    }
    (best.0, best.1, !within(best.1, target))
}

/// Integer range queries `[c - w/2, c - w/2 + w]` (width `w = hi - lo`)
/// centred on `count` values sampled from `values`, with `w` found by
/// binary search so the mean result count is as close as possible to
/// `target_mean` (within ±10% unless unreachable: then `clamped`).
pub fn calibrate_ranges(
    values: &[i64],
    target_mean: f64,
    count: usize,
    seed: u64,
) -> Calibrated<i64> {
    if values.is_empty() || count == 0 {
        return Calibrated {
            param: 0,
            achieved_mean: 0.0,
            clamped: true,
            queries: Vec::new(),
        };
    }
    let counter = IntCounter::new(values);
    let centres: Vec<i64> = sample_indexes(values.len(), count, seed)
        .into_iter()
        .map(|i| values[i])
        .collect();
    let query = |c: i64, w: i128| -> (i64, i64) {
        let lo = i128::from(c) - w / 2;
        let hi = lo + w;
        let clamp = |x: i128| x.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        (clamp(lo), clamp(hi))
    };
    let mean_at = |w: i128| -> f64 {
        let total: u64 = centres
            .iter()
            .map(|&c| {
                let (lo, hi) = query(c, w);
                counter.count(lo, hi)
            })
            .sum();
        total as f64 / centres.len() as f64
    };
    let (min, max) = (counter.sorted[0], counter.sorted[counter.sorted.len() - 1]);
    let full = 2 * (i128::from(max) - i128::from(min)) + 2;
    // Smallest width whose mean reaches the target.
    let (mut lo, mut hi) = (0i128, full);
    if mean_at(0) >= target_mean {
        hi = 0;
    } else {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if mean_at(mid) < target_mean {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    let mut w = hi;
    let mut m = mean_at(w);
    if w > 0 {
        let m_below = mean_at(w - 1);
        if (m_below - target_mean).abs() < (m - target_mean).abs() {
            w -= 1;
            m = m_below;
        }
    }
    let queries = centres
        .iter()
        .map(|&c| {
            let (lo, hi) = query(c, w);
            Query::Range(lo, hi)
        })
        .collect();
    Calibrated {
        param: w.clamp(0, i128::from(i64::MAX)) as i64,
        achieved_mean: m,
        clamped: !within(m, target_mean),
        queries,
    }
}

/// Float range queries `[c - w/2, c + w/2]` centred on sampled finite
/// values, `w` found by bisection (see [`calibrate_ranges`]).
pub fn calibrate_ranges_f64(
    values: &[f64],
    target_mean: f64,
    count: usize,
    seed: u64,
) -> Calibrated<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() || count == 0 {
        return Calibrated {
            param: 0.0,
            achieved_mean: 0.0,
            clamped: true,
            queries: Vec::new(),
        };
    }
    let counter = FloatCounter::new(&finite);
    let centres: Vec<f64> = sample_indexes(finite.len(), count, seed)
        .into_iter()
        .map(|i| finite[i])
        .collect();
    let mean_at = |w: f64| -> f64 {
        let total: u64 = centres
            .iter()
            .map(|&c| counter.count(c - w / 2.0, c + w / 2.0))
            .sum();
        total as f64 / centres.len() as f64
    };
    let (min, max) = (counter.sorted[0], counter.sorted[counter.sorted.len() - 1]);
    let full = 2.0 * (max - min) + 1.0;
    let (w, m, clamped) = bisect_f64(full, target_mean, mean_at);
    Calibrated {
        param: w,
        achieved_mean: m,
        clamped,
        queries: centres
            .iter()
            .map(|&c| Query::RangeF(c - w / 2.0, c + w / 2.0))
            .collect(),
    }
}

fn square(c: [f64; 2], side: f64) -> [f64; 4] {
    [
        c[0] - side / 2.0,
        c[1] - side / 2.0,
        c[0] + side / 2.0,
        c[1] + side / 2.0,
    ]
}

fn calibrate_windows_on(
    counter: &mut WindowCounter,
    centres: Vec<[f64; 2]>,
    target_mean: f64,
) -> Calibrated<f64> {
    if centres.is_empty() {
        return Calibrated {
            param: 0.0,
            achieved_mean: 0.0,
            clamped: true,
            queries: Vec::new(),
        };
    }
    let full = counter.full_side();
    let n = centres.len() as f64;
    let (side, m, clamped) = bisect_f64(full, target_mean, |side| {
        centres
            .iter()
            .map(|&c| counter.count(&square(c, side)))
            .sum::<u64>() as f64
            / n
    });
    Calibrated {
        param: side,
        achieved_mean: m,
        clamped,
        queries: centres
            .iter()
            .map(|&c| Query::Window(square(c, side)))
            .collect(),
    }
}

/// Square windows of side `s` centred on `count` sampled points, `s` found
/// by bisection so the mean number of points inside is within ±10% of
/// `target_mean` (else `clamped`). Non-finite points are ignored.
pub fn calibrate_windows(
    points: &[[f64; 2]],
    target_mean: f64,
    count: usize,
    seed: u64,
) -> Calibrated<f64> {
    let rects: Vec<[f64; 4]> = points.iter().map(|p| [p[0], p[1], p[0], p[1]]).collect();
    calibrate_windows_rect(&rects, target_mean, count, seed)
}

/// Rectangles with finite coordinates and `min <= max`.
fn valid_rects(rects: &[[f64; 4]]) -> Vec<[f64; 4]> {
    rects
        .iter()
        .copied()
        .filter(|r| r.iter().all(|v| v.is_finite()) && r[0] <= r[2] && r[1] <= r[3])
        .collect()
}

/// Centres of `count` rectangles sampled from `valid`.
fn sample_centres(valid: &[[f64; 4]], count: usize, seed: u64) -> Vec<[f64; 2]> {
    if valid.is_empty() {
        return Vec::new();
    }
    sample_indexes(valid.len(), count, seed)
        .into_iter()
        .map(|i| centre(&valid[i]))
        .collect()
}

/// Square windows centred on the centres of `count` sampled rectangles,
/// counting rectangles that intersect the window (see
/// [`calibrate_windows`]). Malformed rectangles are ignored.
pub fn calibrate_windows_rect(
    rects: &[[f64; 4]],
    target_mean: f64,
    count: usize,
    seed: u64,
) -> Calibrated<f64> {
    let valid = valid_rects(rects);
    let centres = sample_centres(&valid, count, seed);
    let mut counter = WindowCounter::from_rects(&valid);
    drop(valid);
    calibrate_windows_on(&mut counter, centres, target_mean)
}

/// `count` point lookups on values sampled from `values` (categorical
/// `--eq` queries); every lookup has at least one result.
pub fn lookups(values: &[i64], count: usize, seed: u64) -> Vec<Query> {
    if values.is_empty() {
        return Vec::new();
    }
    sample_indexes(values.len(), count, seed)
        .into_iter()
        .map(|i| Query::Lookup(values[i]))
        .collect()
}

// ---------------------------------------------------------- query sets

fn mean(counts: &[u64]) -> f64 {
    if counts.is_empty() {
        0.0
    } else {
        counts.iter().sum::<u64>() as f64 / counts.len() as f64
    }
}

/// Range sets on an integer attribute, one per target (classes
/// small/medium/large), plus an `eq` set of lookups.
pub fn int_query_sets(
    attribute: &str,
    values: &[i64],
    targets: &[f64; 3],
    count: usize,
    seed: u64,
) -> Vec<QuerySet> {
    let counter = IntCounter::new(values);
    let mut sets: Vec<QuerySet> = CLASSES
        .iter()
        .zip(targets)
        .enumerate()
        .map(|(i, (class, &target))| {
            let c = calibrate_ranges(values, target, count, seed.wrapping_add(i as u64));
            let expected_counts: Vec<u64> =
                c.queries.iter().map(|q| counter.count_query(q)).collect();
            let c = Calibrated {
                param: c.param as f64,
                achieved_mean: c.achieved_mean,
                clamped: c.clamped,
                queries: c.queries,
            };
            QuerySet::calibrated(attribute, class, target, c, expected_counts)
        })
        .collect();
    let queries = lookups(values, count, seed.wrapping_add(3));
    let expected_counts: Vec<u64> = queries.iter().map(|q| counter.count_query(q)).collect();
    let m = mean(&expected_counts);
    sets.push(QuerySet {
        attribute: attribute.to_string(),
        class: "eq".to_string(),
        target_mean: m,
        achieved_mean: m,
        clamped: false,
        param: 0.0,
        expected_counts,
        queries,
    });
    sets
}

/// Range sets on a float attribute (classes small/medium/large).
pub fn float_query_sets(
    attribute: &str,
    values: &[f64],
    targets: &[f64; 3],
    count: usize,
    seed: u64,
) -> Vec<QuerySet> {
    let counter = FloatCounter::new(values);
    CLASSES
        .iter()
        .zip(targets)
        .enumerate()
        .map(|(i, (class, &target))| {
            let c = calibrate_ranges_f64(values, target, count, seed.wrapping_add(i as u64));
            let expected_counts = c
                .queries
                .iter()
                .map(|q| match *q {
                    Query::RangeF(lo, hi) => counter.count(lo, hi),
                    _ => 0,
                })
                .collect();
            QuerySet::calibrated(attribute, class, target, c, expected_counts)
        })
        .collect()
}

/// Window sets over rectangles (points as degenerate rectangles), classes
/// small/medium/large. Same queries as [`calibrate_windows_rect`] with seed
/// `seed + class index`, sharing one index.
pub fn window_query_sets(
    attribute: &str,
    rects: &[[f64; 4]],
    targets: &[f64; 3],
    count: usize,
    seed: u64,
) -> Vec<QuerySet> {
    let valid = valid_rects(rects);
    let centres: Vec<Vec<[f64; 2]>> = (0..CLASSES.len())
        .map(|i| sample_centres(&valid, count, seed.wrapping_add(i as u64)))
        .collect();
    let mut counter = WindowCounter::from_rects(&valid);
    drop(valid);
    CLASSES
        .iter()
        .zip(targets)
        .zip(centres)
        .map(|((class, &target), centres)| {
            let c = calibrate_windows_on(&mut counter, centres, target);
            let expected_counts = c
                .queries
                .iter()
                .map(|q| match q {
                    Query::Window(w) => counter.count(w),
                    _ => 0,
                })
                .collect();
            QuerySet::calibrated(attribute, class, target, c, expected_counts)
        })
        .collect()
}

/// Tweet query sets from the attribute columns: `user_id`
/// small/medium/large (targets 108/1107/11349) and `eq` lookups;
/// `coordinates` small/medium/large (56/350/14887). Targets are the
/// paper's, unscaled; unreachable ones are clamped and flagged.
pub fn tweet_query_sets_from(
    user_ids: &[i64],
    coordinates: &[[f64; 2]],
    count: usize,
    seed: u64,
) -> Vec<QuerySet> {
    let rects: Vec<[f64; 4]> = coordinates
        .iter()
        .map(|p| [p[0], p[1], p[0], p[1]])
        .collect();
    let mut sets = int_query_sets("user_id", user_ids, &TWEET_USER_ID_TARGETS, count, seed);
    sets.extend(window_query_sets(
        "coordinates",
        &rects,
        &TWEET_COORDINATES_TARGETS,
        count,
        seed ^ 0x10,
    ));
    sets
}

/// [`tweet_query_sets_from`] on generated tweets.
pub fn tweet_query_sets(tweets: &[Tweet], count: usize, seed: u64) -> Vec<QuerySet> {
    let users: Vec<i64> = tweets.iter().map(|t| t.user_id).collect();
    let coords: Vec<[f64; 2]> = tweets.iter().map(|t| t.coordinates).collect();
    tweet_query_sets_from(&users, &coords, count, seed)
}

/// Building query sets from the attribute columns: `bbox` windows
/// (targets 17/608/18753) and `perimeter` ranges (403/3929/40064).
pub fn building_query_sets_from(
    bboxes: &[[f64; 4]],
    perimeters: &[f64],
    count: usize,
    seed: u64,
) -> Vec<QuerySet> {
    let mut sets = window_query_sets("bbox", bboxes, &BUILDING_BBOX_TARGETS, count, seed);
    sets.extend(float_query_sets(
        "perimeter",
        perimeters,
        &BUILDING_PERIMETER_TARGETS,
        count,
        seed ^ 0x10,
    ));
    sets
}

/// [`building_query_sets_from`] on generated buildings.
pub fn building_query_sets(buildings: &[Building], count: usize, seed: u64) -> Vec<QuerySet> {
    let bboxes: Vec<[f64; 4]> = buildings.iter().map(|b| b.bbox).collect();
    let perims: Vec<f64> = buildings.iter().map(|b| b.perimeter).collect();
    building_query_sets_from(&bboxes, &perims, count, seed)
}

/// Synthetic query sets (NEXT §6.5): `attr` ranges with the Tweet
/// `user_id` targets (108/1107/11349) and `eq` point lookups.
pub fn synthetic_query_sets_from(attrs: &[i64], count: usize, seed: u64) -> Vec<QuerySet> {
    int_query_sets("attr", attrs, &TWEET_USER_ID_TARGETS, count, seed)
}

/// [`synthetic_query_sets_from`] on generated records.
pub fn synthetic_query_sets(records: &[SyntheticRecord], count: usize, seed: u64) -> Vec<QuerySet> {
    let attrs: Vec<i64> = records.iter().map(|r| r.attr).collect();
    synthetic_query_sets_from(&attrs, count, seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{buildings, synthetic, tweets, Dist};

    fn random_points(n: usize, seed: u64) -> Vec<[f64; 2]> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                if i % 3 == 0 {
                    [r.uniform(-180.0, 180.0), r.uniform(-90.0, 90.0)]
                } else {
                    // Clusters, with exact duplicates and grid-aligned values.
                    let c = (r.below(5) as f64) * 10.0;
                    if i % 7 == 0 {
                        [c, c / 2.0]
                    } else {
                        [c + 0.01 * r.normal(), c / 2.0 + 0.01 * r.normal()]
                    }
                }
            })
            .collect()
    }

    #[test]
    fn grid_counts_equal_brute_force_on_points() {
        let pts = random_points(20_000, 1);
        let mut wc = WindowCounter::from_points(&pts);
        let mut r = SplitMix64::new(2);
        for i in 0..600 {
            let side = 10f64.powf(r.uniform(-6.0, 2.5));
            let c = if i % 2 == 0 {
                pts[r.below(pts.len() as u64) as usize]
            } else {
                [r.uniform(-200.0, 200.0), r.uniform(-100.0, 100.0)]
            };
            let q = [
                c[0] - side / 2.0,
                c[1] - side * 0.3,
                c[0] + side / 2.0,
                c[1] + side * 0.7,
            ];
            assert_eq!(wc.count(&q), wc.count_brute(&q), "window {q:?}");
        }
        // Exact boundaries: a window whose edge is exactly a point.
        let q = [0.0, 0.0, 10.0, 5.0];
        assert_eq!(wc.count(&q), wc.count_brute(&q));
    }

    #[test]
    fn grid_counts_equal_brute_force_on_rects() {
        let bs: Vec<[f64; 4]> = buildings(9, 20_000).map(|b| b.bbox).collect();
        let mut wc = WindowCounter::from_rects(&bs);
        let mut r = SplitMix64::new(3);
        for _ in 0..600 {
            let side = 10f64.powf(r.uniform(-5.0, 1.5));
            let b = bs[r.below(bs.len() as u64) as usize];
            let c = [(b[0] + b[2]) / 2.0 + r.normal() * side, (b[1] + b[3]) / 2.0];
            let q = [
                c[0] - side / 2.0,
                c[1] - side / 2.0,
                c[0] + side / 2.0,
                c[1] + side / 2.0,
            ];
            assert_eq!(wc.count(&q), wc.count_brute(&q), "window {q:?}");
        }
    }

    #[test]
    fn empty_and_degenerate_inputs() {
        let c = calibrate_ranges(&[], 10.0, 5, 1);
        assert!(c.queries.is_empty() && c.clamped);
        let c = calibrate_windows(&[], 10.0, 5, 1);
        assert!(c.queries.is_empty() && c.clamped);
        // All equal values: width 0 already returns everything.
        let c = calibrate_ranges(&[7; 100], 10.0, 5, 1);
        assert_eq!(c.param, 0);
        assert_eq!(c.achieved_mean, 100.0);
        assert!(c.clamped);
        // Target above the record count: clamped to everything.
        let c = calibrate_ranges(&[1, 2, 3, 1000], 10.0, 5, 1);
        assert_eq!(c.achieved_mean, 4.0);
        assert!(c.clamped);
        let mut wc = WindowCounter::from_points(&[[f64::NAN, 1.0], [1.0, 1.0]]);
        assert_eq!(wc.len(), 1);
        assert_eq!(wc.count(&[0.0, 0.0, 2.0, 2.0]), 1);
        assert_eq!(wc.count(&[f64::NAN, 0.0, 2.0, 2.0]), 0);
        assert_eq!(
            wc.count(&[
                f64::NEG_INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::INFINITY
            ]),
            1
        );
    }

    fn check(c: &Calibrated<impl std::fmt::Debug>, target: f64, what: &str) {
        eprintln!(
            "{what}: target {target} achieved {:.1} param {:?}",
            c.achieved_mean, c.param
        );
        assert!(!c.clamped, "{what}: clamped");
        assert!(
            within(c.achieved_mean, target),
            "{what}: {} vs {target}",
            c.achieved_mean
        );
        assert_eq!(c.queries.len(), 1000);
    }

    /// Calibration on 50k tweets hits scaled-down targets within ±10%, and
    /// the reported mean is the real mean of the queries.
    #[test]
    fn calibration_hits_targets_on_tweets() {
        let ts: Vec<Tweet> = tweets(1, 50_000).collect();
        let users: Vec<i64> = ts.iter().map(|t| t.user_id).collect();
        let pts: Vec<[f64; 2]> = ts.iter().map(|t| t.coordinates).collect();
        let counter = IntCounter::new(&users);
        for target in [40.0, 400.0, 4000.0] {
            let c = calibrate_ranges(&users, target, 1000, 7);
            check(&c, target, "user_id");
            let m = mean(
                &c.queries
                    .iter()
                    .map(|q| counter.count_query(q))
                    .collect::<Vec<_>>(),
            );
            assert_eq!(m, c.achieved_mean);
            // Centres are data values.
            for q in &c.queries {
                let Query::Range(lo, hi) = *q else {
                    panic!("not a range")
                };
                assert_eq!(hi - lo, c.param);
                assert!(counter.count(lo, hi) >= 1);
            }
        }
        let wc = WindowCounter::from_points(&pts);
        for target in [20.0, 150.0, 5000.0] {
            let c = calibrate_windows(&pts, target, 1000, 7);
            check(&c, target, "coordinates");
            let m = mean(
                &c.queries
                    .iter()
                    .map(|q| match q {
                        Query::Window(w) => wc.count_brute(w),
                        _ => 0,
                    })
                    .collect::<Vec<_>>(),
            );
            assert!((m - c.achieved_mean).abs() < 1e-9);
        }
    }

    #[test]
    fn calibration_hits_targets_on_buildings_and_synthetic() {
        let bs: Vec<Building> = buildings(2, 50_000).collect();
        let rects: Vec<[f64; 4]> = bs.iter().map(|b| b.bbox).collect();
        let perims: Vec<f64> = bs.iter().map(|b| b.perimeter).collect();
        for target in [10.0, 200.0, 6000.0] {
            check(
                &calibrate_windows_rect(&rects, target, 1000, 3),
                target,
                "bbox",
            );
        }
        for target in [100.0, 1000.0, 10_000.0] {
            check(
                &calibrate_ranges_f64(&perims, target, 1000, 3),
                target,
                "perimeter",
            );
        }
        for dist in [Dist::Uniform, Dist::Zipf(0.5), Dist::Zipf(0.8)] {
            let attrs: Vec<i64> = synthetic(1, 50_000, dist).map(|r| r.attr).collect();
            for target in [30.0, 300.0, 3000.0] {
                check(
                    &calibrate_ranges(&attrs, target, 1000, 3),
                    target,
                    &format!("attr {dist}"),
                );
            }
        }
    }

    #[test]
    fn query_sets_are_deterministic_and_complete() {
        let ts: Vec<Tweet> = tweets(4, 5_000).collect();
        let a = tweet_query_sets(&ts, 100, 1);
        let b = tweet_query_sets(&ts, 100, 1);
        assert_eq!(a, b);
        assert_ne!(a, tweet_query_sets(&ts, 100, 2));
        let names: Vec<String> = a.iter().map(|s| s.file_name()).collect();
        assert_eq!(
            names,
            [
                "user_id-small.json",
                "user_id-medium.json",
                "user_id-large.json",
                "user_id-eq.json",
                "coordinates-small.json",
                "coordinates-medium.json",
                "coordinates-large.json"
            ]
        );
        for s in &a {
            assert_eq!(s.queries.len(), 100);
            assert!(
                (mean(&s.expected_counts) - s.achieved_mean).abs() < 1e-9,
                "{}",
                s.file_name()
            );
        }
        // 11349 results cannot be the mean over 5000 tweets.
        assert!(a[2].clamped);
        let json = serde_json::to_string(&a[0]).expect("serialise");
        let back: QuerySet = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, a[0]);
        let bs: Vec<Building> = buildings(4, 5_000).collect();
        assert_eq!(building_query_sets(&bs, 50, 1).len(), 6);
    }
}
