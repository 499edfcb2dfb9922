//! Which of a task's partitions (one per topic of the join) to take the next record from.
//!
//! As Kafka Streams does, a task takes the record with the smallest timestamp while every partition
//! has data buffered, so a partition fetched ahead of the other does not make the other's records
//! look late and results do not depend on fetch timing. When a side has nothing buffered the task
//! waits up to `max_idle_ms` (Kafka Streams' `max.task.idle.ms`) for it, then goes on with the others
//! (with three topics or more, every empty side is judged so, and all must let the task go on)
//! — unless the empty side may have records on the broker that were not fetched yet: its end offset
//! (from the consumer's last fetch response) is past the next offset to arrive, or not known yet
//! because nothing was fetched. Then the task waits for them as Kafka Streams does since KIP-695:
//! going on would make them look late. That wait is bounded too ([`BACKLOG_WAIT_MS`]), in case the
//! end offset counts records that never arrive. Transaction markers are such offsets: a topic an
//! exactly-once producer writes holds one after each transaction, which the end offset counts and
//! no poll delivers. The consumer's position moves past them (librdkafka serves a marker by moving
//! it), so the I/O layer reports the position of a side whose polled records are all pushed
//! ([`TaskQueue::set_position`]): offsets below it are none the task will see.
//!
//! The consumer's end offset is as old as its last fetch response for that partition: on a busy
//! machine a fetch can come back seconds late, and the cache then says "caught up" while the
//! broker holds more. So before it goes on past an empty side, a task asks the broker
//! ([`TaskQueue::end_offsets_wanted`], answered by [`TaskQueue::confirm_end_offset`]): records
//! on the broker are waited for as a known backlog; an answer that there are none lets it go on
//! with the other side's records queued by then. Those queued later may have been written after
//! the answer, beside records of the empty side the broker did not have yet: they wait for the
//! next answer (a record produced later than its partner by more than `grace` is late whatever
//! the host does; one the broker held is not). No answer (a broker away, or one slow to answer on
//! a busy machine) is not "caught up": as Kafka Streams waits while a partition's lag is unknown,
//! the task keeps waiting and asking, for at most [`BACKLOG_WAIT_MS`] from the first unanswered
//! ask; then it goes on until that side moves.
//!
//! In a live stream the idle wait is skipped for a record stamped at most `max_idle` after the
//! empty side's latest record (the broker is still asked first): waiting could only bring records
//! of that side written at about the same time, which join all the same, and no record can become
//! late short of that side's latest + window + grace (the limit, if `max_idle` is longer). A
//! record further ahead (a backlog replayed faster than real time, where milliseconds of producer
//! skew are seconds of event time) waits `max_idle` ([`TaskQueue::within_idle_of`]).
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

use crate::event::{Event, Side, MAX_TOPICS};

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

/// One side's records and what the queue knows of its partition.
struct Lane {
    queue: VecDeque<Queued>,
    /// Records at or below this offset are replay; `None` when there is none (left).
    replay_through: Option<i64>,
    /// The next offset that will arrive (last pushed + 1), if known.
    next_offset: Option<i64>,
    /// The partition's end offset (high watermark) as last seen by the consumer.
    end_offset: EndOffset,
    /// See [`TaskQueue::set_end_offset_floor`].
    end_floor: i64,
    /// The next offset at which waiting for the backlog was given up; the backlog is ignored
    /// until the side moves on.
    backlog_given_up_at: Option<i64>,
    /// The end offset the broker gave when asked ([`TaskQueue::confirm_end_offset`]).
    broker_end: Option<i64>,
    /// The broker answered that it has nothing past the next offset: the next offset then, and
    /// how many records each side had been pushed then (those may go on).
    confirmed: Option<(Option<i64>, Vec<u64>)>,
    /// The last ask was not answered, and since when (the clock of the `choose` that first saw
    /// it); cleared by an answer or a record of this side.
    unanswered: bool,
    unanswered_since: Option<i64>,
    /// Records pushed so far.
    pushed: u64,
    /// The latest timestamp of a record pushed to join (see [`TaskQueue::within_idle_of`]).
    latest_ts: Option<i64>,
    /// Bytes of the queued events.
    bytes: usize,
    /// Fetching is paused for backpressure.
    paused: bool,
}

impl Lane {
    fn new() -> Self {
        Lane {
            queue: VecDeque::new(),
            replay_through: None,
            next_offset: None,
            end_offset: EndOffset::Untracked,
            end_floor: 0,
            backlog_given_up_at: None,
            broker_end: None,
            confirmed: None,
            unanswered: false,
            unanswered_since: None,
            pushed: 0,
            latest_ts: None,
            bytes: 0,
            paused: false,
        }
    }

    fn is_replay(&self, offset: i64) -> bool {
        self.replay_through.is_some_and(|t| offset <= t)
    }

    fn front_is_replay(&self) -> bool {
        self.queue
            .front()
            .is_some_and(|q| self.is_replay(q.event.offset))
    }

    /// Replay records that have not been pushed yet.
    fn replay_outstanding(&self) -> bool {
        match (self.replay_through, self.next_offset) {
            (Some(through), Some(next)) => next <= through,
            _ => false,
        }
    }

    /// Whether the partition may have records on the broker that have not been pushed yet.
    fn has_backlog(&self) -> bool {
        let next = self.next_offset;
        let backlog = match (self.end_offset, next) {
            (EndOffset::Untracked, _) => false,
            (EndOffset::Known(end), Some(next)) => {
                end > next || self.broker_end.is_some_and(|b| b > next)
            }
            (EndOffset::Known(_), None) | (EndOffset::Unknown, _) => true,
        };
        backlog && self.backlog_given_up_at != next
    }
}

pub struct TaskQueue {
    lanes: Vec<Lane>,
    max_idle_ms: i64,
    /// When the task started waiting for an empty side. Kept while a side stays empty: once it
    /// has been waited for `max_idle_ms`, the other sides' records go on without a new wait each
    /// (as Kafka Streams' enforced processing); reset when every side has records, or none.
    idle_since: Option<i64>,
    /// Per side: waits for the broker's end offset before the task goes on without it.
    wants_end: Vec<bool>,
    /// How far in event time past an empty side's latest record a record may go without the
    /// idle wait: `max_idle`, less than the join's retention (see [`TaskQueue::set_retention`]).
    ahead_ms: i64,
    /// The most bytes all sides held at once.
    peak_bytes: usize,
    /// Since when records are queued and none may be taken (a wait for a side), and the
    /// milliseconds of the waits that ended.
    waiting_since: Option<i64>,
    waited_ms: i64,
    /// Ties in timestamp go to the right side (a table join's table), not the first.
    table_first: bool,
}

impl TaskQueue {
    /// The queue of a two-topic join.
    pub fn new(max_idle_ms: i64) -> Self {
        TaskQueue::with_sides(2, max_idle_ms)
    }

    /// The queue of a join of `sides` topics.
    /// One side: a join with a global table, whose task reads the stream alone.
    pub fn with_sides(sides: usize, max_idle_ms: i64) -> Self {
        assert!(
            (1..=MAX_TOPICS).contains(&sides),
            "a task reads 1 to {MAX_TOPICS} topics, not {sides}"
        );
        TaskQueue {
            lanes: (0..sides).map(|_| Lane::new()).collect(),
            max_idle_ms,
            idle_since: None,
            wants_end: vec![false; sides],
            ahead_ms: max_idle_ms,
            peak_bytes: 0,
            waiting_since: None,
            waited_ms: 0,
            table_first: false,
        }
    }

    /// A table join: of records stamped alike, the table's (right) is taken first, so that a
    /// stream record is joined with an update of its own millisecond (the latest update stamped
    /// at or before it), whichever partition was fetched first.
    pub fn set_table_first(&mut self) {
        self.table_first = true;
    }

    /// How many topics the join takes.
    pub fn sides(&self) -> usize {
        self.lanes.len()
    }

    fn lane(&self, side: Side) -> &Lane {
        &self.lanes[side.index()]
    }

    fn lane_mut(&mut self, side: Side) -> &mut Lane {
        &mut self.lanes[side.index()]
    }

    /// Bytes of `side`'s queued events ([`Event::footprint`]).
    pub fn bytes(&self, side: Side) -> usize {
        self.lane(side).bytes
    }

    /// Bytes of every side's queued events.
    pub fn total_bytes(&self) -> usize {
        self.lanes.iter().map(|l| l.bytes).sum()
    }

    /// Marks `side` as paused for backpressure, or not: an empty paused side is waited for.
    pub fn set_paused(&mut self, side: Side, paused: bool) {
        self.lane_mut(side).paused = paused;
    }

    /// The most bytes all sides held at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Milliseconds records waited in the queue with none to take (for an empty side, its
    /// replay records, or a paused one), counted when each wait ends.
    pub fn waited_ms(&self) -> i64 {
        self.waited_ms
    }

    pub fn is_paused(&self, side: Side) -> bool {
        self.lane(side).paused
    }

    /// Declares that records of `side` up to `offset` (inclusive) were processed by a previous
    /// owner and that consumption restarts at `start`.
    pub fn set_replay(&mut self, side: Side, start: i64, through: Option<i64>) {
        let lane = self.lane_mut(side);
        lane.next_offset = Some(start);
        lane.replay_through = through.filter(|&t| t >= start);
    }

    /// Whether `event` of `side` is replay (already processed by a previous owner).
    pub fn is_replay(&self, side: Side, offset: i64) -> bool {
        self.lane(side).is_replay(offset)
    }

    /// The end offset the broker reported when the task was assigned. The consumer's cached end
    /// offsets can predate the assignment (kept from an earlier one); a report below this floor is
    /// such a stale one and counts as unknown.
    pub fn set_end_offset_floor(&mut self, side: Side, floor: i64) {
        self.lane_mut(side).end_floor = floor;
    }

    /// The consumer's position on `side`'s partition, reported while every record it polled of
    /// that partition was pushed: an offset between the next one to arrive and the position is a
    /// transaction marker or an aborted record, which no poll delivers, so the next offset to
    /// arrive is the position. Without it a marker at a partition's end looks like a backlog,
    /// waited for up to [`BACKLOG_WAIT_MS`] (measured: an upstream committing every 10 ms made
    /// the tasks of `make bench-latency` wait most of their time).
    pub fn set_position(&mut self, side: Side, position: i64) {
        let next = &mut self.lane_mut(side).next_offset;
        if next.is_some_and(|n| position > n) {
            *next = Some(position);
        }
    }

    /// The join's window + grace: a record that far past an empty side's latest would make that
    /// side's next records late, so the idle wait is skipped only for records less far ahead.
    pub fn set_retention(&mut self, retention_ms: i64) {
        self.ahead_ms = self.max_idle_ms.min(retention_ms.saturating_sub(1));
    }

    /// The end offset (high watermark) of `side`'s partition as the consumer last saw it in a
    /// fetch response; `None` while it has seen none.
    pub fn set_end_offset(&mut self, side: Side, end: Option<i64>) {
        let lane = self.lane_mut(side);
        lane.end_offset = match end.filter(|&e| e >= lane.end_floor) {
            Some(e) => EndOffset::Known(e),
            None => EndOffset::Unknown,
        };
    }

    /// Per side, whether the task would go on without it and waits to hear from the broker
    /// about it first: is there nothing more on it than what was pushed? Answer with
    /// [`TaskQueue::confirm_end_offset`].
    pub fn end_offsets_wanted(&self) -> &[bool] {
        &self.wants_end
    }

    /// The broker's end offset of `side`'s partition, asked now (`None`: no answer; the task
    /// waits and asks again, see the module doc). Past the next offset, the records there are
    /// waited for (as a known backlog, bounded by [`BACKLOG_WAIT_MS`]); else the side is caught
    /// up and the task goes on without it for the rest of this wait.
    pub fn confirm_end_offset(&mut self, side: Side, end: Option<i64>) {
        let pushed: Vec<u64> = self.lanes.iter().map(|l| l.pushed).collect();
        self.wants_end[side.index()] = false;
        let lane = self.lane_mut(side);
        let Some(end) = end else {
            lane.unanswered = true;
            return;
        };
        lane.unanswered = false;
        lane.unanswered_since = None;
        match lane.next_offset {
            Some(next) if end > next => lane.broker_end = Some(end),
            next => lane.confirmed = Some((next, pushed)),
        }
    }

    /// Whether going on with `chosen` without the empty `side` waits for the broker's word
    /// first: its end is tracked, and the broker has not said that nothing more is there since
    /// `chosen`'s front record was queued.
    fn unconfirmed(&self, side: Side, chosen: Side) -> bool {
        let lane = self.lane(side);
        let Some(front) = self.lane(chosen).queue.front() else {
            return false;
        };
        let said = |(next, pushed): &(Option<i64>, Vec<u64>)| {
            *next == lane.next_offset && front.seq < pushed[chosen.index()]
        };
        lane.end_offset != EndOffset::Untracked && !lane.confirmed.as_ref().is_some_and(said)
    }

    pub fn push(&mut self, side: Side, event: Event) {
        self.push_admitted(side, event, Admission::Join);
    }

    /// Buffers a record; [`TaskQueue::next_record`] hands it back with its admission.
    pub fn push_admitted(&mut self, side: Side, event: Event, admission: Admission) {
        let bytes = event.footprint();
        let lane = self.lane_mut(side);
        // Saturating: a recording (`plugin test`) may give any offset, i64::MAX too.
        lane.next_offset = Some(event.offset.saturating_add(1));
        lane.unanswered = false;
        lane.unanswered_since = None;
        lane.bytes += bytes;
        if admission == Admission::Join {
            let latest = &mut lane.latest_ts;
            *latest = Some(latest.map_or(event.timestamp, |t| t.max(event.timestamp)));
        }
        let seq = lane.pushed;
        lane.pushed += 1;
        lane.queue.push_back(Queued {
            event,
            admission,
            bytes,
            seq,
        });
        self.peak_bytes = self.peak_bytes.max(self.total_bytes());
    }

    pub fn len(&self) -> usize {
        self.lanes.iter().map(|l| l.queue.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Smallest buffered offset of `side`: not yet processed, so not committable.
    pub fn first_offset(&self, side: Side) -> Option<i64> {
        self.lane(side).queue.front().map(|q| q.event.offset)
    }

    /// The next record to process, if one may be taken at `now_ms`.
    pub fn next(&mut self, now_ms: i64) -> Option<(Side, Event)> {
        self.next_record(now_ms)
            .map(|(side, event, _)| (side, event))
    }

    /// Like [`TaskQueue::next`], also giving the record's admission.
    pub fn next_record(&mut self, now_ms: i64) -> Option<(Side, Event, Admission)> {
        let Some(side) = self.choose(now_ms) else {
            if self.is_empty() {
                self.waiting_since = None;
            } else {
                self.waiting_since.get_or_insert(now_ms);
            }
            return None;
        };
        if let Some(since) = self.waiting_since.take() {
            self.waited_ms += (now_ms - since).max(0);
        }
        let lane = self.lane_mut(side);
        let q = lane.queue.pop_front().expect("chosen side is non-empty");
        lane.bytes -= q.bytes;
        Some((side, q.event, q.admission))
    }

    fn sides_iter(&self) -> impl Iterator<Item = Side> + Clone {
        Side::all(self.lanes.len())
    }

    fn choose(&mut self, now_ms: i64) -> Option<Side> {
        // Asked again below if this choice still needs the broker's word.
        self.wants_end.fill(false);
        // A record that will not join is taken as soon as it is at the front, live and in replay
        // alike, so that a replay takes the records in the order the previous owner did.
        let not_joining = self.sides_iter().find(|&s| {
            self.lane(s)
                .queue
                .front()
                .is_some_and(|q| q.admission != Admission::Join)
        });
        if not_joining.is_some() {
            return not_joining;
        }
        // Replay first: a replay record goes before any new one, on every side.
        let replaying = |l: &Lane| l.front_is_replay() || l.replay_outstanding();
        if self.lanes.iter().any(replaying) {
            // A side's replay records still to be fetched exist (the previous owner read them),
            // so they are waited for: replay in timestamp order rebuilds the same
            // matched/unmatched state the previous owner had.
            if self
                .lanes
                .iter()
                .any(|l| !l.front_is_replay() && l.replay_outstanding())
            {
                return None;
            }
            return self.oldest(Lane::front_is_replay);
        }
        let Some(side) = self.oldest(|l| !l.queue.is_empty()) else {
            self.idle_since = None;
            return None;
        };
        let empty: Vec<Side> = self
            .sides_iter()
            .filter(|&s| self.lane(s).queue.is_empty())
            .collect();
        if empty.is_empty() {
            self.idle_since = None;
            return Some(side);
        }
        if empty.iter().any(|&e| self.lane(e).paused) {
            // Its records are on the broker, not absent: wait, without a timeout.
            self.idle_since = None;
            return None;
        }
        let waited = now_ms - *self.idle_since.get_or_insert(now_ms);
        let mut go_on = true;
        for e in empty {
            go_on &= self.may_go_without(e, side, waited, now_ms);
        }
        go_on.then_some(side)
    }

    /// Whether the task may go on with `side`'s front record without the empty side `empty`,
    /// having waited `waited` ms for it: not while that side has a backlog on the broker
    /// (bounded), nor within `max_idle` unless the record is close behind that side's latest,
    /// nor before the broker said it holds nothing more of it (asked through `wants_end`).
    fn may_go_without(&mut self, empty: Side, side: Side, waited: i64, now_ms: i64) -> bool {
        let i = empty.index();
        let max_idle_ms = self.max_idle_ms;
        let sides = self.lanes.len();
        if self.lanes[i].has_backlog() {
            if waited < BACKLOG_WAIT_MS.max(max_idle_ms) {
                return false;
            }
            // Give up on this backlog until the side moves on (`None`: nothing fetched),
            // without asking the broker again.
            let lane = &mut self.lanes[i];
            lane.backlog_given_up_at = lane.next_offset;
            lane.confirmed = Some((lane.next_offset, vec![u64::MAX; sides]));
        }
        if waited < max_idle_ms && !self.within_idle_of(side, empty) {
            return false;
        }
        if self.unconfirmed(empty, side) {
            let lane = &mut self.lanes[i];
            let unanswered_for = lane
                .unanswered
                .then(|| now_ms - *lane.unanswered_since.get_or_insert(now_ms));
            if unanswered_for.is_none_or(|t| t < BACKLOG_WAIT_MS) {
                self.wants_end[i] = true;
                return false;
            }
            // Given up asking until the side moves on, as a backlog that never comes.
            lane.confirmed = Some((lane.next_offset, vec![u64::MAX; sides]));
        }
        true
    }

    /// Whether `side`'s front record is stamped at most `max_idle` after the latest record of
    /// the empty side, which the broker tracks. Then the wait for that side is skipped (the
    /// broker is still asked whether it is caught up): in a stream whose event time keeps pace
    /// with the producers' clocks, waiting `max_idle` could only bring records of the empty side
    /// stamped before that one and written at about the same time, which come in order of their
    /// partition and join all the same (no record can become late: stream time stays short of
    /// that side's latest + window + grace, [`TaskQueue::set_retention`]). A record further
    /// ahead, as in a backlog replayed faster than real time (where a few ms of producer skew
    /// is seconds of event time), waits `max_idle` as before.
    fn within_idle_of(&self, side: Side, empty: Side) -> bool {
        let empty = self.lane(empty);
        if empty.end_offset == EndOffset::Untracked {
            return false;
        }
        let front = self.lane(side).queue.front().map(|q| q.event.timestamp);
        match (front, empty.latest_ts) {
            (Some(ts), Some(latest)) => ts <= latest.saturating_add(self.ahead_ms),
            _ => false,
        }
    }

    /// Of the sides `which` picks, the one whose front record is oldest; the first such side
    /// (in topic order) on a tie.
    fn oldest(&self, which: impl Fn(&Lane) -> bool) -> Option<Side> {
        self.sides_iter()
            .filter(|&s| which(self.lane(s)))
            .filter_map(|s| self.lane(s).queue.front().map(|q| (q.event.timestamp, s)))
            .min_by_key(|&(ts, s)| (ts, !(self.table_first && s == Side::RIGHT)))
            .map(|(_, s)| s)
    }
}

#[cfg(test)]
mod tests;
