//! Deterministic record generators: tweets, OSM-like buildings, synthetic
//! uniform / Zipf attributes.
//!
//! Every generator is an iterator that is a pure function of `(seed, n)`;
//! each aspect of a record (author, position, time, text, ...) is drawn from
//! its own [`SplitMix64`] stream, so changing one model does not shift the
//! others. Records carry an increasing numeric `id` (the primary key) and
//! serialise with `to_json` to one compact JSON object (one JSONL line).
//!
//! # Tweets (NEXT, SIGMOD 2025 §6.1; LevelDB++ study, SIGMOD 2018 §5)
//!
//! The paper's Tweet set has 33M geo-tagged tweets of ≈420 bytes with 4.7
//! tweets per user on average; queries use `UserID` (numeric) and
//! `Coordinates` (spatial).
//!
//! * `id`: starts at 10^15 and grows by a uniform gap in `1..=2^17`, so ids
//!   have 16 decimal digits (decimal order = numeric order) and stay below
//!   2^53 (exact in any JSON reader) for any realistic `n`.
//! * `user_id`: each tweet's author is a rank drawn from a Zipf law
//!   `P(k) ∝ k^-s` over a population of `U` users, mapped to an id in
//!   `[1, 4·10^9]` through a keyed Feistel permutation (so popular users are
//!   scattered over the id space like real Twitter ids). `s` and `U` are
//!   solved numerically from `n` ([`UserModel::for_tweets`]) so that
//!   (a) the expected number of *active* users (at least one tweet) is
//!   `n / 4.7` — the paper's mean — and (b) the expected tweet count of the
//!   top user is `2·√n` (≈450 at 50k tweets, ≈11 500 at 33M: "a few users
//!   with thousands of tweets"). This gives `s ≈ 0.5–0.6`, not the ≈1.0 of a
//!   classic Zipf: with `s ≈ 1` the top user would own `1/H(U) ≈ 10%` of all
//!   tweets at every scale, so the mean result of a user_id range query
//!   centred on a sampled tweet could never drop below `Σc²/n` (≈800 at 50k
//!   tweets, ≈500k at 33M) and the paper's small class (≈108 results) would
//!   be unreachable. With the solved model `Σc²/n` stays ≈20–50. Measured
//!   at 50k tweets, seed 1 (test `user_distribution`): `s = 0.588`,
//!   `U = 11 405`, 10 664 active users, mean 4.69 tweets per user, median
//!   3, max 409, `Σc²/n = 20.9`. At 2M tweets the paper's user_id targets
//!   108/1107/11349 are reached with widths ≈ 158k/2.2M/22.6M.
//! * `coordinates` `[lon, lat]`: with probability 0.95 a city from
//!   [`crate::places::PLACES`] chosen ∝ `population^0.8`, then a Gaussian
//!   offset with `σ = clamp(0.02·(pop/10^5)^0.4, 0.02, 0.3)` degrees
//!   (longitude stretched by `1/cos(lat)`), as a mixture of a wide
//!   component (60%, σ) and a dense core (40%, σ/5); otherwise uniform over
//!   a land-ish region of [`crate::places::REGIONS`] (∝ area). Rounded to
//!   10^-6 degrees. `place` is the city or region name.
//! * `created_at` (unix ms): starts 2019-01-01, strictly increasing; gaps
//!   are `1 + Exp(mean)` ms with the mean switching between a calm regime
//!   (80 ms) and bursts (8 ms); a calm stretch lasts 2000 tweets on
//!   average, a burst 200.
//! * `text`: ASCII pseudo-words (with some `#tags`, `@mentions` and links),
//!   sized so the whole JSON record is uniform in 400..=480 bytes.
//! * `lang` follows the place's country (75%), else mostly `en`;
//!   `retweet_count`/`favorite_count` are zero-inflated Pareto; `source`
//!   is one of a few clients.
//!
//! # Buildings (NEXT §6.1, OSM Buildings from SpatialHadoop)
//!
//! Centres are clustered like tweets (97% around places, 3% background).
//! Footprint width is log-normal (median 18 m, σ_ln 0.45: most 10–50 m);
//! 3% are large (Pareto, 60 m – 3 km). Height/width aspect is log-normal.
//! Degrees = metres / 111 000 (longitude divided by `cos(lat)`); `bbox`
//! is rounded to 10^-7 degrees (OSM precision). `perimeter` (metres) is the
//! footprint's box perimeter times a shape factor in [0.9, 1.3).
//! JSON records are uniform in 210..=290 bytes.
//!
//! # Synthetic (NEXT §6.5)
//!
//! `attr` in `1..=10^8`, uniform or Zipf(`s`). A Zipf rank `k` is mapped to
//! `1 + π(k - 1)` with `π` a keyed permutation of `0..10^8`, so popular
//! values are scattered over the domain instead of being the smallest
//! numbers (the paper notes its Zipf-1.0 data were skewed toward small
//! values; use the rank directly if that is wanted). Records are uniform in
//! 380..=420 bytes.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::places::{Place, PLACES, REGIONS};
use crate::rng::{Permutation, SplitMix64, Zipf};

/// Mean tweets per active user in the paper's Tweet data set (NEXT §6.1).
pub const TWEETS_PER_USER: f64 = 4.7;
/// Size of the user-id space: ids are in `1..=USER_ID_SPACE`.
pub const USER_ID_SPACE: u64 = 4_000_000_000;
/// First tweet id.
pub const FIRST_TWEET_ID: u64 = 1_000_000_000_000_000;
/// First `created_at`: 2019-01-01T00:00:00Z in unix milliseconds.
pub const FIRST_CREATED_AT: i64 = 1_546_300_800_000;
/// Synthetic attributes are in `1..=SYNTHETIC_DOMAIN` (NEXT §6.5).
pub const SYNTHETIC_DOMAIN: u64 = 100_000_000;

// Stream identifiers for SplitMix64::derive.
const S_USER: u64 = 1;
const S_GEO: u64 = 2;
const S_TIME: u64 = 3;
const S_TEXT: u64 = 4;
const S_MISC: u64 = 5;
const S_ID: u64 = 6;
const S_PERM: u64 = 7;
const S_SIZE: u64 = 8;
const S_ATTR: u64 = 9;
// Added to the stream ids of each data set, so that data sets generated
// with the same seed are independent of each other.
const SALT_BUILDINGS: u64 = 0x100;
const SALT_SYNTHETIC: u64 = 0x200;

// ---------------------------------------------------------------- users

/// The author model of the tweet generator: Zipf(`exponent`) over
/// `population` ranks. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UserModel {
    /// Zipf exponent over ranks.
    pub exponent: f64,
    /// Number of ranks (users who may tweet).
    pub population: u64,
    /// Expected number of users with at least one tweet among `n`.
    pub expected_active: f64,
    /// Expected tweet count of the most active user.
    pub expected_top: f64,
}

impl UserModel {
    /// Solves the exponent and population for `n` tweets: expected active
    /// users `n / 4.7` and expected top-user count `2·√n` (clamped to what
    /// an exponent in `[0, 0.95]` can reach). Deterministic; O(10^3) sums of
    /// O(10^4) terms.
    pub fn for_tweets(n: u64) -> UserModel {
        let nf = n.max(1) as f64;
        let target_active = (nf / TWEETS_PER_USER).max(1.0);
        let target_top = 2.0 * nf.sqrt();
        let solve_u = |s: f64| -> f64 {
            // Smallest population whose expected active count reaches the
            // target (active count grows with the population).
            let (mut lo, mut hi) = (target_active.ceil(), (1000.0 * nf).max(target_active * 2.0));
            if expected_active(nf, lo, s) >= target_active {
                return lo;
            }
            for _ in 0..60 {
                if hi - lo <= 1.0 {
                    break;
                }
                let mid = ((lo + hi) / 2.0).floor();
                if expected_active(nf, mid, s) < target_active {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            hi
        };
        let top = |s: f64, u: f64| nf / harmonic(u, s);
        let (mut lo, mut hi) = (0.0f64, 0.95f64);
        let mut best = (hi, solve_u(hi));
        if top(best.0, best.1) > target_top {
            best = (lo, solve_u(lo));
            if top(best.0, best.1) < target_top {
                for _ in 0..40 {
                    let mid = (lo + hi) / 2.0;
                    let u = solve_u(mid);
                    best = (mid, u);
                    if top(mid, u) < target_top {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                    if hi - lo < 1e-4 {
                        break;
                    }
                }
            }
        }
        let (s, u) = best;
        UserModel {
            exponent: s,
            population: u as u64,
            expected_active: expected_active(nf, u, s),
            expected_top: top(s, u),
        }
    }
}

/// `Σ_{k=1..u} f(k)` for a smooth decreasing `f`: exact for the first 2048
/// ranks, midpoint rule over geometric buckets (ratio 1.002) beyond.
fn rank_sum(u: f64, f: impl Fn(f64) -> f64) -> f64 {
    let u = u.max(0.0).floor();
    let exact = u.min(2048.0) as u64;
    let mut sum: f64 = (1..=exact).map(|k| f(k as f64)).sum();
    let mut a = exact as f64 + 1.0;
    while a <= u {
        let b = (a * 1.002).ceil().max(a + 1.0).min(u + 1.0);
        sum += (b - a) * f((a + b - 1.0) / 2.0);
        a = b;
    }
    sum
}

/// Generalised harmonic number `H(u, s) = Σ_{k=1..u} k^-s`.
fn harmonic(u: f64, s: f64) -> f64 {
    rank_sum(u, |k| k.powf(-s))
}

/// Expected number of distinct ranks among `n` Zipf(`s`, `u`) draws.
fn expected_active(n: f64, u: f64, s: f64) -> f64 {
    let h = harmonic(u, s);
    rank_sum(u, |k| {
        let p = k.powf(-s) / h;
        -(n * (-p).ln_1p()).exp_m1()
    })
}

// ------------------------------------------------------------------ geo

/// Samples positions around [`PLACES`] (∝ population^0.8) with a
/// `background` fraction uniform over [`REGIONS`] (∝ area).
#[derive(Debug, Clone)]
struct Geo {
    cum_places: Vec<f64>,
    cum_regions: Vec<f64>,
    background: f64,
}

/// A sampled position.
struct Position {
    lon: f64,
    lat: f64,
    /// The city, or `None` for background noise.
    place: Option<&'static Place>,
    /// City or region name.
    name: &'static str,
}

/// Gaussian spread (degrees) of a city of this population.
pub fn city_sigma(population: u64) -> f64 {
    (0.02 * (population as f64 / 1e5).powf(0.4)).clamp(0.02, 0.3)
}

impl Geo {
    fn new(background: f64) -> Geo {
        let mut acc = 0.0;
        let cum_places = PLACES
            .iter()
            .map(|p| {
                acc += (p.population as f64).powf(0.8);
                acc
            })
            .collect();
        let mut acc = 0.0;
        let cum_regions = REGIONS
            .iter()
            .map(|r| {
                acc += (r.bbox[2] - r.bbox[0]) * (r.bbox[3] - r.bbox[1]);
                acc
            })
            .collect();
        Geo {
            cum_places,
            cum_regions,
            background,
        }
    }

    fn sample(&self, r: &mut SplitMix64) -> Position {
        if r.chance(self.background) {
            let reg = &REGIONS[r.weighted(&self.cum_regions)];
            return Position {
                lon: r.uniform(reg.bbox[0], reg.bbox[2]),
                lat: r.uniform(reg.bbox[1], reg.bbox[3]),
                place: None,
                name: reg.name,
            };
        }
        let pl = &PLACES[r.weighted(&self.cum_places)];
        let mut sigma = city_sigma(pl.population);
        if r.chance(0.4) {
            sigma /= 5.0;
        }
        let lat = (pl.lat + sigma * r.normal()).clamp(-90.0, 90.0);
        let stretch = 1.0 / pl.lat.to_radians().cos().max(0.2);
        let mut lon = pl.lon + sigma * stretch * r.normal();
        if lon > 180.0 {
            lon -= 360.0;
        } else if lon < -180.0 {
            lon += 360.0;
        }
        Position {
            lon,
            lat,
            place: Some(pl),
            name: pl.name,
        }
    }
}

/// Rounds to `10^-digits`.
fn round_to(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

// ----------------------------------------------------------------- text

const ONSETS: &[&str] = &[
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
    "ch", "sh", "th", "st", "tr", "br", "pl", "gr", "",
];
const VOWELS: &[&str] = &[
    "a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "oo",
];
const CODAS: &[&str] = &["", "", "", "n", "r", "s", "t", "l", "nd", "ng", "ck"];
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fn pick<'a>(r: &mut SplitMix64, xs: &[&'a str]) -> &'a str {
    xs[r.below(xs.len() as u64) as usize]
}

fn make_word(r: &mut SplitMix64) -> String {
    let mut w = String::new();
    let syllables = 1 + r.below(3) + u64::from(r.chance(0.15));
    for _ in 0..syllables {
        w.push_str(pick(r, ONSETS));
        w.push_str(pick(r, VOWELS));
    }
    w.push_str(pick(r, CODAS));
    w
}

/// The pseudo-word vocabulary: 4096 words drawn once from a fixed seed
/// (the same for every data set and seed), so that text costs one draw per
/// word.
fn vocabulary() -> &'static [String] {
    static VOCAB: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    VOCAB.get_or_init(|| {
        let mut r = SplitMix64::new(0x0076_6f63_6162);
        (0..4096).map(|_| make_word(&mut r)).collect()
    })
}

/// Pseudo-words text of exactly `len` ASCII bytes (no quotes, backslashes
/// or control characters; no leading or trailing space).
pub fn pseudo_text(r: &mut SplitMix64, len: usize) -> String {
    let vocab = vocabulary();
    let mut s = String::with_capacity(len + 32);
    while s.len() < len {
        if !s.is_empty() {
            s.push(' ');
        }
        // One draw: the low 12 bits pick a word, the bits above pick the
        // kind of token (5% #tag, 3% @mention, 2% link, 90% word).
        let x = r.next_u64();
        let word = vocab[(x & 4095) as usize].as_str();
        match (x >> 12) % 100 {
            0..=4 => s.push('#'),
            5..=7 => s.push('@'),
            8..=9 => {
                s.push_str("https://t.co/");
                let mut y = r.next_u64();
                for _ in 0..10 {
                    s.push(char::from(ALNUM[(y % ALNUM.len() as u64) as usize]));
                    y /= ALNUM.len() as u64;
                }
                continue;
            }
            _ => {}
        }
        s.push_str(word);
    }
    s.truncate(len);
    if s.ends_with(' ') {
        s.pop();
        s.push('s');
    }
    s
}

// ----------------------------------------------------------------- json

/// Appends `s` as a JSON string literal.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a JSON number for `x` (shortest round-trip form; `null` if not
/// finite, as serde_json does).
fn json_f64(out: &mut String, x: f64) {
    if x.is_finite() {
        // Writing into a String cannot fail.
        let _ = write!(out, "{x:?}");
    } else {
        out.push_str("null");
    }
}

fn json_f64s(out: &mut String, xs: &[f64]) {
    out.push('[');
    for (i, &x) in xs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_f64(out, x);
    }
    out.push(']');
}

// --------------------------------------------------------------- tweets

/// One generated tweet. `id` is the primary key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tweet {
    /// Primary key, increasing.
    pub id: u64,
    /// Author, in `1..=USER_ID_SPACE`.
    pub user_id: i64,
    /// Unix milliseconds, strictly increasing.
    pub created_at: i64,
    /// `[lon, lat]` in degrees.
    pub coordinates: [f64; 2],
    /// ASCII pseudo-words.
    pub text: String,
    /// Language code.
    pub lang: String,
    /// Retweets.
    pub retweet_count: u32,
    /// Likes.
    pub favorite_count: u32,
    /// City (or background region) name.
    pub place: String,
    /// Posting client.
    pub source: String,
}

impl Tweet {
    /// The record as one compact JSON object (fields in declaration order).
    pub fn to_json(&self) -> String {
        let mut o = String::with_capacity(512);
        o.push_str("{\"id\":");
        o.push_str(&self.id.to_string());
        o.push_str(",\"user_id\":");
        o.push_str(&self.user_id.to_string());
        o.push_str(",\"created_at\":");
        o.push_str(&self.created_at.to_string());
        o.push_str(",\"coordinates\":");
        json_f64s(&mut o, &self.coordinates);
        o.push_str(",\"text\":");
        json_str(&mut o, &self.text);
        o.push_str(",\"lang\":");
        json_str(&mut o, &self.lang);
        o.push_str(",\"retweet_count\":");
        o.push_str(&self.retweet_count.to_string());
        o.push_str(",\"favorite_count\":");
        o.push_str(&self.favorite_count.to_string());
        o.push_str(",\"place\":");
        json_str(&mut o, &self.place);
        o.push_str(",\"source\":");
        json_str(&mut o, &self.source);
        o.push('}');
        o
    }
}

const SOURCES: &[&str] = &[
    "Twitter for iPhone",
    "Twitter for iPhone",
    "Twitter for Android",
    "Twitter for Android",
    "Instagram",
    "Twitter Web App",
    "Foursquare",
    "TweetDeck",
];

/// Main language of a country (ISO 639-1).
fn country_lang(cc: &str) -> &'static str {
    match cc {
        "MX" | "ES" | "CO" | "AR" | "PE" | "CL" | "VE" | "EC" | "BO" | "UY" | "PY" | "CU"
        | "DO" | "GT" | "CR" | "PA" | "PR" => "es",
        "BR" | "PT" | "AO" | "MZ" => "pt",
        "FR" | "BE" | "CI" | "SN" | "CD" | "CM" | "ML" | "BF" | "GN" | "MG" | "TN" | "DZ" => "fr",
        "MA" | "EG" | "SA" | "IQ" | "AE" | "QA" | "KW" | "OM" | "JO" | "LB" | "LY" | "SD"
        | "YE" | "SO" => "ar",
        "JP" => "ja",
        "KR" | "KP" => "ko",
        "CN" | "HK" | "TW" => "zh",
        "RU" | "BY" | "KZ" | "UZ" | "UA" => "ru",
        "TR" => "tr",
        "IR" | "AF" => "fa",
        "ID" | "MY" => "in",
        "TH" => "th",
        "PH" => "tl",
        "VN" => "vi",
        "DE" | "AT" | "CH" => "de",
        "IT" => "it",
        "NL" => "nl",
        "PL" => "pl",
        "IN" => "hi",
        "PK" => "ur",
        "BD" => "bn",
        _ => "en",
    }
}

/// Zero-inflated Pareto count: 0 with probability `zero`, else
/// `floor(u^-1/1.2)` (≥ 1), capped at 10^6.
fn social_count(r: &mut SplitMix64, zero: f64) -> u32 {
    if r.chance(zero) {
        0
    } else {
        r.f64_open0().powf(-1.0 / 1.2).min(1e6) as u32
    }
}

/// Iterator over `n` tweets; see the module documentation for the model.
#[derive(Debug, Clone)]
pub struct Tweets {
    remaining: u64,
    model: UserModel,
    zipf: Zipf,
    perm: Permutation,
    geo: Geo,
    r_user: SplitMix64,
    r_geo: SplitMix64,
    r_time: SplitMix64,
    r_text: SplitMix64,
    r_misc: SplitMix64,
    r_id: SplitMix64,
    next_id: u64,
    now_ms: i64,
    burst: bool,
}

/// `n` tweets generated from `seed`.
pub fn tweets(seed: u64, n: u64) -> Tweets {
    let model = UserModel::for_tweets(n);
    Tweets {
        remaining: n,
        zipf: Zipf::new(model.population, model.exponent),
        model,
        perm: Permutation::new(USER_ID_SPACE, seed ^ S_PERM),
        geo: Geo::new(0.05),
        r_user: SplitMix64::derive(seed, S_USER),
        r_geo: SplitMix64::derive(seed, S_GEO),
        r_time: SplitMix64::derive(seed, S_TIME),
        r_text: SplitMix64::derive(seed, S_TEXT),
        r_misc: SplitMix64::derive(seed, S_MISC),
        r_id: SplitMix64::derive(seed, S_ID),
        next_id: FIRST_TWEET_ID,
        now_ms: FIRST_CREATED_AT,
        burst: false,
    }
}

impl Tweets {
    /// The author model solved for this record count.
    pub fn user_model(&self) -> UserModel {
        self.model
    }
}

impl Iterator for Tweets {
    type Item = Tweet;

    fn next(&mut self) -> Option<Tweet> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;

        let id = self.next_id;
        self.next_id += 1 + self.r_id.below(1 << 17);

        let rank = self.zipf.sample(&mut self.r_user);
        let user_id = (self.perm.apply(rank - 1) + 1) as i64;

        let flip = if self.burst {
            1.0 / 200.0
        } else {
            1.0 / 2000.0
        };
        if self.r_time.chance(flip) {
            self.burst = !self.burst;
        }
        let mean_gap = if self.burst { 8.0 } else { 80.0 };
        let created_at = self.now_ms;
        self.now_ms += 1 + self.r_time.exp(mean_gap) as i64;

        let pos = self.geo.sample(&mut self.r_geo);
        let coordinates = [round_to(pos.lon, 1e6), round_to(pos.lat, 1e6)];

        let m = &mut self.r_misc;
        let lang = match pos.place {
            Some(p) if m.chance(0.75) => country_lang(p.country),
            _ if m.chance(0.1) => "und",
            _ => "en",
        };
        let retweet_count = social_count(m, 0.7);
        let favorite_count = social_count(m, 0.5);
        let source = pick(m, SOURCES);

        let mut t = Tweet {
            id,
            user_id,
            created_at,
            coordinates,
            text: String::new(),
            lang: lang.to_string(),
            retweet_count,
            favorite_count,
            place: pos.name.to_string(),
            source: source.to_string(),
        };
        let target = self.r_text.range_u64(400, 480) as usize;
        let base = t.to_json().len();
        t.text = pseudo_text(&mut self.r_text, target.saturating_sub(base).max(1));
        Some(t)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

// ------------------------------------------------------------ buildings

/// One OSM-like building footprint. `id` is the primary key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Building {
    /// Primary key, increasing.
    pub id: u64,
    /// `[xmin, ymin, xmax, ymax]` in degrees (lon, lat), `xmin <= xmax`,
    /// `ymin <= ymax`.
    pub bbox: [f64; 4],
    /// Perimeter of the footprint in metres.
    pub perimeter: f64,
    /// OSM `building=*` value.
    pub building: String,
    /// `building:levels`.
    pub levels: u32,
    /// Name (often empty).
    pub name: String,
    /// Nearest listed city or background region.
    pub city: String,
    /// Filler address text.
    pub addr: String,
}

impl Building {
    /// The record as one compact JSON object (fields in declaration order).
    pub fn to_json(&self) -> String {
        let mut o = String::with_capacity(320);
        o.push_str("{\"id\":");
        o.push_str(&self.id.to_string());
        o.push_str(",\"bbox\":");
        json_f64s(&mut o, &self.bbox);
        o.push_str(",\"perimeter\":");
        json_f64(&mut o, self.perimeter);
        o.push_str(",\"building\":");
        json_str(&mut o, &self.building);
        o.push_str(",\"levels\":");
        o.push_str(&self.levels.to_string());
        o.push_str(",\"name\":");
        json_str(&mut o, &self.name);
        o.push_str(",\"city\":");
        json_str(&mut o, &self.city);
        o.push_str(",\"addr\":");
        json_str(&mut o, &self.addr);
        o.push('}');
        o
    }

    /// Centre of the bounding box.
    pub fn centre(&self) -> [f64; 2] {
        [
            (self.bbox[0] + self.bbox[2]) / 2.0,
            (self.bbox[1] + self.bbox[3]) / 2.0,
        ]
    }
}

const BUILDING_KINDS: &[&str] = &[
    "yes",
    "yes",
    "yes",
    "yes",
    "house",
    "house",
    "residential",
    "apartments",
    "commercial",
    "industrial",
    "retail",
    "school",
    "garage",
    "shed",
];

/// Iterator over `n` buildings; see the module documentation.
#[derive(Debug, Clone)]
pub struct Buildings {
    remaining: u64,
    geo: Geo,
    r_geo: SplitMix64,
    r_size: SplitMix64,
    r_text: SplitMix64,
    r_misc: SplitMix64,
    r_id: SplitMix64,
    next_id: u64,
}

/// `n` buildings generated from `seed`.
pub fn buildings(seed: u64, n: u64) -> Buildings {
    Buildings {
        remaining: n,
        geo: Geo::new(0.03),
        r_geo: SplitMix64::derive(seed, S_GEO + SALT_BUILDINGS),
        r_size: SplitMix64::derive(seed, S_SIZE + SALT_BUILDINGS),
        r_text: SplitMix64::derive(seed, S_TEXT + SALT_BUILDINGS),
        r_misc: SplitMix64::derive(seed, S_MISC + SALT_BUILDINGS),
        r_id: SplitMix64::derive(seed, S_ID + SALT_BUILDINGS),
        next_id: 100_000_000,
    }
}

impl Iterator for Buildings {
    type Item = Building;

    fn next(&mut self) -> Option<Building> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let id = self.next_id;
        self.next_id += 1 + self.r_id.below(64);

        let pos = self.geo.sample(&mut self.r_geo);
        let s = &mut self.r_size;
        let width_m = if s.chance(0.03) {
            (60.0 * s.f64_open0().powf(-1.0 / 1.5)).min(3000.0)
        } else {
            (18.0 * (0.45 * s.normal()).exp()).clamp(3.0, 200.0)
        };
        let height_m = (width_m * (0.35 * s.normal()).exp()).clamp(2.0, 4000.0);
        let shape = s.uniform(0.9, 1.3);
        let perimeter = round_to(2.0 * (width_m + height_m) * shape, 100.0);
        let dx = width_m / (111_000.0 * pos.lat.to_radians().cos().max(0.05));
        let dy = height_m / 111_000.0;
        let lon = pos.lon.clamp(-180.0 + dx, 180.0 - dx);
        let lat = pos.lat.clamp(-90.0 + dy, 90.0 - dy);
        let bbox = [
            round_to(lon - dx / 2.0, 1e7),
            round_to(lat - dy / 2.0, 1e7),
            round_to(lon + dx / 2.0, 1e7),
            round_to(lat + dy / 2.0, 1e7),
        ];

        let m = &mut self.r_misc;
        let building = pick(m, BUILDING_KINDS);
        let big = width_m > 60.0 || pos.place.is_some_and(|p| p.population > 5_000_000);
        let mut levels = 1u32;
        while levels < 60 && m.chance(if big { 0.7 } else { 0.35 }) {
            levels += 1;
        }
        let t = &mut self.r_text;
        let name = if t.chance(0.3) {
            let len = t.range_u64(6, 24) as usize;
            pseudo_text(t, len)
        } else {
            String::new()
        };

        let mut b = Building {
            id,
            bbox,
            perimeter,
            building: building.to_string(),
            levels,
            name,
            city: pos.name.to_string(),
            addr: String::new(),
        };
        let target = t.range_u64(210, 290) as usize;
        let base = b.to_json().len();
        b.addr = pseudo_text(t, target.saturating_sub(base).max(1));
        Some(b)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

// ------------------------------------------------------------ synthetic

/// Distribution of the synthetic attribute.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Dist {
    /// Uniform over `1..=10^8`.
    Uniform,
    /// Zipf with this exponent over `1..=10^8` (ranks scattered by a keyed
    /// permutation; NEXT §6.5 uses 0.5, 0.8 and 1.0).
    Zipf(f64),
}

impl std::fmt::Display for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dist::Uniform => write!(f, "uniform"),
            Dist::Zipf(s) => write!(f, "zipf-{s}"),
        }
    }
}

/// One synthetic record. `id` is the primary key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticRecord {
    /// Primary key, `1..=n`.
    pub id: u64,
    /// The indexed attribute, in `1..=10^8`.
    pub attr: i64,
    /// Padding text.
    pub pad: String,
}

impl SyntheticRecord {
    /// The record as one compact JSON object.
    pub fn to_json(&self) -> String {
        let mut o = String::with_capacity(432);
        o.push_str("{\"id\":");
        o.push_str(&self.id.to_string());
        o.push_str(",\"attr\":");
        o.push_str(&self.attr.to_string());
        o.push_str(",\"pad\":");
        json_str(&mut o, &self.pad);
        o.push('}');
        o
    }
}

/// Iterator over `n` synthetic records.
#[derive(Debug, Clone)]
pub struct Synthetic {
    next: u64,
    n: u64,
    dist: Dist,
    zipf: Option<Zipf>,
    perm: Permutation,
    r_attr: SplitMix64,
    r_text: SplitMix64,
}

/// `n` synthetic records with attribute distribution `dist`, from `seed`.
/// A non-finite or negative Zipf exponent is treated as 0 (uniform ranks).
pub fn synthetic(seed: u64, n: u64, dist: Dist) -> Synthetic {
    Synthetic {
        next: 1,
        n,
        dist,
        zipf: match dist {
            Dist::Uniform => None,
            Dist::Zipf(s) => Some(Zipf::new(SYNTHETIC_DOMAIN, s)),
        },
        perm: Permutation::new(SYNTHETIC_DOMAIN, seed ^ (S_PERM + SALT_SYNTHETIC)),
        r_attr: SplitMix64::derive(seed, S_ATTR + SALT_SYNTHETIC),
        r_text: SplitMix64::derive(seed, S_TEXT + SALT_SYNTHETIC),
    }
}

impl Synthetic {
    /// The distribution being generated.
    pub fn dist(&self) -> Dist {
        self.dist
    }
}

impl Iterator for Synthetic {
    type Item = SyntheticRecord;

    fn next(&mut self) -> Option<SyntheticRecord> {
        if self.next > self.n {
            return None;
        }
        let id = self.next;
        self.next += 1;
        let attr = match &self.zipf {
            None => 1 + self.r_attr.below(SYNTHETIC_DOMAIN),
            Some(z) => 1 + self.perm.apply(z.sample(&mut self.r_attr) - 1),
        } as i64;
        let mut rec = SyntheticRecord {
            id,
            attr,
            pad: String::new(),
        };
        let target = self.r_text.range_u64(380, 420) as usize;
        let base = rec.to_json().len();
        rec.pad = pseudo_text(&mut self.r_text, target.saturating_sub(base).max(1));
        Some(rec)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.n + 1 - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn counts_per_user(ts: &[Tweet]) -> Vec<u64> {
        let mut m: HashMap<i64, u64> = HashMap::new();
        for t in ts {
            *m.entry(t.user_id).or_default() += 1;
        }
        let mut c: Vec<u64> = m.into_values().collect();
        c.sort_unstable();
        c
    }

    #[test]
    fn tweets_are_deterministic() {
        let a: Vec<String> = tweets(42, 300).map(|t| t.to_json()).collect();
        let b: Vec<String> = tweets(42, 300).map(|t| t.to_json()).collect();
        let c: Vec<String> = tweets(43, 300).map(|t| t.to_json()).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 300);
    }

    /// The author distribution at 50k tweets: mean tweets per active user
    /// within ±15% of 4.7, and a heavy head (max ≥ 50 × median).
    #[test]
    fn user_distribution() {
        let n = 50_000;
        let g = tweets(1, n);
        let model = g.user_model();
        let ts: Vec<Tweet> = g.collect();
        let c = counts_per_user(&ts);
        let mean = n as f64 / c.len() as f64;
        let median = c[c.len() / 2];
        let max = c[c.len() - 1];
        let sum_sq: f64 = c.iter().map(|&x| (x * x) as f64).sum::<f64>() / n as f64;
        eprintln!(
            "model {model:?}: users {} mean {mean:.3} median {median} max {max} sum_c2/n {sum_sq:.1}",
            c.len()
        );
        assert!((mean - 4.7).abs() <= 0.15 * 4.7, "mean {mean}");
        assert!(max >= 50 * median, "max {max} median {median}");
        for t in &ts {
            assert!((1..=USER_ID_SPACE as i64).contains(&t.user_id));
        }
    }

    #[test]
    fn user_model_scales() {
        for n in [1_000u64, 50_000, 2_000_000, 33_000_000] {
            let m = UserModel::for_tweets(n);
            let mean = n as f64 / m.expected_active;
            assert!((mean - 4.7).abs() < 0.05, "{n}: {m:?}");
            let top = 2.0 * (n as f64).sqrt();
            assert!((m.expected_top / top - 1.0).abs() < 0.05, "{n}: {m:?}");
        }
        assert_eq!(UserModel::for_tweets(0).population, 1);
    }

    #[test]
    fn tweet_fields_are_valid() {
        let ts: Vec<Tweet> = tweets(7, 20_000).collect();
        let mut total = 0usize;
        let mut near = 0usize;
        for w in ts.windows(2) {
            assert!(w[0].id < w[1].id);
            assert!(w[0].created_at < w[1].created_at);
        }
        for t in &ts {
            let j = t.to_json();
            assert!((400..=500).contains(&j.len()), "{} bytes: {j}", j.len());
            total += j.len();
            let back: Tweet = serde_json::from_str(&j).expect("valid json");
            assert_eq!(&back, t);
            let [lon, lat] = t.coordinates;
            assert!((-180.0..=180.0).contains(&lon) && (-90.0..=90.0).contains(&lat));
            if PLACES
                .iter()
                .any(|p| (p.lon - lon).abs() <= 1.0 && (p.lat - lat).abs() <= 1.0)
            {
                near += 1;
            }
        }
        let avg = total as f64 / ts.len() as f64;
        assert!((400.0..=500.0).contains(&avg), "{avg}");
        let frac = near as f64 / ts.len() as f64;
        assert!(frac >= 0.8, "only {frac} near a place");
        // Timestamps show bursts: some gaps are far below the calm mean.
        let gaps: Vec<i64> = ts
            .windows(2)
            .map(|w| w[1].created_at - w[0].created_at)
            .collect();
        let mean_gap = gaps.iter().sum::<i64>() as f64 / gaps.len() as f64;
        assert!(mean_gap > 20.0 && mean_gap < 100.0, "{mean_gap}");
    }

    #[test]
    fn buildings_are_valid_and_deterministic() {
        let a: Vec<Building> = buildings(3, 20_000).collect();
        let b: Vec<Building> = buildings(3, 20_000).collect();
        assert_eq!(a, b);
        assert_ne!(a[..50], buildings(4, 50).collect::<Vec<_>>()[..]);
        let mut total = 0;
        let mut widths: Vec<f64> = Vec::new();
        for x in &a {
            let [x0, y0, x1, y1] = x.bbox;
            assert!(x0 <= x1 && y0 <= y1, "{x:?}");
            assert!((-180.0..=180.0).contains(&x0) && (-180.0..=180.0).contains(&x1));
            assert!((-90.0..=90.0).contains(&y0) && (-90.0..=90.0).contains(&y1));
            assert!(x.perimeter > 0.0);
            let j = x.to_json();
            assert!((200..=300).contains(&j.len()), "{} bytes: {j}", j.len());
            total += j.len();
            let back: Building = serde_json::from_str(&j).expect("valid json");
            assert_eq!(&back, x);
            widths.push((y1 - y0) * 111_000.0);
        }
        widths.sort_by(f64::total_cmp);
        let median = widths[widths.len() / 2];
        let p99 = widths[widths.len() * 99 / 100];
        assert!((10.0..=50.0).contains(&median), "median {median} m");
        assert!(p99 > 3.0 * median, "p99 {p99} m");
        let avg = total as f64 / a.len() as f64;
        assert!((200.0..=300.0).contains(&avg));
    }

    #[test]
    fn synthetic_sizes_and_determinism() {
        let a: Vec<String> = synthetic(1, 2000, Dist::Uniform)
            .map(|r| r.to_json())
            .collect();
        assert_eq!(
            a,
            synthetic(1, 2000, Dist::Uniform)
                .map(|r| r.to_json())
                .collect::<Vec<_>>()
        );
        assert_ne!(
            a,
            synthetic(2, 2000, Dist::Uniform)
                .map(|r| r.to_json())
                .collect::<Vec<_>>()
        );
        for j in &a {
            assert!((380..=420).contains(&j.len()), "{j}");
        }
        for r in synthetic(1, 2000, Dist::Zipf(1.0)) {
            assert!((1..=SYNTHETIC_DOMAIN as i64).contains(&r.attr));
        }
    }

    /// Top-1 vs top-10 value frequency follows `10^s` in 50k records.
    #[test]
    fn synthetic_zipf_follows_the_law() {
        for s in [0.8, 1.0] {
            let mut m: HashMap<i64, u64> = HashMap::new();
            for r in synthetic(5, 50_000, Dist::Zipf(s)) {
                *m.entry(r.attr).or_default() += 1;
            }
            let mut c: Vec<u64> = m.into_values().collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            let ratio = c[0] as f64 / c[9] as f64;
            let expect = 10f64.powf(s);
            eprintln!(
                "zipf {s}: top1 {} top10 {} ratio {ratio:.2} (law {expect:.2})",
                c[0], c[9]
            );
            assert!((ratio / expect - 1.0).abs() < 0.35, "s={s}: ratio {ratio}");
        }
        // Uniform: no value repeats much.
        let mut m: HashMap<i64, u64> = HashMap::new();
        for r in synthetic(5, 50_000, Dist::Uniform) {
            *m.entry(r.attr).or_default() += 1;
        }
        assert!(m.values().all(|&c| c <= 3));
    }

    #[test]
    fn json_strings_are_escaped() {
        let b = Building {
            id: 1,
            bbox: [0.0, 0.0, 1.0, 1.0],
            perimeter: 4.0,
            building: "a\"b\\c\nd\u{1}é".to_string(),
            levels: 1,
            name: String::new(),
            city: "x".to_string(),
            addr: "y".to_string(),
        };
        let back: Building = serde_json::from_str(&b.to_json()).expect("valid json");
        assert_eq!(back, b);
    }

    #[test]
    fn text_is_exact_and_safe() {
        let mut r = SplitMix64::new(1);
        for len in [1usize, 2, 5, 50, 300] {
            let t = pseudo_text(&mut r, len);
            assert_eq!(t.len(), len);
            assert!(t.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
            assert!(!t.contains('"') && !t.contains('\\'));
            assert!(!t.starts_with(' ') && !t.ends_with(' '));
        }
    }
}
