//! The per-table structures of the strategies built with each table (NEXT's
//! directory and secondary blocks, embedded's zone maps): one map per
//! version from table file number to the structure, maintained the same
//! way at every install and recovery.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use strata_lsm::error::{Error, Result};
use strata_lsm::hooks::InstallEvent;
use strata_lsm::version::{FileMetaData, Version};

use super::lock;

/// A version's structures, by table file number.
pub(crate) type TableMap<T> = BTreeMap<u64, Arc<T>>;

/// Structures built while a table is written, consumed when it is
/// installed, by file number.
pub(crate) type Pending<T> = Arc<Mutex<HashMap<u64, Arc<T>>>>;

/// The map of the version `ev` installs: the previous version's tables,
/// minus those removed, plus those added (from what the builder left in
/// `pending`, else read back with `read`); a trivially moved table keeps
/// its entry.
pub(crate) fn install<T>(
    prev: Option<&TableMap<T>>,
    ev: &InstallEvent<'_>,
    pending: &Mutex<HashMap<u64, Arc<T>>>,
    read: impl Fn(&FileMetaData) -> Result<Option<T>>,
) -> Result<TableMap<T>> {
    let mut tables = prev.cloned().unwrap_or_default();
    let moved: HashSet<u64> = ev.added.iter().map(|(_, f)| f.number).collect();
    for (_, n) in ev.removed {
        if !moved.contains(n) {
            tables.remove(n);
        }
    }
    for (_, f) in ev.added {
        match lock(pending).remove(&f.number) {
            Some(t) => {
                tables.insert(f.number, t);
            }
            None if tables.contains_key(&f.number) => {}
            None => {
                if let Some(t) = read(f)? {
                    tables.insert(f.number, Arc::new(t));
                }
            }
        }
    }
    Ok(tables)
}

/// The map of the recovered version of live `files`, read with `read`; a
/// `ready` index (named `index`) must cover every table: a table without
/// its `blocks` (e.g. `"block next.3.dir"`) is corruption.
pub(crate) fn recover<T>(
    files: &[(usize, Arc<FileMetaData>)],
    ready: bool,
    read: impl Fn(&FileMetaData) -> Result<Option<T>>,
    blocks: &str,
    index: &str,
) -> Result<TableMap<T>> {
    let mut tables = TableMap::new();
    for (_, f) in files {
        match read(f)? {
            Some(t) => {
                tables.insert(f.number, Arc::new(t));
            }
            None if ready => {
                return Err(Error::corruption(format!(
                    "table {} lacks the {blocks} of ready index {index:?}",
                    f.number
                )))
            }
            None => {}
        }
    }
    Ok(tables)
}

/// True if `tables` has an entry for every table of `version`.
pub(crate) fn covers<T>(tables: Option<&TableMap<T>>, version: &Version) -> bool {
    version
        .all_files()
        .all(|(_, f)| tables.is_some_and(|t| t.contains_key(&f.number)))
}
