//! `PartitionTask`: partition p of the left and of the right topic, joined — the unit of work that
//! moves between hosts. It connects the pure join core with an [`Action`] (the plugin, behind a
//! trait so this module stays free of wasmtime) and says what the I/O layer must do: records to
//! produce, dead letters, and what to commit. No I/O of its own.
//!
//! The I/O layer's loop, per task: `push` consumed records; `run` to get a [`Batch`]; produce the
//! batch and wait for every acknowledgement; `acknowledge` it; then take `commit_points` (every
//! round: a look per state segment), which the I/O layer commits every second. Records count as
//! processed only once their batch is acknowledged.
//! [`pool`] runs a round of tasks on several actions at once.
//!
//! A failed call with retries left does not wait on its worker: the task parks ([`Parked`]) —
//! it keeps the call and everything taken after it, stops its run there, and makes the call again
//! in the first `run` at or after [`PartitionTask::parked_until`]; the other tasks go on.

pub mod backpressure;
pub mod pool;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{FailurePolicy, RecordPolicy, TombstonePolicy};
use crate::event::{Call, Event, FailureKind, OutputRecord, Side};
use backpressure::QueueMarks;

use crate::join::{
    Admission, CommitPoint, JoinKind, JoinOutcome, JoinState, JoinWindow, ReplayBounds, SpillDir,
    StoreStats, TaskQueue,
};

/// A failed action call, as the dead-letter headers will describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// What the task calls for each match and expiry.
pub trait Action {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure>;
    fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure>;
    /// The version now answering, for dead-letter headers.
    fn version(&self) -> String;
    /// How many calls the action takes at once ([`Action::call_batch`]); 1: one at a time.
    fn batch_limit(&self) -> usize {
        1
    }
    /// Makes several calls at once: one result per call, in order, or `None` when the batch as a
    /// whole failed (a trap, its deadline) or cannot be made; the task then makes the calls one
    /// by one, so each gets its own failure and retries.
    fn call_batch(
        &mut self,
        _calls: &[Call<'_>],
    ) -> Option<Vec<Result<Vec<OutputRecord>, ActionFailure>>> {
        None
    }
}

/// A call deferred to be made in a batch, and where the run stood before its record.
struct Deferred {
    outcome: JoinOutcome,
    before: RunPoint,
    /// Records that ended (were marked processed) after this call was deferred and before the
    /// next one: if the task parks on this call or an earlier one, they are not processed yet.
    ends: Vec<(Side, i64)>,
}

impl Deferred {
    fn call(&self) -> Call<'_> {
        match &self.outcome {
            JoinOutcome::Match { left, right } => Call::Match {
                key: left.key_bytes(),
                left,
                right,
            },
            JoinOutcome::Expired { side, event } => Call::Expire {
                key: event.key_bytes(),
                event,
                side: *side,
            },
            JoinOutcome::Late { .. } => unreachable!("late records are rejected, not deferred"),
        }
    }
}

/// What a halt on a record rolls back to: the record it halted on is not processed, nor any
/// after it (their outcomes may already be in the state, as without batching). Parking rolls
/// back the batch too: the emits of the record, made before its failed call, wait with it.
#[derive(Clone, Copy)]
struct RunPoint {
    through: [Option<i64>; 2],
    pending: [Option<i64>; 2],
    pending_from: [Option<i64>; 2],
    /// The batch's emits, bytes and sources then.
    emits: usize,
    bytes: usize,
    sources: usize,
}

/// The result of one attempt of a call.
type CallResult = Result<Vec<OutputRecord>, ActionFailure>;

/// Work taken after a parked call, kept in order until the call is done.
enum Step {
    /// Act on an outcome; `first`: the result of an attempt already made (in a batch).
    Call {
        outcome: JoinOutcome,
        first: Option<CallResult>,
    },
    /// A record that does not join, to dead-letter.
    Reject {
        reason: DeadLetterReason,
        event: Event,
    },
    /// The record at `offset` of `side` is processed once the steps before it are.
    End { side: Side, offset: i64 },
}

/// A call that failed with retries left, waiting for its backoff to pass (off the worker: the
/// run stopped there and returned its batch), with what was taken after it: nothing after it is
/// done before it. Its record and the records after it do not count as processed meanwhile.
struct Parked {
    /// What the call's record emitted before the call failed: held back with it, so that a record
    /// is produced whole (a restart acts on it again from the start).
    made: Vec<Emit>,
    /// The inputs (side, offset) of `made`: commit points stay at or before them.
    made_from: Vec<(Side, i64)>,
    /// The failed call.
    outcome: JoinOutcome,
    /// Attempts made of it so far.
    attempts: u32,
    rest: VecDeque<Step>,
    /// On the clock `run` is given (ms).
    not_before_ms: i64,
}

impl Parked {
    /// Offsets (per side) a restart must read again to redo what is parked.
    fn needs(&self) -> Vec<(Side, i64)> {
        fn read(o: &JoinOutcome, needs: &mut Vec<(Side, i64)>) {
            match o {
                JoinOutcome::Match { left, right } => {
                    needs.push((Side::Left, left.offset));
                    needs.push((Side::Right, right.offset));
                }
                JoinOutcome::Expired { side, event } | JoinOutcome::Late { side, event } => {
                    needs.push((*side, event.offset))
                }
            }
        }
        let mut needs = self.made_from.clone();
        read(&self.outcome, &mut needs);
        for step in &self.rest {
            match step {
                Step::Call { outcome, .. } => read(outcome, &mut needs),
                Step::Reject { .. } => {}
                Step::End { side, offset } => needs.push((*side, *offset)),
            }
        }
        needs
    }
}

/// The most a retry waits: the backoff doubles up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before retry `retry` (1: the first) of a failed call: `backoff`, doubled for each
/// retry after the first, up to [`MAX_BACKOFF`].
pub fn backoff_before(backoff: Duration, retry: u32) -> Duration {
    let doublings = retry.saturating_sub(1).min(31);
    backoff.saturating_mul(1u32 << doublings).min(MAX_BACKOFF)
}

/// `run`'s clock: what it was given, plus the time since the run started.
#[derive(Clone, Copy)]
struct Clock {
    now_ms: i64,
    started: Instant,
}

impl Clock {
    fn ms(&self) -> i64 {
        self.now_ms
            .saturating_add(i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX))
    }
}

/// How a task treats records it cannot use and calls that fail.
#[derive(Clone, Debug)]
pub struct TaskPolicy {
    pub window: JoinWindow,
    pub kind: JoinKind,
    pub max_idle_ms: i64,
    /// How far past the wall clock a record's timestamp may be; later ones are rejected and do
    /// not move stream time (`join.max_future`).
    pub max_future_ms: i64,
    pub late: RecordPolicy,
    pub null_keys: RecordPolicy,
    pub tombstones: TombstonePolicy,
    pub failure: FailurePolicy,
    pub retries: u32,
    pub backoff: Duration,
    pub outputs: OutputTopics,
}

/// Where a plugin's records may go. Never to the join's own input topics: a plugin writing there
/// feeds the join its own results (one pair fed itself 21 times); nor to the repartition step's
/// internal topics, which feed the join too (14 matches from one pair in 15 s). With `allowed`
/// set (`output.allowed_topics`), only to those and the default output topic.
#[derive(Clone, Debug, Default)]
pub struct OutputTopics {
    pub inputs: [String; 2],
    /// The internal topics the join could read (`<group>-<topic>-repartition` of either side,
    /// whether or not that side is repartitioned now: the names are the host's).
    pub internal: Vec<String>,
    pub allowed: Option<Vec<String>>,
}

impl OutputTopics {
    /// Why a record naming `topic` (`None`: the default output topic) may not be produced.
    pub fn refusal(&self, topic: Option<&str>) -> Option<String> {
        let topic = topic?;
        if self.inputs.iter().any(|t| t == topic) {
            return Some(format!(
                "the plugin wrote to {topic:?}, an input topic of this join; that would feed the join its own \
                 results (write to output.topic or another topic)"
            ));
        }
        if self.internal.iter().any(|t| t == topic) {
            return Some(format!(
                "the plugin wrote to {topic:?}, an internal topic of this join (its repartition \
                 step's); the join reads it, so that would feed the join its own results (write \
                 to output.topic or another topic)"
            ));
        }
        match &self.allowed {
            Some(allowed) if !allowed.iter().any(|t| t == topic) => Some(format!(
                "the plugin wrote to {topic:?}, which is not in output.allowed_topics {allowed:?} \
                 (add it there, or write to output.topic)"
            )),
            _ => None,
        }
    }
}

/// Why records went to the dead-letter topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeadLetterReason {
    Late,
    /// Stamped further ahead of the wall clock than `join.max_future`.
    FutureTimestamp,
    NullKey,
    Tombstone,
    /// The action failed on every attempt.
    Failed {
        failure: ActionFailure,
        plugin_version: String,
    },
    /// An output of these inputs could not be produced: a topic it may not write to, or one the
    /// producer or broker refused for good (too large, no such topic).
    OutputRefused {
        error: String,
    },
}

impl DeadLetterReason {
    /// The `cojoin.error.kind` header.
    pub fn kind(&self) -> &'static str {
        match self {
            DeadLetterReason::Late => "late",
            DeadLetterReason::FutureTimestamp => "future-timestamp",
            DeadLetterReason::NullKey => "null-key",
            DeadLetterReason::Tombstone => "tombstone",
            DeadLetterReason::Failed { failure, .. } => failure.kind.as_str(),
            DeadLetterReason::OutputRefused { .. } => "output-refused",
        }
    }

    /// The `cojoin.error.message` header.
    pub fn message(&self) -> &str {
        match self {
            DeadLetterReason::Late => "older than stream time - window - grace",
            DeadLetterReason::FutureTimestamp => {
                "stamped further ahead of the host's clock than join.max_future"
            }
            DeadLetterReason::NullKey => "a record without a key cannot join",
            DeadLetterReason::Tombstone => "a record without a value (join.tombstones)",
            DeadLetterReason::Failed { failure, .. } => &failure.message,
            DeadLetterReason::OutputRefused { error } => error,
        }
    }

    /// The `cojoin.plugin.version` header: the version that failed, empty for other reasons.
    pub fn plugin_version(&self) -> &str {
        match self {
            DeadLetterReason::Failed { plugin_version, .. } => plugin_version,
            _ => "",
        }
    }

    /// A failure of the plugin or of its outputs (a warning), rather than a record routed by
    /// policy (expected traffic).
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            DeadLetterReason::Failed { .. } | DeadLetterReason::OutputRefused { .. }
        )
    }
}

#[derive(Clone, Debug)]
pub struct DeadLetter {
    pub reason: DeadLetterReason,
    /// The input records, to be copied with their topic, partition and offset in headers.
    pub inputs: Vec<Arc<Event>>,
}

/// Something to produce.
#[derive(Clone, Debug)]
pub enum Emit {
    /// A plugin record (`topic: None` goes to the default output topic) and the inputs it was
    /// made from, dead-lettered if the record cannot be produced.
    Output {
        record: OutputRecord,
        inputs: Vec<Arc<Event>>,
    },
    DeadLetter(DeadLetter),
}

/// What one `run` produced; acknowledge it once every emit is durable.
#[derive(Debug, Default)]
pub struct Batch {
    pub emits: Vec<Emit>,
    through: [Option<i64>; 2],
    /// What the emits take in memory, about (their records and input events).
    bytes: usize,
    /// The run stopped at its budget: the task may have more records to take now.
    full: bool,
    /// The (side, offset) of the events of each outcome acted on, for a task that parks: what it
    /// holds back must stay readable after a restart.
    sources: Vec<(Side, i64)>,
}

impl Batch {
    pub fn is_full(&self) -> bool {
        self.full
    }

    fn push(&mut self, emit: Emit) {
        let inputs = match &emit {
            Emit::Output { record, inputs } => {
                self.bytes += record.key.as_ref().map_or(0, Vec::len)
                    + record.value.as_ref().map_or(0, Vec::len)
                    + record
                        .headers
                        .iter()
                        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                        .sum::<usize>();
                inputs
            }
            Emit::DeadLetter(d) => &d.inputs,
        };
        self.bytes += inputs.iter().map(|e| e.footprint()).sum::<usize>();
        self.emits.push(emit);
    }
}

/// Counts per task, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskCounters {
    pub records: u64,
    pub matches: u64,
    pub expiries: u64,
    pub late: u64,
    /// Records stamped too far ahead of the wall clock (`join.max_future`).
    pub future_timestamps: u64,
    pub null_keys: u64,
    pub tombstones: u64,
    pub failed_calls: u64,
    pub dead_lettered: u64,
    /// Plugin records not produced: a topic they may not go to, or refused by the producer or
    /// broker (their inputs dead-lettered as `output-refused`).
    pub refused_outputs: u64,
    /// Outcomes not acted on again because a previous owner had (replay).
    pub suppressed: u64,
    /// Partitions paused for backpressure (counted by the I/O layer, which pauses them).
    pub pauses: u64,
    /// Join state bytes moved to disk and read back (from the state's store).
    pub spilled_bytes: u64,
    pub read_back_bytes: u64,
}

impl TaskCounters {
    /// Adds `other`'s counts to these (to sum over tasks).
    pub fn add(&mut self, other: &TaskCounters) {
        self.records += other.records;
        self.matches += other.matches;
        self.expiries += other.expiries;
        self.late += other.late;
        self.future_timestamps += other.future_timestamps;
        self.null_keys += other.null_keys;
        self.tombstones += other.tombstones;
        self.failed_calls += other.failed_calls;
        self.dead_lettered += other.dead_lettered;
        self.refused_outputs += other.refused_outputs;
        self.suppressed += other.suppressed;
        self.pauses += other.pauses;
        self.spilled_bytes += other.spilled_bytes;
        self.read_back_bytes += other.read_back_bytes;
    }
}

pub struct PartitionTask {
    pub partition: i32,
    policy: TaskPolicy,
    queue: TaskQueue,
    state: JoinState,
    bounds: ReplayBounds,
    /// Next offset to consume, per side.
    next_offset: [i64; 2],
    /// Highest offset whose batch was acknowledged, per side.
    acknowledged: [Option<i64>; 2],
    /// Highest offset processed into a batch not yet acknowledged, per side.
    pending: [Option<i64>; 2],
    /// First offset of the unacknowledged batch, per side: not committable yet.
    pending_from: [Option<i64>; 2],
    halted: Option<String>,
    /// A failed call waiting for its retry, and the work behind it.
    parked: Option<Parked>,
    /// The points last handed out for commit; a halted task keeps committing these, since the
    /// record it halted on may have changed the state without its outcome being acted on.
    last_points: [CommitPoint; 2],
    /// The latest timestamp accepted: the wall clock the host last gave plus `max_future_ms`.
    latest_timestamp_ms: i64,
    /// A `run` stops taking records once its batch holds this many bytes (the rest waits for
    /// the next round): the outputs of a round are held until the broker acknowledges them, and
    /// one record can close the windows of thousands of events.
    batch_budget: usize,
    /// How long one `run` may take records for (none: until the queue or the batch budget says).
    time_budget: Option<Duration>,
    pub counters: TaskCounters,
}

fn ix(side: Side) -> usize {
    match side {
        Side::Left => 0,
        Side::Right => 1,
    }
}

impl PartitionTask {
    /// A task starting from the committed points of its two partitions (offset and the
    /// processed-through read back from commit metadata).
    pub fn new(partition: i32, policy: TaskPolicy, start: [CommitPoint; 2]) -> Self {
        let mut queue = TaskQueue::new(policy.max_idle_ms);
        for side in [Side::Left, Side::Right] {
            let p = start[ix(side)];
            queue.set_replay(side, p.offset, p.processed_through);
        }
        PartitionTask {
            partition,
            state: JoinState::new(policy.window, policy.kind),
            policy,
            queue,
            bounds: ReplayBounds {
                left: start[0].processed_through,
                right: start[1].processed_through,
            },
            next_offset: [start[0].offset, start[1].offset],
            acknowledged: [start[0].processed_through, start[1].processed_through],
            pending: [None, None],
            pending_from: [None, None],
            halted: None,
            parked: None,
            last_points: start,
            // Until the host says what time it is, no timestamp is too far ahead.
            latest_timestamp_ms: i64::MAX,
            batch_budget: usize::MAX,
            time_budget: None,
            counters: TaskCounters::default(),
        }
    }

    /// Buffers a consumed record. One that will not join (no key, stamped too far ahead) is
    /// marked now, so that it does not wait in timestamp order.
    pub fn push(&mut self, side: Side, event: Event) {
        self.next_offset[ix(side)] = event.offset + 1;
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
    pub fn set_end_offsets(&mut self, end: [Option<i64>; 2]) {
        self.queue.set_end_offset(Side::Left, end[0]);
        self.queue.set_end_offset(Side::Right, end[1]);
    }

    /// End offsets of the left and right partitions as the broker reported them when the task was
    /// assigned: cached reports below them are stale (see [`TaskQueue::set_end_offset_floor`]).
    pub fn set_end_offset_floors(&mut self, floor: [i64; 2]) {
        self.queue.set_end_offset_floor(Side::Left, floor[0]);
        self.queue.set_end_offset_floor(Side::Right, floor[1]);
    }

    /// The wall clock now (Unix ms), against which `max_future_ms` is measured when a record is
    /// pushed: give it before the first push (until then no timestamp is too far ahead).
    pub fn set_wall_clock(&mut self, unix_ms: i64) {
        self.latest_timestamp_ms = unix_ms.saturating_add(self.policy.max_future_ms);
    }

    /// `Some(reason)` once the task stopped on a failure under the `halt` policy.
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    /// When a failed call waits for its retry (the task parked): the first time, on the clock
    /// [`PartitionTask::run`] is given (ms), at which `run` makes it again; before that `run`
    /// returns at once with an empty batch. `None`: not parked (or halted: never again).
    pub fn parked_until(&self) -> Option<i64> {
        match self.halted {
            Some(_) => None,
            None => self.parked.as_ref().map(|p| p.not_before_ms),
        }
    }

    /// Records consumed but not processed yet.
    pub fn buffered(&self) -> usize {
        self.queue.len()
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

    /// Events and bytes held in the join state.
    pub fn held(&self) -> (usize, usize) {
        self.state.held()
    }

    /// Lets the join state move its oldest events to files in `dir` beyond its RAM budget.
    pub fn spill_to(&mut self, dir: Arc<SpillDir>) {
        self.state.spill_to(dir);
    }

    /// This task's share of `memory.state_bytes`: join state beyond it goes to disk (once
    /// [`PartitionTask::spill_to`] gave it a place).
    pub fn set_state_budget(&mut self, bytes: usize) {
        self.state.set_ram_budget(bytes);
    }

    /// The join state's bytes in RAM and on disk, and what moved between them.
    pub fn store_stats(&self) -> StoreStats {
        self.state.store_stats()
    }

    /// The bytes a batch may reach before `run` stops taking records (its share of
    /// `memory.queue_bytes`). A single record's outcomes are never split.
    pub fn set_batch_budget(&mut self, bytes: usize) {
        self.batch_budget = bytes;
    }

    /// How long one `run` may take records for: the run loop bounds it so that the workers of a
    /// round finish close together (a task with a large backlog takes several rounds instead of
    /// keeping one worker busy while the others wait). A record's outcomes are never split.
    pub fn set_time_budget(&mut self, budget: Duration) {
        self.time_budget = Some(budget);
    }

    /// Processes every record the queue allows at `now_ms`, or until the batch passes its budget
    /// (bytes, or time). A parked task first makes its failed call again, once `now_ms` reaches
    /// [`PartitionTask::parked_until`] (before that it returns an empty batch at once), then what
    /// was taken after it; a call that fails with retries left parks the task and ends the run.
    /// `now_ms` is a clock that never goes back (the run loop's: ms since it started).
    pub fn run(&mut self, now_ms: i64, action: &mut dyn Action) -> Batch {
        let mut batch = Batch::default();
        if self
            .parked
            .as_ref()
            .is_some_and(|p| now_ms < p.not_before_ms)
        {
            return batch;
        }
        let started = Instant::now();
        let clock = Clock { now_ms, started };
        if self.halted.is_none() {
            self.resume(&mut batch, action, clock);
        }
        let mut outcomes = Vec::new();
        let mut taken = 0u32;
        let mut out_of_time = false;
        // A failed call usually took its deadline: the clock is read after every record from then.
        let failed_before = self.counters.failed_calls;
        // Matches and expiries wait here to be made in one call (a plugin that takes batches);
        // anything else emitted first makes them, so that emits stay in record order.
        let batch_limit = action.batch_limit().max(1);
        let mut deferred: Vec<Deferred> = Vec::new();
        while self.halted.is_none() && self.parked.is_none() && batch.bytes < self.batch_budget {
            // The clock is read every few records: a read costs more than a Rust plugin's call.
            if (taken % 16 == 15 || self.counters.failed_calls != failed_before)
                && self.time_budget.is_some_and(|b| started.elapsed() >= b)
            {
                out_of_time = true;
                break;
            }
            let Some((side, event, admission)) = self.queue.next_record(now_ms) else {
                break;
            };
            taken += 1;
            let offset = event.offset;
            self.counters.records += 1;
            let replay = self.queue.is_replay(side, offset);
            let before = self.run_point(&batch);
            let unjoined_tombstone =
                event.value.is_none() && self.policy.tombstones != TombstonePolicy::Join;
            if admission != Admission::Join || unjoined_tombstone {
                self.flush(&mut batch, &mut deferred, action, clock);
                if self.halted.is_some() {
                    break;
                }
                let rejection = if admission == Admission::NullKey {
                    self.counters.null_keys += 1;
                    (self.policy.null_keys == RecordPolicy::DeadLetter)
                        .then_some(DeadLetterReason::NullKey)
                } else if admission == Admission::FutureTimestamp {
                    // A record from the far future would move stream time past every window: all
                    // that follows would be late, across restarts. It is kept out of the join.
                    self.counters.future_timestamps += 1;
                    Some(DeadLetterReason::FutureTimestamp)
                } else {
                    self.counters.tombstones += 1;
                    (self.policy.tombstones == TombstonePolicy::DeadLetter)
                        .then_some(DeadLetterReason::Tombstone)
                };
                let rejection = rejection.filter(|_| !replay);
                if let Some(parked) = &mut self.parked {
                    // A deferred call before it failed: this record waits behind it.
                    if let Some(reason) = rejection {
                        parked.rest.push_back(Step::Reject { reason, event });
                    }
                    parked.rest.push_back(Step::End { side, offset });
                    break;
                }
                if let Some(reason) = rejection {
                    self.reject(&mut batch, RecordPolicy::DeadLetter, reason, event);
                }
            } else {
                outcomes.clear();
                self.state.insert(side, event, &mut outcomes);
                let mut drained = outcomes.drain(..);
                while let Some(outcome) = drained.next() {
                    if self.bounds.suppresses(side, offset, &outcome) {
                        self.counters.suppressed += 1;
                        continue;
                    }
                    // The call to park on (a deferred one parked already: `None`).
                    let mut park = None;
                    if batch_limit > 1 && !matches!(outcome, JoinOutcome::Late { .. }) {
                        deferred.push(Deferred {
                            outcome,
                            before,
                            ends: Vec::new(),
                        });
                        if deferred.len() >= batch_limit {
                            self.flush(&mut batch, &mut deferred, action, clock);
                        }
                    } else {
                        self.flush(&mut batch, &mut deferred, action, clock);
                        if self.parked.is_some() {
                            self.parked_rest(Step::Call {
                                outcome,
                                first: None,
                            });
                        } else if self.halted.is_none() {
                            park = self.act(&mut batch, outcome, action, None, 0);
                        }
                    }
                    if let Some(outcome) = park {
                        self.park(&mut batch, before, outcome, 1, VecDeque::new(), clock);
                    }
                    if self.parked.is_some() {
                        // The rest of this record waits behind the parked call.
                        for outcome in drained.by_ref() {
                            if self.bounds.suppresses(side, offset, &outcome) {
                                self.counters.suppressed += 1;
                            } else {
                                self.parked_rest(Step::Call {
                                    outcome,
                                    first: None,
                                });
                            }
                        }
                        self.parked_rest(Step::End { side, offset });
                    }
                    if self.halted.is_some() || self.parked.is_some() {
                        break;
                    }
                }
            }
            if self.halted.is_some() || self.parked.is_some() {
                // The record it halted (or parked) on is not processed: nothing after the last
                // commit is.
                break;
            }
            self.processed(&mut batch, side, offset);
            if let Some(last) = deferred.last_mut() {
                last.ends.push((side, offset));
            }
        }
        self.flush(&mut batch, &mut deferred, action, clock);
        batch.full = batch.bytes >= self.batch_budget || out_of_time;
        let stats = self.state.store_stats();
        self.counters.spilled_bytes = stats.spilled_bytes_total;
        self.counters.read_back_bytes = stats.read_back_bytes_total;
        batch
    }

    fn run_point(&self, batch: &Batch) -> RunPoint {
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
    fn roll_back(&mut self, batch: &mut Batch, before: RunPoint) {
        batch.through = before.through;
        self.pending = before.pending;
        self.pending_from = before.pending_from;
    }

    /// The record at `offset` of `side` is in the batch, to count as processed once acknowledged.
    fn processed(&mut self, batch: &mut Batch, side: Side, offset: i64) {
        let i = ix(side);
        self.pending[i] = Some(offset);
        self.pending_from[i].get_or_insert(offset);
        batch.through[i] = Some(offset);
    }

    /// `outcome`'s call failed (`attempts` made of it) with retries left: parks the task on it,
    /// with `rest` after it. The run rolls back to `before`, the point before its record (taking
    /// back out of the batch what the record emitted before the call, to go with it).
    fn park(
        &mut self,
        batch: &mut Batch,
        before: RunPoint,
        outcome: JoinOutcome,
        attempts: u32,
        rest: VecDeque<Step>,
        clock: Clock,
    ) {
        self.roll_back(batch, before);
        let made: Vec<Emit> = batch.emits.drain(before.emits..).collect();
        let made_from = batch
            .sources
            .split_off(before.sources.min(batch.sources.len()));
        batch.bytes = before.bytes;
        let wait = backoff_before(self.policy.backoff, attempts);
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        self.parked = Some(Parked {
            made,
            made_from,
            outcome,
            attempts,
            rest,
            not_before_ms: clock.ms().saturating_add(wait_ms),
        });
    }

    /// Queues `step` behind the parked call.
    fn parked_rest(&mut self, step: Step) {
        if let Some(parked) = &mut self.parked {
            parked.rest.push_back(step);
        }
    }

    /// Makes the parked call again, then does what was taken after it, in order; parks again on
    /// a call that fails with retries left.
    fn resume(&mut self, batch: &mut Batch, action: &mut dyn Action, clock: Clock) {
        let Some(parked) = self.parked.take() else {
            return;
        };
        let mut before = self.run_point(batch);
        for emit in parked.made {
            batch.push(emit);
        }
        batch.sources.extend(parked.made_from);
        let mut rest = parked.rest;
        let mut next = Some((parked.outcome, None, parked.attempts));
        loop {
            if let Some((outcome, first, attempts)) = next.take() {
                if let Some(outcome) = self.act(batch, outcome, action, first, attempts) {
                    self.park(batch, before, outcome, attempts + 1, rest, clock);
                    return;
                }
                if self.halted.is_some() {
                    self.roll_back(batch, before);
                    return;
                }
            }
            match rest.pop_front() {
                None => return,
                Some(Step::Call { outcome, first }) => next = Some((outcome, first, 0)),
                Some(Step::Reject { reason, event }) => {
                    self.reject(batch, RecordPolicy::DeadLetter, reason, event)
                }
                Some(Step::End { side, offset }) => {
                    self.processed(batch, side, offset);
                    before = self.run_point(batch);
                }
            }
        }
    }

    fn reject(
        &mut self,
        batch: &mut Batch,
        policy: RecordPolicy,
        reason: DeadLetterReason,
        event: Event,
    ) {
        if policy == RecordPolicy::DeadLetter {
            self.counters.dead_lettered += 1;
            batch.push(Emit::DeadLetter(DeadLetter {
                reason,
                inputs: vec![Arc::new(event)],
            }));
        }
    }

    /// Makes the deferred calls (in one batch when there are several), then acts on their
    /// results in order. A halt rolls the run back to before the record of the call it halted on;
    /// a call with retries left parks the task there, the deferred calls after it (with their
    /// results) and the records ended since waiting behind it.
    fn flush(
        &mut self,
        batch: &mut Batch,
        deferred: &mut Vec<Deferred>,
        action: &mut dyn Action,
        clock: Clock,
    ) {
        if deferred.is_empty() {
            return;
        }
        let results = if deferred.len() > 1 {
            let calls: Vec<Call<'_>> = deferred.iter().map(Deferred::call).collect();
            action
                .call_batch(&calls)
                .filter(|results| results.len() == calls.len())
        } else {
            None
        };
        let mut results = results.map(Vec::into_iter);
        let mut drained = deferred.drain(..);
        while let Some(d) = drained.next() {
            let first = results.as_mut().and_then(Iterator::next);
            if let Some(outcome) = self.act(batch, d.outcome, action, first, 0) {
                let ends = |ends: Vec<(Side, i64)>| {
                    ends.into_iter()
                        .map(|(side, offset)| Step::End { side, offset })
                };
                let mut rest: VecDeque<Step> = ends(d.ends).collect();
                for d in drained.by_ref() {
                    let first = results.as_mut().and_then(Iterator::next);
                    rest.push_back(Step::Call {
                        outcome: d.outcome,
                        first,
                    });
                    rest.extend(ends(d.ends));
                }
                self.park(batch, d.before, outcome, 1, rest, clock);
                break;
            }
            if self.halted.is_some() {
                self.roll_back(batch, d.before);
                break;
            }
        }
    }

    /// Calls the action for `outcome` and emits what it returned. `first`: the result of a first
    /// attempt already made (in a batch); `attempts`: attempts made before (a parked call's).
    /// A failed call with retries left is handed back, for the caller to park the task on.
    fn act(
        &mut self,
        batch: &mut Batch,
        outcome: JoinOutcome,
        action: &mut dyn Action,
        first: Option<CallResult>,
        attempts: u32,
    ) -> Option<JoinOutcome> {
        let (inputs, result) = match &outcome {
            JoinOutcome::Late { side, event } => {
                self.counters.late += 1;
                batch.sources.push((*side, event.offset));
                let JoinOutcome::Late { event, .. } = outcome else {
                    unreachable!()
                };
                let event = Arc::unwrap_or_clone(event);
                self.reject(batch, self.policy.late, DeadLetterReason::Late, event);
                return None;
            }
            JoinOutcome::Match { left, right } => {
                if attempts == 0 {
                    self.counters.matches += 1;
                }
                batch.sources.push((Side::Left, left.offset));
                batch.sources.push((Side::Right, right.offset));
                let result =
                    first.unwrap_or_else(|| action.on_match(left.key_bytes(), left, right));
                (vec![left.clone(), right.clone()], result)
            }
            JoinOutcome::Expired { side, event } => {
                if attempts == 0 {
                    self.counters.expiries += 1;
                }
                batch.sources.push((*side, event.offset));
                let result =
                    first.unwrap_or_else(|| action.on_expire(event.key_bytes(), event, *side));
                (vec![event.clone()], result)
            }
        };
        match result {
            Ok(records) => {
                for record in records {
                    match self.policy.outputs.refusal(record.topic.as_deref()) {
                        None => batch.push(Emit::Output {
                            record,
                            inputs: inputs.clone(),
                        }),
                        Some(error) => {
                            self.refused_output(batch, inputs.clone(), error);
                        }
                    }
                }
            }
            Err(_) if attempts < self.policy.retries => {
                self.counters.failed_calls += 1;
                return Some(outcome);
            }
            Err(failure) => {
                self.counters.failed_calls += 1;
                match self.policy.failure {
                    FailurePolicy::DeadLetter => {
                        self.counters.dead_lettered += inputs.len() as u64;
                        batch.push(Emit::DeadLetter(DeadLetter {
                            reason: DeadLetterReason::Failed {
                                failure,
                                plugin_version: action.version(),
                            },
                            inputs,
                        }));
                    }
                    FailurePolicy::Halt => {
                        self.halted = Some(format!(
                        "task {} halted: the plugin failed ({}) on key {:?} at offsets {:?}: {}",
                        self.partition,
                        failure.kind,
                        String::from_utf8_lossy(inputs[0].key_bytes()),
                        inputs.iter().map(|e| (&*e.topic, e.offset)).collect::<Vec<_>>(),
                        failure.message
                    ));
                    }
                }
            }
        }
        None
    }

    /// An output made from `inputs` cannot be produced (`error` says why): under
    /// `plugin.failure = "dead-letter"` the inputs are dead-lettered as `output-refused`, under
    /// `halt` the task halts. The I/O layer calls it for what the producer or broker refused.
    pub fn refused_output(&mut self, batch: &mut Batch, inputs: Vec<Arc<Event>>, error: String) {
        self.counters.refused_outputs += 1;
        match self.policy.failure {
            FailurePolicy::DeadLetter => {
                self.counters.dead_lettered += inputs.len() as u64;
                batch.push(Emit::DeadLetter(DeadLetter {
                    reason: DeadLetterReason::OutputRefused { error },
                    inputs,
                }));
            }
            FailurePolicy::Halt => {
                self.halted.get_or_insert_with(|| {
                    format!(
                        "task {} halted: an output made from key {:?} at offsets {:?} was refused: {error}",
                        self.partition,
                        String::from_utf8_lossy(inputs[0].key_bytes()),
                        inputs.iter().map(|e| (&*e.topic, e.offset)).collect::<Vec<_>>(),
                    )
                });
            }
        }
    }

    /// The batch's emits are durable: its records now count as processed.
    pub fn acknowledge(&mut self, batch: Batch) {
        for i in 0..2 {
            if let Some(through) = batch.through[i] {
                self.acknowledged[i] = self.acknowledged[i].max(Some(through));
                if self.pending[i] == Some(through) {
                    self.pending[i] = None;
                    self.pending_from[i] = None;
                }
            }
        }
    }

    /// What to commit for the left and the right partition now. A parked task's points stay at
    /// or before what it holds back (its record, the records after it, the events of its calls).
    pub fn commit_points(&mut self) -> [CommitPoint; 2] {
        if self.halted.is_some() {
            return self.last_points;
        }
        let parked = self.parked.as_ref().map(Parked::needs).unwrap_or_default();
        self.last_points = [Side::Left, Side::Right].map(|side| {
            let i = ix(side);
            let needed = self
                .state
                .needed_offsets()
                .chain(parked.iter().copied())
                .filter(|(s, _)| *s == side)
                .map(|(_, o)| o)
                .chain(self.queue.first_offset(side))
                .chain(self.pending_from[i]);
            CommitPoint::new(self.next_offset[i], needed, self.acknowledged[i])
        });
        self.last_points
    }
}

#[cfg(test)]
mod tests;
