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
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

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

/// One held event. Kept to 24 bytes: the state holds one per buffered event.
struct Held {
    event: Arc<Event>,
    /// Offset of the latest partner this event matched, or [`UNMATCHED`]. While this event is held
    /// and its expiry would be reported, a restart must replay that partner too, or the rebuilt
    /// state would think this event unmatched and report a spurious expiry.
    partner_offset: i64,
    side: Side,
}

/// `partner_offset` of an event that has not matched (Kafka offsets are never negative).
const UNMATCHED: i64 = -1;

impl Held {
    fn matched(&self) -> bool {
        self.partner_offset != UNMATCHED
    }
}

/// A key in the state's map: the key bytes of one of the events it holds, so a key is not stored
/// twice. When that event leaves, the entry is re-keyed by another of the key's events.
struct HeldKey(Arc<Event>);

impl std::hash::Hash for HeldKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.key.hash(h)
    }
}
impl PartialEq for HeldKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}
impl Eq for HeldKey {}
impl std::borrow::Borrow<[u8]> for HeldKey {
    fn borrow(&self) -> &[u8] {
        &self.0.key
    }
}

/// An expiry-index entry: the held event and when stream time passes its window and grace.
/// Ordered by (close, seq) alone, so events leave in the order they arrived among equal close times.
struct Expiring {
    close: i64,
    seq: u64,
    event: Arc<Event>,
}

impl PartialEq for Expiring {
    fn eq(&self, other: &Self) -> bool {
        (self.close, self.seq) == (other.close, other.seq)
    }
}
impl Eq for Expiring {}
impl PartialOrd for Expiring {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Expiring {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.close, self.seq).cmp(&(other.close, other.seq))
    }
}

/// Pushes into a list whose capacity grows 1, 2, 4, …: most keys hold one or two events, and
/// `Vec::push` would reserve four.
fn push_small<T>(list: &mut Vec<T>, item: T) {
    if list.len() == list.capacity() {
        list.reserve_exact(list.len().max(1));
    }
    list.push(item);
}

/// Fixed cost counted per held event on top of its bytes: the `Arc` header, the `Held` entry and
/// the expiry-index entry. The per-key map and spare capacity are not counted; benches/memory.rs
/// measures everything.
const PER_EVENT_OVERHEAD: usize =
    16 + std::mem::size_of::<Held>() + std::mem::size_of::<Expiring>();

pub struct JoinState {
    window: JoinWindow,
    kind: JoinKind,
    stream_time: Option<i64>,
    /// Per key, the held events of both sides (most keys hold one or two).
    /// foldhash, seeded per process: SipHash took a sixth of insert's time (perf, benches/matcher.rs).
    keys: HashMap<HeldKey, Vec<Held>, foldhash::fast::RandomState>,
    /// Min-heap of held events by close time: what to evict as stream time advances, oldest first.
    expiry: BinaryHeap<Reverse<Expiring>>,
    next_seq: u64,
    bytes: usize,
    events: usize,
}

fn event_bytes(event: &Event) -> usize {
    event.key.len()
        + event.value.as_ref().map_or(0, |v| v.len())
        + event
            .headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len) + 32)
            .sum::<usize>()
        + std::mem::size_of::<Event>()
}

impl JoinState {
    pub fn new(window: JoinWindow, kind: JoinKind) -> Self {
        JoinState {
            window,
            kind,
            stream_time: None,
            keys: HashMap::default(),
            expiry: BinaryHeap::new(),
            next_seq: 0,
            bytes: 0,
            events: 0,
        }
    }

    /// Largest timestamp seen so far.
    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// Events held, and the bytes they take (payloads plus bookkeeping).
    pub fn held(&self) -> (usize, usize) {
        (self.events, self.bytes)
    }

    /// Offsets a restart must replay to rebuild this state, by side: every held event, and for a
    /// matched event whose expiry would be reported, its latest partner. The commit offset of each
    /// partition must stay at or below the smallest of them.
    pub fn needed_offsets(&self) -> impl Iterator<Item = (Side, i64)> + '_ {
        let kind = self.kind;
        self.keys.values().flatten().flat_map(move |h| {
            let other = opposite(h.side);
            let partner =
                (h.matched() && kind.reports_expiry(h.side)).then_some((other, h.partner_offset));
            std::iter::once((h.side, h.event.offset)).chain(partner)
        })
    }

    /// Takes one event of `side` and appends what it caused to `out`: the matches it forms, then
    /// the expiries its timestamp brings about. A late event is reported and not held.
    pub fn insert(&mut self, side: Side, event: Event, out: &mut Vec<JoinOutcome>) {
        let ts = event.timestamp;
        let event = Arc::new(event);
        if let Some(st) = self.stream_time {
            if ts < st.saturating_sub(self.window.retention()) {
                out.push(JoinOutcome::Late { side, event });
                return;
            }
        }
        self.stream_time = Some(self.stream_time.map_or(ts, |st| st.max(ts)));

        let window = self.window.window_ms;
        // One hash per insert; a key already held keeps its map key.
        let list = self.keys.entry(HeldKey(event.clone())).or_default();
        let mut partner_offset = UNMATCHED;
        for held in list.iter_mut().filter(|h| h.side != side) {
            if (held.event.timestamp - ts).abs() <= window {
                held.partner_offset = event.offset;
                partner_offset = partner_offset.max(held.event.offset);
                let (left, right) = match side {
                    Side::Left => (event.clone(), held.event.clone()),
                    Side::Right => (held.event.clone(), event.clone()),
                };
                out.push(JoinOutcome::Match { left, right });
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += event_bytes(&event) + PER_EVENT_OVERHEAD;
        self.events += 1;
        let close = ts.saturating_add(self.window.retention());
        self.expiry.push(Reverse(Expiring {
            close,
            seq,
            event: event.clone(),
        }));
        push_small(
            list,
            Held {
                event,
                partner_offset,
                side,
            },
        );
        self.expire(out);
    }

    /// Removes every event whose window and grace have passed, reporting unmatched ones per kind.
    fn expire(&mut self, out: &mut Vec<JoinOutcome>) {
        let Some(st) = self.stream_time else { return };
        while self.expiry.peek().is_some_and(|e| e.0.close < st) {
            let Reverse(Expiring {
                event: expiring, ..
            }) = self.expiry.pop().expect("checked non-empty");
            let Entry::Occupied(mut entry) = self.keys.entry(HeldKey(expiring.clone())) else {
                continue;
            };
            let list = entry.get_mut();
            if let Some(pos) = list.iter().position(|h| Arc::ptr_eq(&h.event, &expiring)) {
                let held = list.swap_remove(pos);
                self.bytes -= event_bytes(&held.event) + PER_EVENT_OVERHEAD;
                self.events -= 1;
                if !held.matched() && self.kind.reports_expiry(held.side) {
                    out.push(JoinOutcome::Expired {
                        side: held.side,
                        event: held.event,
                    });
                }
            }
            if list.is_empty() {
                entry.remove();
            } else if Arc::ptr_eq(&entry.key().0, &expiring) {
                // The map's key is this leaving event: keyed anew by one that stays, so the
                // leaving event's memory is freed now rather than with the key's last event.
                let (_, list) = entry.remove_entry();
                let key = HeldKey(list[0].event.clone());
                self.keys.insert(key, list);
            }
        }
    }
}

fn opposite(side: Side) -> Side {
    match side {
        Side::Left => Side::Right,
        Side::Right => Side::Left,
    }
}

#[cfg(test)]
mod tests;
