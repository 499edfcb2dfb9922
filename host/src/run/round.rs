//! One round: every task that can run takes its records and calls the plugin on the worker
//! threads while this thread polls ahead; the batches are delivered, acknowledged to their tasks,
//! and the tasks' commit points published to the intake.

use std::time::Instant;

use anyhow::Result;

use crate::event::Side;
use crate::kafka::intake::Intake;
use crate::kafka::sink::{Delivered, Refused, Sink};
use crate::metrics::{Counts, MatchBounds};
use crate::report::Happened;
use crate::task::{pool, Batch, Emit};

use super::action::MeteredAction;
use super::tasks::Held;
use super::{Host, Running, ROUND_TASK_TIME};

impl Host {
    /// One plugin instance per worker thread; tasks are dealt to them each round (task/pool.rs).
    /// More instances than tasks would never run a call (a task keeps its worker), and each costs
    /// a plugin instance's memory: `workers = 300` on 6 partitions started 300.
    pub(super) fn start_workers(&self, partitions: usize) -> Result<Vec<MeteredAction>> {
        let wanted = self.config.plugin.workers();
        let count = wanted.min(partitions.max(1));
        if count < wanted {
            tracing::warn!(
                "plugin.workers is {wanted} but the join has {partitions} partitions (tasks): starting {count} workers"
            );
        }
        (0..count)
            .map(|_| Ok(MeteredAction::new(self.registry.handle()?)))
            .collect()
    }

    /// Runs every task that can run, produces the batches, acknowledges them and publishes the
    /// tasks' commit points. True when a task stopped at its batch budget (it has more to do).
    pub(super) fn round(
        &self,
        intake: &mut Intake,
        sink: &mut Sink,
        workers: &mut [MeteredAction],
        run: &mut Running,
        started: Instant,
    ) -> Result<bool> {
        let now = started.elapsed().as_millis() as i64;
        let wall_clock = crate::clock::now_ms() as i64;
        let mut running = Vec::new();
        let state_budget = run.tasks.state_budget();
        let marks = run.marks();
        let positions = intake.positions();
        for task in run.tasks.map.values_mut() {
            if task.halted().is_some() {
                continue;
            }
            task.set_state_budget(state_budget);
            // A task's outputs in flight count against its queue share, both sides' worth.
            task.set_batch_budget(2 * marks.high);
            task.set_time_budget(ROUND_TASK_TIME);
            task.set_wall_clock(wall_clock);
            task.set_end_offsets(&intake.end_offsets_seen(task.partition));
            let p = task.partition;
            let at: Vec<_> = task
                .sides()
                .map(|s| positions.get(&(p, s)).copied())
                .collect();
            task.set_positions(&at);
            task.set_backpressured(&intake.backpressured(task.partition));
            running.push(task);
        }
        // Meanwhile this thread polls the next round's records.
        let mut poll_ahead = |running: &dyn Fn() -> bool| intake.poll_ahead(running);
        let mut batches = pool::run_round_beside(running, workers, now, Some(&mut poll_ahead));
        // A partition revoked meanwhile: its task's points were committed in the callback and
        // the task stops when the rebalance is applied; its batch is not delivered (the next
        // owner makes it again from those points), nor are its points published again.
        let revoked = intake.revoked_meanwhile();
        if !revoked.is_empty() {
            let dropped: Vec<i32> = batches
                .iter()
                .map(|(p, _)| *p)
                .filter(|p| revoked.contains(p))
                .collect();
            tracing::info!(
                target: "cojoin::report",
                ?dropped,
                "partitions revoked during a round: the batches of its revoked tasks are dropped (their records are the next owner's to read from the committed points)"
            );
            batches.retain(|(p, _)| !revoked.contains(p));
        }
        match deliver(intake, sink, &mut batches, &mut run.tasks)? {
            Delivered::Done(_) => {
                let acknowledged = crate::clock::now_ms() as i64;
                let latencies = match_latencies(&batches, acknowledged);
                self.metrics.match_latency.add(&latencies);
            }
            Delivered::Aborted(why) => {
                Happened::TransactionAborted { why: &why }.emit(&self.metrics);
                intake.rewind_all(&mut run.tasks)?;
                return Ok(false);
            }
            Delivered::Fenced(why) => {
                self.renew_producer(&why, intake, sink, run)?;
                return Ok(false);
            }
        }
        // A partition revoked by a keep-alive poll: its points are not this host's to publish.
        let revoked = intake.revoked_meanwhile();
        let more = batches.iter().any(|(_, b)| b.is_full());
        for (partition, batch) in batches {
            let Some(task) = run.tasks.map.get_mut(&partition) else {
                continue;
            };
            task.acknowledge(batch);
            if let Some(reason) = task.halted() {
                Happened::TaskHalted {
                    task: partition,
                    reason,
                    topics: &self.config.join.topics,
                }
                .emit(&self.metrics);
                intake.halt(partition)?;
            }
        }
        for (p, task) in run.tasks.map.iter_mut() {
            if !revoked.contains(p) {
                intake.publish(*p, &task.commit_points());
            }
        }
        intake.resume_drained(&run.tasks)?;
        let answered = self.ask_end_offsets(intake, &mut run.tasks);
        Ok(more | answered)
    }
}

impl Host {
    /// Asks the broker the end offsets of the sides a task would go on without (its consumer's
    /// cached end offset says they are caught up, and may be old: join/order.rs), all in one
    /// request. True when one was answered: the task can go on (or knows to wait) now, so the
    /// next poll does not wait. A side not answered waits, and is asked again next round (after
    /// the poll's usual wait: an error that comes back at once must not spin the loop).
    fn ask_end_offsets(&self, intake: &mut Intake, tasks: &mut Held) -> bool {
        let wanted: Vec<(i32, Side)> = tasks
            .map
            .iter()
            .flat_map(|(p, task)| {
                let wanted = task.end_offsets_wanted();
                task.sides()
                    .filter(move |side| wanted[side.index()])
                    .map(move |side| (*p, side))
            })
            .collect();
        if wanted.is_empty() {
            return false;
        }
        self.metrics.end_offsets_asked.inc_by(wanted.len() as u64);
        let ends = intake.end_offsets_now(&wanted);
        intake.keep_alive();
        for (p, side) in wanted {
            let end = ends.get(&(p, side)).copied();
            let seen = intake.end_offsets_seen(p)[side.index()];
            if let (Some(end), Some(seen)) = (end, seen) {
                if end > seen {
                    self.metrics.end_offsets_behind.inc();
                    let which = &self.config.join.topics[side.index()];
                    if let Some(said) = crate::quiet::said(
                        &format!("end offset behind {p}"),
                        || {
                            format!("task {p}: the broker holds its partition of {which} up to offset {end}, the consumer's last fetch showed {seen}: waiting for those records rather than going on without them")
                        },
                    ) {
                        tracing::info!(target: "cojoin::report", "{said}");
                    }
                }
            }
            if let Some(task) = tasks.map.get_mut(&p) {
                task.confirm_end_offset(side, end);
            }
        }
        !ends.is_empty()
    }
}

/// The latency of each output of a match in `batches`, acknowledged at `acknowledged_ms`: from
/// the later of its inputs' timestamps. An expiry's output (one input) is left out: it waited for
/// its window to close by design. An output refused for good counts too (rare; dead-lettered).
fn match_latencies(batches: &[(i32, Batch)], acknowledged_ms: i64) -> Counts<MatchBounds> {
    let mut counts = Counts::default();
    for (_, batch) in batches {
        for emit in &batch.emits {
            if let Emit::Output { inputs, .. } = emit {
                if inputs.len() < 2 {
                    continue;
                }
                if let Some(later) = inputs.iter().map(|e| e.timestamp).max() {
                    counts.observe((acknowledged_ms - later).max(0) as f64 / 1000.0);
                }
            }
        }
    }
    counts
}

/// Delivers every task's batch: all sent, then all awaited at once (one round trip per round),
/// the consumer polled meanwhile so that a broker away does not cost the group membership. An
/// output refused for good goes to its task, whose dead letters for it (if its policy makes
/// any) are delivered next. Ends with [`Delivered::Done`] once nothing is left to send.
fn deliver(
    intake: &mut Intake,
    sink: &mut Sink,
    batches: &mut [(i32, Batch)],
    tasks: &mut Held,
) -> Result<Delivered> {
    let mut from = vec![0; batches.len()];
    loop {
        let refused = match sink.deliver(batches, &from, &mut || intake.keep_alive())? {
            Delivered::Done(refused) if !refused.is_empty() => refused,
            delivered => return Ok(delivered),
        };
        from = batches.iter().map(|(_, b)| b.emits.len()).collect();
        for Refused {
            batch,
            inputs,
            error,
        } in refused
        {
            let (partition, batch) = &mut batches[batch];
            if let Some(task) = tasks.map.get_mut(partition) {
                task.refused_output(batch, inputs, error);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::event::{Event, OutputRecord};
    use crate::task::{DeadLetter, DeadLetterReason};

    fn event(timestamp: i64) -> Arc<Event> {
        Arc::new(Event {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            timestamp,
            key: Some(b"k".to_vec().into()),
            value: None,
            headers: Box::default(),
        })
    }

    fn output(inputs: Vec<Arc<Event>>) -> Emit {
        Emit::Output {
            record: OutputRecord {
                topic: None,
                key: None,
                value: None,
                headers: Vec::new(),
            },
            inputs,
        }
    }

    #[test]
    fn a_match_output_is_timed_from_its_later_input_and_expiries_and_dead_letters_are_not() {
        let mut batch = Batch::default();
        batch.emits = vec![
            output(vec![event(1_000), event(1_030)]),
            output(vec![event(1_090), event(1_020)]),
            output(vec![event(0)]),
            Emit::DeadLetter(DeadLetter {
                reason: DeadLetterReason::Late,
                inputs: vec![event(0)],
            }),
        ];
        let counts = match_latencies(&[(0, batch)], 1_100);
        assert_eq!(counts.count, 2);
        assert!((counts.sum_seconds - 0.08).abs() < 1e-9, "{counts:?}");
        assert_eq!(
            counts.quantile(1.0),
            Some(0.1),
            "70 ms is in the 100 ms bucket"
        );
    }
}
