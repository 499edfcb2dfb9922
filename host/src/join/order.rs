//! Which of a task's two partitions to take the next record from.
//!
//! As Kafka Streams does, a task takes the record with the smaller timestamp while both partitions
//! have data buffered, so a partition fetched ahead of the other does not make the other's records
//! look late and results do not depend on fetch timing. When one side has nothing buffered the task
//! waits up to `max_idle_ms` (Kafka Streams' `max.task.idle.ms`) for it, then goes on with the other
//! — unless the empty side may have records on the broker that were not fetched yet: its end offset
//! (from the consumer's last fetch response) is past the next offset to arrive, or not known yet
//! because nothing was fetched. Then the task waits for them as Kafka Streams does since KIP-695:
//! going on would make them look late. That wait is bounded too ([`BACKLOG_WAIT_MS`]), in case the
//! end offset counts records that never arrive (transaction markers).
//!
//! The consumer's end offset is as old as its last fetch response for that partition: on a busy
//! machine a fetch can come back seconds late, and the cache then says "caught up" while the
//! broker holds more. So before it goes on past an empty side, a task asks the broker
//! ([`TaskQueue::end_offsets_wanted`], answered by [`TaskQueue::confirm_end_offset`]): records
//! on the broker are waited for as a known backlog; an answer that there are none lets it go on
//! with the other side's records queued by then. Those queued later may have been written after
//! the answer, beside records of the empty side the broker did not have yet: they wait for the
//! next answer (a record produced later than its partner by more than `grace` is late whatever
//! the host does; one the broker held is not).
//!
//! A side paused for backpressure (its queue passed its share of `memory.queue_bytes`) is not an
//! empty side: its records are on the broker, and going on with the other side would make them
//! late. The task waits for it, with no idle timeout, until the I/O layer resumes it.
//!
//! After a restart, records up to each partition's processed-through offset rebuild the state
//! ("replay"). All replay records of both partitions are taken before any new record, so the stream
//! time at the end of replay is the one the previous owner had reached, which is what makes
//! suppressing the replay's outcomes safe (see [`super::offsets`]). Time is a caller-supplied
//! monotonic millisecond count, which keeps this module pure.

use std::collections::VecDeque;

use crate::event::{Event, Side};

/// The longest a task waits for a side whose known backlog does not arrive.
pub const BACKLOG_WAIT_MS: i64 = 30_000;

/// What will become of a queued record, decided when it is pushed. Records that will not join
/// still go through the queue, so that offsets are processed in order, but they do not wait for
/// the other side: their timestamp orders nothing (a record stamped in the year 3000 would
/// otherwise wait behind every record of the other side, and hold its own side's records with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Join,
    /// Consumed without a key (its `key` is empty).
    NullKey,
    /// Stamped further ahead of the host's clock than the task accepts.
    FutureTimestamp,
}

struct Queued {
    event: Event,
    admission: Admission,
    /// The event's [`Event::footprint`], counted when pushed.
    bytes: usize,
    /// Records pushed on this side before it.
    seq: u64,
}

/// What the queue knows of a partition's end on the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndOffset {
    /// Nobody reports it (an offline replay): only `max_idle` applies.
    Untracked,
    /// Reported, but not known yet (no fetch response so far): there may be a backlog.
    Unknown,
    Known(i64),
}

pub struct TaskQueue {
    left: VecDeque<Queued>,
    right: VecDeque<Queued>,
    max_idle_ms: i64,
    /// When the task started waiting for an empty side. Kept while that side stays empty: once
    /// it has been waited for `max_idle_ms`, the other side's records go on without a new wait
    /// each (as Kafka Streams' enforced processing); reset when both sides have records, or none.
    idle_since: Option<i64>,
    /// Per side: records at or below this offset are replay; `None` when there is none (left).
    replay_through: [Option<i64>; 2],
    /// Per side: the next offset that will arrive (last pushed + 1), if known.
    next_offset: [Option<i64>; 2],
    /// Per side: the partition's end offset (high watermark) as last seen by the consumer.
    end_offset: [EndOffset; 2],
    /// Per side: see [`TaskQueue::set_end_offset_floor`].
    end_floor: [i64; 2],
    /// Per side: the next offset at which waiting for the backlog was given up; the backlog is
    /// ignored until that side moves on.
    backlog_given_up_at: [Option<i64>; 2],
    /// Per side: the end offset the broker gave when asked ([`TaskQueue::confirm_end_offset`]).
    broker_end: [Option<i64>; 2],
    /// Per side: waits for the broker's end offset before the task goes on without it.
    wants_end: [bool; 2],
    /// Per side: the broker answered that it has nothing past the next offset (the next offset
    /// then, and how many records the other side had been pushed then: those may go on).
    confirmed: [Option<(Option<i64>, u64)>; 2],
    /// Per side: records pushed so far.
    pushed: [u64; 2],
    /// Per side: bytes of the queued events.
    bytes: [usize; 2],
    /// Per side: fetching is paused for backpressure.
    paused: [bool; 2],
    /// The most bytes both sides held at once.
    peak_bytes: usize,
}

impl TaskQueue {
    pub fn new(max_idle_ms: i64) -> Self {
        TaskQueue {
            left: VecDeque::new(),
            right: VecDeque::new(),
            max_idle_ms,
            idle_since: None,
            replay_through: [None, None],
            next_offset: [None, None],
            end_offset: [EndOffset::Untracked; 2],
            end_floor: [0; 2],
            backlog_given_up_at: [None, None],
            broker_end: [None, None],
            wants_end: [false; 2],
            confirmed: [None, None],
            pushed: [0; 2],
            bytes: [0; 2],
            paused: [false; 2],
            peak_bytes: 0,
        }
    }

    /// Bytes of `side`'s queued events ([`Event::footprint`]).
    pub fn bytes(&self, side: Side) -> usize {
        self.bytes[side.index()]
    }

    /// Marks `side` as paused for backpressure, or not: an empty paused side is waited for.
    pub fn set_paused(&mut self, side: Side, paused: bool) {
        self.paused[side.index()] = paused;
    }

    /// The most bytes both sides held at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    pub fn is_paused(&self, side: Side) -> bool {
        self.paused[side.index()]
    }

    /// Declares that records of `side` up to `offset` (inclusive) were processed by a previous
    /// owner and that consumption restarts at `start`.
    pub fn set_replay(&mut self, side: Side, start: i64, through: Option<i64>) {
        self.next_offset[side.index()] = Some(start);
        self.replay_through[side.index()] = through.filter(|&t| t >= start);
    }

    /// Whether `event` of `side` is replay (already processed by a previous owner).
    pub fn is_replay(&self, side: Side, offset: i64) -> bool {
        self.replay_through[side.index()].is_some_and(|t| offset <= t)
    }

    /// The end offset the broker reported when the task was assigned. The consumer's cached end
    /// offsets can predate the assignment (kept from an earlier one); a report below this floor is
    /// such a stale one and counts as unknown.
    pub fn set_end_offset_floor(&mut self, side: Side, floor: i64) {
        self.end_floor[side.index()] = floor;
    }

    /// The end offset (high watermark) of `side`'s partition as the consumer last saw it in a
    /// fetch response; `None` while it has seen none.
    pub fn set_end_offset(&mut self, side: Side, end: Option<i64>) {
        let i = side.index();
        self.end_offset[i] = match end.filter(|&e| e >= self.end_floor[i]) {
            Some(e) => EndOffset::Known(e),
            None => EndOffset::Unknown,
        };
    }

    /// Whether `side` may have records on the broker that have not been pushed yet.
    fn has_backlog(&self, side: Side) -> bool {
        let i = side.index();
        let next = self.next_offset[i];
        let backlog = match (self.end_offset[i], next) {
            (EndOffset::Untracked, _) => false,
            (EndOffset::Known(end), Some(next)) => {
                end > next || self.broker_end[i].is_some_and(|b| b > next)
            }
            (EndOffset::Known(_), None) | (EndOffset::Unknown, _) => true,
        };
        backlog && self.backlog_given_up_at[i] != next
    }

    /// Sides the task would go on without, and waits to hear from the broker about first: is
    /// there nothing more on it than what was pushed? Answer with
    /// [`TaskQueue::confirm_end_offset`].
    pub fn end_offsets_wanted(&self) -> [bool; 2] {
        self.wants_end
    }

    /// The broker's end offset of `side`'s partition, asked now (`None`: it did not answer, and
    /// the task goes on as it would have). Past the next offset, the records there are waited
    /// for (as a known backlog, bounded by [`BACKLOG_WAIT_MS`]); else the side is caught up and
    /// the task goes on without it for the rest of this wait.
    pub fn confirm_end_offset(&mut self, side: Side, end: Option<i64>) {
        let i = side.index();
        let next = self.next_offset[i];
        self.wants_end[i] = false;
        match (end, next) {
            (Some(end), Some(next)) if end > next => self.broker_end[i] = Some(end),
            _ => self.confirmed[i] = Some((next, self.pushed[1 - i])),
        }
    }

    /// Whether going on without the empty `side` waits for the broker's word first: its end is
    /// tracked, and the broker has not said that nothing more is there since the other side's
    /// front record was queued.
    fn unconfirmed(&self, side: Side) -> bool {
        let i = side.index();
        let Some(front) = self.queue_ref(side.opposite()).front() else {
            return false;
        };
        let said = |&(next, pushed): &(Option<i64>, u64)| {
            next == self.next_offset[i] && front.seq < pushed
        };
        self.end_offset[i] != EndOffset::Untracked && !self.confirmed[i].as_ref().is_some_and(said)
    }

    pub fn push(&mut self, side: Side, event: Event) {
        self.push_admitted(side, event, Admission::Join);
    }

    /// Buffers a record; [`TaskQueue::next_record`] hands it back with its admission.
    pub fn push_admitted(&mut self, side: Side, event: Event, admission: Admission) {
        // Saturating: a recording (`plugin test`) may give any offset, i64::MAX too.
        self.next_offset[side.index()] = Some(event.offset.saturating_add(1));
        let bytes = event.footprint();
        self.bytes[side.index()] += bytes;
        let seq = self.pushed[side.index()];
        self.pushed[side.index()] += 1;
        self.peak_bytes = self.peak_bytes.max(self.bytes[0] + self.bytes[1]);
        self.queue(side).push_back(Queued {
            event,
            admission,
            bytes,
            seq,
        });
    }

    pub fn len(&self) -> usize {
        self.left.len() + self.right.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Smallest buffered offset of `side`: not yet processed, so not committable.
    pub fn first_offset(&self, side: Side) -> Option<i64> {
        self.queue_ref(side).front().map(|q| q.event.offset)
    }

    fn queue(&mut self, side: Side) -> &mut VecDeque<Queued> {
        match side {
            Side::Left => &mut self.left,
            Side::Right => &mut self.right,
        }
    }

    fn queue_ref(&self, side: Side) -> &VecDeque<Queued> {
        match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        }
    }

    /// Replay records of `side` that have not been pushed yet.
    fn replay_outstanding(&self, side: Side) -> bool {
        match (
            self.replay_through[side.index()],
            self.next_offset[side.index()],
        ) {
            (Some(through), Some(next)) => next <= through,
            _ => false,
        }
    }

    fn front_is_replay(&self, side: Side) -> bool {
        self.queue_ref(side)
            .front()
            .is_some_and(|q| self.is_replay(side, q.event.offset))
    }

    /// The next record to process, if one may be taken at `now_ms`.
    pub fn next(&mut self, now_ms: i64) -> Option<(Side, Event)> {
        self.next_record(now_ms)
            .map(|(side, event, _)| (side, event))
    }

    /// Like [`TaskQueue::next`], also giving the record's admission.
    pub fn next_record(&mut self, now_ms: i64) -> Option<(Side, Event, Admission)> {
        let side = self.choose(now_ms)?;
        let q = self
            .queue(side)
            .pop_front()
            .expect("chosen side is non-empty");
        self.bytes[side.index()] -= q.bytes;
        Some((side, q.event, q.admission))
    }

    fn choose(&mut self, now_ms: i64) -> Option<Side> {
        // Asked again below if this choice still needs the broker's word.
        self.wants_end = [false; 2];
        // A record that will not join is taken as soon as it is at the front, live and in replay
        // alike, so that a replay takes the records in the order the previous owner did.
        for side in [Side::Left, Side::Right] {
            if self
                .queue_ref(side)
                .front()
                .is_some_and(|q| q.admission != Admission::Join)
            {
                return Some(side);
            }
        }
        // Replay first: a replay record goes before any new one, on either side.
        let replay = [Side::Left, Side::Right].map(|s| self.front_is_replay(s));
        let pending = [Side::Left, Side::Right].map(|s| self.replay_outstanding(s));
        if replay[0] || replay[1] || pending[0] || pending[1] {
            return match (replay[0], replay[1]) {
                (true, true) => Some(self.older()),
                (true, false) if !pending[1] => Some(Side::Left),
                (false, true) if !pending[0] => Some(Side::Right),
                // The other side's replay records are still to be fetched. They exist (the
                // previous owner read them), so wait for them: replay in timestamp order rebuilds
                // the same matched/unmatched state the previous owner had.
                _ => None,
            };
        }
        match (self.left.front(), self.right.front()) {
            (Some(_), Some(_)) => {
                self.idle_since = None;
                Some(self.older())
            }
            (None, None) => {
                self.idle_since = None;
                None
            }
            (Some(_), None) | (None, Some(_)) => {
                let (side, empty) = if self.left.is_empty() {
                    (Side::Right, Side::Left)
                } else {
                    (Side::Left, Side::Right)
                };
                if self.paused[empty.index()] {
                    // Its records are on the broker, not absent: wait, without a timeout.
                    self.idle_since = None;
                    return None;
                }
                let waited = now_ms - *self.idle_since.get_or_insert(now_ms);
                let i = empty.index();
                if self.has_backlog(empty) {
                    if waited < BACKLOG_WAIT_MS.max(self.max_idle_ms) {
                        return None;
                    }
                    // Give up on this backlog until the side moves on (`None`: nothing fetched),
                    // without asking the broker again.
                    self.backlog_given_up_at[i] = self.next_offset[i];
                    self.confirmed[i] = Some((self.next_offset[i], u64::MAX));
                }
                if waited < self.max_idle_ms {
                    return None;
                }
                if self.unconfirmed(empty) {
                    self.wants_end[i] = true;
                    return None;
                }
                Some(side)
            }
        }
    }

    /// The side whose front record is older; the left side on a tie.
    fn older(&self) -> Side {
        let l = self.left.front().map(|q| q.event.timestamp);
        let r = self.right.front().map(|q| q.event.timestamp);
        match (l, r) {
            (Some(l), Some(r)) if r < l => Side::Right,
            _ => Side::Left,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_takes_a_record_that_will_not_join_where_the_live_run_did() {
        // Live, F (far future) went first, as soon as it was at the front: F, R0, J1, R1. A
        // replay of the same records must take them in the same order, or J1 would come after
        // R1, be late, and a match made before the restart would be lost.
        let mut q = TaskQueue::new(1_000);
        q.set_replay(Side::Left, 0, Some(1));
        q.set_replay(Side::Right, 0, Some(1));
        q.push_admitted(Side::Left, ev(0, i64::MAX / 2), Admission::FutureTimestamp);
        q.push(Side::Left, ev(1, 100));
        q.push(Side::Right, ev(0, 50));
        q.push(Side::Right, ev(1, 200));
        let order: Vec<_> = std::iter::from_fn(|| q.next_record(0))
            .map(|(side, e, _)| (side, e.offset))
            .collect();
        assert_eq!(
            order,
            [
                (Side::Left, 0),
                (Side::Right, 0),
                (Side::Left, 1),
                (Side::Right, 1)
            ]
        );
    }

    #[test]
    fn a_record_that_will_not_join_does_not_wait_for_the_other_side() {
        let mut q = TaskQueue::new(1_000);
        // Stamped far ahead, then an ordinary record behind it on the same side; the other
        // side has an older record and then nothing.
        q.push_admitted(Side::Left, ev(0, i64::MAX / 2), Admission::FutureTimestamp);
        q.push(Side::Left, ev(1, 100));
        q.push(Side::Right, ev(0, 50));
        let order: Vec<_> = std::iter::from_fn(|| q.next_record(0))
            .map(|(side, e, a)| (side, e.offset, a))
            .collect();
        assert_eq!(
            order,
            [
                (Side::Left, 0, Admission::FutureTimestamp),
                (Side::Right, 0, Admission::Join),
            ]
        );
        // The ordinary record waits for the empty side as usual.
        assert!(q.next_record(999).is_none());
        assert_eq!(q.next_record(1_000).map(|(_, e, _)| e.offset), Some(1));
    }

    #[test]
    fn a_side_paused_for_backpressure_is_waited_for_however_long_it_takes() {
        let mut q = TaskQueue::new(100);
        q.push(Side::Left, ev(0, 10));
        q.push(Side::Right, ev(0, 20));
        q.set_paused(Side::Right, true);
        assert_eq!(q.next(0).map(|(s, e)| (s, e.offset)), Some((Side::Left, 0)));
        q.push(Side::Left, ev(1, 30));
        assert_eq!(
            q.next(0).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 0))
        );
        // The right side ran dry while paused: its next records are on the broker.
        assert!(q.next(0).is_none());
        assert!(
            q.next(1_000_000).is_none(),
            "max idle must not apply to a paused side"
        );
        // Resumed: it is an ordinary empty side again (max idle from now).
        q.set_paused(Side::Right, false);
        assert!(q.next(1_000_001).is_none());
        assert_eq!(q.next(1_000_101).map(|(_, e)| e.offset), Some(1));
    }

    #[test]
    fn queued_bytes_follow_pushes_and_takes() {
        let mut q = TaskQueue::new(0);
        let (a, b) = (ev(0, 10), ev(1, 20));
        let (fa, fb) = (a.footprint(), b.footprint());
        q.push(Side::Left, a);
        q.push(Side::Left, b);
        assert_eq!(q.bytes(Side::Left), fa + fb);
        assert_eq!(q.bytes(Side::Right), 0);
        q.next(0).unwrap();
        assert_eq!(q.bytes(Side::Left), fb);
        q.next(0).unwrap();
        assert_eq!(q.bytes(Side::Left), 0);
    }

    #[test]
    fn once_an_empty_side_was_waited_for_the_other_side_runs_on_without_waiting_per_record() {
        // The left topic is done (nothing more will come); the right has a backlog. One wait of
        // max idle, then the right side's records go one after another: waiting again for each
        // took one record per max idle per task (10 records/s at the default 100 ms).
        let mut q = TaskQueue::new(100);
        for offset in 0..5 {
            q.push(Side::Right, ev(offset, 10 * offset));
        }
        assert!(q.next(0).is_none());
        assert_eq!(drain(&mut q, 100).len(), 5);
        // Both sides had nothing: the next lone record waits again.
        q.push(Side::Right, ev(5, 60));
        assert!(q.next(150).is_none());
        assert_eq!(q.next(250).map(|(_, e)| e.offset), Some(5));
        // A record of the waited-for side resets the wait.
        q.push(Side::Left, ev(0, 70));
        q.push(Side::Right, ev(6, 80));
        assert_eq!(q.next(250).map(|(s, _)| s), Some(Side::Left));
        assert!(
            q.next(300).is_none(),
            "the left side is empty again: a new wait"
        );
        assert_eq!(q.next(400).map(|(_, e)| e.offset), Some(6));
    }

    /// A task whose left side the consumer's cache says is caught up (end 1 after offset 0).
    fn left_caught_up_by_the_cache() -> TaskQueue {
        let mut q = TaskQueue::new(100);
        q.set_replay(Side::Left, 0, None);
        q.set_replay(Side::Right, 0, None);
        q.push(Side::Left, ev(0, 0));
        q.set_end_offset(Side::Left, Some(1));
        q.set_end_offset(Side::Right, Some(3));
        for offset in 0..3 {
            q.push(Side::Right, ev(offset, 1000 + offset));
        }
        assert_eq!(q.next(0).map(|(s, e)| (s, e.offset)), Some((Side::Left, 0)));
        q
    }

    #[test]
    fn a_side_the_cache_calls_caught_up_is_not_gone_past_before_the_broker_says_so() {
        let mut q = left_caught_up_by_the_cache();
        assert!(q.next(50).is_none(), "within max idle");
        assert_eq!(q.end_offsets_wanted(), [false, false]);
        assert!(q.next(150).is_none(), "max idle passed: ask first");
        assert_eq!(q.end_offsets_wanted(), [true, false]);
        // A fetch came back late: the broker holds offsets 1 and 2 of the left partition.
        q.confirm_end_offset(Side::Left, Some(3));
        assert_eq!(q.end_offsets_wanted(), [false, false]);
        assert!(
            q.next(5_000).is_none(),
            "a backlog on the broker is waited for"
        );
        q.push(Side::Left, ev(1, 500));
        q.push(Side::Left, ev(2, 1500));
        // In timestamp order: nothing of the left side became late.
        assert_eq!(
            drain(&mut q, 5_000),
            [
                (Side::Left, 1),
                (Side::Right, 0),
                (Side::Right, 1),
                (Side::Right, 2)
            ]
        );
        assert_eq!(
            q.next(5_000).map(|(s, e)| (s, e.offset)),
            None,
            "the left record waits for the right side"
        );
    }

    #[test]
    fn a_side_the_broker_says_is_caught_up_is_gone_past_with_what_was_queued_by_then() {
        let mut q = left_caught_up_by_the_cache();
        assert!(q.next(0).is_none());
        assert!(q.next(100).is_none());
        assert_eq!(q.end_offsets_wanted(), [true, false]);
        q.confirm_end_offset(Side::Left, Some(1));
        // Queued after the answer: it may have been written beside left records the broker did
        // not have yet (the failure this prevents: a fetch of one partition late on a busy
        // machine, the other side's next records taken past it, its records then late).
        q.push(Side::Right, ev(3, 1003));
        assert_eq!(drain(&mut q, 100).len(), 3, "no new question per record");
        assert!(q.next(100).is_none());
        assert_eq!(q.end_offsets_wanted(), [true, false]);
        // No answer (the broker did not respond): the task goes on as it did without asking.
        q.confirm_end_offset(Side::Left, None);
        assert_eq!(
            q.next(100).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 3))
        );
        assert!(q.next(100).is_none(), "both sides empty");
        // A new wait (both sides emptied, then a lone record) waits max idle, then asks again.
        q.push(Side::Right, ev(4, 2000));
        assert!(q.next(200).is_none());
        assert_eq!(q.end_offsets_wanted(), [false, false]);
        assert!(q.next(300).is_none());
        assert_eq!(q.end_offsets_wanted(), [true, false]);
    }

    #[test]
    fn an_offline_replay_asks_no_broker() {
        let mut q = TaskQueue::new(100);
        q.push(Side::Right, ev(0, 0));
        assert!(q.next(0).is_none());
        assert_eq!(
            q.next(100).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 0))
        );
        assert_eq!(q.end_offsets_wanted(), [false, false]);
    }

    fn ev(offset: i64, ts: i64) -> Event {
        Event {
            topic: "t".into(),
            partition: 0,
            offset,
            timestamp: ts,
            key: Some(b"k".to_vec().into()),
            value: None,
            headers: Box::default(),
        }
    }

    fn drain(q: &mut TaskQueue, now: i64) -> Vec<(Side, i64)> {
        std::iter::from_fn(|| q.next(now))
            .map(|(s, e)| (s, e.offset))
            .collect()
    }

    #[test]
    fn takes_the_older_record_while_both_sides_have_data() {
        let mut q = TaskQueue::new(100);
        q.push(Side::Left, ev(0, 10));
        q.push(Side::Left, ev(1, 30));
        q.push(Side::Right, ev(0, 20));
        q.push(Side::Right, ev(1, 40));
        assert_eq!(q.next(0).map(|(s, e)| (s, e.offset)), Some((Side::Left, 0)));
        assert_eq!(
            q.next(0).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 0))
        );
        assert_eq!(q.next(0).map(|(s, e)| (s, e.offset)), Some((Side::Left, 1)));
        // Right alone now: waits for the left side up to max idle.
        assert!(q.next(0).is_none());
        assert!(q.next(99).is_none());
        assert_eq!(
            q.next(100).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 1))
        );
    }

    #[test]
    fn an_empty_side_with_records_on_the_broker_is_waited_for_beyond_max_idle() {
        let mut q = TaskQueue::new(100);
        q.set_replay(Side::Left, 0, None);
        q.set_replay(Side::Right, 0, None);
        q.push(Side::Left, ev(0, 5_000));
        // The right partition holds offsets 0..3 on the broker, none fetched yet.
        q.set_end_offset(Side::Right, Some(3));
        assert!(q.next(0).is_none());
        assert!(
            q.next(5_000).is_none(),
            "max idle must not apply to a known backlog"
        );
        q.push(Side::Right, ev(0, 1_000));
        assert_eq!(
            q.next(5_001).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 0))
        );
        // Offsets 1 and 2 are awaited.
        assert!(q.next(5_102).is_none());
        q.push(Side::Right, ev(1, 1_100));
        q.push(Side::Right, ev(2, 1_200));
        assert_eq!(drain(&mut q, 5_102).len(), 2);
        // Caught up with what the broker reported: max idle applies again, then the broker is
        // asked whether that is still so.
        assert!(q.next(5_103).is_none());
        assert!(q.next(5_203).is_none());
        assert_eq!(q.end_offsets_wanted(), [false, true]);
        q.confirm_end_offset(Side::Right, Some(3));
        assert_eq!(
            q.next(5_203).map(|(s, e)| (s, e.offset)),
            Some((Side::Left, 0))
        );
    }

    #[test]
    fn a_side_whose_last_offset_was_i64_max_has_no_backlog_at_that_end() {
        // offset + 1 wrapped to i64::MIN: an end offset of i64::MAX looked like a backlog
        // and the other side waited BACKLOG_WAIT_MS instead of max idle.
        let mut q = TaskQueue::new(0);
        q.set_end_offset(Side::Left, Some(i64::MAX));
        q.set_end_offset(Side::Right, Some(1));
        q.push(Side::Left, ev(i64::MAX, 10));
        q.push(Side::Right, ev(0, 20));
        assert_eq!(drain(&mut q, 0), [(Side::Left, i64::MAX)]);
        assert_eq!(q.end_offsets_wanted(), [true, false]);
        q.confirm_end_offset(Side::Left, Some(i64::MAX));
        assert_eq!(drain(&mut q, 0), [(Side::Right, 0)]);
    }

    #[test]
    fn an_empty_side_never_fetched_is_waited_for_until_its_end_offset_is_known() {
        let mut q = TaskQueue::new(100);
        q.set_replay(Side::Left, 0, None);
        q.set_replay(Side::Right, 0, None);
        q.push(Side::Left, ev(0, 5_000));
        q.set_end_offset(Side::Right, None);
        assert!(q.next(1_000).is_none());
        assert!(
            q.next(5_000).is_none(),
            "max idle must not apply before the first fetch"
        );
        // The first fetch response says the partition is empty: max idle applies (and the broker
        // says so too when asked).
        q.set_end_offset(Side::Right, Some(0));
        assert!(q.next(5_000).is_none());
        q.confirm_end_offset(Side::Right, Some(0));
        assert_eq!(
            q.next(5_000).map(|(s, e)| (s, e.offset)),
            Some((Side::Left, 0))
        );
    }

    #[test]
    fn a_cached_end_offset_older_than_the_assignment_is_not_trusted() {
        let mut q = TaskQueue::new(100);
        q.set_replay(Side::Left, 0, None);
        q.set_replay(Side::Right, 0, None);
        q.push(Side::Left, ev(0, 5_000));
        // At assignment the broker said 2; the consumer's cache still says 0 from before.
        q.set_end_offset_floor(Side::Right, 2);
        q.set_end_offset(Side::Right, Some(0));
        assert!(q.next(0).is_none());
        assert!(
            q.next(5_000).is_none(),
            "unknown until a fetch response at or past the floor"
        );
        q.set_end_offset(Side::Right, Some(2));
        assert!(q.next(5_001).is_none(), "offsets 0 and 1 are on the broker");
        q.push(Side::Right, ev(0, 100));
        q.push(Side::Right, ev(1, 200));
        assert_eq!(drain(&mut q, 5_001).len(), 2);
        assert!(q.next(5_101).is_none());
        q.confirm_end_offset(Side::Right, Some(2));
        assert_eq!(
            q.next(5_101).map(|(s, e)| (s, e.offset)),
            Some((Side::Left, 0))
        );
    }

    #[test]
    fn a_backlog_that_never_arrives_is_waited_for_only_once() {
        let mut q = TaskQueue::new(100);
        q.set_replay(Side::Left, 0, None);
        q.set_replay(Side::Right, 0, None);
        q.push(Side::Left, ev(0, 10));
        q.push(Side::Left, ev(1, 20));
        // A transaction marker at offset 0: the end offset says 1, no record will come.
        q.set_end_offset(Side::Right, Some(1));
        assert!(q.next(0).is_none());
        assert!(q.next(BACKLOG_WAIT_MS - 1).is_none());
        assert_eq!(q.next(BACKLOG_WAIT_MS).map(|(_, e)| e.offset), Some(0));
        // Given up at this offset, and the side was waited for: the next record goes at once.
        assert_eq!(q.next(BACKLOG_WAIT_MS).map(|(_, e)| e.offset), Some(1));
        // Once the side moves on, a new backlog there is waited for again.
        q.push(Side::Left, ev(2, 30));
        q.push(Side::Right, ev(1, 25));
        q.set_end_offset(Side::Right, Some(5));
        assert_eq!(
            q.next(BACKLOG_WAIT_MS).map(|(s, e)| (s, e.offset)),
            Some((Side::Right, 1))
        );
        assert!(
            q.next(BACKLOG_WAIT_MS + 1).is_none(),
            "offsets 2..5 are on the broker"
        );
    }

    #[test]
    fn the_result_does_not_depend_on_which_side_was_fetched_first() {
        let mut a = TaskQueue::new(1_000);
        let mut b = TaskQueue::new(1_000);
        let left = [ev(0, 5), ev(1, 15), ev(2, 25)];
        let right = [ev(0, 10), ev(1, 20), ev(2, 30)];
        for e in &left {
            a.push(Side::Left, e.clone());
        }
        for e in &right {
            a.push(Side::Right, e.clone());
            b.push(Side::Right, e.clone());
        }
        for e in &left {
            b.push(Side::Left, e.clone());
        }
        // Both drain in timestamp order until one side runs dry, then wait.
        assert_eq!(drain(&mut a, 0), drain(&mut b, 0));
    }

    #[test]
    fn replay_records_of_both_sides_come_before_any_new_record() {
        let mut q = TaskQueue::new(0);
        q.set_replay(Side::Left, 0, Some(1));
        q.set_replay(Side::Right, 0, Some(0));
        q.push(Side::Left, ev(0, 10));
        q.push(Side::Left, ev(1, 50));
        q.push(Side::Left, ev(2, 1)); // new, and older than everything
                                      // Right's replay record has not arrived: nothing may be taken yet, even with no idle wait.
        assert!(q.next(1_000).is_none());
        q.push(Side::Right, ev(0, 20));
        assert_eq!(
            drain(&mut q, 1_000),
            [
                (Side::Left, 0),
                (Side::Right, 0),
                (Side::Left, 1),
                (Side::Left, 2)
            ]
        );
        assert!(!q.is_replay(Side::Left, 2));
        assert!(q.is_replay(Side::Left, 1));
    }
}
