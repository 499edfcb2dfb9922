//! A task's intake: the records the I/O layer pushes into its queue, what it tells the queue about
//! the partitions (end offsets, the wall clock), and backpressure: when a side's queue is too full
//! and its partition must pause, and when it has drained enough to resume.

use super::backpressure::QueueMarks;
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

    /// End offsets (high watermarks) of the left and right partitions as the consumer last saw
    /// them: a side known to have unfetched records is waited for (see [`TaskQueue`]).
    ///
    /// [`TaskQueue`]: crate::join::TaskQueue
    pub fn set_end_offsets(&mut self, end: [Option<i64>; 2]) {
        self.queue.set_end_offset(Side::Left, end[0]);
        self.queue.set_end_offset(Side::Right, end[1]);
    }

    /// End offsets of the left and right partitions as the broker reported them when the task was
    /// assigned: cached reports below them are stale (see [`TaskQueue::set_end_offset_floor`]).
    ///
    /// [`TaskQueue::set_end_offset_floor`]: crate::join::TaskQueue::set_end_offset_floor
    pub fn set_end_offset_floors(&mut self, floor: [i64; 2]) {
        self.queue.set_end_offset_floor(Side::Left, floor[0]);
        self.queue.set_end_offset_floor(Side::Right, floor[1]);
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

    /// Bytes of the records buffered on both sides ([`Event::footprint`]).
    pub fn queued_bytes(&self) -> usize {
        self.queue.bytes(Side::Left) + self.queue.bytes(Side::Right)
    }

    /// The most bytes the queue held at once.
    pub fn queued_peak_bytes(&self) -> usize {
        self.queue.peak_bytes()
    }

    /// Sides paused for backpressure.
    pub fn paused_sides(&self) -> usize {
        [Side::Left, Side::Right]
            .into_iter()
            .filter(|&s| self.queue.is_paused(s))
            .count()
    }

    /// Whether `side`'s partition must be paused now: its queue passed `marks.high`. The side
    /// is then marked paused (the queue waits for it rather than idling past it); the caller
    /// pauses the partition.
    pub fn pause_if_full(&mut self, side: Side, marks: QueueMarks) -> bool {
        if self.queue.is_paused(side) || self.queue.bytes(side) <= marks.high {
            return false;
        }
        self.queue.set_paused(side, true);
        self.counters.pauses += 1;
        true
    }

    /// Sides paused for backpressure whose queue drained to `marks.low`: marked resumed; the
    /// caller resumes their partitions. A halted task's stay paused.
    pub fn drained(&mut self, marks: QueueMarks) -> Vec<Side> {
        if self.halted.is_some() {
            return Vec::new();
        }
        let sides: Vec<Side> = [Side::Left, Side::Right]
            .into_iter()
            .filter(|&s| self.queue.is_paused(s) && self.queue.bytes(s) <= marks.low)
            .collect();
        for &side in &sides {
            self.queue.set_paused(side, false);
        }
        sides
    }
}
