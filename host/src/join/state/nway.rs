//! The join of three topics or more on the binary join's packed store: the semantics of
//! [`crate::join::multi`] (the reference model), at the binary join's cost per held event (its
//! header, its share of the key table, and for some an expiry-heap entry), spilled alike.
//!
//! - Matching: an insert walks its key's chain once (arrival order) and collects, per other
//!   topic, the held events within the new event's window. If every topic has one, every
//!   combination with all timestamps within the window of each other is a match, enumerated
//!   topic by topic in arrival order: the reference's order.
//! - An event's partner field, which only the binary join needs as a partner offset, keeps two
//!   marks: on an event of the first topic of a `left` join, that it matched (any value but
//!   [`UNMATCHED`]); on an event of another topic, that it is *retired* and since when (below).
//! - `left` reports an unmatched first-topic event `e` with the events of the other topics within
//!   its window that were held while it was. Those of an earlier timestamp reach their close
//!   before `e` does, so an event `p` of topic ≥ 1 whose key's chain holds a first-topic event
//!   within `p`'s window at its close is not removed but retired: no longer a candidate for
//!   matches (as if gone), moved to the end of the store (so that it does not keep the segment
//!   the expiry walk read back in RAM), marked with the handle of the newest arrival (handles
//!   grow in arrival order), and re-queued to leave at `ts + window + retention + 1`: past the
//!   close of every first-topic event within its window, the +1 breaking the tie. At `e`'s close
//!   its partners are the chain's events of topics ≥ 1 within its window that are not retired
//!   (held at `e`'s arrival or arrived since) or were retired at or after `e`'s arrival.
//! - Commit points: a retired event stays as long as a first-topic event within its window,
//!   matched or not, is held. So the held events' own offsets are all a restart needs: replayed
//!   from them, the state forms again the matches that marked its held first-topic events and
//!   the partner lists of their expiries (nway/tests/replay.rs checks it).

use super::*;

/// A held event within the window of the one being inserted.
pub(super) struct Candidate {
    handle: Handle,
    timestamp: i64,
    /// Its partner field as read; on a first-topic event of a `left` join, whether it matched.
    partner_offset: i64,
    /// Read from the store once, when a match first takes it.
    event: Option<Arc<Event>>,
}

/// Whether the event whose head this is was retired (see the module doc).
fn is_retired(head: &Head) -> bool {
    head.side != Side::LEFT && head.partner_offset != UNMATCHED
}

impl JoinState {
    /// [`JoinState::insert`] of a join of three topics or more, past the late check and the
    /// stream time.
    pub(super) fn insert_n(&mut self, side: Side, event: Event, out: &mut Vec<JoinOutcome>) {
        assert!(
            side.index() < self.topics,
            "{side:?} in a join of {} topics",
            self.topics
        );
        let ts = event.timestamp;
        let window = self.window;
        let Pushed {
            handle,
            head,
            close,
            out_of_order,
        } = self.push(side, &event);
        let Self {
            store, candidates, ..
        } = self;
        candidates.iter_mut().for_each(Vec::clear);
        let mut h = head;
        while h != NO_HANDLE {
            let held = store.head(h);
            if held.side != side && !is_retired(&held) && window.within(held.timestamp, ts) {
                candidates[held.side.index()].push(Candidate {
                    handle: h,
                    timestamp: held.timestamp,
                    partner_offset: held.partner_offset,
                    event: None,
                });
            }
            if held.next == NO_HANDLE {
                store.set_next(h, handle);
            }
            h = held.next;
        }
        let complete =
            (candidates.iter().enumerate()).all(|(t, c)| t == side.index() || !c.is_empty());
        if complete {
            let offset = event.offset;
            candidates[side.index()].push(Candidate {
                handle,
                timestamp: ts,
                partner_offset: UNMATCHED,
                event: Some(Arc::new(event)),
            });
            let mut combine = Combine {
                candidates,
                chosen: [0; MAX_TOPICS],
                window,
                store,
                // Only a left join reports unmatched events: only its first topic's are marked.
                mark: (self.kind == JoinKind::Left).then_some(offset),
                out,
            };
            combine.from(0);
        }
        self.last_arrival = handle;
        self.events += 1;
        self.queue(close, handle, out_of_order);
        self.expire(out);
    }

    /// Takes `leaving`, whose close time passed, out of the state, reporting it if it expires
    /// unmatched; or, an event a first-topic one may yet count as its partner, retires it.
    pub(super) fn leave_n(&mut self, leaving: Handle, out: &mut Vec<JoinOutcome>) {
        let head = self.store.head(leaving);
        if self.kind == JoinKind::Left && head.partner_offset == UNMATCHED {
            if head.side != Side::LEFT {
                if self.retire(leaving, &head) {
                    return;
                }
            } else {
                let partners = self.partners_of(leaving, &head);
                out.push(JoinOutcome::ExpiredN {
                    event: Arc::new(self.store.event(leaving)),
                    partners,
                });
            }
        }
        self.unlink(leaving);
        self.store.remove(leaving);
        self.events -= 1;
    }

    /// Retires `p` if its key's chain holds a first-topic event within its window: moves it to
    /// the end of the store, marked with the newest arrival, and re-queues it. Returns whether
    /// it did.
    fn retire(&mut self, p: Handle, head: &Head) -> bool {
        let window = self.window;
        let Self {
            store,
            keys,
            hasher,
            ..
        } = self;
        let key = store.key(p);
        let hash = hasher.hash_one(&*key) as u32;
        let found = keys.find_entry(Slot::table_hash(hash), |s| {
            s.hash == hash && (s.handle() == p || store.key_is(s.handle(), &key))
        });
        let Ok(mut entry) = found else {
            unreachable!("a held event's key is in the table");
        };
        drop(key);
        let (mut needed, mut before) = (false, NO_HANDLE);
        let mut h = entry.get().handle();
        while h != NO_HANDLE {
            let held = store.head(h);
            needed |= held.side == Side::LEFT && window.within(held.timestamp, head.timestamp);
            if held.next == p {
                before = h;
            }
            h = held.next;
        }
        if !needed {
            return false;
        }
        let moved = store.relocate(p, self.last_arrival as i64);
        if before == NO_HANDLE {
            *entry.get_mut() = Slot::new(hash, moved);
        } else {
            store.set_next(before, moved);
        }
        let leaves = (head.timestamp.saturating_add(window.window_ms))
            .saturating_add(window.retention())
            .saturating_add(1);
        self.out_of_order.push(Reverse((leaves, moved)));
        true
    }

    /// The partners of the first-topic event `e`, per other topic in arrival order: the events of
    /// its key within its window held while it was (see the module doc).
    fn partners_of(&self, e: Handle, head: &Head) -> Vec<Vec<Arc<Event>>> {
        let key = self.store.key(e);
        let hash = self.hasher.hash_one(&*key) as u32;
        let slot = self.keys.find(Slot::table_hash(hash), |s| {
            s.hash == hash && (s.handle() == e || self.store.key_is(s.handle(), &key))
        });
        let Some(slot) = slot else {
            unreachable!("a held event's key is in the table");
        };
        let mut partners = vec![Vec::new(); self.topics - 1];
        let mut h = slot.handle();
        while h != NO_HANDLE {
            let held = self.store.head(h);
            let together = held.partner_offset == UNMATCHED || held.partner_offset as u64 >= e;
            if held.side != Side::LEFT
                && together
                && self.window.within(held.timestamp, head.timestamp)
            {
                partners[held.side.index() - 1].push(Arc::new(self.store.event(h)));
            }
            h = held.next;
        }
        partners
    }
}

/// The enumeration of an insert's matches: every choice of one candidate per topic, topic by
/// topic, each within the window of those chosen before it.
struct Combine<'a> {
    candidates: &'a mut [Vec<Candidate>],
    /// Per topic below the one being chosen, the index of its chosen candidate.
    chosen: [usize; MAX_TOPICS],
    window: JoinWindow,
    store: &'a mut EventStore,
    /// In a left join, what to mark a first-topic event that matches with: the inserted offset.
    mark: Option<i64>,
    out: &'a mut Vec<JoinOutcome>,
}

impl Combine<'_> {
    /// Chooses topic `t`'s candidate, then the next topics'; past the last, reports the match.
    fn from(&mut self, t: usize) {
        if t == self.candidates.len() {
            self.report();
            return;
        }
        for i in 0..self.candidates[t].len() {
            let ts = self.candidates[t][i].timestamp;
            let fits = (0..t).all(|u| {
                let chosen = &self.candidates[u][self.chosen[u]];
                self.window.within(chosen.timestamp, ts)
            });
            if fits {
                self.chosen[t] = i;
                self.from(t + 1);
            }
        }
    }

    fn report(&mut self) {
        if let Some(mark) = self.mark {
            let first = &mut self.candidates[0][self.chosen[0]];
            if first.partner_offset == UNMATCHED {
                first.partner_offset = mark;
                self.store.set_mark(first.handle, mark);
            }
        }
        let events = (self.candidates.iter_mut().zip(self.chosen))
            .map(|(c, i)| {
                let c = &mut c[i];
                c.event
                    .get_or_insert_with(|| Arc::new(self.store.event(c.handle)))
                    .clone()
            })
            .collect();
        self.out.push(JoinOutcome::MatchN { events });
    }
}

#[cfg(test)]
mod tests;
