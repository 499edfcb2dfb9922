//! The calls of a `plugin-n` component (joins of three topics or more), and the error a call of
//! the other world gets.

use std::sync::Arc;
use std::time::Instant;

use super::{Bound, PluginInstance};
use crate::event::{Call, Event, OutputRecord};
use crate::plugin::bindings;
use crate::plugin::error::CallError;
use crate::plugin::instance::BatchResults;

impl PluginInstance {
    /// Refuses a two-topic call (`what`) to a `plugin-n` component.
    pub(super) fn two_topic_call(&self, what: &str) -> Result<(), CallError> {
        if !self.version.is_n_way() {
            return Ok(());
        }
        Err(CallError::Plugin {
            plugin: self.version.label.to_string(),
            message: format!(
                "it is of world plugin-n (joins of three topics or more) and has no {what}: \
                 a two-topic join needs a plugin of world `plugin` (or list three topics or \
                 more in join.topics)"
            ),
        })
    }

    /// Refuses an N-way call (`what`) to a component of world `plugin`.
    fn n_way_call(&self, what: &str) -> Result<(), CallError> {
        if self.version.is_n_way() {
            return Ok(());
        }
        Err(CallError::Plugin {
            plugin: self.version.label.to_string(),
            message: format!(
                "it is of world plugin (two-topic joins) and has no {what}: a join of three \
                 topics or more needs a plugin of world `plugin-n`"
            ),
        })
    }

    /// Calls `on-match-n(key, events)`.
    pub fn on_match_n(
        &mut self,
        key: &[u8],
        events: &[Arc<Event>],
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.n_way_call("on-match-n")?;
        let events = bindings::events_of(events);
        self.prepare_call(1)?;
        let started = Instant::now();
        let live = self.live.as_mut().expect("prepared");
        let Bound::Multi(b) = &live.bound else {
            unreachable!("an N-way version's instance")
        };
        let result = b.call_on_match_n(&mut live.store, key, &events);
        self.note_pace(Some(started), 1);
        self.finish(result)
    }

    /// Calls `on-expire-n(key, event, partners)`.
    pub fn on_expire_n(
        &mut self,
        key: &[u8],
        event: &Event,
        partners: &[Vec<Arc<Event>>],
    ) -> Result<Vec<OutputRecord>, CallError> {
        self.n_way_call("on-expire-n")?;
        let event = bindings::event_of(event);
        let partners: Vec<_> = partners.iter().map(|p| bindings::events_of(p)).collect();
        self.prepare_call(1)?;
        let started = Instant::now();
        let live = self.live.as_mut().expect("prepared");
        let Bound::Multi(b) = &live.bound else {
            unreachable!("an N-way version's instance")
        };
        let result = b.call_on_expire_n(&mut live.store, key, &event, &partners);
        self.note_pace(Some(started), 1);
        self.finish(result)
    }

    /// Calls `on-batch-n` with `calls` (all N-way). A trap, or an answer with a result count
    /// other than the calls', fails the whole batch.
    pub(super) fn on_batch_n(&mut self, calls: &[Call<'_>]) -> Result<BatchResults, CallError> {
        let wit_calls = bindings::calls_n(calls);
        self.prepare_call(calls.len() as u64)?;
        let started = Instant::now();
        let live = self.live.as_mut().expect("prepared");
        let Bound::Multi(b) = &live.bound else {
            unreachable!("an N-way version's instance")
        };
        let result = b.call_on_batch_n(&mut live.store, &wit_calls);
        self.note_pace(Some(started), calls.len());
        match result {
            Ok(outcomes) if outcomes.len() == calls.len() => Ok(outcomes
                .into_iter()
                .map(|o| o.map(bindings::outputs))
                .collect()),
            Ok(outcomes) => Err(CallError::Plugin {
                plugin: self.version.label.to_string(),
                message: format!(
                    "on-batch-n returned {} results for {} calls",
                    outcomes.len(),
                    calls.len()
                ),
            }),
            Err(e) => Err(self.trapped(e)),
        }
    }
}
