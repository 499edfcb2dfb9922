//! What the loop tells between rounds: the round's counts and gauges added to the metrics.
//!
//! The tasks keep running totals in plain numbers (no atomic per record); once a round, the
//! loop adds to each counter what its total gained since the last round ([`Published`] keeps
//! the totals it added up to), and sets the gauges.

use std::collections::BTreeSet;

use prometheus_client::metrics::counter::Counter;

use crate::kafka::intake::Intake;
use crate::kafka::sink::Acknowledged;
use crate::metrics::{Metrics, TaskGauges, Topic};
use crate::task::TaskCounters;

use super::action::MeteredAction;
use super::{Host, Running};

/// What the last round added to the metrics: the totals its counts went up to, and the tasks
/// whose gauges it set.
#[derive(Default)]
pub(super) struct Published {
    counters: TaskCounters,
    consumed: Vec<u64>,
    acknowledged: Acknowledged,
    tasks: BTreeSet<i32>,
}

/// One of a task's counts, read from its counters.
type Count = fn(&TaskCounters) -> u64;

/// The counter of each task count.
fn task_counts(m: &Metrics) -> [(&Counter, Count); 15] {
    [
        (&m.matches, |c| c.matches),
        (&m.expiries, |c| c.expiries),
        (&m.late_records, |c| c.late),
        (&m.future_timestamp_records, |c| c.future_timestamps),
        (&m.null_key_records, |c| c.null_keys),
        (&m.tombstone_records, |c| c.tombstones),
        (&m.dead_lettered_records, |c| c.dead_lettered),
        (&m.refused_outputs, |c| c.refused_outputs),
        (&m.replay_suppressed, |c| c.suppressed),
        (&m.state_spilled_bytes, |c| c.spilled_bytes),
        (&m.state_read_back_bytes, |c| c.read_back_bytes),
        (&m.table_updates, |c| c.table_updates),
        (&m.table_misses, |c| c.table_misses),
        (&m.table_too_old, |c| c.table_too_old),
        (&m.table_restored_records, |c| c.table_restored_records),
    ]
}

impl Host {
    /// Adds this round's counts to the metrics and sets the gauges (atomics, once per round;
    /// nothing per record). Causes before effects: a scrape that sees an output acknowledged
    /// also sees the match that made it.
    pub(super) fn publish_metrics(
        &self,
        intake: &Intake,
        run: &mut Running,
        workers: &mut [MeteredAction],
        acknowledged: Acknowledged,
    ) {
        let m = &*self.metrics;
        let was = &run.published;
        let sides = &self.config.join.topics;
        let consumed = intake.consumed().to_vec();
        let before = (was.consumed.iter().copied()).chain(std::iter::repeat(0));
        for ((topic, now), was) in sides.iter().zip(&consumed).zip(before) {
            m.records_consumed
                .get_or_create(&Topic {
                    topic: topic.clone(),
                })
                .inc_by(now.saturating_sub(was));
        }
        let counters = run.tasks.counters();
        for (counter, count) in task_counts(m) {
            counter.inc_by(count(&counters).saturating_sub(count(&was.counters)));
        }
        let restore_ms = counters.table_restore_ms;
        m.table_restore_seconds
            .inc_by(restore_ms.saturating_sub(was.counters.table_restore_ms) as f64 / 1000.0);
        for worker in workers.iter_mut() {
            for (label, stats) in worker.take_calls() {
                m.add_calls(&label, &stats);
            }
        }
        let outputs = acknowledged
            .outputs
            .saturating_sub(was.acknowledged.outputs);
        let dead_letters = acknowledged
            .dead_letters
            .saturating_sub(was.acknowledged.dead_letters);
        m.outputs_produced.inc_by(outputs);
        m.dead_letters_produced.inc_by(dead_letters);
        m.records_produced.inc_by(outputs + dead_letters);

        let mut paused = 0;
        for (p, task) in &run.tasks.map {
            let (events, bytes) = task.held();
            let store = task.store_stats();
            let gauges = TaskGauges {
                events,
                bytes,
                ram_bytes: store.ram_bytes,
                disk_bytes: store.disk_bytes,
                queued_bytes: task.queued_bytes(),
                queued_peak_bytes: task.queued_peak_bytes(),
                paused: intake.backpressured(*p).into_iter().filter(|&b| b).count(),
                lag: run.lags.get(p).cloned().unwrap_or_default(),
                waited_ms: task.waited_ms(),
            };
            paused += gauges.paused;
            m.set_task(*p, &gauges);
        }
        let held: BTreeSet<i32> = run.tasks.map.keys().copied().collect();
        for gone in was.tasks.difference(&held) {
            m.forget_task(*gone);
        }
        m.paused_partitions.set(paused as i64);
        m.tasks_waiting_for_pair.set(intake.waiting() as i64);
        m.assigned_tasks.set(run.tasks.map.len() as i64);
        run.published = Published {
            counters,
            consumed,
            acknowledged,
            tasks: held,
        };
    }
}
