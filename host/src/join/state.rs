//! One task's join state: per key, the events of each side still inside their window + grace.
//!
//! Semantics follow Kafka Streams' windowed stream-stream join (`JoinWindows`):
//! - `a` (left) and `b` (right) with the same key match when `|ts(a) − ts(b)| ≤ window`.
//! - Stream time is the largest timestamp the task has seen. An event is late when its timestamp is
//!   below `stream time − window − grace`; it joins nothing and is reported as late.
//! - An event leaves the state once stream time passes `ts + window + grace`. For left and outer
//!   joins, an event that leaves without ever having matched is reported as expired — only then, so
//!   no result is emitted for a pair that could still form (as Kafka Streams 3.1+).
//!
//! Every pair is reported exactly once, by the event that arrives second.
//!
//! The same state joins 3 to [`MAX_TOPICS`] topics ([`JoinState::with_topics`], inner and left):
//! a match is one event of each topic, all within the window of each other, reported once by the
//! event that completes it ([`JoinOutcome::MatchN`]); `left` reports an event of the first topic
//! that leaves in no match with the partners it found ([`JoinOutcome::ExpiredN`]). The semantics
//! are [`super::multi`]'s, the reference model; how the packed store serves them is in `nway`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::store::{EventStore, Handle, Head, Links, SpillDir, StoreStats, NO_HANDLE, UNMATCHED};
use crate::event::{Event, Side, MAX_TOPICS};

mod nway;

/// The join window, in milliseconds of event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinWindow {
    /// Largest timestamp difference of a matching pair.
    pub window_ms: i64,
    /// How long after its window closes an event is kept for out-of-order partners.
    pub grace_ms: i64,
}

impl JoinWindow {
    /// How long past its timestamp an event is held: its window, then its grace.
    pub(super) fn retention(&self) -> i64 {
        self.window_ms.saturating_add(self.grace_ms)
    }

    /// Whether an event stamped `ts` is late at `stream_time`: its window and grace have passed.
    pub(super) fn is_late(&self, ts: i64, stream_time: Option<i64>) -> bool {
        stream_time.is_some_and(|st| ts < st.saturating_sub(self.retention()))
    }

    /// Whether events stamped `a` and `b` are within the window of each other. The distance as
    /// a u64: timestamps come from the input, and `a - b` of two far apart (i64::MIN and
    /// i64::MAX) overflowed, wrapping in release to a small one that matched.
    pub(super) fn within(&self, a: i64, b: i64) -> bool {
        u64::try_from(self.window_ms).is_ok_and(|w| a.abs_diff(b) <= w)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinKind {
    /// Matches only.
    Inner,
    /// Matches, and left events that expire unmatched.
    Left,
    /// Matches, and events of either side that expire unmatched.
    Outer,
}

impl JoinKind {
    fn reports_expiry(self, side: Side) -> bool {
        match self {
            JoinKind::Inner => false,
            JoinKind::Left => side == Side::LEFT,
            JoinKind::Outer => true,
        }
    }
}

/// What one inserted event caused, in the order it should be acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinOutcome {
    /// A pair to hand to `on-match`.
    Match { left: Arc<Event>, right: Arc<Event> },
    /// An unmatched event whose window closed, to hand to `on-expire` (left/outer joins).
    Expired { side: Side, event: Arc<Event> },
    /// The inserted event arrived after its window and grace had passed.
    Late { side: Side, event: Arc<Event> },
    /// A join of three topics or more: one event of each topic, in topic order, to hand to
    /// `on-match-n`.
    MatchN { events: Vec<Arc<Event>> },
    /// A `left` join of three topics or more: an event of the first topic whose window closed in
    /// no match, with the partners it did find: `partners[j]`, the events of topic j + 1 within
    /// its window held while it was (in arrival order), to hand to `on-expire-n`.
    ExpiredN {
        event: Arc<Event>,
        partners: Vec<Vec<Arc<Event>>>,
    },
}

/// Counted per held event on top of its bytes in the store: its share of the per-key table (a
/// [`Slot`] and a control byte). Out-of-order events also take an expiry-heap entry, counted
/// apart. benches/memory.rs measures everything, spare capacity included.
const PER_EVENT_OVERHEAD: usize = std::mem::size_of::<Slot>() + 1;

/// A key's entry in the table: the head of its chain, and 32 bits of its hash, so that growing
/// the table never reads a key (a spilled one would be read from disk) and a probe compares keys
/// only on a full hash match. 12 bytes, packed as u32s: a `(u64, Handle)` would take 16, which
/// at 60,000 unique keys would cost 17 bytes per event more than the 8 of a bare handle
/// (benches/memory.rs) instead of 9.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub(super) hash: u32,
    handle: [u32; 2],
}

impl Slot {
    pub(super) fn new(hash: u32, h: Handle) -> Self {
        Slot {
            hash,
            handle: [(h >> 32) as u32, h as u32],
        }
    }

    pub(super) fn handle(self) -> Handle {
        (u64::from(self.handle[0]) << 32) | u64::from(self.handle[1])
    }

    /// The table's 64-bit hash of the slot's key: hashbrown takes its bucket from the low bits
    /// and its control byte from the top 7, so the 32 stored bits are spread over all 64.
    pub(super) fn table_hash(hash: u32) -> u64 {
        u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// Where [`JoinState::push`] put a new event: its handle, the oldest held event of its key before
/// it ([`NO_HANDLE`]: none), when it closes, and whether that is out of the log's order.
struct Pushed {
    handle: Handle,
    head: Handle,
    close: i64,
    out_of_order: bool,
}

pub struct JoinState {
    /// Topics joined: 2, or up to [`MAX_TOPICS`] (`nway`).
    topics: usize,
    window: JoinWindow,
    kind: JoinKind,
    stream_time: Option<i64>,
    /// The held events, packed; each carries the offset of its latest partner
    /// ([`UNMATCHED`] if none) and a link to the next held event of its key.
    store: EventStore,
    /// Per key, the oldest held event of that key: the head of its chain through the store.
    keys: HashTable<Slot>,
    /// foldhash, seeded per process: SipHash took a sixth of insert's time (perf, benches/matcher.rs).
    hasher: foldhash::fast::RandomState,
    /// What to evict as stream time advances, in two parts. Events that close no earlier than
    /// every event before them (nearly all: a task takes its records in timestamp order) are
    /// evicted by walking the store from `in_order`, the oldest of them, at no memory cost. The
    /// rest go into `out_of_order`, a min-heap by (close time, arrival). Store handles grow in
    /// arrival order, so equal close times leave in arrival order across both parts.
    /// (close time, handle) of the oldest in-order event: its close time is kept here so that
    /// checking it never reads a spilled event.
    in_order: Option<(i64, Handle)>,
    /// Close time of the newest in-order event.
    in_order_close: i64,
    out_of_order: BinaryHeap<Reverse<(i64, Handle)>>,
    events: usize,
    /// The held partners of the event being inserted; kept to reuse its allocation.
    partners: Vec<Handle>,
    /// N-way joins: per topic, the held events within the window of the one being inserted.
    candidates: Vec<Vec<nway::Candidate>>,
    /// N-way joins: the handle of the newest inserted event (not of one moved in the store).
    last_arrival: Handle,
}

impl JoinState {
    /// A join of two topics, `Side::LEFT` and `Side::RIGHT`.
    pub fn new(window: JoinWindow, kind: JoinKind) -> Self {
        Self::with_topics(2, window, kind)
    }

    /// A join of `topics` topics, 2 to [`MAX_TOPICS`], sides `Side::of(0)` on. Three topics or
    /// more join inner or left: what a `left` join reports ([`JoinOutcome::ExpiredN`]) is an
    /// event of the first topic with its partners; an outer join, reporting unmatched events of
    /// every topic, is not defined for them.
    pub fn with_topics(topics: usize, window: JoinWindow, kind: JoinKind) -> Self {
        assert!(
            (2..=MAX_TOPICS).contains(&topics),
            "a join takes 2 to {MAX_TOPICS} topics, not {topics}"
        );
        assert!(
            topics == 2 || kind != JoinKind::Outer,
            "a join of {topics} topics is inner or left, not outer"
        );
        JoinState {
            topics,
            window,
            kind,
            stream_time: None,
            store: EventStore::default(),
            keys: HashTable::new(),
            hasher: Default::default(),
            in_order: None,
            in_order_close: i64::MIN,
            out_of_order: BinaryHeap::new(),
            events: 0,
            partners: Vec::new(),
            candidates: (0..topics).map(|_| Vec::new()).collect(),
            last_arrival: NO_HANDLE,
        }
    }

    /// Lets the state move its oldest events to files in `dir` once it holds more than its RAM
    /// budget ([`Self::set_ram_budget`]). Without it, everything stays in RAM. Once per state:
    /// its files stay where they were written.
    pub fn spill_to(&mut self, dir: Arc<SpillDir>) {
        self.store.spill_to(dir);
    }

    /// Bytes of event segments the state keeps in RAM once it can spill: past it, the oldest
    /// segments go to disk. Checked on insert; the segment being filled always stays, and
    /// segments read back to expire may exceed it briefly.
    pub fn set_ram_budget(&mut self, bytes: usize) {
        self.store.set_budget(bytes);
    }

    /// Where the held events' bytes are: RAM, disk, and what moved between them so far.
    pub fn store_stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Largest timestamp seen so far.
    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// Events held, and the bytes they take (payloads plus bookkeeping).
    pub fn held(&self) -> (usize, usize) {
        (
            self.events,
            self.store.live_bytes()
                + self.events * PER_EVENT_OVERHEAD
                + self.out_of_order.len() * std::mem::size_of::<Reverse<(i64, Handle)>>(),
        )
    }

    /// Offsets a restart must replay to rebuild this state, by side: of every held event, and for
    /// a matched event whose expiry would be reported, of its latest partner — the smallest of
    /// each per store segment. The commit offset of each partition must stay at or below the
    /// smallest of them. Events spilled to disk are not read: each spilled segment gives instead a
    /// lower bound per side, which may be lower than needed (see `store::Needs`), never higher.
    /// A join of three topics or more needs its held events' own offsets only (`nway`).
    pub fn needed_offsets(&self) -> impl Iterator<Item = (Side, i64)> + '_ {
        let kind = self.kind;
        let partners = self.topics == 2;
        self.store
            .needs()
            .flat_map(move |needs| needs.offsets(move |side| partners && kind.reports_expiry(side)))
    }

    /// Takes one event of `side` and appends what it caused to `out`: the matches it forms, then
    /// the expiries its timestamp brings about. A late event is reported and not held.
    pub fn insert(&mut self, side: Side, event: Event, out: &mut Vec<JoinOutcome>) {
        debug_assert!(side.index() < self.topics, "{side:?} of {}", self.topics);
        let ts = event.timestamp;
        if self.window.is_late(ts, self.stream_time) {
            out.push(JoinOutcome::Late {
                side,
                event: Arc::new(event),
            });
            return;
        }
        self.stream_time = Some(self.stream_time.map_or(ts, |st| st.max(ts)));
        if self.topics > 2 {
            return self.insert_n(side, event, out);
        }

        let window = self.window;
        let Pushed {
            handle,
            head,
            close,
            out_of_order,
        } = self.push(side, &event);
        let Self {
            store, partners, ..
        } = self;
        // One walk of the chain (a key holds few events) marks the partners and appends the new
        // event; once the new event is shared, the pairs are reported.
        partners.clear();
        let mut partner_offset = UNMATCHED;
        let mut h = head;
        while h != NO_HANDLE {
            let held = store.head(h);
            if held.side != side && window.within(held.timestamp, ts) {
                store.set_partner_offset(h, &held, event.offset);
                partner_offset = partner_offset.max(held.offset);
                partners.push(h);
            }
            if held.next == NO_HANDLE {
                store.set_next(h, handle);
            }
            h = held.next;
        }
        if partner_offset != UNMATCHED {
            let pushed = store.head(handle);
            store.set_partner_offset(handle, &pushed, partner_offset);
            let this = Arc::new(event);
            for &h in partners.iter() {
                let held = Arc::new(store.event(h));
                let (left, right) = match side {
                    Side::LEFT => (this.clone(), held),
                    _ => (held, this.clone()),
                };
                out.push(JoinOutcome::Match { left, right });
            }
        }
        self.events += 1;
        self.queue(close, handle, out_of_order);
        self.expire(out);
    }

    /// Stores a new event of `side` and makes its key's entry point at it if it is the key's
    /// first; the caller links it at the end of the key's chain while it walks it. One hash per
    /// insert. A key's chain runs from its oldest held event to its newest.
    #[inline]
    fn push(&mut self, side: Side, event: &Event) -> Pushed {
        let close = event.timestamp.saturating_add(self.window.retention());
        let out_of_order = close < self.in_order_close;
        let Self {
            store,
            keys,
            hasher,
            ..
        } = self;
        let key = event.key_bytes();
        let hash = hasher.hash_one(key) as u32;
        let entry = keys.entry(
            Slot::table_hash(hash),
            |s| s.hash == hash && store.key_is(s.handle(), key),
            |s| Slot::table_hash(s.hash),
        );
        let handle = store.push(
            event,
            Links {
                side,
                partner_offset: UNMATCHED,
                next: NO_HANDLE,
                out_of_order,
            },
        );
        let head = match entry {
            Entry::Occupied(o) => o.get().handle(),
            Entry::Vacant(v) => {
                v.insert(Slot::new(hash, handle));
                NO_HANDLE
            }
        };
        Pushed {
            handle,
            head,
            close,
            out_of_order,
        }
    }

    /// Queues a new event to leave at `close`: in the log walk, or, `out_of_order`, in the heap.
    #[inline]
    fn queue(&mut self, close: i64, handle: Handle, out_of_order: bool) {
        if out_of_order {
            self.out_of_order.push(Reverse((close, handle)));
        } else {
            self.in_order_close = close;
            self.in_order.get_or_insert((close, handle));
        }
    }

    /// Removes every event whose window and grace have passed, reporting unmatched ones per kind.
    fn expire(&mut self, out: &mut Vec<JoinOutcome>) {
        let Some(st) = self.stream_time else { return };
        let retention = self.window.retention();
        loop {
            let from_log = self.in_order;
            let from_heap = self.out_of_order.peek().map(|r| r.0);
            let Some((close, leaving)) = from_log.into_iter().chain(from_heap).min() else {
                break;
            };
            if close >= st {
                break;
            }
            let after = if Some((close, leaving)) == from_heap {
                self.out_of_order.pop();
                None
            } else {
                // The log walk empties the oldest segments: one spilled is read back whole.
                self.store.read_back(leaving);
                Some(self.store.after(leaving))
            };
            if self.topics > 2 {
                // Removed, or kept a while longer (moved, re-queued): `nway`.
                self.leave_n(leaving, out);
            } else {
                self.unlink(leaving);
                let side = self.store.side(leaving);
                if self.store.partner_offset(leaving) == UNMATCHED && self.kind.reports_expiry(side)
                {
                    out.push(JoinOutcome::Expired {
                        side,
                        event: Arc::new(self.store.event(leaving)),
                    });
                }
                self.store.remove(leaving);
                self.events -= 1;
            }
            if let Some(after) = after {
                self.in_order = self
                    .store
                    .in_order_from(after)
                    .map(|h| (self.store.timestamp(h).saturating_add(retention), h));
            }
        }
    }

    /// Takes `leaving` out of its key's chain, and the key out of the table if it was its last.
    fn unlink(&mut self, leaving: Handle) {
        let Self {
            store,
            keys,
            hasher,
            ..
        } = self;
        let key = store.key(leaving);
        let hash = hasher.hash_one(&*key) as u32;
        let found = keys.find_entry(Slot::table_hash(hash), |s| {
            s.hash == hash && (s.handle() == leaving || store.key_is(s.handle(), &key))
        });
        let Ok(mut entry) = found else {
            unreachable!("a held event's key is in the table");
        };
        // An owned key (read from disk) is no longer needed; a borrowed one would hold `store`.
        drop(key);
        let next = store.next(leaving);
        if entry.get().handle() == leaving {
            if next == NO_HANDLE {
                entry.remove();
            } else {
                *entry.get_mut() = Slot::new(hash, next);
            }
            return;
        }
        let mut h = entry.get().handle();
        while store.next(h) != leaving {
            h = store.next(h);
            assert_ne!(h, NO_HANDLE, "a held event is in its key's chain");
        }
        store.set_next(h, next);
    }
}

#[cfg(test)]
mod tests;
