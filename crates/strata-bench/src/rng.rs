//! Deterministic randomness: SplitMix64 and the samplers the generators use.
//!
//! No external crates: every stream is a [`SplitMix64`] seeded from the user
//! seed mixed with a per-purpose constant ([`SplitMix64::derive`]), so two
//! aspects of a record (say its author and its text) come from independent
//! streams and changing how one is drawn does not shift the other.
//!
//! * [`Zipf`] draws ranks `1..=n` with `P(k) ∝ k^-s` in O(1) expected time
//!   per draw, for any `n` (including 10^8 and more), with W. Hörmann and
//!   G. Derflinger's rejection-inversion method ("Rejection-inversion to
//!   generate variates from monotone discrete distributions", ACM TOMACS
//!   1996), in the formulation used by Apache Commons RNG.
//! * [`Permutation`] is a keyed bijection of `0..domain` (a 4-round Feistel
//!   network on the next even bit width, with cycle-walking), used to
//!   scatter ranks over an id space.

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, full period,
/// good enough statistical quality for workload generation.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

/// The SplitMix64 output function (a strong 64-bit mixer).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl SplitMix64 {
    /// A generator whose sequence is a function of `seed` only.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// An independent stream for purpose `stream` under the same user seed.
    pub fn derive(seed: u64, stream: u64) -> Self {
        SplitMix64::new(mix64(
            seed ^ mix64(stream.wrapping_add(0x9e37_79b9_7f4a_7c15)),
        ))
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `(0, 1]` (never zero, safe under `ln`).
    pub fn f64_open0(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` without bias (Lemire's multiply-shift with
    /// rejection). Returns 0 when `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            // Rare slow path: reject the low values that would bias.
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Uniform in `lo..=hi` (requires `lo <= hi`; returns `lo` otherwise).
    pub fn range_u64(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// Standard normal (Box–Muller; one of the pair is discarded so that
    /// each call consumes exactly two draws).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64_open0();
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * self.f64_open0().ln()
    }

    /// Index into `cumulative` (a non-decreasing vector of cumulative
    /// weights, last element = total) drawn with probability ∝ weight.
    /// Returns 0 for an empty vector.
    pub fn weighted(&mut self, cumulative: &[f64]) -> usize {
        let Some(&total) = cumulative.last() else {
            return 0;
        };
        let x = self.f64() * total;
        cumulative
            .partition_point(|&c| c <= x)
            .min(cumulative.len() - 1)
    }
}

/// Zipf distribution over ranks `1..=n`: `P(k) = k^-s / H(n, s)`.
///
/// Sampling is Hörmann–Derflinger rejection-inversion: O(1) expected time
/// and no tables, whatever `n` is; the acceptance rate is above 90% for
/// every `s`. Valid for any `s >= 0` (`s = 0` is uniform).
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    threshold: f64,
}

impl Zipf {
    /// The distribution over `1..=n` with exponent `s`. `n` is at least 1
    /// and `s` is clamped to be non-negative and finite.
    pub fn new(n: u64, s: f64) -> Self {
        let n = n.max(1) as f64;
        let s = if s.is_finite() { s.max(0.0) } else { 0.0 };
        let mut z = Zipf {
            n,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            threshold: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(n + 0.5);
        z.threshold = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// Number of ranks.
    pub fn n(&self) -> u64 {
        self.n as u64
    }

    /// The exponent.
    pub fn exponent(&self) -> f64 {
        self.s
    }

    /// One rank in `1..=n`.
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        loop {
            let u = self.h_integral_n + rng.f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// A keyed pseudo-random bijection of `0..domain`.
///
/// A balanced 4-round Feistel network over the smallest even bit width
/// covering `domain`, with cycle-walking: values that land outside the
/// domain are permuted again until they fall inside (fewer than 4 rounds of
/// walking on average, since the width is at most 4× the domain).
#[derive(Debug, Clone)]
pub struct Permutation {
    domain: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// A permutation of `0..domain` (`domain >= 1`, at most 2^62) chosen by
    /// `seed`.
    pub fn new(domain: u64, seed: u64) -> Self {
        let domain = domain.clamp(1, 1 << 62);
        let bits = 64 - (domain - 1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut r = SplitMix64::derive(seed, 0x7065_726d);
        let keys = [r.next_u64(), r.next_u64(), r.next_u64(), r.next_u64()];
        Permutation {
            domain,
            half_bits,
            keys,
        }
    }

    /// The size of the permuted set.
    pub fn domain(&self) -> u64 {
        self.domain
    }

    /// The image of `x` (taken modulo the domain).
    pub fn apply(&self, x: u64) -> u64 {
        let mut v = x % self.domain;
        loop {
            v = self.feistel(v);
            if v < self.domain {
                return v;
            }
        }
    }

    fn feistel(&self, v: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let mut l = v >> self.half_bits;
        let mut r = v & mask;
        for &k in &self.keys {
            let f = mix64(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_is_deterministic_and_seed_sensitive() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = SplitMix64::new(8);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Reference value of SplitMix64 seeded with 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn below_and_uniform_stay_in_range() {
        let mut r = SplitMix64::new(1);
        let mut hist = [0u32; 7];
        for _ in 0..70_000 {
            hist[r.below(7) as usize] += 1;
            let f = r.f64();
            assert!((0.0..1.0).contains(&f));
        }
        for h in hist {
            assert!((9_000..11_000).contains(&h), "{hist:?}");
        }
        assert_eq!(r.range_u64(5, 5), 5);
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut r = SplitMix64::new(3);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "{mean}");
        assert!((var - 1.0).abs() < 0.03, "{var}");
    }

    /// Frequencies of a small Zipf match `k^-s / H` for every exponent used
    /// by the synthetic workloads.
    #[test]
    fn zipf_matches_the_law() {
        for s in [0.0, 0.5, 0.8, 1.0, 1.1] {
            let n = 50u64;
            let z = Zipf::new(n, s);
            let mut r = SplitMix64::new(11);
            let draws = 200_000;
            let mut hist = vec![0u32; n as usize + 1];
            for _ in 0..draws {
                let k = z.sample(&mut r);
                assert!((1..=n).contains(&k));
                hist[k as usize] += 1;
            }
            let h: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
            for k in [1usize, 2, 10, 50] {
                let expect = draws as f64 * (k as f64).powf(-s) / h;
                let got = f64::from(hist[k]);
                assert!(
                    (got - expect).abs() < 5.0 * expect.sqrt() + 0.01 * expect,
                    "s={s} k={k}: got {got}, expected {expect}"
                );
            }
        }
    }

    #[test]
    fn zipf_over_1e8_is_fast_and_skewed() {
        let z = Zipf::new(100_000_000, 1.0);
        let mut r = SplitMix64::new(5);
        let draws = 200_000;
        let ones = (0..draws).filter(|_| z.sample(&mut r) == 1).count();
        // P(1) = 1 / H(1e8) ≈ 1 / 19.0.
        let p = ones as f64 / draws as f64;
        assert!((p - 1.0 / 19.0).abs() < 0.003, "{p}");
    }

    #[test]
    fn permutation_is_a_bijection() {
        for domain in [1u64, 2, 3, 1000, 4097] {
            let p = Permutation::new(domain, 9);
            let mut seen = vec![false; domain as usize];
            for x in 0..domain {
                let y = p.apply(x);
                assert!(y < domain);
                assert!(!seen[y as usize], "domain {domain}: {y} twice");
                seen[y as usize] = true;
            }
        }
        let p = Permutation::new(4_000_000_000, 1);
        assert!(p.apply(0) < 4_000_000_000);
        assert_ne!(p.apply(0), Permutation::new(4_000_000_000, 2).apply(0));
    }
}
