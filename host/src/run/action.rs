//! A `PluginHandle` is a task's action: calls go to its instance, failures become `ActionFailure`s,
//! and each call's latency and outcome is counted against the plugin version that answered it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::event::{positions, printable_key, Call, Event, OutputRecord, Side};
use crate::metrics::CallStats;
use crate::plugin::{CallError, PluginHandle};
use crate::task::{Action, ActionFailure};

/// Logs a failed call with what it was called on, and turns it into the task's failure.
fn failure(e: CallError, key: &[u8], events: &[&Event]) -> ActionFailure {
    tracing::warn!(
        kind = e.kind().as_str(),
        key = %printable_key(key),
        records = %positions(events.iter().copied()),
        "plugin call failed: {e}"
    );
    ActionFailure {
        kind: e.kind(),
        message: e.message().to_owned(),
    }
}

/// A worker plus the call statistics gathered since the host last took them.
pub struct MeteredAction {
    pub worker: PluginHandle,
    calls: BTreeMap<String, CallStats>,
}

impl MeteredAction {
    pub fn new(worker: PluginHandle) -> Self {
        MeteredAction {
            worker,
            calls: BTreeMap::new(),
        }
    }

    /// The statistics since the last call, per version label; resets them.
    pub fn take_calls(&mut self) -> BTreeMap<String, CallStats> {
        std::mem::take(&mut self.calls)
    }

    /// The statistics of the version now answering.
    fn stats(&mut self) -> &mut CallStats {
        let label = &self.worker.version().label;
        if !self.calls.contains_key(&**label) {
            self.calls.insert(label.to_string(), CallStats::default());
        }
        self.calls.get_mut(&**label).expect("inserted above")
    }

    /// Instances recycled since the worker had recycled `recycles` on `generation`. A swap
    /// starts a new instance, whose count starts at zero.
    fn recycled_since(&self, recycles: u64, generation: u64) -> u64 {
        if self.worker.version().generation == generation {
            self.worker.recycles().saturating_sub(recycles)
        } else {
            self.worker.recycles()
        }
    }

    fn observe<T>(
        &mut self,
        key: &[u8],
        events: &[&Event],
        call: impl FnOnce(&mut PluginHandle) -> Result<T, CallError>,
    ) -> Result<T, ActionFailure> {
        let (recycles, generation) = (self.worker.recycles(), self.worker.version().generation);
        let started = Instant::now();
        let result = call(&mut self.worker);
        let took = started.elapsed();
        let recycled = self.recycled_since(recycles, generation);
        // The version after the call: a swap between calls switches the worker before it calls.
        let stats = self.stats();
        stats.observe(took, result.as_ref().err().map(CallError::kind));
        stats.recycles += recycled;
        result.map_err(|e| failure(e, key, events))
    }
}

impl Action for MeteredAction {
    fn on_match(
        &mut self,
        key: &[u8],
        left: &Event,
        right: &Event,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.observe(key, &[left, right], |w| w.on_match(key, left, right))
    }

    fn on_expire(
        &mut self,
        key: &[u8],
        event: &Event,
        side: Side,
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.observe(key, &[event], |w| w.on_expire(key, event, side))
    }

    fn on_match_n(
        &mut self,
        key: &[u8],
        events: &[Arc<Event>],
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        let inputs: Vec<&Event> = events.iter().map(|e| &**e).collect();
        self.observe(key, &inputs, |w| w.on_match_n(key, events))
    }

    fn on_expire_n(
        &mut self,
        key: &[u8],
        event: &Event,
        partners: &[Vec<Arc<Event>>],
    ) -> Result<Vec<OutputRecord>, ActionFailure> {
        self.observe(key, &[event], |w| w.on_expire_n(key, event, partners))
    }

    fn batch_limit(&self) -> usize {
        self.worker.batch_limit()
    }

    /// Each call of a batch is counted as a call taking its share of the batch's time; a batch
    /// that fails as a whole counts nothing (its calls are made again one by one).
    fn call_batch(
        &mut self,
        calls: &[Call<'_>],
    ) -> Option<Vec<Result<Vec<OutputRecord>, ActionFailure>>> {
        let (recycles, generation) = (self.worker.recycles(), self.worker.version().generation);
        let started = Instant::now();
        let results = match self.worker.on_batch(calls)? {
            Ok(results) => results,
            Err(e) => {
                tracing::debug!(
                    calls = calls.len(),
                    "a batch of calls failed as a whole ({e}); making them one by one"
                );
                return None;
            }
        };
        let took = started.elapsed() / calls.len().max(1) as u32;
        let label = self.worker.version().label.to_string();
        let mut failures = Vec::new();
        let results = results
            .into_iter()
            .zip(calls)
            .map(|(result, call)| {
                result.map_err(|message| {
                    let e = CallError::Plugin {
                        plugin: label.clone(),
                        message,
                    };
                    failures.push(e.kind());
                    failure(e, call.key(), &call.events())
                })
            })
            .collect();
        let recycled = self.recycled_since(recycles, generation);
        let stats = self.stats();
        stats.recycles += recycled;
        for _ in 0..calls.len() - failures.len() {
            stats.observe(took, None);
        }
        for kind in failures {
            stats.observe(took, Some(kind));
        }
        Some(results)
    }

    fn version(&self) -> String {
        let v = self.worker.version();
        format!("{}@{} (generation {})", v.name, v.sha256, v.generation)
    }
}
