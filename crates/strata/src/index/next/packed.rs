//! A static R-tree over one table's spatial slices, packed by
//! sort-tile-recursive (STR) order.
//!
//! Level 0 holds the slices' rectangles in STR order (by centre: vertical
//! slabs of about √(n / NODE) nodes' worth of slices each, each slab by y);
//! each level above holds the union of [`NODE`] consecutive boxes of the
//! level below, up to one root, laid out in one array as flatbush does. A
//! search walks down from the root, testing a node's children in one loop,
//! and allocates nothing besides the caller's output.
//!
//! Built in memory from the global entries when a table's index is loaded
//! (nothing of it is on disk). It replaced an `rstar` tree, whose search
//! (an iterator with its own stack per query and table, boxes scattered
//! over nodes) was a fifth of a small window's top-10 query's
//! instructions. Packing the slices in their own (Hilbert) order instead
//! of STR order made parents too wide: 1.5× the rstar search's work.

use crate::index::value::intersects;

/// Children per node.
const NODE: usize = 16;

/// The packed tree: every level's boxes, leaves first.
#[derive(Debug, Clone, Default)]
pub struct PackedTree {
    boxes: Vec<[f64; 4]>,
    /// Start of each level in `boxes`, and the end of the last (so level
    /// `l` is `boxes[levels[l]..levels[l + 1]]`); empty for an empty tree.
    levels: Vec<usize>,
    /// The slice of each leaf box.
    ids: Vec<u32>,
}

/// The smallest box holding `a` and `b`.
fn union(a: &[f64; 4], b: &[f64; 4]) -> [f64; 4] {
    [
        a[0].min(b[0]),
        a[1].min(b[1]),
        a[2].max(b[2]),
        a[3].max(b[3]),
    ]
}

/// The slices of `rects` in STR order.
fn str_order(rects: &[[f64; 4]]) -> Vec<u32> {
    let cx = |i: &u32| rects.get(*i as usize).map_or(0.0, |r| r[0] + r[2]);
    let cy = |i: &u32| rects.get(*i as usize).map_or(0.0, |r| r[1] + r[3]);
    let mut order: Vec<u32> = (0..rects.len() as u32).collect();
    order.sort_unstable_by(|a, b| cx(a).total_cmp(&cx(b)));
    let nodes = rects.len().div_ceil(NODE);
    let slabs = (nodes as f64).sqrt().ceil().max(1.0) as usize;
    let per_slab = nodes.div_ceil(slabs) * NODE;
    for slab in order.chunks_mut(per_slab.max(NODE)) {
        slab.sort_unstable_by(|a, b| cy(a).total_cmp(&cy(b)));
    }
    order
}

impl PackedTree {
    /// The tree over `rects` (slice `i` is `rects[i]`), each given as
    /// `[x1, y1, x2, y2]` with `x1 <= x2` and `y1 <= y2`.
    pub fn new(rects: &[[f64; 4]]) -> PackedTree {
        if rects.is_empty() {
            return PackedTree::default();
        }
        let ids = str_order(rects);
        let mut boxes: Vec<[f64; 4]> = ids
            .iter()
            .map(|&i| rects.get(i as usize).copied().unwrap_or([f64::NAN; 4]))
            .collect();
        let mut levels = vec![0];
        let mut start = 0;
        loop {
            let end = boxes.len();
            levels.push(end);
            if end - start <= 1 {
                break;
            }
            let parents: Vec<[f64; 4]> = boxes
                .get(start..end)
                .unwrap_or_default()
                .chunks(NODE)
                .filter_map(|c| {
                    let (first, rest) = c.split_first()?;
                    Some(rest.iter().fold(*first, |u, b| union(&u, b)))
                })
                .collect();
            boxes.extend(parents);
            start = end;
        }
        PackedTree { boxes, levels, ids }
    }

    /// Calls `f` with each slice whose rectangle intersects window `w`
    /// (inclusive edges, the window's corners in any order), in no
    /// particular order. A window with a NaN corner meets nothing.
    pub fn search(&self, w: &[f64; 4], mut f: impl FnMut(usize)) {
        if w.iter().any(|c| c.is_nan()) {
            return;
        }
        let w = [
            w[0].min(w[2]),
            w[1].min(w[3]),
            w[0].max(w[2]),
            w[1].max(w[3]),
        ];
        let Some(top) = self.levels.len().checked_sub(2) else {
            return;
        };
        let root = self.levels.get(top).and_then(|&s| self.boxes.get(s));
        if root.is_some_and(|b| intersects(b, &w)) {
            self.visit(top, 0, &w, &mut f);
        }
    }

    /// Visits node `node` of level `level`, whose box meets `w`.
    fn visit(&self, level: usize, node: usize, w: &[f64; 4], f: &mut impl FnMut(usize)) {
        let Some(below) = level.checked_sub(1) else {
            if let Some(&id) = self.ids.get(node) {
                f(id as usize);
            }
            return;
        };
        let (Some(&start), Some(&end)) = (self.levels.get(below), self.levels.get(level)) else {
            return;
        };
        let first = start + node * NODE;
        let children = self
            .boxes
            .get(first..(first + NODE).min(end))
            .unwrap_or_default();
        // The children that meet `w` as a bit mask, each tested without a
        // branch (`intersects` combines its comparisons with `&`), then
        // visited: whether a box meets a window is data the branch
        // predictor cannot learn, and a branch per child mispredicted on
        // most of the ~2,000 boxes a small window tests over 16 tables.
        let mut mask: u32 = 0;
        for (j, b) in children.iter().enumerate() {
            mask |= u32::from(intersects(b, w)) << j;
        }
        while mask != 0 {
            let j = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            self.visit(below, node * NODE + j, w, f);
        }
    }

    /// Bytes of RAM held.
    pub fn memory_bytes(&self) -> usize {
        self.boxes.capacity() * 32 + self.levels.capacity() * 8 + self.ids.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    #[test]
    fn search_finds_exactly_the_intersecting_rects_in_order() {
        let mut next = xorshift(99);
        let mut coord = move || (next() % 10_000) as f64 / 10.0;
        for n in [0usize, 1, 2, 15, 16, 17, 255, 256, 257, 3000] {
            let rects: Vec<[f64; 4]> = (0..n)
                .map(|_| {
                    let (x, y) = (coord(), coord());
                    [x, y, x + coord() / 50.0, y + coord() / 50.0]
                })
                .collect();
            let tree = PackedTree::new(&rects);
            for _ in 0..50 {
                let (x, y) = (coord(), coord());
                let (dx, dy) = (coord() / 5.0, coord() / 5.0);
                // Corners in either order.
                let w = [x + dx, y, x, y + dy];
                let norm = [x, y, x + dx, y + dy];
                let mut got = Vec::new();
                tree.search(&w, |i| got.push(i));
                got.sort_unstable();
                let want: Vec<usize> = (0..n).filter(|&i| intersects(&rects[i], &norm)).collect();
                assert_eq!(got, want, "{n} rects, window {w:?}");
            }
            // A window covering everything finds every rect; a touching
            // edge counts.
            let mut all = Vec::new();
            tree.search(&[-1.0, -1.0, 2000.0, 2000.0], |i| all.push(i));
            all.sort_unstable();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
            if let Some(r) = rects.first() {
                let mut edge = Vec::new();
                tree.search(&[r[2], r[3], r[2] + 1e-9, r[3] + 1e-9], |i| edge.push(i));
                assert!(edge.contains(&0));
            }
        }
    }

    #[test]
    fn nan_windows_find_nothing() {
        let tree = PackedTree::new(&[[0.0, 0.0, 1.0, 1.0]; 40]);
        let mut got = Vec::new();
        tree.search(&[f64::NAN, 0.0, 1.0, 1.0], |i| got.push(i));
        assert!(got.is_empty());
    }
}
