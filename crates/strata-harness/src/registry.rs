//! From a `--systems` entry to an open [`BenchSystem`]: `strata:...` names
//! are Strata ([`crate::strata_system`]); `rocksdb`, `sqlite` and `fjall` are
//! the peers of the `strata-compare` crate, compiled in with
//! `--features peers` (and `--features rocksdb` for RocksDB).

use std::collections::BTreeMap;
use std::path::Path;

use strata_bench::system::{BenchSystem, IndexDecl, OpenFn, SysResult, SystemOptions};

use crate::names::SystemName;
use crate::strata_system::{StrataSpec, StrataSystem};

/// Peer systems known to the harness (implemented in `strata-compare`).
pub const PEERS: [&str; 3] = ["rocksdb", "sqlite", "fjall"];

/// A resolved `--systems` entry.
pub enum SystemSpec {
    /// A `strata:...` name: Strata with that strategy and parameters.
    Strata(StrataSpec),
    /// A peer of `strata-compare` compiled into this build.
    Peer {
        /// The peer's name (`rocksdb`, `sqlite`, `fjall`).
        name: String,
        /// Opens the peer on an empty directory.
        open: OpenFn,
    },
}

impl SystemSpec {
    /// The entry as given: the system's label in results.
    pub fn name(&self) -> &str {
        match self {
            SystemSpec::Strata(s) => &s.name,
            SystemSpec::Peer { name, .. } => name,
        }
    }

    /// Index parameters as applied (Strata: after `key@index` overrides and
    /// `delta=Nx` resolution), as `index.key -> value`; empty for peers.
    pub fn applied_params(
        &self,
        decls: &[IndexDecl],
        gaps: &BTreeMap<String, f64>,
    ) -> Result<BTreeMap<String, String>, String> {
        match self {
            SystemSpec::Strata(s) => Ok(s
                .index_params(decls, gaps)?
                .into_iter()
                .flat_map(|(i, m)| m.into_iter().map(move |(k, v)| (format!("{i}.{k}"), v)))
                .collect()),
            SystemSpec::Peer { .. } => Ok(BTreeMap::new()),
        }
    }

    /// Opens the system on the empty directory `dir`.
    pub fn open(
        &self,
        dir: &Path,
        decls: &[IndexDecl],
        gaps: &BTreeMap<String, f64>,
        opts: &SystemOptions,
    ) -> SysResult<Box<dyn BenchSystem>> {
        match self {
            SystemSpec::Strata(s) => {
                let params = s.index_params(decls, gaps)?;
                StrataSystem::open(s, dir, decls, &params, opts)
            }
            SystemSpec::Peer { open, .. } => open(dir, decls, opts),
        }
    }
}

/// Resolves one `--systems` entry (grammar in [`crate::names`]).
pub fn resolve(name: &str) -> Result<SystemSpec, String> {
    let parsed = match SystemName::parse(name) {
        Ok(n) => n,
        // A malformed Strata name says what is wrong with it; anything
        // else is not a system this harness knows.
        Err(e) if name.starts_with("strata:") => return Err(e),
        Err(_) => return Err(peer_unavailable(name)),
    };
    if parsed.is_strata() {
        return StrataSpec::from_name(parsed)
            .map(SystemSpec::Strata)
            .ok_or_else(|| peer_unavailable(name));
    }
    if PEERS.contains(&parsed.family.as_str())
        && (parsed.strategy.is_some() || !parsed.params.is_empty())
    {
        return Err(format!(
            "system {name:?}: a peer takes no strategy or parameters (write {:?})",
            parsed.family
        ));
    }
    match peer_open_fn(name) {
        Some(open) => Ok(SystemSpec::Peer {
            name: name.to_string(),
            open,
        }),
        None => Err(peer_unavailable(name)),
    }
}

/// Resolves a comma-separated `--systems` list (at least one entry, no
/// duplicates).
pub fn resolve_list(list: &str) -> Result<Vec<SystemSpec>, String> {
    let mut out: Vec<SystemSpec> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if out.iter().any(|s| s.name() == item) {
            return Err(format!("system {item:?} is listed twice in --systems"));
        }
        out.push(resolve(item)?);
    }
    if out.is_empty() {
        return Err("--systems is empty".into());
    }
    Ok(out)
}

#[cfg(feature = "peers")]
fn peer_open_fn(name: &str) -> Option<OpenFn> {
    strata_compare::open_fn(name)
}

#[cfg(not(feature = "peers"))]
fn peer_open_fn(_name: &str) -> Option<OpenFn> {
    None
}

/// Why `name` cannot be opened in this build.
fn peer_unavailable(name: &str) -> String {
    let known = PEERS.contains(&name);
    if known && cfg!(feature = "peers") {
        format!(
            "system {name:?} is not compiled in: rebuild with `--features {}` (see docs/benchmarks.md)",
            if name == "rocksdb" { "rocksdb" } else { "peers" }
        )
    } else if known {
        format!(
            "system {name:?} is a peer: rebuild with `--features peers` (see docs/benchmarks.md)"
        )
    } else {
        format!(
            "unknown system {name:?} (Strata: strata:none, strata:<strategy>[key=value;...]; peers: {})",
            PEERS.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_strata_and_explains_peers() {
        let v = resolve_list("strata:none, strata:next[delta=off]").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].name(), "strata:next[delta=off]");
        let e = resolve_list("strata:next,strata:next").err().unwrap();
        assert!(e.contains("twice"), "{e}");
        assert!(resolve_list(" , ").is_err());
        let e = resolve("foo").err().unwrap();
        assert!(e.starts_with("unknown system \"foo\""), "{e}");
        let e = resolve("strata").err().unwrap();
        assert!(e.starts_with("unknown system \"strata\""), "{e}");
        let e = resolve("foo bar").err().unwrap();
        assert!(e.starts_with("unknown system \"foo bar\""), "{e}");
        let e = resolve("strata:next[delta=off").err().unwrap();
        assert!(e.contains("must end with ']'"), "{e}");
        let e = resolve("sqlite:composite").err().unwrap();
        assert!(e.contains("a peer takes no strategy"), "{e}");
        // Aliases resolve to the engine's strategy names.
        match resolve("strata:eager").unwrap() {
            SystemSpec::Strata(s) => {
                assert_eq!(s.strategy.as_deref(), Some("memory"));
                assert_eq!(s.name, "strata:eager");
            }
            SystemSpec::Peer { .. } => panic!("strata:eager is Strata"),
        }
        if !cfg!(feature = "peers") {
            let e = resolve("sqlite").err().unwrap();
            assert_eq!(
                e,
                "system \"sqlite\" is a peer: rebuild with `--features peers` (see docs/benchmarks.md)"
            );
        }
    }
}
