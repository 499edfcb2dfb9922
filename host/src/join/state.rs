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

use std::collections::{BTreeMap, HashMap};
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

struct Held {
    id: u64,
    event: Arc<Event>,
    matched: bool,
    /// Offset of the latest partner this event matched. While this event is held and its expiry
    /// would be reported, a restart must replay that partner too, or the rebuilt state would think
    /// this event unmatched and report a spurious expiry.
    partner_offset: Option<i64>,
}

#[derive(Default)]
struct KeyEvents {
    left: Vec<Held>,
    right: Vec<Held>,
}

impl KeyEvents {
    fn side(&mut self, side: Side) -> &mut Vec<Held> {
        match side {
            Side::Left => &mut self.left,
            Side::Right => &mut self.right,
        }
    }
}

/// Fixed cost counted per held event on top of its bytes: the `Held` entry, the `Arc` header and
/// the expiry-index entry.
const PER_EVENT_OVERHEAD: usize =
    std::mem::size_of::<Held>() + 16 + std::mem::size_of::<((i64, u64), (Side, Arc<Event>))>();

pub struct JoinState {
    window: JoinWindow,
    kind: JoinKind,
    stream_time: Option<i64>,
    keys: HashMap<Vec<u8>, KeyEvents>,
    /// (close time, id) → the held event: what to evict as stream time advances, oldest first.
    /// The event, not a copy of its key: no second allocation per event, no key held twice.
    expiry: BTreeMap<(i64, u64), (Side, Arc<Event>)>,
    next_id: u64,
    bytes: usize,
    events: usize,
}

fn event_bytes(event: &Event) -> usize {
    event.key.len()
        + event.value.as_ref().map_or(0, Vec::len)
        + event.topic.len()
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
            keys: HashMap::new(),
            expiry: BTreeMap::new(),
            next_id: 0,
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
        self.keys.values().flat_map(move |k| {
            let sides = [
                (Side::Left, Side::Right, &k.left),
                (Side::Right, Side::Left, &k.right),
            ];
            sides.into_iter().flat_map(move |(side, other, held)| {
                held.iter().flat_map(move |h| {
                    let partner = h
                        .partner_offset
                        .filter(|_| kind.reports_expiry(side))
                        .map(|o| (other, o));
                    std::iter::once((side, h.event.offset)).chain(partner)
                })
            })
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
        // Looked up by reference first: a key already held costs no allocation.
        if !self.keys.contains_key(event.key.as_slice()) {
            self.keys.insert(event.key.clone(), KeyEvents::default());
        }
        let entry = self
            .keys
            .get_mut(event.key.as_slice())
            .expect("inserted above");
        let other = match side {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        };
        let mut partner_offset = None;
        for held in entry.side(other).iter_mut() {
            if (held.event.timestamp - ts).abs() <= window {
                held.matched = true;
                held.partner_offset = Some(event.offset);
                partner_offset = partner_offset.max(Some(held.event.offset));
                let (left, right) = match side {
                    Side::Left => (event.clone(), held.event.clone()),
                    Side::Right => (held.event.clone(), event.clone()),
                };
                out.push(JoinOutcome::Match { left, right });
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += event_bytes(&event) + PER_EVENT_OVERHEAD;
        self.events += 1;
        let close = ts.saturating_add(self.window.retention());
        self.expiry.insert((close, id), (side, event.clone()));
        entry.side(side).push(Held {
            id,
            event,
            matched: partner_offset.is_some(),
            partner_offset,
        });
        self.expire(out);
    }

    /// Removes every event whose window and grace have passed, reporting unmatched ones per kind.
    fn expire(&mut self, out: &mut Vec<JoinOutcome>) {
        let Some(st) = self.stream_time else { return };
        while let Some((&(close, _), _)) = self.expiry.first_key_value() {
            if close >= st {
                break;
            }
            let ((_, id), (side, expiring)) = self.expiry.pop_first().expect("checked non-empty");
            let key = expiring.key.as_slice();
            let Some(entry) = self.keys.get_mut(key) else {
                continue;
            };
            let list = entry.side(side);
            if let Some(pos) = list.iter().position(|h| h.id == id) {
                let held = list.swap_remove(pos);
                self.bytes -= event_bytes(&held.event) + PER_EVENT_OVERHEAD;
                self.events -= 1;
                if !held.matched && self.kind.reports_expiry(side) {
                    out.push(JoinOutcome::Expired {
                        side,
                        event: held.event,
                    });
                }
            }
            if entry.left.is_empty() && entry.right.is_empty() {
                self.keys.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
