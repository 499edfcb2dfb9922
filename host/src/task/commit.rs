//! Commit points: how far a task's records count as processed (only once their batch is
//! acknowledged), where a halt or a park rolls a run back to, and what the I/O layer may commit
//! for each partition: never past a record the task still needs (queued, unacknowledged, held in
//! the join state, or held back by a parked call).

use super::batch::RunPoint;
use super::retry::Parked;
use super::{Batch, PartitionTask};
use crate::event::Side;
use crate::join::CommitPoint;

impl PartitionTask {
    pub(super) fn run_point(&self, batch: &Batch) -> RunPoint {
        RunPoint {
            through: batch.through,
            pending: self.pending,
            pending_from: self.pending_from,
            emits: batch.emits.len(),
            bytes: batch.bytes,
            sources: batch.sources.len(),
        }
    }

    /// A halt rolls back to `before`: the record halted on, and those after it, not processed.
    pub(super) fn roll_back(&mut self, batch: &mut Batch, before: RunPoint) {
        batch.through = before.through;
        self.pending = before.pending;
        self.pending_from = before.pending_from;
    }

    /// The record at `offset` of `side` is in the batch, to count as processed once acknowledged.
    pub(super) fn processed(&mut self, batch: &mut Batch, side: Side, offset: i64) {
        let i = side.index();
        self.pending[i] = Some(offset);
        self.pending_from[i].get_or_insert(offset);
        batch.through[i] = Some(offset);
    }

    /// The batch's emits are durable: its records now count as processed.
    pub fn acknowledge(&mut self, batch: Batch) {
        for i in 0..self.next_offset.len() {
            if let Some(through) = batch.through[i] {
                self.acknowledged[i] = self.acknowledged[i].max(Some(through));
                if self.pending[i] == Some(through) {
                    self.pending[i] = None;
                    self.pending_from[i] = None;
                }
            }
        }
    }

    /// What to commit for each partition (one per topic, in the join's order) now. A parked
    /// task's points stay at or before what it holds back (its record, the records after it, the
    /// events of its calls).
    pub fn commit_points(&mut self) -> Vec<CommitPoint> {
        if self.halted.is_some() {
            return self.last_points.clone();
        }
        let parked = self.parked.as_ref().map(Parked::needs).unwrap_or_default();
        let sides = Side::all(self.next_offset.len());
        self.last_points = sides
            .map(|side| {
                let i = side.index();
                let needed = self
                    .state
                    .needed_offsets()
                    .chain(parked.iter().copied())
                    .filter(|(s, _)| *s == side)
                    .map(|(_, o)| o)
                    .chain(self.queue.first_offset(side))
                    .chain(self.pending_from[i]);
                CommitPoint::new(self.next_offset[i], needed, self.acknowledged[i])
            })
            .collect();
        self.last_points.clone()
    }
}
