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
//!
//! The task's concerns, each in a file of its own:
//! - [`action`]: the [`Action`] trait the task calls;
//! - [`policy`]: [`TaskPolicy`] and the topics a plugin's records may go to;
//! - [`intake`]: records pushed in, and what the I/O layer tells it of its partitions;
//! - [`calls`]: calling the action for an outcome, one by one or in a batch;
//! - [`retry`]: parking on a failed call until its backoff passed;
//! - [`dead_letter`]: records rejected by policy and outputs refused;
//! - [`batch`]: what a run hands the I/O layer; [`commit`]: what counts as processed, and the
//!   points to commit;
//! - [`budget`]: the memory and time a task runs within; [`counters`]: what it counts.

mod action;
pub mod backpressure;
mod batch;
mod budget;
mod calls;
mod commit;
mod counters;
mod dead_letter;
mod intake;
mod policy;
pub mod pool;
mod retry;
mod table;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::config::{RecordPolicy, TombstonePolicy};
use crate::event::{Side, MAX_TOPICS};
use crate::join::{Admission, CommitPoint, JoinOutcome, JoinState, ReplayBounds, TaskQueue};
use batch::PerSide;
use calls::Deferred;
use retry::{Clock, Parked, Step};

pub use crate::config::{backoff_before, MAX_BACKOFF};
pub use action::{Action, ActionFailure};
pub use batch::{Batch, Emit};
pub use counters::TaskCounters;
pub use dead_letter::{DeadLetter, DeadLetterReason};
pub use policy::{OutputTopics, TableJoin, TaskPolicy};
pub use table::TABLE_SIDE;

pub struct PartitionTask {
    pub partition: i32,
    policy: TaskPolicy,
    queue: TaskQueue,
    state: JoinState,
    /// A table join's table side (`policy.table`); the join state then stays empty.
    table: Option<table::TableSide>,
    bounds: ReplayBounds,
    /// Next offset to consume, per side.
    next_offset: Vec<i64>,
    /// Highest offset whose batch was acknowledged, per side.
    acknowledged: Vec<Option<i64>>,
    /// Highest offset processed into a batch not yet acknowledged, per side.
    pending: PerSide,
    /// First offset of the unacknowledged batch, per side: not committable yet.
    pending_from: PerSide,
    halted: Option<String>,
    /// A failed call waiting for its retry, and the work behind it.
    parked: Option<Parked>,
    /// The points last handed out for commit; a halted task keeps committing these, since the
    /// record it halted on may have changed the state without its outcome being acted on.
    last_points: Vec<CommitPoint>,
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

impl PartitionTask {
    /// A task starting from the committed points of its partitions, one per topic of the join
    /// in order (offset and the processed-through read back from commit metadata).
    pub fn new(partition: i32, policy: TaskPolicy, start: &[CommitPoint]) -> Self {
        let mut queue = TaskQueue::with_sides(start.len(), policy.max_idle_ms);
        queue.set_retention(
            policy
                .window
                .window_ms
                .saturating_add(policy.window.grace_ms),
        );
        for (side, p) in Side::all(start.len()).zip(start) {
            queue.set_replay(side, p.offset, p.processed_through);
        }
        if matches!(policy.table, Some(policy::TableJoin::CoPartitioned(_))) {
            queue.set_table_first();
        }
        PartitionTask {
            partition,
            // A global table join reads the stream alone; its join state stays empty.
            state: JoinState::with_topics(start.len().max(2), policy.window, policy.kind),
            table: policy.table.clone().map(table::TableSide::new),
            policy,
            queue,
            bounds: ReplayBounds::new(start.iter().map(|p| p.processed_through)),
            next_offset: start.iter().map(|p| p.offset).collect(),
            acknowledged: start.iter().map(|p| p.processed_through).collect(),
            pending: [None; MAX_TOPICS],
            pending_from: [None; MAX_TOPICS],
            halted: None,
            parked: None,
            last_points: start.to_vec(),
            // Until the host says what time it is, no timestamp is too far ahead.
            latest_timestamp_ms: i64::MAX,
            batch_budget: usize::MAX,
            time_budget: None,
            counters: TaskCounters::default(),
        }
    }

    /// `Some(reason)` once the task stopped on a failure under the `halt` policy.
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
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
            // A table's tombstone is a deletion, whatever join.tombstones says of the stream's.
            let unjoined_tombstone = event.value.is_none()
                && self.policy.tombstones != TombstonePolicy::Join
                && !(self.table.is_some() && side == TABLE_SIDE);
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
                match &mut self.table {
                    Some(table) => table.join(
                        side,
                        event,
                        self.policy.kind,
                        &mut self.counters,
                        &mut outcomes,
                    ),
                    None => self.state.insert(side, event, &mut outcomes),
                }
                let mut drained = outcomes.drain(..);
                while let Some(outcome) = drained.next() {
                    if self.suppresses(side, offset, &outcome) {
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
                            if self.suppresses(side, offset, &outcome) {
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
        self.check_restore();
        let stats = self.store_stats();
        self.counters.spilled_bytes = stats.spilled_bytes_total;
        self.counters.read_back_bytes = stats.read_back_bytes_total;
        batch
    }
}

#[cfg(test)]
mod tests;
