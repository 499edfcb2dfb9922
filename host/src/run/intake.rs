//! The consumer side of the loop: records handed to their tasks (polled now or during the last
//! round), partitions paused for backpressure and resumed once drained, rebalances applied to the
//! tasks (stopped, started from their committed points, lone halves paused), and every task sent
//! back to its committed points after an aborted transaction.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::event::Side;
use crate::kafka::source::{InstanceIdHeld, Record, Source};
use crate::report::Happened;
use crate::task::PartitionTask;

use super::{Host, Running, POLL_PER_ROUND, POLL_WAIT_MS};

impl Host {
    /// Hands the records polled during the last round to their tasks, in the order the loop
    /// would have (run/ahead.rs). A side its task's queue pauses meanwhile takes none of its
    /// later records: its partition is moved back to the first of them, fetched again on resume.
    pub(super) fn hand_over(&self, source: &Source, run: &mut Running) -> Result<()> {
        let polled = std::mem::take(&mut run.ahead);
        // A task with a partition revoked meanwhile stops when the rebalance is applied: its
        // records are the next owner's to read from the committed points (as the loop drops
        // what it polls for a task it does not hold).
        let revoked = if polled.rebalance {
            source.revoked_pending()
        } else {
            Default::default()
        };
        // Sides paused by this hand-over, and the first record each did not take.
        let mut held_back: HashMap<(Side, i32), Option<i64>> = HashMap::new();
        for record in polled.before {
            if revoked.contains(&record.event.partition) {
                continue;
            }
            let at = (record.side, record.event.partition);
            if let Some(first) = held_back.get_mut(&at) {
                first.get_or_insert(record.event.offset);
                continue;
            }
            run.consumed[record.side as usize] += 1;
            if self.queue(source, run, record)? {
                held_back.insert(at, None);
            }
        }
        for ((side, p), first) in held_back {
            if let Some(offset) = first {
                source.seek_side(side, p, offset)?;
            }
        }
        if polled.rebalance {
            self.apply_rebalance(source, run)?;
        }
        for record in polled.after {
            run.consumed[record.side as usize] += 1;
            self.queue(source, run, record)?;
        }
        match polled.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Hands a polled record to its task, and pauses its partition once the task's queue for
    /// that side passes its share of `memory.queue_bytes` (resumed by [`Host::resume_drained`]):
    /// whether it paused it now.
    pub(super) fn queue(&self, source: &Source, run: &mut Running, record: Record) -> Result<bool> {
        let marks = run.marks();
        let (side, p) = (record.side, record.event.partition);
        if !run.large_record_reported && record.event.footprint() > marks.high {
            run.large_record_reported = true;
            Happened::LargeRecord {
                topic: &record.event.topic,
                partition: p,
                offset: record.event.offset,
                bytes: record.event.footprint(),
                share: marks.high,
            }
            .emit(&self.metrics);
        }
        let Some(task) = run.tasks.get_mut(&p) else {
            return Ok(false);
        };
        task.push(side, record.event);
        let paused = task.pause_if_full(side, marks);
        if paused {
            source.pause_side(side, p, "backpressure: its task's queue is full")?;
            Happened::QueueFull {
                task: p,
                side,
                queued: task.queued_bytes(),
                high: marks.high,
            }
            .emit(&self.metrics);
        }
        Ok(paused)
    }

    /// Resumes the partitions paused for backpressure whose queues drained to the low mark.
    pub(super) fn resume_drained(&self, source: &Source, run: &mut Running) -> Result<()> {
        let marks = run.marks();
        for (&p, task) in run.tasks.iter_mut() {
            for side in task.drained(marks) {
                source.resume_side(side, p)?;
            }
        }
        Ok(())
    }

    /// Applies what the rebalance callbacks recorded: stops the tasks that lost a partition,
    /// pauses halves without their pair, starts the tasks whose pair is complete from their
    /// committed offsets and processed-through metadata. Tasks not named keep running with their
    /// state and queue.
    pub(super) fn apply_rebalance(&self, source: &Source, run: &mut Running) -> Result<()> {
        let rebalanced = source.rebalanced();
        if rebalanced.revoked.is_empty() && rebalanced.assigned.is_empty() && !rebalanced.assignment
        {
            return Ok(());
        }
        let now = crate::clock::now_ms() as i64;
        let (changes, mut settled) =
            run.pairing
                .apply(&rebalanced.revoked, &rebalanced.assigned, now);
        if rebalanced.assignment && rebalanced.assigned.is_empty() {
            settled = settled.or(run.pairing.assigned_nothing(now));
        }
        let numbers = |moved: &[(Side, i32)], side: Side| -> Vec<i32> {
            let mut ps: Vec<i32> = moved
                .iter()
                .filter(|(s, _)| *s == side)
                .map(|(_, p)| *p)
                .collect();
            ps.sort_unstable();
            ps
        };
        if !rebalanced.revoked.is_empty() {
            Happened::PartitionsRevoked {
                left: &numbers(&rebalanced.revoked, Side::Left),
                right: &numbers(&rebalanced.revoked, Side::Right),
            }
            .emit(&self.metrics);
        }
        if rebalanced.assignment {
            let member_id = source.member_id();
            self.metrics.set_member(member_id);
            let [left, right] = run.pairing.held();
            Happened::Assignment {
                left: &left,
                right: &right,
                added: [
                    &numbers(&rebalanced.assigned, Side::Left),
                    &numbers(&rebalanced.assigned, Side::Right),
                ],
            }
            .emit(&self.metrics);
        }
        for p in &changes.stop {
            if let Some(task) = run.tasks.remove(p) {
                run.retired.add(&task.counters);
                Happened::TaskRevoked { task: *p }.emit(&self.metrics);
            }
        }
        for &(side, p) in &changes.pause {
            source.pause_half(side, p)?;
        }
        if !changes.start.is_empty() {
            let new: Vec<i32> = changes.start.iter().map(|(p, _)| *p).collect();
            let starts = source.committed(&new)?;
            for (p, waited_ms) in changes.start {
                let start = starts[&p];
                // Paused earlier (a lone half, a full queue, a halted task) and librdkafka keeps
                // that across the revoke: seek to the start and fetch again.
                if waited_ms.is_some() || source.is_paused(p) {
                    source.rewind_and_resume(p, &start)?;
                }
                run.waiting_reported.remove(&p);
                Happened::TaskAssigned {
                    task: p,
                    start: &start,
                    waited_ms,
                }
                .emit(&self.metrics);
                let task = run.start_task(source, p, start);
                run.tasks.insert(p, task);
            }
        }
        if let Some(settled) = settled {
            Happened::RebalanceDone {
                took_ms: settled.took_ms,
                tasks: run.tasks.len(),
            }
            .emit(&self.metrics);
        }
        Ok(())
    }

    /// Restarts every task from its last committed points (their partitions sought back there):
    /// what they did since is in an aborted transaction.
    pub(super) fn rewind_all(&self, source: &Source, run: &mut Running) -> Result<()> {
        // Polled ahead of the rewind: fetched again from the points.
        let ahead = std::mem::take(&mut run.ahead);
        if ahead.rebalance {
            self.apply_rebalance(source, run)?;
        }
        if let Some(e) = ahead.error {
            return Err(e);
        }
        let held: Vec<i32> = run.tasks.keys().copied().collect();
        if held.is_empty() {
            return Ok(());
        }
        let starts = source.committed(&held)?;
        for p in held {
            if let Some(task) = run.tasks.remove(&p) {
                run.retired.add(&task.counters);
            }
            let start = starts[&p];
            source.rewind_and_resume(p, &start)?;
            let task = run.start_task(source, p, start);
            run.tasks.insert(p, task);
        }
        Ok(())
    }

    /// Hands the records polled during the last round to their tasks, then polls what is there
    /// (at most [`POLL_PER_ROUND`] in all), waiting at most [`POLL_WAIT_MS`] for the first unless
    /// a task has `more` to do; rebalances are applied as the polls bring them.
    pub(super) fn poll(
        &self,
        source: &mut Source,
        new_source: &dyn Fn() -> Result<Source>,
        run: &mut Running,
        more: bool,
        started: Instant,
    ) -> Result<()> {
        // What was polled during the last round first, then what is there (bounded),
        // waiting at most 50 ms for the first record.
        let ahead = run.ahead.len();
        self.hand_over(source, run)?;
        // A task waiting to retry a failed call (parked) runs again once its backoff passed:
        // the wait for a record ends by then (and a parked task alone does not spin).
        let now = started.elapsed().as_millis() as i64;
        let idle_wait = run
            .tasks
            .values()
            .filter_map(PartitionTask::parked_until)
            .min()
            .map_or(POLL_WAIT_MS, |until| {
                until.saturating_sub(now).clamp(0, POLL_WAIT_MS)
            });
        for polled in ahead..POLL_PER_ROUND {
            let wait = if polled == 0 && !more { idle_wait } else { 0 };
            let record = match source.poll(Duration::from_millis(wait as u64)) {
                // A static member restarted after a kill -9 under the consumer protocol:
                // the broker releases its id at the old member's session timeout. Until
                // then a new consumer asks again, backing off (it holds no task yet).
                Err(e) if e.is::<InstanceIdHeld>() && run.tasks.is_empty() => {
                    let attempt = run.id_held_attempts;
                    run.id_held_attempts += 1;
                    if attempt == 0 {
                        tracing::warn!("{e}; asking again until it is released");
                    }
                    // 1, 2, 4, then every 8 s (the broker's default timeout is 45 s).
                    std::thread::sleep(Duration::from_secs(1 << attempt.min(3)));
                    *source = new_source()?;
                    source.subscribe()?;
                    break;
                }
                record => record?,
            };
            self.apply_rebalance(source, run)?;
            let Some(record) = record else { break };
            run.consumed[record.side as usize] += 1;
            self.queue(source, run, record)?;
        }
        Ok(())
    }
}
