//! A task's intake: the records the I/O layer pushes into its queue, what it tells the queue about
//! the partitions (end offsets, the wall clock, which sides are paused for backpressure), and
//! what it has queued.

use super::PartitionTask;
use crate::event::{Event, Side};
use crate::join::Admission;

impl PartitionTask {
    /// Buffers a consumed record. One that will not join (no key, stamped too far ahead) is
    /// marked now, so that it does not wait in timestamp order.
    pub fn push(&mut self, side: Side, event: Event) {
        self.next_offset[side.index()] = event.offset.saturating_add(1);
        let admission = if event.key.is_none() {
            Admission::NullKey
        } else if event.timestamp > self.latest_timestamp_ms {
            Admission::FutureTimestamp
        } else {
            Admission::Join
        };
        self.queue.push_admitted(side, event, admission);
    }

    /// End offsets (high watermarks) of the task's partitions (one per topic, in order) as the
    /// consumer last saw them: a side known to have unfetched records is waited for (see
    /// [`TaskQueue`]).
    ///
    /// [`TaskQueue`]: crate::join::TaskQueue
    pub fn set_end_offsets(&mut self, end: &[Option<i64>]) {
        for (side, end) in self.sides().zip(end) {
            self.queue.set_end_offset(side, *end);
        }
    }

    /// The sides of the task's join, in topic order.
    pub fn sides(&self) -> impl Iterator<Item = Side> + Clone {
        Side::all(self.queue.sides())
    }

    /// The consumer's positions on the task's partitions, where every record polled of them was
    /// queued here (see [`TaskQueue::set_position`]).
    ///
    /// [`TaskQueue::set_position`]: crate::join::TaskQueue::set_position
    pub fn set_positions(&mut self, positions: &[Option<i64>]) {
        for (side, &position) in self.sides().zip(positions) {
            if let Some(position) = position {
                self.queue.set_position(side, position);
                if side == super::TABLE_SIDE {
                    self.set_table_position(position);
                }
            }
        }
    }

    /// Per side, whether the task waits to hear the broker's end offset of it before it goes on
    /// without it: the consumer's cache says it is caught up, and it may be old.
    pub fn end_offsets_wanted(&self) -> &[bool] {
        self.queue.end_offsets_wanted()
    }

    /// The broker's end offset of one side's partition, asked because
    /// [`PartitionTask::end_offsets_wanted`] said so (`None`: no answer).
    pub fn confirm_end_offset(&mut self, side: Side, end: Option<i64>) {
        self.queue.confirm_end_offset(side, end);
    }

    /// End offsets of the task's partitions as the broker reported them when the task was
    /// assigned: cached reports below them are stale (see [`TaskQueue::set_end_offset_floor`]).
    ///
    /// [`TaskQueue::set_end_offset_floor`]: crate::join::TaskQueue::set_end_offset_floor
    pub fn set_end_offset_floors(&mut self, floor: &[i64]) {
        for (side, &floor) in self.sides().zip(floor) {
            self.queue.set_end_offset_floor(side, floor);
            if side == super::TABLE_SIDE {
                self.set_restore_end(floor);
            }
        }
    }

    /// The wall clock now (Unix ms), against which `max_future_ms` is measured when a record is
    /// pushed: give it before the first push (until then no timestamp is too far ahead).
    pub fn set_wall_clock(&mut self, unix_ms: i64) {
        self.latest_timestamp_ms = unix_ms.saturating_add(self.policy.max_future_ms);
    }

    /// Records buffered and not yet run.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Bytes of the records buffered on every side ([`Event::footprint`]).
    pub fn queued_bytes(&self) -> usize {
        self.queue.total_bytes()
    }

    /// The most bytes the queue held at once.
    pub fn queued_peak_bytes(&self) -> usize {
        self.queue.peak_bytes()
    }

    /// Milliseconds its records waited for a side ([`TaskQueue::waited_ms`]).
    ///
    /// [`TaskQueue::waited_ms`]: crate::join::TaskQueue::waited_ms
    pub fn waited_ms(&self) -> i64 {
        self.queue.waited_ms()
    }

    /// Bytes of the records buffered on one side.
    pub fn queued_side_bytes(&self, side: Side) -> usize {
        self.queue.bytes(side)
    }

    /// Which sides' partitions are paused for backpressure now (per side, in topic order), as
    /// the I/O layer keeps them: an empty paused side is waited for, not idled past (its records
    /// are on the broker).
    pub fn set_backpressured(&mut self, paused: &[bool]) {
        for (side, &paused) in self.sides().zip(paused) {
            self.queue.set_paused(side, paused);
        }
    }
}
