//! The peer systems of Strata's benchmarks, behind the
//! [`BenchSystem`](strata_bench::system::BenchSystem) interface, each an
//! opt-in cargo feature (none is on by default, so the workspace builds
//! without compiling any of them):
//!
//! * `sqlite` ([`sqlite::SqlitePeer`]): `rusqlite` with bundled SQLite, a
//!   B-tree index per scalar index, an R*Tree per spatial index;
//! * `fjall` ([`fjall_peer::FjallPeer`]): fjall keyspaces, one per index,
//!   maintained in the same write batch as the record;
//! * `rocksdb` ([`rocksdb_peer::RocksPeer`]): RocksDB column families, one
//!   per index, maintained in the same `WriteBatch`.
//!
//! The key-value peers share [`kv`] (the composite-key index logic),
//! [`encode`] (order-preserving encodings) and [`curve`] (Hilbert keys for
//! spatial attributes); [`attr`] gives every peer Strata's extraction and
//! query semantics. Option choices are documented in `docs/benchmarks.md`
//! ("Peers") and in this crate's README.

pub mod attr;
pub mod curve;
pub mod encode;
#[cfg(any(feature = "fjall", feature = "rocksdb"))]
pub mod kv;

#[cfg(feature = "fjall")]
pub mod fjall_peer;
#[cfg(feature = "rocksdb")]
pub mod rocksdb_peer;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use strata_bench::system::OpenFn;

/// A record returned by a query: primary key and value.
pub type Record = (Vec<u8>, Vec<u8>);

/// The opener of peer `name` (`"sqlite"`, `"fjall"`, `"rocksdb"`), if its
/// feature is compiled in.
pub fn open_fn(name: &str) -> Option<OpenFn> {
    match name {
        #[cfg(feature = "sqlite")]
        "sqlite" => Some(sqlite::open),
        #[cfg(feature = "fjall")]
        "fjall" => Some(fjall_peer::open),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Some(rocksdb_peer::open),
        _ => None,
    }
}

/// The peers compiled into this build, in a fixed order.
pub fn available() -> Vec<&'static str> {
    ["sqlite", "fjall", "rocksdb"]
        .into_iter()
        .filter(|n| open_fn(n).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_matches_open_fn() {
        for name in ["sqlite", "fjall", "rocksdb"] {
            assert_eq!(
                open_fn(name).is_some(),
                available().contains(&name),
                "{name}"
            );
        }
        assert!(open_fn("strata").is_none());
    }
}
