//! One round: every task that can run takes its records and calls the plugin on the worker
//! threads while this thread polls ahead; the batches are delivered, acknowledged to their tasks,
//! and the tasks' commit points published to the intake.

use std::time::Instant;

use anyhow::Result;

use crate::event::Side;
use crate::kafka::intake::{EndOffsetAsks, Intake};
use crate::kafka::sink::{Delivered, Refused, Sink};
use crate::report::Happened;
use crate::task::{pool, Batch};

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
        for task in run.tasks.map.values_mut() {
            if task.halted().is_some() {
                continue;
            }
            task.set_state_budget(state_budget);
            // A task's outputs in flight count against its queue share, both sides' worth.
            task.set_batch_budget(2 * marks.high);
            task.set_time_budget(ROUND_TASK_TIME);
            task.set_wall_clock(wall_clock);
            task.set_end_offsets(intake.end_offsets_seen(task.partition));
            task.set_backpressured(intake.backpressured(task.partition));
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
            Delivered::Done(_) => {}
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
                    left: &self.config.join.left,
                    right: &self.config.join.right,
                }
                .emit(&self.metrics);
                intake.halt(partition)?;
            }
        }
        for (p, task) in run.tasks.map.iter_mut() {
            if !revoked.contains(p) {
                intake.publish(*p, task.commit_points());
            }
        }
        intake.resume_drained(&run.tasks)?;
        Ok(more | self.ask_end_offsets(intake, &mut run.tasks))
    }
}

impl Host {
    /// Asks the broker the end offsets of the sides a task would go on without (its consumer's
    /// cached end offset says they are caught up, and may be old: join/order.rs). True when one
    /// was asked: the task can go on (or knows to wait) now, so the next poll does not wait.
    /// After an ask without an answer (a broker away) the others of the round are not asked: they
    /// wait as without an answer (asked again next round), and the loop does not block an
    /// answer's timeout per task while the group waits for its next poll.
    fn ask_end_offsets(&self, intake: &mut Intake, tasks: &mut Held) -> bool {
        let mut asked = false;
        let mut asks = EndOffsetAsks::default();
        for (p, task) in tasks.map.iter_mut() {
            let wanted = task.end_offsets_wanted();
            for side in [Side::Left, Side::Right] {
                if !wanted[side.index()] {
                    continue;
                }
                let end = asks.ask(|| {
                    self.metrics.end_offsets_asked.inc();
                    let end = intake.end_offset_now(side, *p);
                    intake.keep_alive();
                    end
                });
                let seen = intake.end_offsets_seen(*p)[side.index()];
                if let (Some(end), Some(seen)) = (end, seen) {
                    if end > seen {
                        self.metrics.end_offsets_behind.inc();
                        let which = if side == Side::Left { "left" } else { "right" };
                        if let Some(said) = crate::quiet::said(
                            &format!("end offset behind {p}"),
                            || {
                                format!("task {p}: the broker holds its {which} partition up to offset {end}, the consumer's last fetch showed {seen}: waiting for those records rather than going on without them")
                            },
                        ) {
                            tracing::info!(target: "cojoin::report", "{said}");
                        }
                    }
                }
                task.confirm_end_offset(side, end);
                asked = true;
            }
        }
        asked
    }
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
