//! The two orders a NEXT query puts its candidates and results in, by
//! integer sorts that do not compare: candidates grouped by data block
//! (each block read once, entries in position order) and results newest
//! first. A comparison sort of these vectors was about a sixth of a large
//! query's instructions (16 k results: two sorts of n log n comparisons and
//! moves); a counting or radix pass is linear.

/// Below this many items a comparison sort is cheaper than the passes.
const SMALL: usize = 256;

/// Sorts `cands` (data block position, entry position, seq) by (block,
/// entry). `blocks` bounds the block positions (the table's data block
/// count); a position at or above it keeps the comparison sort's order
/// correct, only slower.
pub(crate) fn by_position(cands: &mut Vec<(u32, u32, u64)>, blocks: usize) {
    let key = |c: &(u32, u32, u64)| (u64::from(c.0) << 32) | u64::from(c.1);
    // A counting pass costs the block count besides the items: worth it
    // only when the items are a fair share of the blocks.
    let n = cands.len();
    if n < SMALL || n < blocks / 8 || cands.iter().any(|c| c.0 as usize >= blocks) {
        cands.sort_unstable_by_key(key);
        return;
    }
    let mut start = vec![0usize; blocks + 1];
    let mut out = vec![(0u32, 0u32, 0u64); n];
    scatter(cands, &mut out, &mut start, |c| c.0 as usize);
    // Within a block (few entries each), by entry position.
    for group in out.chunk_by_mut(|a, b| a.0 == b.0) {
        if group.len() > 1 {
            group.sort_unstable_by_key(key);
        }
    }
    *cands = out;
}

/// Sorts `items` (seq, payload) by seq, highest first, by a least
/// significant digit radix sort on the bits in which the seqs differ.
pub(crate) fn by_seq_desc(items: &mut Vec<(u64, u32)>) {
    if items.len() < SMALL {
        items.sort_unstable_by_key(|o| std::cmp::Reverse(o.0));
        return;
    }
    // Descending = ascending on the complement.
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for o in items.iter() {
        lo = lo.min(!o.0);
        hi = hi.max(!o.0);
    }
    let bits = 64 - (lo ^ hi).leading_zeros();
    let mut src = std::mem::take(items);
    let mut dst = vec![(0u64, 0u32); src.len()];
    let mut shift = 0;
    while shift < bits {
        let mut start = [0usize; 257];
        scatter(&src, &mut dst, &mut start, |o| {
            ((!o.0 >> shift) & 0xff) as usize
        });
        std::mem::swap(&mut src, &mut dst);
        shift += 8;
    }
    *items = src;
}

/// One counting-sort pass: moves `src` into `dst` (of the same length)
/// ordered by `bucket`, stably. `start` holds one more counter than there
/// are buckets, all zero; every bucket must be below `start.len() - 1`.
fn scatter<T: Copy>(src: &[T], dst: &mut [T], start: &mut [usize], bucket: impl Fn(&T) -> usize) {
    for x in src {
        if let Some(s) = start.get_mut(bucket(x) + 1) {
            *s += 1;
        }
    }
    for i in 1..start.len() {
        let prev = start.get(i - 1).copied().unwrap_or(0);
        if let Some(s) = start.get_mut(i) {
            *s += prev;
        }
    }
    for x in src {
        if let Some(s) = start.get_mut(bucket(x)) {
            if let Some(slot) = dst.get_mut(*s) {
                *slot = *x;
            }
            *s += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state >> 33
    }

    #[test]
    fn by_position_matches_a_comparison_sort() {
        let mut r = 7u64;
        for (n, blocks) in [
            (0, 10),
            (5, 100),
            (300, 50),
            (2000, 1000),
            (5000, 40_000),
            (4000, 64),
        ] {
            let mut v: Vec<(u32, u32, u64)> = (0..n)
                .map(|_| {
                    let b = (lcg(&mut r) % blocks as u64) as u32;
                    let p = (lcg(&mut r) % 30) as u32;
                    (b, p, lcg(&mut r))
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable_by_key(|c| (c.0, c.1));
            by_position(&mut v, blocks);
            let k = |v: &[(u32, u32, u64)]| v.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>();
            assert_eq!(k(&v), k(&want), "n {n} blocks {blocks}");
            let mut a = v.clone();
            let mut b = want.clone();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "same items");
        }
        // A block position beyond the bound falls back to comparing.
        let mut v: Vec<(u32, u32, u64)> = (0..1000).map(|i| (1000 - i, 0, 0)).collect();
        by_position(&mut v, 10);
        assert!(v.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn by_seq_desc_matches_a_comparison_sort() {
        let mut r = 11u64;
        for (n, range) in [
            (0u64, 1u64),
            (100, 1000),
            (300, 1 << 40),
            (5000, 1 << 18),
            (3000, 4),
            (1000, u64::MAX),
        ] {
            let mut v: Vec<(u64, u32)> = (0..n)
                .map(|i| {
                    let s = if range == u64::MAX {
                        lcg(&mut r) << 31 ^ lcg(&mut r)
                    } else {
                        lcg(&mut r) % range
                    };
                    (s, i as u32)
                })
                .collect();
            let mut want: Vec<u64> = v.iter().map(|o| o.0).collect();
            want.sort_unstable_by(|a, b| b.cmp(a));
            by_seq_desc(&mut v);
            assert_eq!(v.iter().map(|o| o.0).collect::<Vec<_>>(), want, "n {n}");
            let mut ids: Vec<u32> = v.iter().map(|o| o.1).collect();
            ids.sort_unstable();
            assert_eq!(ids, (0..n as u32).collect::<Vec<_>>());
        }
    }
}
