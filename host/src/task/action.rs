//! The plugin as a task sees it: a trait, so that the task (and its tests, with a fake) stays free
//! of wasmtime; the runtime's implementation is in run/action.rs.

use std::sync::Arc;

use crate::event::{Call, Event, FailureKind, OutputRecord, Side};

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
    /// A join of three topics or more: one event of each topic, in topic order. An action that
    /// serves two-topic joins only refuses it.
    fn on_match_n(
        &mut self,
        _key: &[u8],
        events: &[Arc<Event>],
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        Err(two_topics_only(events.len()))
    }
    /// A `left` join of three topics or more: a first-topic event that left in no match, and
    /// per other topic the partners it found.
    fn on_expire_n(
        &mut self,
        _key: &[u8],
        _event: &Event,
        partners: &[Vec<Arc<Event>>],
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        Err(two_topics_only(partners.len() + 1))
    }
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

fn two_topics_only(topics: usize) -> ActionFailure {
    ActionFailure {
        kind: FailureKind::Unavailable,
        message: format!("this action serves two-topic joins, not a join of {topics} topics"),
    }
}

/// The result of one attempt of a call.
pub(super) type CallResult = Result<Vec<OutputRecord>, ActionFailure>;
