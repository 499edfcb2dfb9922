//! What the loop tells between rounds: tasks waiting for their pair, and the round's counts and
//! gauges copied into the shared metrics.

use crate::kafka::sink::Acknowledged;
use crate::metrics::TaskGauges;
use crate::report::Happened;

use super::action::MeteredAction;
use super::{Host, Running, WAITING_REPORTED_AFTER};

impl Host {
    /// Says once of each task whose lone half has waited for its pair longer than
    /// [`WAITING_REPORTED_AFTER`].
    pub(super) fn report_waiting(&self, run: &mut Running) {
        let now = crate::clock::now_ms() as i64;
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        for (p, since) in run.pairing.waiting_since() {
            let waited_ms = now - since;
            if waited_ms >= WAITING_REPORTED_AFTER.as_millis() as i64
                && run.waiting_reported.insert(p)
            {
                Happened::TaskWaiting {
                    task: p,
                    waited_ms,
                    left,
                    right,
                }
                .emit(&self.metrics);
            }
        }
    }

    /// Copies this round's counts into the shared metrics (one lock per round, none per record).
    pub(super) fn publish_metrics(
        &self,
        run: &Running,
        workers: &mut [MeteredAction],
        acknowledged: Acknowledged,
    ) {
        let mut counters = run.retired.clone();
        for task in run.tasks.values() {
            counters.add(&task.counters);
        }
        let gauges = run
            .tasks
            .iter()
            .map(|(p, task)| {
                let (events, bytes) = task.held();
                let lag = run.lags.get(p).copied().unwrap_or_default();
                let store = task.store_stats();
                let gauges = TaskGauges {
                    events,
                    bytes,
                    ram_bytes: store.ram_bytes,
                    disk_bytes: store.disk_bytes,
                    queued_bytes: task.queued_bytes(),
                    queued_peak_bytes: task.queued_peak_bytes(),
                    paused: task.paused_sides(),
                    lag,
                };
                (*p, gauges)
            })
            .collect();
        let calls: Vec<_> = workers.iter_mut().flat_map(|w| w.take_calls()).collect();
        let (left, right) = (&self.config.join.left, &self.config.join.right);
        self.metrics.update(|m| {
            m.consumed.insert(left.clone(), run.consumed[0]);
            m.consumed.insert(right.clone(), run.consumed[1]);
            m.counters = counters;
            m.outputs_acknowledged = acknowledged.outputs;
            m.dead_letters_acknowledged = acknowledged.dead_letters;
            m.tasks = gauges;
            m.processing = !m.tasks.is_empty();
            m.tasks_waiting = run.pairing.waiting() as u64;
            for (label, stats) in calls {
                m.calls.entry(label).or_default().add(&stats);
            }
        });
    }
}
