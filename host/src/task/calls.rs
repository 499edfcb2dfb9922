//! Calling the action for a join outcome, and what comes of it: the records it returned (each
//! checked against the topics it may go to), or its failure (retried, dead-lettered, or a halt).
//! Calls may be deferred to be made in one batch (a plugin that takes batches): their results are
//! then acted on in order, exactly as if the calls had been made one by one.

use std::collections::VecDeque;
use std::sync::Arc;

use super::action::CallResult;
use super::batch::RunPoint;
use super::retry::{Clock, Step};
use super::{Action, Batch, DeadLetter, DeadLetterReason, Emit, PartitionTask};
use crate::config::FailurePolicy;
use crate::event::{Call, Side};
use crate::join::JoinOutcome;

/// A call deferred to be made in a batch, and where the run stood before its record.
pub(super) struct Deferred {
    pub(super) outcome: JoinOutcome,
    pub(super) before: RunPoint,
    /// Records that ended (were marked processed) after this call was deferred and before the
    /// next one: if the task parks on this call or an earlier one, they are not processed yet.
    pub(super) ends: Vec<(Side, i64)>,
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
            JoinOutcome::MatchN { events } => Call::MatchN {
                key: events[0].key_bytes(),
                events,
            },
            JoinOutcome::ExpiredN { event, partners } => Call::ExpireN {
                key: event.key_bytes(),
                event,
                partners,
            },
        }
    }
}

impl PartitionTask {
    /// Makes the deferred calls (in one batch when there are several), then acts on their
    /// results in order. A halt rolls the run back to before the record of the call it halted on;
    /// a call with retries left parks the task there, the deferred calls after it (with their
    /// results) and the records ended since waiting behind it.
    pub(super) fn flush(
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
    pub(super) fn act(
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
                batch.sources.push((Side::LEFT, left.offset));
                batch.sources.push((Side::RIGHT, right.offset));
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
            JoinOutcome::MatchN { events } => {
                if attempts == 0 {
                    self.counters.matches += 1;
                }
                let sides = (0..events.len()).map(Side::of);
                batch
                    .sources
                    .extend(sides.zip(events.iter().map(|e| e.offset)));
                let key = events[0].key_bytes();
                let result = first.unwrap_or_else(|| action.on_match_n(key, events));
                (events.clone(), result)
            }
            JoinOutcome::ExpiredN { event, partners } => {
                if attempts == 0 {
                    self.counters.expiries += 1;
                }
                batch.sources.push((Side::LEFT, event.offset));
                for (t, events) in partners.iter().enumerate() {
                    let side = Side::of(t + 1);
                    batch
                        .sources
                        .extend(events.iter().map(|e| (side, e.offset)));
                }
                let result =
                    first.unwrap_or_else(|| action.on_expire_n(event.key_bytes(), event, partners));
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
}
