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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::store::{EventStore, Handle, Links, NO_HANDLE};
use crate::event::{Event, Side};

/// The join window, in milliseconds of event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinWindow {
    /// Largest timestamp difference of a matching pair.
    pub window_ms: i64,
    /// How long after its window closes an event is kept for out-of-order partners.
    pub grace_ms: i64,
}

impl JoinWindow {
    fn retention(&self) -> i64 {
        self.window_ms.saturating_add(self.grace_ms)
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
            JoinKind::Left => side == Side::Left,
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
}

/// `partner_offset` of an event that has not matched (Kafka offsets are never negative).
const UNMATCHED: i64 = -1;

/// Counted per held event on top of its bytes in the store: its share of the per-key table.
/// Out-of-order events also take an expiry-heap entry, counted apart. benches/memory.rs measures
/// everything, spare capacity included.
const PER_EVENT_OVERHEAD: usize = 9;

pub struct JoinState {
    window: JoinWindow,
    kind: JoinKind,
    stream_time: Option<i64>,
    /// The held events, packed; each carries the offset of its latest partner
    /// ([`UNMATCHED`] if none) and a link to the next held event of its key.
    store: EventStore,
    /// Per key, the oldest held event of that key: the head of its chain through the store.
    keys: HashTable<Handle>,
    /// foldhash, seeded per process: SipHash took a sixth of insert's time (perf, benches/matcher.rs).
    hasher: foldhash::fast::RandomState,
    /// What to evict as stream time advances, in two parts. Events that close no earlier than
    /// every event before them (nearly all: a task takes its records in timestamp order) are
    /// evicted by walking the store from `in_order`, the oldest of them, at no memory cost. The
    /// rest go into `out_of_order`, a min-heap by (close time, arrival). Store handles grow in
    /// arrival order, so equal close times leave in arrival order across both parts.
    in_order: Option<Handle>,
    /// Close time of the newest in-order event.
    in_order_close: i64,
    out_of_order: BinaryHeap<Reverse<(i64, Handle)>>,
    events: usize,
}

impl JoinState {
    pub fn new(window: JoinWindow, kind: JoinKind) -> Self {
        JoinState {
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
        }
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

    /// Offsets a restart must replay to rebuild this state, by side: every held event, and for a
    /// matched event whose expiry would be reported, its latest partner. The commit offset of each
    /// partition must stay at or below the smallest of them.
    pub fn needed_offsets(&self) -> impl Iterator<Item = (Side, i64)> + '_ {
        let kind = self.kind;
        let store = &self.store;
        store.live().flat_map(move |h| {
            let side = store.side(h);
            let partner = store.partner_offset(h);
            let reported = partner != UNMATCHED && kind.reports_expiry(side);
            std::iter::once((side, store.offset(h)))
                .chain(reported.then_some((side.opposite(), partner)))
        })
    }

    /// Takes one event of `side` and appends what it caused to `out`: the matches it forms, then
    /// the expiries its timestamp brings about. A late event is reported and not held.
    pub fn insert(&mut self, side: Side, event: Event, out: &mut Vec<JoinOutcome>) {
        let ts = event.timestamp;
        if let Some(st) = self.stream_time {
            if ts < st.saturating_sub(self.window.retention()) {
                out.push(JoinOutcome::Late {
                    side,
                    event: Arc::new(event),
                });
                return;
            }
        }
        self.stream_time = Some(self.stream_time.map_or(ts, |st| st.max(ts)));

        let window = self.window.window_ms;
        let Self {
            store,
            keys,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(event.key_bytes());
        // One hash per insert. A key's chain runs from its oldest held event to its newest.
        let entry = keys.entry(
            hash,
            |&h| store.key(h) == event.key_bytes(),
            |&h| hasher.hash_one(store.key(h)),
        );
        let close = ts.saturating_add(self.window.retention());
        let out_of_order = close < self.in_order_close;
        let handle = store.push(
            &event,
            Links {
                side,
                partner_offset: UNMATCHED,
                next: NO_HANDLE,
                out_of_order,
            },
        );
        let head = match entry {
            Entry::Occupied(o) => *o.get(),
            Entry::Vacant(v) => {
                v.insert(handle);
                NO_HANDLE
            }
        };
        // Two walks of the chain (a key holds few events): the first marks the partners and
        // appends the new event, the second, once the new event is shared, reports the pairs.
        let partners = |store: &EventStore, h: Handle| {
            store.side(h) != side && (store.timestamp(h) - ts).abs() <= window
        };
        let mut partner_offset = UNMATCHED;
        let mut h = head;
        while h != NO_HANDLE {
            if partners(store, h) {
                store.set_partner_offset(h, event.offset);
                partner_offset = partner_offset.max(store.offset(h));
            }
            match store.next(h) {
                NO_HANDLE => {
                    store.set_next(h, handle);
                    break;
                }
                next => h = next,
            }
        }
        if partner_offset != UNMATCHED {
            store.set_partner_offset(handle, partner_offset);
            let this = Arc::new(event);
            let mut h = head;
            while h != handle {
                if partners(store, h) {
                    let held = Arc::new(store.event(h));
                    let (left, right) = match side {
                        Side::Left => (this.clone(), held),
                        Side::Right => (held, this.clone()),
                    };
                    out.push(JoinOutcome::Match { left, right });
                }
                h = store.next(h);
            }
        }
        self.events += 1;
        if out_of_order {
            self.out_of_order.push(Reverse((close, handle)));
        } else {
            self.in_order_close = close;
            self.in_order.get_or_insert(handle);
        }
        self.expire(out);
    }

    /// Removes every event whose window and grace have passed, reporting unmatched ones per kind.
    fn expire(&mut self, out: &mut Vec<JoinOutcome>) {
        let Some(st) = self.stream_time else { return };
        let retention = self.window.retention();
        loop {
            let from_log = self
                .in_order
                .map(|h| (self.store.timestamp(h).saturating_add(retention), h));
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
                Some(self.store.after(leaving))
            };
            self.unlink(leaving);
            let side = self.store.side(leaving);
            if self.store.partner_offset(leaving) == UNMATCHED && self.kind.reports_expiry(side) {
                out.push(JoinOutcome::Expired {
                    side,
                    event: Arc::new(self.store.event(leaving)),
                });
            }
            self.store.remove(leaving);
            self.events -= 1;
            if let Some(after) = after {
                self.in_order = self.store.in_order_from(after);
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
        let found = keys.find_entry(hasher.hash_one(key), |&h| store.key(h) == key);
        let Ok(mut entry) = found else {
            unreachable!("a held event's key is in the table");
        };
        let next = store.next(leaving);
        if *entry.get() == leaving {
            if next == NO_HANDLE {
                entry.remove();
            } else {
                *entry.get_mut() = next;
            }
            return;
        }
        let mut h = *entry.get();
        while store.next(h) != leaving {
            h = store.next(h);
            assert_ne!(h, NO_HANDLE, "a held event is in its key's chain");
        }
        store.set_next(h, next);
    }
}

#[cfg(test)]
mod tests;
