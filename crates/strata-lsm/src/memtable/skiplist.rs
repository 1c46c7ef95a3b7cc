//! The memtable's ordered map: an arena skiplist of internal keys.
//!
//! The structure is LevelDB's (`db/skiplist.h`): one writer at a time
//! inserts, any number of readers search and walk it without locks, and
//! nothing is ever removed. Nodes are carved out of chunks the list owns
//! (no allocation per node), each holding its internal key and its value
//! inline; the list is ordered by [`key::compare_internal`]. An insert
//! returns the node as a [`RawEntry`], which the memtable's side structure
//! keeps to read the value later without a search.
//!
//! Why our own: `crossbeam-skiplist` spent 1.9 k of the 5.5 k instructions
//! of a no-index PUT in its insert (callgrind, 40 k chirp writes): an epoch
//! pin, a node allocation, reference counts and a full key comparison per
//! step. Here a step compares a 16-byte head of the user key first and
//! reads the key's bytes only when the heads tie.
//!
//! Invariants every `unsafe` block below relies on:
//! - (I1) a node is never moved or freed before the list is dropped: chunks
//!   are only added, and freed in `Drop` (which has `&mut self`, so no
//!   reader or cursor borrowing the list remains);
//! - (I2) a node's fields, key bytes and links are written before the node
//!   is published by a `Release` store of a link to it, and only its links
//!   change afterwards (atomically); readers load links with `Acquire`, so
//!   every node they reach is fully initialized;
//! - (I3) one inserter at a time: `insert` holds `writer`'s lock while it
//!   searches, allocates and links.
//! - (I6) `last` is null while the list is empty, else a published node
//!   whose key is the greatest linked before its store: the inserter
//!   stores it (`Release`, after linking, holding the lock) whenever the
//!   new node has no successor, so it only grows.
//! - (I7) under the writer lock, `Writer::tails[l]` is the last node
//!   linked at level `l` (the head if none): an insert whose new node has
//!   no successor at a level becomes that level's tail.

#![allow(unsafe_code)]

use std::cmp::Ordering;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ptr::{self, addr_of, addr_of_mut};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;

use crate::key;

/// Tallest tower. With a branching factor of 2, 24 levels keep searches
/// logarithmic up to 2²⁴ ≈ 16 M entries, far above any memtable's count.
const MAX_HEIGHT: usize = 24;

/// One node in two is promoted to the next level (LevelDB promotes one in
/// four). A search here compares a link's hint without loading its node
/// and loads only the nodes it moves to: about `(1 - p) / p` a level over
/// `log(n) / log(1 / p)` levels, 17 at 145 k entries for p = 1/2 against
/// 26 for p = 1/4, and at the lower levels of a large list each load is a
/// cache miss. Measured (`docs/benchmarks.md`, session 36): first-level
/// read misses of 145 k random inserts −20% (callgrind), 1 M random
/// inserts −17 to −22%, the engine's 1 M random fill +6 to +14%; the cost
/// is two links a node on average instead of 4/3 (16 bytes).
const BRANCHING: u32 = 2;

/// The first chunk's size in 8-byte words (8 KiB); each next chunk doubles,
/// up to [`MAX_CHUNK_WORDS`], so a small memtable stays small.
const FIRST_CHUNK_WORDS: usize = 1 << 10;

/// The largest chunk (1 MiB). A node above a quarter of the next chunk's
/// size gets a chunk of its own.
const MAX_CHUNK_WORDS: usize = 1 << 17;

/// A node's fixed part; `height` links, a [`Tail`], `key_len` key bytes
/// and the tail's `inline_len` value bytes follow it in the same
/// allocation. The links come right after the head so that a search step
/// (compare a node's head, then follow one of its links) touches the
/// node's first cache line for its lowest links (with the tail first,
/// levels 2 and up were on the node's second line).
#[repr(C)]
struct Node {
    /// The user key's first 16 bytes, big-endian, zero-padded, in two
    /// words: if two heads differ, their user keys compare as the heads do.
    head: Head,
    key_len: u32,
    height: u32,
    links: [Link; 0],
}

/// A link to the next node at one level, with a copy of that node's head
/// (its *hint*), so that a search can tell that the next node is past its
/// target without loading the node: at the lower levels of a large list
/// each node loaded is a cache miss, and about one node in three that a
/// search loads is only rejected before the search descends.
///
/// (I4) A hint read after its `next` never exceeds the head of the node
/// that `next` names: the inserter stores `hint_hi`, then `hint_lo`
/// (Release), then `next` (Release); a reader loads `next` (Acquire), then
/// `hint_lo` (Acquire), then `hint_hi`. The reader's words come from the
/// update that published its `next` or from later ones, and each later
/// update of a link names a smaller node (an insert goes between the
/// link's node and its successor): mixing a later `hint_hi` with an
/// earlier-or-equal `hint_lo` gives at most the head of the node `next`
/// names (if the high words are equal, so are all between them, and the
/// low words are ordered). So `hint > target` implies that node is past
/// the target; a smaller or equal hint says nothing and the node is
/// compared.
///
/// (I5) Under the writer lock, every non-null link's hint is its node's
/// head: links change only there, a new node's links copy its
/// predecessors' and a predecessor's link is set with the new node's
/// head. The inserter's search orders a next node by its hint alone
/// unless the heads tie, loading only the nodes it moves to.
#[repr(C)]
struct Link {
    hint_hi: AtomicU64,
    hint_lo: AtomicU64,
    next: AtomicPtr<Node>,
}

impl Link {
    /// The hint, read after `next` (I4).
    fn hint(&self) -> Head {
        let lo = self.hint_lo.load(AtomicOrdering::Acquire);
        Head(self.hint_hi.load(AtomicOrdering::Relaxed), lo)
    }

    /// Points the link at `node`, whose head is `head` (I4's store order;
    /// the inserter only, holding the writer lock).
    fn set(&self, node: *mut Node, head: Head) {
        self.hint_hi.store(head.0, AtomicOrdering::Relaxed);
        self.hint_lo.store(head.1, AtomicOrdering::Release);
        self.next.store(node, AtomicOrdering::Release);
    }
}

/// What follows a node's links: the length of its value.
#[repr(C, align(8))]
struct Tail {
    /// Bytes of the value stored after the key.
    inline_len: u32,
    _pad: u32,
}

const _: () = assert!(size_of::<Node>().is_multiple_of(8) && align_of::<Node>() == 8);
const _: () = assert!(size_of::<Tail>().is_multiple_of(8) && align_of::<Tail>() == 8);

/// Words a node of `height` links and `bytes` key and value bytes
/// occupies.
fn node_words(height: usize, bytes: usize) -> usize {
    (size_of::<Node>() + height * size_of::<Link>() + size_of::<Tail>() + bytes).div_ceil(8)
}

/// A user key's first 16 bytes as two big-endian words, zero-padded;
/// ordered as the bytes are. Sixteen bytes, not eight: keys often share
/// their first eight (decimal ids of equal length, table prefixes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Head(u64, u64);

impl Head {
    /// The head as one number, ordered as the bytes are (compared in two
    /// or three instructions; the words' derived order took about ten).
    pub(super) fn wide(self) -> u128 {
        (u128::from(self.0) << 64) | u128::from(self.1)
    }
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        self.wide().cmp(&other.wide())
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

pub(super) fn head_of(user_key: &[u8]) -> Head {
    let mut b = [0u8; 16];
    let n = user_key.len().min(16);
    if let (Some(dst), Some(src)) = (b.get_mut(..n), user_key.get(..n)) {
        dst.copy_from_slice(src);
    }
    let (hi, lo) = b.split_at(8);
    let word = |w: &[u8]| <[u8; 8]>::try_from(w).map_or(0, u64::from_be_bytes);
    Head(word(hi), word(lo))
}

impl Node {
    /// Link `level` of `node`.
    ///
    /// # Safety
    /// `node` points to a live, initialized node (I1, I2) and
    /// `level < node.height`.
    unsafe fn link<'a>(node: *const Node, level: usize) -> &'a Link {
        // SAFETY: the links follow the fixed part inside the node's
        // allocation and `level` is below the node's height (caller).
        unsafe { &*(addr_of!((*node).links) as *const Link).add(level) }
    }

    /// The node's tail.
    ///
    /// # Safety
    /// `node` points to a live node whose fixed part and links are
    /// initialized (I1, I2).
    unsafe fn tail(node: *const Node) -> *const Tail {
        // SAFETY: the tail follows the links inside the node's allocation.
        unsafe {
            let height = (*node).height as usize;
            (addr_of!((*node).links) as *const Link).add(height) as *const Tail
        }
    }

    /// The node's internal key.
    ///
    /// # Safety
    /// `node` points to a live, initialized node (I1, I2).
    unsafe fn key<'a>(node: *const Node) -> &'a [u8] {
        // SAFETY: the key bytes follow the tail inside the node's
        // allocation; they were written before the node was published.
        unsafe {
            let start = Node::tail(node).add(1) as *const u8;
            std::slice::from_raw_parts(start, (*node).key_len as usize)
        }
    }
}

/// What a search compares nodes against: an internal key split into its
/// user key's head, its user key and its trailer.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    head: Head,
    user_key: &'a [u8],
    trailer: u64,
}

impl<'a> Target<'a> {
    /// The internal key `user_key ‖ trailer`.
    pub(crate) fn new(user_key: &'a [u8], trailer: u64) -> Target<'a> {
        Target {
            head: head_of(user_key),
            user_key,
            trailer,
        }
    }

    /// An encoded internal key (a malformed one, shorter than a trailer,
    /// orders as [`key::compare_internal`] orders it: trailer 0).
    pub(crate) fn from_internal(ikey: &'a [u8]) -> Target<'a> {
        Target::new(key::user_key(ikey), key::trailer(ikey))
    }
}

/// How `node`'s key orders against `t` ([`key::compare_internal`]).
///
/// # Safety
/// `node` points to a live, initialized node (I1, I2).
unsafe fn compare(node: *const Node, t: &Target<'_>) -> Ordering {
    // SAFETY: the caller's contract.
    let head = unsafe { (*node).head };
    match head.cmp(&t.head) {
        Ordering::Equal => {
            // SAFETY: the caller's contract.
            let ikey = unsafe { Node::key(node) };
            match key::user_key(ikey).cmp(t.user_key) {
                Ordering::Equal => t.trailer.cmp(&key::trailer(ikey)),
                o => o,
            }
        }
        o => o,
    }
}

/// The chunks and the tower-height generator: only the inserter uses them.
struct Writer {
    /// Every chunk: its first word and its length in words (freed in Drop).
    chunks: Vec<(*mut u64, usize)>,
    /// Next free word of the current chunk, and words left in it.
    cursor: *mut u64,
    left: usize,
    next_chunk_words: usize,
    rng: u32,
    /// The last node at each level (the head where a level has none): the
    /// predecessors of a key greater than every key, so that an append
    /// needs no search. Maintained by every insert (I7).
    tails: [*const Node; MAX_HEIGHT],
}

impl Writer {
    /// `words` uninitialized, 8-byte aligned words that stay put until the
    /// list is dropped (I1).
    fn alloc(&mut self, words: usize) -> *mut u64 {
        if words > self.left {
            // A node above a quarter of the next chunk gets its own (the
            // next chunk is then always large enough for the node).
            if words > self.next_chunk_words / 4 {
                return self.new_chunk(words);
            }
            let size = self.next_chunk_words;
            self.next_chunk_words = (size * 2).min(MAX_CHUNK_WORDS);
            self.cursor = self.new_chunk(size);
            self.left = size;
        }
        let p = self.cursor;
        // SAFETY: `words <= left`, so the result stays inside the chunk
        // (or one past its end).
        self.cursor = unsafe { self.cursor.add(words) };
        self.left -= words;
        p
    }

    fn new_chunk(&mut self, words: usize) -> *mut u64 {
        // Not zeroed: `new_node` writes every byte it reads later (zeroing
        // a 1 MiB chunk cost 290 k instructions, 210 a PUT).
        let chunk = Box::into_raw(Box::<[u64]>::new_uninit_slice(words)) as *mut u64;
        self.chunks.push((chunk, words));
        chunk
    }

    /// A tower height: 1 with probability 1/2, each further level half
    /// as likely as the one below.
    fn random_height(&mut self) -> usize {
        let mut h = 1;
        while h < MAX_HEIGHT && self.next_random().is_multiple_of(BRANCHING) {
            h += 1;
        }
        h
    }

    fn next_random(&mut self) -> u32 {
        // xorshift32: the tower heights need independence from the keys,
        // not quality.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }
}

/// The arena skiplist (see the module documentation).
pub(crate) struct SkipList {
    /// A node of [`MAX_HEIGHT`] links and an empty key, before every key.
    head: *const Node,
    /// Height of the tallest tower; readers may see a stale value, which
    /// only makes their search start lower or meet null links at the top.
    height: AtomicUsize,
    len: AtomicUsize,
    /// The node with the greatest key (I6).
    last: AtomicPtr<Node>,
    writer: Mutex<Writer>,
    /// Unique in the process: a [`RawEntry`] names the list it came from.
    id: u64,
}

/// The next [`SkipList::id`].
static NEXT_LIST_ID: AtomicU64 = AtomicU64::new(0);

// SAFETY: the list owns its chunks (raw pointers only because readers share
// them); nodes are immutable after publication except for atomic links
// (I2), and inserts are serialized by `writer` (I3).
unsafe impl Send for SkipList {}
// SAFETY: as for `Send`.
unsafe impl Sync for SkipList {}

impl SkipList {
    pub(crate) fn new() -> SkipList {
        let mut writer = Writer {
            chunks: Vec::new(),
            cursor: ptr::null_mut(),
            left: 0,
            next_chunk_words: FIRST_CHUNK_WORDS,
            rng: 0x9e37_79b9,
            tails: [ptr::null(); MAX_HEIGHT],
        };
        let head = Self::new_node(&mut writer, MAX_HEIGHT, &[], 0, &[]);
        writer.tails = [head; MAX_HEIGHT];
        SkipList {
            head,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            last: AtomicPtr::new(ptr::null_mut()),
            writer: Mutex::new(writer),
            id: NEXT_LIST_ID.fetch_add(1, AtomicOrdering::Relaxed),
        }
    }

    /// A node holding `user_key ‖ trailer` and `value`, its links null,
    /// not yet published.
    fn new_node(
        writer: &mut Writer,
        height: usize,
        user_key: &[u8],
        trailer: u64,
        inline: &[u8],
    ) -> *mut Node {
        let key_len = user_key.len() + key::TRAILER_LEN;
        let node = writer.alloc(node_words(height, key_len + inline.len())) as *mut Node;
        // SAFETY: `alloc` returned aligned words enough for the fixed part,
        // `height` links, the tail, the key and the inline value, all
        // written here (links null). The
        // node is not yet reachable, so nothing else reads it.
        unsafe {
            ptr::write(
                node,
                Node {
                    head: head_of(user_key),
                    key_len: key_len as u32,
                    height: height as u32,
                    links: [],
                },
            );
            let links = addr_of_mut!((*node).links) as *mut Link;
            for level in 0..height {
                ptr::write(
                    links.add(level),
                    Link {
                        hint_hi: AtomicU64::new(0),
                        hint_lo: AtomicU64::new(0),
                        next: AtomicPtr::new(ptr::null_mut()),
                    },
                );
            }
            let tail = links.add(height) as *mut Tail;
            ptr::write(
                tail,
                Tail {
                    inline_len: inline.len() as u32,
                    _pad: 0,
                },
            );
            let key = tail.add(1) as *mut u8;
            ptr::copy_nonoverlapping(user_key.as_ptr(), key, user_key.len());
            ptr::copy_nonoverlapping(
                trailer.to_le_bytes().as_ptr(),
                key.add(user_key.len()),
                key::TRAILER_LEN,
            );
            ptr::copy_nonoverlapping(inline.as_ptr(), key.add(key_len), inline.len());
        }
        node
    }

    /// Entries inserted.
    pub(crate) fn len(&self) -> usize {
        self.len.load(AtomicOrdering::Acquire)
    }

    /// Inserts `user_key ‖ trailer` with `value`, and returns the new
    /// entry. The internal key must be new to the list; a duplicate is
    /// placed after the existing entry, which keeps shadowing it.
    #[cfg(test)]
    pub(crate) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8]) -> RawEntry {
        self.insert_next(user_key, trailer, value).0
    }

    /// As [`SkipList::insert`], also returning the entry that follows the
    /// new one: when it has the same user key, the newest entry of that
    /// key older than the new one (what the insert's search found anyway).
    pub(crate) fn insert_next(
        &self,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
    ) -> (RawEntry, Option<Entry<'_>>) {
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let target = Target::new(user_key, trailer);
        // An append (a key at or after the greatest, as keys written in
        // order are) takes its predecessors from the tails (I7): no search.
        let last = self.last.load(AtomicOrdering::Relaxed);
        // SAFETY: `last` is null or a published node (I6).
        let append = last.is_null() || unsafe { compare(last, &target) } != Ordering::Greater;
        let mut prev = [self.head; MAX_HEIGHT];
        let next = if append {
            prev = writer.tails;
            ptr::null()
        } else {
            self.search(&target, Some(&mut prev), true)
        };
        let height = writer.random_height();
        // Levels above the old height have the head as predecessor, which
        // `prev` already holds.
        if height > self.height.load(AtomicOrdering::Relaxed) {
            self.height.store(height, AtomicOrdering::Relaxed);
        }
        let node = Self::new_node(&mut writer, height, user_key, trailer, value);
        for (level, &p) in prev.iter().enumerate().take(height) {
            // SAFETY: `p` is the head or a published node (I1, I2) whose
            // height exceeds `level` (the search found it at that level,
            // or it is that level's tail, I7); `node`
            // is ours until the Release store publishes it, with every
            // field written (I2); we hold the writer lock (I3).
            // The new node's link copies the predecessor's (hint and all:
            // only this thread changes links); it is not yet reachable.
            unsafe {
                let from = Node::link(p, level);
                let to = Node::link(node, level);
                to.hint_hi.store(
                    from.hint_hi.load(AtomicOrdering::Relaxed),
                    AtomicOrdering::Relaxed,
                );
                to.hint_lo.store(
                    from.hint_lo.load(AtomicOrdering::Relaxed),
                    AtomicOrdering::Relaxed,
                );
                let succ = from.next.load(AtomicOrdering::Relaxed);
                to.next.store(succ, AtomicOrdering::Relaxed);
                from.set(node, (*node).head);
                if succ.is_null() {
                    // Nothing after it at this level (I7).
                    if let Some(t) = writer.tails.get_mut(level) {
                        *t = node;
                    }
                }
            }
        }
        if next.is_null() {
            // Linked above: the greatest key now (I6).
            self.last.store(node, AtomicOrdering::Release);
        }
        self.len.fetch_add(1, AtomicOrdering::Release);
        let raw = RawEntry {
            node,
            list: self.id,
        };
        // `next` is null or a published node (found by the search), and
        // the new node's successor at level 0: the writer lock is held.
        (raw, Entry::new(self, next))
    }

    /// The first node at or after `t` (`after_equal`: strictly after the
    /// entries equal to `t`), filling `prev` with its predecessor at each
    /// level if asked: only by the inserter, holding the writer lock.
    fn search(
        &self,
        t: &Target<'_>,
        mut prev: Option<&mut [*const Node; MAX_HEIGHT]>,
        after_equal: bool,
    ) -> *const Node {
        let mut x = self.head;
        let mut level = self.height.load(AtomicOrdering::Relaxed).max(1) - 1;
        // The node rejected one level up: it is the next one at this level
        // too whenever no node was inserted between, and need not be
        // compared again.
        let mut rejected: *const Node = ptr::null();
        // Only the inserter asks for `prev`, holding the writer lock (I3).
        let exact = prev.is_some();
        let target_head = t.head.wide();
        loop {
            // SAFETY: `x` is the head or was reached through a link (I1,
            // I2), and `level` is below its height: we only descend.
            let link = unsafe { Node::link(x, level) };
            let next = link.next.load(AtomicOrdering::Acquire);
            let hint = link.hint().wide();
            let go_right = !next.is_null()
                && !ptr::eq(next, rejected)
                // A larger hint: `next` is past `t` (I4) without loading it.
                && hint <= target_head
                // The inserter's hints are exact (I5).
                && ((exact && hint < target_head)
                    // SAFETY: `next` was loaded from a link (I1, I2).
                    || match unsafe { compare(next, t) } {
                        Ordering::Less => true,
                        Ordering::Equal => after_equal,
                        Ordering::Greater => false,
                    });
            if go_right {
                x = next;
            } else {
                if let Some(p) = prev.as_deref_mut() {
                    if let Some(slot) = p.get_mut(level) {
                        *slot = x;
                    }
                }
                if level == 0 {
                    return next;
                }
                rejected = next;
                level -= 1;
            }
        }
    }

    /// The first entry at or after `t`.
    pub(crate) fn lower_bound(&self, t: &Target<'_>) -> Option<Entry<'_>> {
        Entry::new(self, self.search(t, None, false))
    }

    /// The entry with the greatest key (`None` while empty). An insert
    /// racing with this call may or may not be seen, as with a search.
    pub(crate) fn last(&self) -> Option<Entry<'_>> {
        // A published node of this list, or null (I6).
        Entry::new(self, self.last.load(AtomicOrdering::Acquire))
    }

    /// The first entry.
    pub(crate) fn first(&self) -> Option<Entry<'_>> {
        // SAFETY: the head is live and has MAX_HEIGHT links (I1).
        Entry::new(self, unsafe {
            Node::link(self.head, 0).next.load(AtomicOrdering::Acquire)
        })
    }
}

impl Drop for SkipList {
    fn drop(&mut self) {
        // `&mut self`: no reader, entry or cursor borrows the list any more.
        // Nodes hold nothing to drop: their chunks are freed whole.
        let writer = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        for &(chunk, words) in &writer.chunks {
            // SAFETY: each chunk came from `Box::into_raw` of a boxed slice
            // of `words` words and is freed once, here.
            drop(unsafe {
                Box::from_raw(ptr::slice_from_raw_parts_mut(
                    chunk as *mut MaybeUninit<u64>,
                    words,
                ))
            });
        }
    }
}

/// An entry of a [`SkipList`], borrowed from it.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// Non-null, a published node of the list (a raw pointer, not a
    /// reference: the links and key lie beyond `Node`'s fixed part).
    node: *const Node,
    list: &'a SkipList,
}

impl<'a> Entry<'a> {
    /// `node` is null or was loaded from a link of `list` (I1, I2).
    fn new(list: &'a SkipList, node: *const Node) -> Option<Entry<'a>> {
        (!node.is_null()).then_some(Entry { node, list })
    }

    /// The internal key.
    pub(crate) fn key(&self) -> &'a [u8] {
        // SAFETY: a published node of a list that outlives `'a`.
        unsafe { Node::key(self.node) }
    }

    /// The value.
    pub(crate) fn value(&self) -> &'a [u8] {
        // SAFETY: a published node of a list that outlives `'a`; the value
        // (inline after the key) is never written after publication (I2).
        unsafe {
            let tail = Node::tail(self.node);
            // From the node's own pointer, not the key's slice (whose
            // provenance ends with the key).
            let start = (tail.add(1) as *const u8).add((*self.node).key_len as usize);
            std::slice::from_raw_parts(start, (*tail).inline_len as usize)
        }
    }

    /// The next entry in key order.
    pub(crate) fn next(&self) -> Option<Entry<'a>> {
        // SAFETY: every node has at least one link (height >= 1).
        Entry::new(self.list, unsafe {
            Node::link(self.node, 0).next.load(AtomicOrdering::Acquire)
        })
    }

    /// The entry as a pointer a cursor that owns the list may keep
    /// ([`RawEntry`]).
    pub(crate) fn raw(&self) -> RawEntry {
        RawEntry {
            node: self.node,
            list: self.list.id,
        }
    }
}

/// An entry not tied to a borrow of its list, for a cursor that keeps the
/// list alive itself (by an `Arc` of its owner). It names its list, so
/// turning it back into an entry needs that list borrowed.
#[derive(Clone, Copy)]
pub(crate) struct RawEntry {
    node: *const Node,
    /// [`SkipList::id`] of the list the node belongs to.
    list: u64,
}

// SAFETY: the node is only read through [`RawEntry::get`], which needs its
// list borrowed (so alive, I1); it is shared read-only (I2) like the list.
unsafe impl Send for RawEntry {}
// SAFETY: as for `Send`.
unsafe impl Sync for RawEntry {}

impl RawEntry {
    /// The entry again, if `list` is the list it came from (ids are
    /// unique, so a borrowed list with that id holds the node alive).
    pub(crate) fn get<'a>(&self, list: &'a SkipList) -> Option<Entry<'a>> {
        (list.id == self.list).then_some(Entry {
            node: self.node,
            list,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Test sizes: small under Miri (`cargo +nightly miri test -p
    /// strata-lsm --lib memtable::skiplist`, which checks the unsafe code
    /// for undefined behaviour), full otherwise.
    const fn scaled(n: u64) -> u64 {
        if cfg!(miri) {
            n / 100
        } else {
            n
        }
    }

    fn ikey(user_key: &[u8], trailer: u64) -> Vec<u8> {
        let mut k = user_key.to_vec();
        k.extend_from_slice(&trailer.to_le_bytes());
        k
    }

    #[derive(PartialEq, Eq)]
    struct ByInternal(Vec<u8>);
    impl Ord for ByInternal {
        fn cmp(&self, o: &Self) -> Ordering {
            key::compare_internal(&self.0, &o.0)
        }
    }
    impl PartialOrd for ByInternal {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }

    /// The list's first entry at or after `probe` is the model's.
    fn assert_lower_bound(list: &SkipList, model: &BTreeMap<ByInternal, u64>, probe: &[u8]) {
        let want = model
            .range(ByInternal(probe.to_vec())..)
            .next()
            .map(|(k, _)| k.0.clone());
        let got = list
            .lower_bound(&Target::from_internal(probe))
            .map(|e| e.key().to_vec());
        assert_eq!(got, want);
    }

    /// A deterministic generator (xorshift64) from `seed` (the memtable's
    /// tests share it).
    pub(in crate::memtable) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Random keys (short, sharing heads, long, some beyond a chunk)
    /// against a B-tree under the same order: iteration order and every
    /// lower bound agree.
    #[test]
    fn agrees_with_an_ordered_model() {
        let mut rnd = xorshift(0x1234_5678_9abc_def1);
        let list = SkipList::new();
        let mut model = BTreeMap::new();
        assert!(list.last().is_none());
        for i in 0..scaled(20_000) {
            let r = rnd();
            let user_key: Vec<u8> = match r % 5 {
                0 => format!("{}", r % 300).into_bytes(),
                1 => format!("prefix__{}", r % 500).into_bytes(),
                2 => vec![0u8; (r % 12) as usize],
                3 => vec![b'z'; 1 + (r % 40) as usize],
                _ => (0..(r % 20)).map(|j| (r >> (j % 8)) as u8).collect(),
            };
            let user_key = if i % scaled(5_000) == 7 {
                vec![b'L'; MAX_CHUNK_WORDS * if cfg!(miri) { 1 } else { 3 }]
            } else {
                user_key
            };
            let trailer = i << 8 | (r & 1);
            let k = ikey(&user_key, trailer);
            let v = i.to_le_bytes();
            let raw = list.insert(&user_key, trailer, &v);
            assert!(raw
                .get(&list)
                .is_some_and(|e| e.key() == &k[..] && e.value() == v));
            model.insert(ByInternal(k), i);
            // The greatest key so far (checked at every insert).
            let greatest = model.last_key_value().map(|(k, _)| &k.0[..]);
            assert_eq!(list.last().map(|e| e.key()), greatest);
        }
        assert_eq!(list.len(), model.len());
        let mut it = list.first();
        for (k, v) in &model {
            let e = it.unwrap();
            assert_eq!(e.key(), &k.0[..]);
            assert_eq!(e.value(), &v.to_le_bytes());
            it = e.next();
        }
        assert!(it.is_none());
        for _ in 0..scaled(20_000) {
            let r = rnd();
            let user_key = format!("{}", r % 320).into_bytes();
            let probe = ikey(&user_key, rnd() % (25_000 << 8));
            assert_lower_bound(&list, &model, &probe);
        }
    }

    /// Every level of `list` is sorted, and its last node is the writer's
    /// tail for it (I7).
    fn check_levels(list: &SkipList) {
        let writer = list.writer.lock().unwrap();
        for level in 0..MAX_HEIGHT {
            let mut x = list.head;
            loop {
                // SAFETY: the head or a node reached through a link at
                // `level` (so taller than it); the test holds the lock.
                let next = unsafe { Node::link(x, level) }
                    .next
                    .load(AtomicOrdering::Acquire);
                if next.is_null() {
                    break;
                }
                if !ptr::eq(x, list.head) {
                    // SAFETY: both published nodes of the list.
                    let (a, b) = unsafe { (Node::key(x), Node::key(next)) };
                    assert_ne!(key::compare_internal(a, b), Ordering::Greater);
                }
                x = next;
            }
            assert!(ptr::eq(x, writer.tails[level]), "tail of level {level}");
        }
    }

    /// Keys written in order (appends, which skip the search) mixed with
    /// keys anywhere, and newer versions of the greatest user key: the
    /// order, the greatest entry, every lower bound and every level's tail
    /// agree with a B-tree.
    #[test]
    fn appends_and_inserts_anywhere_agree_with_an_ordered_model() {
        let mut rnd = xorshift(0x0dd_ba11_cafe_f00d);
        let list = SkipList::new();
        let mut model = BTreeMap::new();
        check_levels(&list);
        let mut up = 0u64;
        for i in 1..=scaled(20_000) {
            let r = rnd();
            let user_key = match r % 4 {
                // Ascending (an append, mostly).
                0 | 1 => {
                    up += 1 + r % 3;
                    format!("k{up:010}").into_bytes()
                }
                // A newer version of the latest ascending key: it sorts
                // before the older one (an insert in the middle).
                2 => format!("k{up:010}").into_bytes(),
                // Anywhere.
                _ => format!("k{:010}", r % (up + 1)).into_bytes(),
            };
            let trailer = i << 8 | 1;
            let v = i.to_le_bytes();
            list.insert(&user_key, trailer, &v);
            model.insert(ByInternal(ikey(&user_key, trailer)), i);
            let greatest = model.last_key_value().map(|(k, _)| &k.0[..]);
            assert_eq!(list.last().map(|e| e.key()), greatest);
            if i % scaled(2_000) == 0 {
                check_levels(&list);
            }
        }
        check_levels(&list);
        let mut it = list.first();
        for k in model.keys() {
            let e = it.unwrap();
            assert_eq!(e.key(), &k.0[..]);
            it = e.next();
        }
        assert!(it.is_none());
        for _ in 0..scaled(5_000) {
            let probe = ikey(
                format!("k{:010}", rnd() % (up + 2)).as_bytes(),
                rnd() % (scaled(20_000) << 8),
            );
            assert_lower_bound(&list, &model, &probe);
        }
    }

    /// Readers walking and searching while one thread inserts always see
    /// a sorted list holding every entry published before they started.
    #[test]
    fn readers_see_a_consistent_list_during_inserts() {
        let list = SkipList::new();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(AtomicOrdering::Acquire) {
                        let before = list.len();
                        let mut n = 0;
                        let mut last: Option<Vec<u8>> = None;
                        let mut e = list.first();
                        while let Some(cur) = e {
                            if let Some(l) = &last {
                                assert!(key::compare_internal(l, cur.key()).is_lt());
                            }
                            last = Some(cur.key().to_vec());
                            n += 1;
                            e = cur.next();
                        }
                        assert!(n >= before);
                        // The first entry at or after the probe: no key of
                        // the inserts already counted (so linked) lies
                        // between the probe and it.
                        let probe = format!("{:08}", n * 7 % 50_000);
                        let linked = list.len() as u64;
                        let first_linked = (0..linked)
                            .map(|i| format!("{:08}", i.wrapping_mul(7919) % 50_000))
                            .filter(|k| k.as_bytes() >= probe.as_bytes())
                            .min();
                        let got = list.lower_bound(&Target::new(probe.as_bytes(), u64::MAX));
                        let got = got.map(|e| key::user_key(e.key()).to_vec());
                        if let Some(g) = &got {
                            assert!(g.as_slice() >= probe.as_bytes());
                        }
                        if let Some(f) = first_linked {
                            let g = got.expect("a linked key follows the probe");
                            assert!(g.as_slice() <= f.as_bytes(), "lower_bound skipped {f}");
                        }
                    }
                });
            }
            for i in 0..scaled(50_000) {
                let k = format!("{:08}", i.wrapping_mul(7919) % 50_000);
                list.insert(k.as_bytes(), i << 8 | 1, b"v");
            }
            done.store(true, AtomicOrdering::Release);
        });
        assert_eq!(list.len() as u64, scaled(50_000));
    }

    /// Nodes of every size, from a few bytes to several chunks, while the
    /// chunks grow: every key and value reads back intact (a node larger
    /// than the next chunk once overran it).
    #[test]
    fn nodes_of_every_size_read_back() {
        let list = SkipList::new();
        let mut x: u64 = 0x0dd_b1a5_e5ba_d5ee;
        let mut sizes = Vec::new();
        for i in 0..scaled(400) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = match i % 4 {
                0 => (x % 64) as usize,
                1 => (x % 20_000) as usize,
                2 => (x % scaled(300_000)) as usize,
                _ => (x % scaled(3_000_000)) as usize,
            };
            let value = vec![(i % 251) as u8; len];
            let user_key = i.to_be_bytes();
            list.insert(&user_key, 1 << 8, &value);
            sizes.push(len);
        }
        let mut e = list.first();
        for (i, len) in sizes.iter().enumerate() {
            let cur = e.unwrap();
            assert_eq!(key::user_key(cur.key()), &(i as u64).to_be_bytes());
            assert_eq!(cur.value().len(), *len);
            assert!(cur.value().iter().all(|&b| b == (i % 251) as u8));
            e = cur.next();
        }
        assert!(e.is_none());
    }

    /// A raw entry turns back into an entry only with its own list.
    #[test]
    fn raw_entries_name_their_list() {
        let (a, b) = (SkipList::new(), SkipList::new());
        a.insert(b"k", 1 << 8, b"in a");
        b.insert(b"k", 1 << 8, b"in b");
        let raw = a.first().map(|e| e.raw());
        let raw = raw.unwrap();
        assert!(raw.get(&a).is_some_and(|e| e.value() == b"in a"));
        assert!(raw.get(&b).is_none());
    }

    /// A workload for timing random inserts into a large list (cache and
    /// TLB misses, which instruction counts do not show), ignored by
    /// default since it only measures: `STRATA_SKIPLIST_INSERTS` keys
    /// (default 145,000, about one 64 MiB memtable of 440-byte chirp
    /// records) of an index entry's shape (an 8-byte random attribute
    /// then a 20-digit primary key) with 40-byte values, keys made before
    /// the clock starts. Compare two builds with `farm-bench` or by the
    /// printed time per insert, alternating runs.
    #[test]
    #[ignore]
    fn random_inserts_workload() {
        let n: u64 = std::env::var("STRATA_SKIPLIST_INSERTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(145_000);
        let mut x: u64 = 0x1234_5678;
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{:08}{i:020}", x % 100_000_000).into_bytes()
            })
            .collect();
        let value = [7u8; 40];
        let list = SkipList::new();
        let start = std::time::Instant::now();
        for (i, k) in (0u64..).zip(&keys) {
            list.insert(k, i << 8 | 1, &value);
        }
        let took = start.elapsed();
        assert_eq!(list.len() as u64, n);
        eprintln!(
            "{n} random inserts: {:.0} ns each",
            took.as_nanos() as f64 / n.max(1) as f64
        );
    }
}
