//! The entry layout of the stand-alone trees that index one record
//! version per key (`composite`, `deli`, and merge repair):
//! `sort_key(value) ‖ primary key ‖ seq` (Luo & Carey §3, DELI), and the
//! scan of the entries matching a query.

#![deny(clippy::indexing_slicing)]

use strata_lsm::error::{Error, Result};
use strata_lsm::key::SeqNo;
use strata_lsm::Snapshot;

use super::strategy::{CandList, Query};
use super::tree::{self, IndexTree};
use super::value::{IndexValue, KeyType};
use super::QueryProfile;

/// The entry of version `seq` of `pk` whose attribute is `v`.
pub(crate) fn entry_key(v: &IndexValue, pk: &[u8], seq: SeqNo) -> Vec<u8> {
    // One allocation: sort keys are at most 8 bytes but for strings.
    let sk = match v {
        IndexValue::Str(s) => s.len() + 2,
        _ => 8,
    };
    let mut k = Vec::with_capacity(sk + pk.len() + 8);
    entry_key_into(v, pk, seq, &mut k);
    k
}

/// [`entry_key`] written into `k` (cleared first), for a caller that
/// keeps its buffer.
pub(crate) fn entry_key_into(v: &IndexValue, pk: &[u8], seq: SeqNo, k: &mut Vec<u8>) {
    k.clear();
    tree::sort_key_into(v, k);
    k.extend_from_slice(pk);
    k.extend_from_slice(&tree::seq_bytes(seq, false));
}

/// `(primary key, seq)` of an entry key.
pub(crate) fn decode_entry(ty: KeyType, key: &[u8]) -> Result<(&[u8], SeqNo)> {
    let sk = tree::sort_key_len(ty, key)?;
    let Some((pk, seq)) = key
        .get(sk..)
        .and_then(|rest| rest.split_at_checked(rest.len().checked_sub(8)?))
    else {
        return Err(Error::corruption("index tree entry key too short"));
    };
    let seq = tree::read_seq(seq, false)?;
    Ok((pk, seq))
}

/// Candidates `(pk, seq)` with `seq <= q.snapshot` of the entries of
/// `tree` (read through `snap`) matching `q.pred`, and, if `keep_keys`,
/// each candidate's entry key (in the same order).
pub(crate) fn scan_entries(
    ty: KeyType,
    tree: &IndexTree,
    snap: &Snapshot,
    q: &Query<'_>,
    keep_keys: bool,
    profile: &mut QueryProfile,
) -> Result<(CandList, Vec<Vec<u8>>)> {
    let before = tree.blocks_read();
    let mut out = CandList::default();
    let mut keys = Vec::new();
    for (from, to) in tree::key_ranges(q.pred, tree.extent()) {
        let mut it = snap.iter(Some(&from), to.as_deref())?;
        while let Some(kv) = it.next_ref() {
            let (k, _, geom) = kv?;
            if tree::is_meta(k) {
                continue;
            }
            let (pk, seq) = decode_entry(ty, k)?;
            if seq <= q.snapshot && tree::entry_matches(ty, q.pred, geom)? {
                out.push(pk, seq);
                if keep_keys {
                    keys.push(k.to_vec());
                }
            }
        }
    }
    profile.index_blocks_read += tree.blocks_read().saturating_sub(before);
    Ok((out, keys))
}
