//! Tasks follow partitions, not rebalances (pure). A task is partition p of every joined topic; it
//! is active only while this host holds all of them. The group hands partitions over as deltas: the
//! classic eager protocol revokes everything and assigns everything, while the new protocol
//! (KIP-848) moves partitions one at a time, so a host can hold orders-3 before (or after) it holds
//! payments-3. [`Pairing`] turns those deltas into what the run loop must do: stop a task when
//! either of its partitions goes, start it once both are here, and hold a lone half paused (nothing
//! read from it is used) until its pair arrives or it goes too.
//!
//! It also keeps the figures an operator reads about rebalances: how long each task waited for its
//! pair, and how long a rebalance took — from the first partition revoked or assigned until every
//! held partition had its pair again.

use std::collections::{BTreeMap, BTreeSet};

use crate::event::Side;

/// What the run loop does after a delta, in this order: stops, then pauses, then starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Active tasks that lost a partition: their state is dropped (their points were committed
    /// on revoke).
    pub stop: Vec<i32>,
    /// Partitions held without their pair: stop fetching them.
    pub pause: Vec<(Side, i32)>,
    /// Tasks whose two partitions are both held now: start them from their committed points.
    /// `waited_ms` is how long a lone half waited for its pair (`None`: both came together), in
    /// which case the half was paused and whatever was read of it dropped, so both partitions
    /// are sought back to the committed points and resumed.
    pub start: Vec<(i32, Option<i64>)>,
}

/// A rebalance that ended: every held partition has its pair again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    pub took_ms: i64,
}

#[derive(Debug, Default)]
pub struct Pairing {
    /// Topics joined: a task is active when all are held.
    topics: usize,
    /// Held partitions per task number: one bit per topic (bit 0 the first).
    held: BTreeMap<i32, u8>,
    active: BTreeSet<i32>,
    /// Lone halves and since when (ms).
    waiting: BTreeMap<i32, i64>,
    /// When the rebalance under way began, if one is.
    unsettled_since: Option<i64>,
    /// Classic eager protocol: a revoke of everything is always followed by an assignment, so the
    /// rebalance lasts until that assignment.
    eager: bool,
}

impl Pairing {
    /// The pairing of a two-topic join.
    pub fn new(eager: bool) -> Self {
        Pairing::with_topics(2, eager)
    }

    /// The pairing of a join of `topics` topics; one for a join with a global table, whose
    /// group reads the stream alone (each partition is a task as soon as it comes).
    pub fn with_topics(topics: usize, eager: bool) -> Self {
        assert!((1..=crate::event::MAX_TOPICS).contains(&topics));
        Pairing {
            topics,
            eager,
            ..Pairing::default()
        }
    }

    /// Applies one delta from the group: what went, then what came, at `now_ms`.
    pub fn apply(
        &mut self,
        revoked: &[(Side, i32)],
        assigned: &[(Side, i32)],
        now_ms: i64,
    ) -> (Changes, Option<Settled>) {
        let mut changes = Changes::default();
        if revoked.is_empty() && assigned.is_empty() {
            return (changes, None);
        }
        self.unsettled_since.get_or_insert(now_ms);
        let mut touched = BTreeSet::new();
        for &(side, p) in revoked {
            if let Some(held) = self.held.get_mut(&p) {
                *held &= !(1 << side.index());
            }
            if self.active.remove(&p) {
                changes.stop.push(p);
            }
            touched.insert(p);
        }
        for &(side, p) in assigned {
            *self.held.entry(p).or_default() |= 1 << side.index();
            touched.insert(p);
        }
        let all = (1u8 << self.topics) - 1;
        for p in touched {
            let held = self.held.get(&p).copied().unwrap_or_default();
            if held == all {
                if !self.active.contains(&p) {
                    self.active.insert(p);
                    let waited = self.waiting.remove(&p).map(|since| now_ms - since);
                    changes.start.push((p, waited));
                }
            } else if held == 0 {
                self.held.remove(&p);
                self.waiting.remove(&p);
            } else {
                // Partitions that just lost their pair, or arrived without it: paused (pausing
                // again one already waiting is harmless).
                self.waiting.entry(p).or_insert(now_ms);
                let sides = Side::all(self.topics).filter(|s| held & (1 << s.index()) != 0);
                changes.pause.extend(sides.map(|side| (side, p)));
            }
        }
        let settled = self.settle(now_ms, !assigned.is_empty());
        (changes, settled)
    }

    /// Ends the rebalance under way when no half waits for its pair (and, under the eager
    /// protocol, the assignment that follows a revoke has come).
    fn settle(&mut self, now_ms: i64, assigned: bool) -> Option<Settled> {
        let since = self.unsettled_since?;
        let awaiting_assignment = self.eager && !assigned;
        if !self.waiting.is_empty() || awaiting_assignment {
            return None;
        }
        self.unsettled_since = None;
        Some(Settled {
            took_ms: now_ms - since,
        })
    }

    /// An assignment that adds nothing: under the classic protocol (more members than
    /// partitions) it still ends the rebalance its revoke began; under the new one it follows
    /// every revoke and ends nothing of its own.
    pub fn assigned_nothing(&mut self, now_ms: i64) -> Option<Settled> {
        self.settle(now_ms, true)
    }

    /// Tasks with a lone half waiting for its pair, and since when (ms).
    pub fn waiting_since(&self) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.waiting.iter().map(|(p, since)| (*p, *since))
    }

    /// The partition numbers held of each topic, in topic order.
    pub fn held(&self) -> Vec<Vec<i32>> {
        (0..self.topics)
            .map(|side| {
                self.held
                    .iter()
                    .filter(|(_, held)| *held & (1 << side) != 0)
                    .map(|(p, _)| *p)
                    .collect()
            })
            .collect()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_active(&self, p: i32) -> bool {
        self.active.contains(&p)
    }
}

#[cfg(test)]
mod tests;
