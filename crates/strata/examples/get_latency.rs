//! Latency of point lookups through the Rust API: the GET row of the
//! LevelDB++ workload, alone, on an existing database.
//!
//! ```sh
//! cargo run --release -p strata --example get_latency -- DB KEYS.txt [ROUNDS]
//! ```
//!
//! KEYS.txt holds one primary key per line. Every key is looked up once to
//! warm the cache, then ROUNDS (default 3) times, each lookup timed alone.
//! Prints the median and mean latency in microseconds and how many keys
//! were found.

use std::time::Instant;

use strata::{Db, Options};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, db, keys, rest @ ..] = args.as_slice() else {
        return Err("usage: get_latency DB KEYS.txt [ROUNDS]".into());
    };
    let rounds: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(3);
    let keys: Vec<Vec<u8>> = std::fs::read_to_string(keys)?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let db = Db::open(db, Options::paper().create_if_missing(false))?;
    let mut found = 0usize;
    for k in &keys {
        found += usize::from(db.get(k)?.is_some());
    }
    let mut times = Vec::with_capacity(keys.len() * rounds);
    for _ in 0..rounds {
        for k in &keys {
            let t = Instant::now();
            let v = db.get(k)?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(v);
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    println!(
        "get keys={} found={found} rounds={rounds} median_us={median:.1} mean_us={mean:.1}",
        keys.len()
    );
    Ok(())
}
