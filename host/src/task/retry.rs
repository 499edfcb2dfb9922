//! Retrying a failed call without holding a worker: the task parks ([`Parked`]) on the call with
//! everything taken after it, its `run` stops there and returns its batch, and the call is made
//! again in the first `run` at or after its backoff (doubling up to
//! [`crate::config::MAX_BACKOFF`]). Meanwhile the other tasks go on, and nothing after the call
//! is done before it.

use std::collections::VecDeque;
use std::time::Instant;

use super::action::CallResult;
use super::batch::RunPoint;
use super::{Action, Batch, DeadLetterReason, Emit, PartitionTask};
use crate::config::{backoff_before, RecordPolicy};
use crate::event::{Event, Side};
use crate::join::JoinOutcome;

/// Work taken after a parked call, kept in order until the call is done.
pub(super) enum Step {
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
pub(super) struct Parked {
    /// What the call's record emitted before the call failed: held back with it, so that a record
    /// is produced whole (a restart acts on it again from the start).
    made: Vec<Emit>,
    /// The inputs (side, offset) of `made`: commit points stay at or before them.
    made_from: Vec<(Side, i64)>,
    /// The failed call.
    outcome: JoinOutcome,
    /// Attempts made of it so far.
    attempts: u32,
    pub(super) rest: VecDeque<Step>,
    /// On the clock `run` is given (ms).
    pub(super) not_before_ms: i64,
}

impl Parked {
    /// Offsets (per side) a restart must read again to redo what is parked.
    pub(super) fn needs(&self) -> Vec<(Side, i64)> {
        fn read(o: &JoinOutcome, needs: &mut Vec<(Side, i64)>) {
            match o {
                JoinOutcome::Match { left, right } => {
                    needs.push((Side::LEFT, left.offset));
                    needs.push((Side::RIGHT, right.offset));
                }
                JoinOutcome::Expired { side, event } | JoinOutcome::Late { side, event } => {
                    needs.push((*side, event.offset))
                }
                JoinOutcome::MatchN { events } => {
                    needs.extend((events.iter().enumerate()).map(|(t, e)| (Side::of(t), e.offset)))
                }
                JoinOutcome::ExpiredN { event, partners } => {
                    needs.push((Side::LEFT, event.offset));
                    for (t, events) in partners.iter().enumerate() {
                        needs.extend(events.iter().map(|e| (Side::of(t + 1), e.offset)));
                    }
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

/// `run`'s clock: what it was given, plus the time since the run started.
#[derive(Clone, Copy)]
pub(super) struct Clock {
    pub(super) now_ms: i64,
    pub(super) started: Instant,
}

impl Clock {
    fn ms(&self) -> i64 {
        self.now_ms
            .saturating_add(i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX))
    }
}

impl PartitionTask {
    /// When a failed call waits for its retry (the task parked): the first time, on the clock
    /// [`PartitionTask::run`] is given (ms), at which `run` makes it again; before that `run`
    /// returns at once with an empty batch. `None`: not parked (or halted: never again).
    pub fn parked_until(&self) -> Option<i64> {
        match self.halted {
            Some(_) => None,
            None => self.parked.as_ref().map(|p| p.not_before_ms),
        }
    }

    /// `outcome`'s call failed (`attempts` made of it) with retries left: parks the task on it,
    /// with `rest` after it. The run rolls back to `before`, the point before its record (taking
    /// back out of the batch what the record emitted before the call, to go with it).
    pub(super) fn park(
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
    pub(super) fn parked_rest(&mut self, step: Step) {
        if let Some(parked) = &mut self.parked {
            parked.rest.push_back(step);
        }
    }

    /// Makes the parked call again, then does what was taken after it, in order; parks again on
    /// a call that fails with retries left.
    pub(super) fn resume(&mut self, batch: &mut Batch, action: &mut dyn Action, clock: Clock) {
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
}
