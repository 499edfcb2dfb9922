//! One task's N-way windowed join (issue 32): per key, the events of each of N topics still
//! inside their window + grace, and the matches they form.
//!
//! Semantics, the binary join's ([`super::state`]) extended to N topics:
//! - A match is one event of each topic for a key with all timestamps within `window` of each
//!   other (max − min ≤ window). Several events per topic give every combination, as chained
//!   windowed joins do. Each match is reported once, by the event that completes it (the last of
//!   its events to arrive), its events in topic order; a new event's matches in the order of its
//!   partners' arrival, topic by topic.
//! - Stream time, late events and retention are the binary join's: an event is late when its
//!   timestamp is below `stream time − window − grace` (it joins nothing, reported as late), and
//!   leaves once stream time passes `ts + window + grace`, in (close time, arrival) order.
//! - `left`: an event of the first topic that took part in no match by the time it leaves is
//!   reported as expired, with the partners it did find: per other topic, the events of its key
//!   within its window that were held while it was (none, or some).
//!
//! For N = 2 the matches, expiries and late events are exactly the binary join's, in the same
//! order (multi/tests.rs checks it on random streams). This is the reference model, not what a
//! task runs: a plain map of keys to per-topic lists, an `Arc` and a `Vec` per held event, and
//! per first-topic event of a `left` join its partners kept as lists. [`JoinState::with_topics`]
//! runs the same semantics on the packed, spilling store (join/state/nway.rs), and its tests
//! check it outcome for outcome against this model (join/state/nway/tests.rs).
//!
//! [`JoinState::with_topics`]: super::JoinState::with_topics

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::state::JoinWindow;
use crate::event::{Event, MAX_TOPICS};

/// Which unmatched events an N-way join reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultiKind {
    /// Complete matches only.
    Inner,
    /// Complete matches, and events of the first topic that leave in none, with their partners.
    Left,
}

/// What one inserted event caused, in the order it should be acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiOutcome {
    /// One event of each topic, in topic order.
    Match { events: Vec<Arc<Event>> },
    /// An event of the first topic that left in no match (`left`); `partners[j]` are the events of
    /// topic j + 1 it found within its window, in arrival order.
    Expired {
        event: Arc<Event>,
        partners: Vec<Vec<Arc<Event>>>,
    },
    /// The inserted event (of topic `topic`) arrived after its window and grace had passed.
    Late { topic: usize, event: Arc<Event> },
}

/// A held event.
struct Held {
    topic: usize,
    event: Arc<Event>,
    matched: bool,
    /// `left`, first topic: the partners found so far, per other topic.
    partners: Vec<Vec<Arc<Event>>>,
}

pub struct MultiJoinState {
    topics: usize,
    window: JoinWindow,
    kind: MultiKind,
    stream_time: Option<i64>,
    /// Held events by arrival number.
    held: HashMap<u64, Held>,
    /// Per key, per topic, the arrival numbers of its held events, oldest first.
    keys: HashMap<Box<[u8]>, Vec<Vec<u64>>>,
    /// (close time, arrival) of every held event: what leaves next.
    closing: BinaryHeap<Reverse<(i64, u64)>>,
    arrivals: u64,
}

impl MultiJoinState {
    /// A join of `topics` topics (2 to [`MAX_TOPICS`]).
    pub fn new(topics: usize, window: JoinWindow, kind: MultiKind) -> Self {
        assert!(
            (2..=MAX_TOPICS).contains(&topics),
            "an N-way join takes 2 to {MAX_TOPICS} topics, not {topics}"
        );
        MultiJoinState {
            topics,
            window,
            kind,
            stream_time: None,
            held: HashMap::new(),
            keys: HashMap::new(),
            closing: BinaryHeap::new(),
            arrivals: 0,
        }
    }

    pub fn stream_time(&self) -> Option<i64> {
        self.stream_time
    }

    /// Events held, and the bytes they take ([`Event::footprint`]).
    pub fn held(&self) -> (usize, usize) {
        let bytes = self.held.values().map(|h| h.event.footprint()).sum();
        (self.held.len(), bytes)
    }

    /// Per topic, the smallest offset of a held event: a commit of that topic's partition must
    /// stay at or below it (the state is rebuilt from the commit points).
    pub fn needed_offsets(&self) -> Vec<Option<i64>> {
        let mut needed = vec![None; self.topics];
        for h in self.held.values() {
            let n: &mut Option<i64> = &mut needed[h.topic];
            *n = Some(n.map_or(h.event.offset, |o| o.min(h.event.offset)));
        }
        needed
    }

    /// Takes one event of topic `topic` and appends what it caused to `out`: the matches it
    /// completes, then the expiries its timestamp brings about. A late event is reported and
    /// not held.
    pub fn insert(&mut self, topic: usize, event: Event, out: &mut Vec<MultiOutcome>) {
        assert!(topic < self.topics, "topic {topic} of {}", self.topics);
        let ts = event.timestamp;
        if self.window.is_late(ts, self.stream_time) {
            out.push(MultiOutcome::Late {
                topic,
                event: Arc::new(event),
            });
            return;
        }
        self.stream_time = Some(self.stream_time.map_or(ts, |st| st.max(ts)));
        let window = self.window;
        let event = Arc::new(event);
        let arrival = self.arrivals;
        self.arrivals += 1;
        let lists = self
            .keys
            .entry(event.key_bytes().into())
            .or_insert_with(|| vec![Vec::new(); self.topics]);
        // Per topic, the held events within the new one's window; its own topic: itself.
        let candidates: Vec<Vec<u64>> = (0..self.topics)
            .map(|t| match t == topic {
                true => vec![arrival],
                false => lists[t]
                    .iter()
                    .copied()
                    .filter(|a| window.within(self.held[a].event.timestamp, ts))
                    .collect(),
            })
            .collect();
        let mut partners = Vec::new();
        if self.kind == MultiKind::Left {
            if topic == 0 {
                partners = candidates[1..]
                    .iter()
                    .map(|c| c.iter().map(|a| self.held[a].event.clone()).collect())
                    .collect();
            } else {
                for a in &lists[0] {
                    let first = self.held.get_mut(a).expect("a listed event is held");
                    if !first.matched && window.within(first.event.timestamp, ts) {
                        first.partners[topic - 1].push(event.clone());
                    }
                }
            }
        }
        lists[topic].push(arrival);
        self.held.insert(
            arrival,
            Held {
                topic,
                event: event.clone(),
                matched: false,
                partners,
            },
        );
        self.closing
            .push(Reverse((ts.saturating_add(window.retention()), arrival)));
        if candidates.iter().all(|c| !c.is_empty()) {
            let mut chosen = Vec::with_capacity(self.topics);
            self.matches(&candidates, &mut chosen, out);
        }
        self.expire(out);
    }

    /// Every combination of one candidate per topic from `chosen.len()` on whose timestamps span
    /// at most the window: reported, and its events marked matched.
    fn matches(
        &mut self,
        candidates: &[Vec<u64>],
        chosen: &mut Vec<u64>,
        out: &mut Vec<MultiOutcome>,
    ) {
        let t = chosen.len();
        if t == candidates.len() {
            for a in chosen.iter() {
                self.held
                    .get_mut(a)
                    .expect("a chosen event is held")
                    .matched = true;
            }
            let events = chosen.iter().map(|a| self.held[a].event.clone()).collect();
            out.push(MultiOutcome::Match { events });
            return;
        }
        for &a in &candidates[t] {
            let ts = self.held[&a].event.timestamp;
            let fits = chosen
                .iter()
                .all(|c| self.window.within(self.held[c].event.timestamp, ts));
            if fits {
                chosen.push(a);
                self.matches(candidates, chosen, out);
                chosen.pop();
            }
        }
    }

    /// Removes every event whose window and grace have passed, reporting per kind.
    fn expire(&mut self, out: &mut Vec<MultiOutcome>) {
        let Some(st) = self.stream_time else { return };
        while let Some(&Reverse((close, arrival))) = self.closing.peek() {
            if close >= st {
                break;
            }
            self.closing.pop();
            let held = self.held.remove(&arrival).expect("a closing event is held");
            let key = held.event.key_bytes();
            let lists = self
                .keys
                .get_mut(key)
                .expect("a held event's key is listed");
            lists[held.topic].retain(|a| *a != arrival);
            if lists.iter().all(Vec::is_empty) {
                self.keys.remove(key);
            }
            if self.kind == MultiKind::Left && held.topic == 0 && !held.matched {
                out.push(MultiOutcome::Expired {
                    event: held.event,
                    partners: held.partners,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
